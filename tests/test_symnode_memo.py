"""The SymNode memo (fastfake/symbolic/symnode_memo.py, csrc/symbolic/symnode_memo.cpp): SymInt / SymFloat /
SymBool binary arithmetic served from a process-wide memo keyed on the operands'
expression objects.

What it learns lives for the whole process and across ShapeEnvs, so the main test
is a long random program run in two worlds side by side, each with its own
ShapeEnv: stock (fastfake uninstalled) and fastfake (installed, the memo kept from
every earlier step and test). Each step makes new symbolic tensors, combines
random pool values with every binary op the memo serves (and ``mod``, which it does
not), adds guards and replacements (``torch._check(a == b)`` moves replacement
chains, which ``expr`` path-compresses), asks tensors for numel / views, clears the
memo or shrinks its bound. After every step the result (every SymNode field: sympy
structure, pytype, hint type and value, constant, fx_node, optimized-summation
flag; which pool value it is, by identity), stock's error if any, and the whole
ShapeEnv state are compared.
"""
from __future__ import annotations

import gc
import operator
import random
import weakref

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.fx.experimental.sym_node import SymNode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import fastfake
import parity
from fastfake import _C
from fastfake.common import stock_sources as _stock_sources
from fastfake.symbolic import symnode_memo as _symnode
from fastfake.symbolic import symnode_expr as _symnode_expr
from fastfake.symbolic import symnode_int as _symnode_int
from test_stateful import _clear_shape_env_method_caches

pytestmark = pytest.mark.skipif(
    not _symnode.available(), reason="the SymNode memo is not offered on this release"
)

SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)

INT_OPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "truediv": operator.truediv,
    "pow2": lambda a, b: a**2,
    "max": torch.sym_max,
    "min": torch.sym_min,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "lshift1": lambda a, b: a << 1,
}
BOOL_OPS = {"and": operator.and_, "or": operator.or_}
FLOAT_OPS = {"fadd": operator.add, "fmul": operator.mul, "fdiv": operator.truediv, "flt": operator.lt}
ARITH = {*INT_OPS, *BOOL_OPS, *FLOAT_OPS}


def _node_desc(v, pool: list) -> tuple:
    if isinstance(v, SYM):
        same = [i for i, p in enumerate(pool) if isinstance(p, SYM) and p.node is v.node]
        return ("sym", type(v).__name__, same, *_symnode.describe(v.node))
    return ("plain", type(v).__name__, repr(v))


class World:
    def __init__(self, fast: bool) -> None:
        self.fast = fast
        self.env = ShapeEnv()
        self.mode = FakeTensorMode(shape_env=self.env)
        self.pool: list = []  # SymInt / SymFloat / SymBool / int values
        self.tensors: list = []

    def run(self, fn):
        _clear_shape_env_method_caches()
        if self.fast:
            fastfake.install()
        else:
            fastfake.uninstall()
        try:
            with self.mode:
                return True, fn(self)
        except Exception as e:  # noqa: BLE001 - stock's errors are part of the result
            return False, e
        finally:
            fastfake.uninstall()

    def describe(self, ok: bool, value) -> tuple:
        state = parity.shape_env_fields(self.env)
        if not ok:
            return parity.error_outcome(value), state
        values = value if isinstance(value, tuple) else (value,)
        return tuple(_node_desc(v, self.pool) for v in values), state


def _pick(rng: random.Random, pool: list, kinds: tuple) -> int | None:
    idx = [i for i, v in enumerate(pool) if isinstance(v, kinds)]
    return rng.choice(idx) if idx else None


def _step(rng: random.Random, n_pool: int, n_tensors: int, kinds_of) -> tuple[str, object]:
    """A step as (label, fn(world) -> value); the choices are drawn here, once, so
    both worlds run the same step."""
    r = rng.random()
    if r < 0.08 or n_tensors == 0:
        shape = tuple(rng.choice([2, 3, 4, 5, 8]) for _ in range(rng.randint(1, 3)))
        name = f"t{rng.randrange(10**6)}"

        def make(w):
            ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
            with unset_fake_temporarily():  # the real tensor is made outside the mode
                real = torch.empty(shape)
            t = w.mode.from_tensor(real, symbolic_context=ctx, source=ConstantSource(name))
            w.tensors.append(t)
            w.pool.extend(t.shape)
            return tuple(t.shape)

        return f"tensor {shape}", make
    if r < 0.12:
        ti = rng.randrange(n_tensors)
        q = rng.choice(["numel", "view", "contiguous", "stride"])

        def query(w):
            t = w.tensors[ti]
            if q == "numel":
                v = t.numel()
            elif q == "view":
                v = t.reshape(-1).shape[0]
            elif q == "contiguous":
                v = t.is_contiguous()
            else:
                v = t.t().contiguous().stride()[0] if t.dim() >= 2 else t.stride()[0]
            w.pool.append(v)
            return v

        return f"tensor {ti} {q}", query
    if r < 0.17:
        i = rng.randrange(n_pool)
        j = rng.randrange(n_pool)
        how = rng.choice(["check_eq", "check_ge", "bool_lt", "guard_int"])

        def guard(w):
            a, b = w.pool[i], w.pool[j]
            if how == "check_eq" and isinstance(a, torch.SymInt) and isinstance(b, (int, torch.SymInt)):
                torch._check(a == b)
            elif how == "check_ge" and isinstance(a, torch.SymInt):
                torch._check(a >= 2)
            elif how == "bool_lt" and isinstance(a, (int, torch.SymInt)) and isinstance(b, (int, torch.SymInt)):
                return bool(a < b)
            elif how == "guard_int" and isinstance(a, torch.SymInt):
                return int(a)
            return None

        return f"guard {how} {i} {j}", guard
    if r < 0.18:
        n = rng.choice([1, 2, 7])

        def bound(w):
            if w.fast:
                _C.symnode_memo_set_max(n)
            return None

        return f"memo bound {n}", bound
    if r < 0.21:

        def restore(w):
            if w.fast:
                _C.symnode_memo_set_max(1 << 15)
                if rng_clear:
                    _C.symnode_memo_clear()
            return None

        rng_clear = rng.random() < 0.5
        return f"memo bound restored, cleared={rng_clear}", restore
    kind = rng.random()
    if kind < 0.7:
        name = rng.choice(list(INT_OPS))
        fn = INT_OPS[name]
        i = kinds_of(torch.SymInt)
        j = kinds_of(torch.SymInt) if rng.random() < 0.8 else None
        c = rng.choice([1, 2, 3, 4, 64, 0])
    elif kind < 0.85:
        name = rng.choice(list(BOOL_OPS))
        fn = BOOL_OPS[name]
        i, j, c = kinds_of(torch.SymBool), kinds_of(torch.SymBool), True
    else:
        name = rng.choice(list(FLOAT_OPS))
        fn = FLOAT_OPS[name]
        i = kinds_of(torch.SymFloat)
        j = kinds_of(torch.SymFloat) if rng.random() < 0.5 else kinds_of(torch.SymInt)
        c = 2.5
    if i is None:
        return "skip", lambda w: None
    swap = rng.random() < 0.2

    def arith(w):
        a = w.pool[i]
        b = w.pool[j] if j is not None else c
        v = fn(b, a) if swap and name not in ("pow2", "lshift1") else fn(a, b)
        w.pool.append(v)
        return v

    return f"{name}({i}, {'c=' + repr(c) if j is None else j}{', swapped' if swap else ''})", arith


def _program(seed: int, steps: int, fault_at: int | None = None) -> tuple[list[str], int]:
    """Run ``steps`` steps in both worlds; returns (program, hits). Raises
    AssertionError naming the first differing step."""
    rng = random.Random(seed)
    stock, fast = World(False), World(True)
    program: list[str] = []
    done: list = []
    hits0 = _C.symnode_memo_counts()["hit"]
    try:
        for n in range(steps):
            if fault_at is not None and n == fault_at:
                _C._inject_fault(10**6, "symnode")

            def kinds_of(t, pool=stock.pool):
                return _pick(rng, pool, (t,))

            if done and rng.random() < 0.3:  # repeat an earlier operation on the same values
                label, fn = rng.choice(done)
                label = "again " + label
            else:
                label, fn = _step(rng, len(stock.pool), len(stock.tensors), kinds_of)
                if label.split("(")[0] in ARITH:
                    done.append((label, fn))
            program.append(label)
            s_ok, s_val = stock.run(fn)
            f_ok, f_val = fast.run(fn)
            s_desc, f_desc = stock.describe(s_ok, s_val), fast.describe(f_ok, f_val)
            if s_desc != f_desc:
                recent = "\n  ".join(program[-12:])
                raise AssertionError(
                    f"seed {seed} step {n} ({label}) differs:\n stock    {s_desc}\n fastfake {f_desc}\n"
                    f"last steps:\n  {recent}"
                )
    finally:
        _C._inject_fault(0, "symnode")
        _C.symnode_memo_set_max(1 << 15)
    return program, _C.symnode_memo_counts()["hit"] - hits0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_arithmetic_matches_stock(seed):
    program, hits = _program(seed, 500)
    assert hits > 100, f"the memo served only {hits} calls: the test would not see its state ({_counts()})"


def test_memo_kept_across_programs(monkeypatch):
    """Entries learned in one ShapeEnv serve the next (the memo is process-wide):
    the second program starts with a warm memo and still matches stock."""
    _program(10, 200)
    before = _C.symnode_memo_size()
    assert before > 0
    # (portable entries off: first calls served from the first program's records
    # would run no kernel, and so no SymNode arithmetic, in the second)
    monkeypatch.setenv("FASTFAKE_NO_PORTABLE", "1")
    _, hits = _program(10, 200)
    assert hits > 100


def test_fault_is_detected():
    """A memo that served the wrong optimized-summation flag must fail the comparison
    (the test can fail)."""
    with pytest.raises(AssertionError, match="differs"):
        _program(3, 400, fault_at=0)


# ---------------------------------------------------------------------------
# what goes to stock
# ---------------------------------------------------------------------------


def _symbols(env, *hints):
    mode = FakeTensorMode(shape_env=env)
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(hints))
    t = mode.from_tensor(torch.empty(hints), symbolic_context=ctx, source=ConstantSource("x"))
    return mode, t


def _counts():
    return dict(_C.symnode_memo_counts())


def test_served_and_new_symnode_each_time():
    fastfake.install()
    _, t = _symbols(ShapeEnv(), 3, 4)
    a, b = t.shape
    first = a * b
    c0 = _counts()
    second = a * b
    assert _counts()["hit"] == c0["hit"] + 1
    assert second.node is not first.node  # a new SymNode every call, as stock
    assert _symnode.describe(second.node) == _symnode.describe(first.node)


def test_proxy_tracing_goes_to_stock_and_graphs_match():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        n = x.shape[0] * x.shape[1]
        return x.reshape(n) * (x.shape[0] + 1)

    def trace():
        env = ShapeEnv()
        mode, t = _symbols(env, 3, 4)
        g = make_fx(f, tracing_mode="symbolic")(torch.empty(3, 4))
        return g.code, [str(x.expr) for x in g.shape_env.guards]

    stock = trace()
    fastfake.install()
    c0 = _counts()
    trace()
    fast = trace()
    assert fast == stock
    assert _counts()["stock.proxy_tracing"] > c0["stock.proxy_tracing"]


def test_debug_logging_goes_to_stock():
    import logging

    fastfake.install()
    _, t = _symbols(ShapeEnv(), 3, 4)
    a, b = t.shape
    a * b
    log = logging.getLogger("torch.fx.experimental.sym_node")
    old = log.level
    log.setLevel(logging.DEBUG)
    try:
        c0 = _counts()
        a * b
        c1 = _counts()
    finally:
        log.setLevel(old)
    assert c1["hit"] == c0["hit"]
    assert c1["stock.state"] == c0["stock.state"] + 1


def test_event_recording_goes_to_stock():
    fastfake.install()
    env = ShapeEnv(should_record_events=True)
    _, t = _symbols(env, 3, 4)
    a, b = t.shape
    c0 = _counts()
    a * b
    a * b
    assert _counts()["hit"] == c0["hit"]
    assert _counts()["stock.state"] >= c0["stock.state"] + 2


def test_unbacked_goes_to_stock():
    fastfake.install()
    env = ShapeEnv()
    _, t = _symbols(env, 3, 4)
    u = env.create_unbacked_symint()
    c0 = _counts()
    r1 = u * t.shape[0]
    r2 = u * t.shape[0]
    assert _counts()["stock.hint"] == c0["stock.hint"] + 2
    assert str(r1) == str(r2)


def test_hint_error_is_stocks():
    """A hint computation that raises (division by zero) reaches stock, which raises."""

    def run():
        env = ShapeEnv()
        _, t = _symbols(env, 3, 4)
        a, b = t.shape
        z = b - b
        outcomes = []
        for _ in range(2):
            try:
                outcomes.append(repr(a // z))
            except Exception as e:  # noqa: BLE001
                outcomes.append(parity.error_outcome(e))
        return outcomes, parity.shape_env_fields(env)

    stock = run()
    fastfake.install()
    assert run() == stock


def test_crosscheck_catches_a_wrong_entry():
    fastfake.install(crosscheck=True)
    _, t = _symbols(ShapeEnv(), 3, 4)
    a, b = t.shape
    a + b
    a + b  # crosschecked hit, identical
    _C._inject_fault(1, "symnode")
    with pytest.raises(fastfake.CrosscheckError, match="SymNode"):
        a + b


def test_bounded_and_cleared():
    fastfake.install()
    _, t = _symbols(ShapeEnv(), 3, 4, 5)
    a, b, c = t.shape
    old = _C.symnode_memo_set_max(2)
    try:
        _C.symnode_memo_clear()
        c0 = _counts()
        for x, y in ((a, b), (b, c), (a, c), (c, a)):
            x * y
        assert _C.symnode_memo_size() <= 2
        assert _counts()["full"] >= c0["full"] + 1
    finally:
        _C.symnode_memo_set_max(old)
    fastfake.cache_clear()
    assert _C.symnode_memo_size() == 0


def test_keeps_no_shape_env_alive():
    fastfake.install()
    env = ShapeEnv()
    mode, t = _symbols(env, 3, 4)
    a, b = t.shape
    for _ in range(3):
        a * b
        a == b
    assert _C.symnode_memo_size() > 0
    ref = weakref.ref(env)
    del env, mode, t, a, b
    _clear_shape_env_method_caches()  # stock's lru caches hold their ShapeEnv
    gc.collect()
    assert ref() is None


def test_uninstall_restores_symnode_methods():
    before = dict(vars(SymNode))
    fastfake.install()
    during = dict(vars(SymNode))
    hooked = set(_symnode.hooks())
    assert hooked and all(during[k] is not before[k] for k in hooked)
    # (`expr` is the C-level descriptor of fastfake/symbolic/symnode_expr.py, `maybe_as_int`
    # the C function of fastfake/symbolic/symnode_int.py)
    patched = hooked | ({"expr"} if _symnode_expr.available() else set())
    patched |= {"maybe_as_int"} if _symnode_int.available() else set()
    assert all(during[k] is before[k] for k in before if k not in patched)
    assert "_mod" not in hooked
    fastfake.uninstall()
    after = dict(vars(SymNode))
    assert set(after) == set(before)
    assert all(after[k] is before[k] for k in before)


def test_env_var_turns_it_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_SYMNODE_MEMO", "1")
    fastfake.install()
    assert all(vars(SymNode)[k] is fn for k, _, fn in _stock_sources.symnode_binary_methods())


def test_unknown_source_is_not_offered():
    """Stock SymNode binary ops whose source is not one the memo was proven on (a new
    release, a patched torch): the memo is neither self-tested nor installed."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import fastfake
        from fastfake.common import compat as _compat
        from torch.fx.experimental.sym_node import SymNode
        _compat.SYMNODE_BINARY_SOURCES.clear()
        before = dict(vars(SymNode))
        fastfake.install()
        assert "symnode_memo" not in fastfake.selftest_report()["passed"]
        # (expr: fastfake/symbolic/symnode_expr.py; maybe_as_int: fastfake/symbolic/symnode_int.py)
        assert all(vars(SymNode)[k] is v for k, v in before.items() if k not in ("expr", "maybe_as_int"))
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
