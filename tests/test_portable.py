"""Symbolic entries reused in another ShapeEnv (csrc/cache/portable.cpp,
fastfake/cache/portable.py).

A first call in a new ShapeEnv may be served from an entry learned in another
one, as the output stock's *miss* returns. Compared with stock, run by run
(tests/parity.py): every output / input field, the SymNode structure (which
output SymNodes *are* input SymNodes), the ShapeEnv state, and stock's own cache
as ``FakeTensorMode.cache_info()`` and the ShapeEnv's ``fake_tensor_cache`` show
it (a served call must leave stock's cache as stock's miss does).
"""
from __future__ import annotations

import random
import weakref

import optree
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
import parity
from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.cache import portable as _portable
from test_cache_symbolic import CASES, _inputs, _mode, _sym, _trace_symbolic, _mlp
from test_stateful import Twin, random_steps
from test_symbolic_views_random import view_steps

pytestmark = [
    parity.requires_symbolic_cache,
    pytest.mark.skipif(not _compat.portable_entries_known(), reason="no portable entries on this release"),
]


def _shape_env(args):
    for a in optree.tree_leaves(list(args)):
        if isinstance(a, torch.Tensor):
            for s in a.shape:
                if isinstance(s, torch.SymInt):
                    return s.node.shape_env
    return None


def _with_stock_cache(fn, times=2):
    """``fn`` ``times`` times, plus the entries stock's cache holds in the ShapeEnv
    (its counters are compared in test_served_call_counts_as_stock_miss: here
    tests/parity.py clears stock's class-level cache between runs behind
    fastfake's back, so static hits count differently)."""

    def run(*args):
        env = _shape_env(args)
        out = tuple(fn(*args) for _ in range(times))
        return out, len(env.fake_tensor_cache) if env is not None else -1

    return run


# Cases whose first call in a second ShapeEnv must come from a portable entry.
# (Not "view_symint": stock's output size is its input's memoised numel SymNode
# itself, which a recipe cannot rebuild; tests/test_portable_nested.py.)
EXPECT_SERVED = {
    "addmm", "bmm", "transpose", "permute", "clone", "softmax",
    "layer_norm", "layer_norm_affine", "gelu", "add_same_shape", "embedding", "sum_dim",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_portable_parity(name):
    """Run 0 learns in its ShapeEnv; runs 1 and 2 are first calls in new ones."""
    fn, reals = CASES[name]
    fastfake.cache_clear()
    both = parity.run_both(_with_stock_cache(fn), _inputs(reals), mode_factory=_mode, fast_runs=3)
    parity.assert_symbolic_parity(both, "portable")
    served = [f.stats.get("cache.symbolic.portable.served", 0) for f in both.fast]
    assert served[0] == 0, served
    if name in EXPECT_SERVED:
        assert served[1] >= 1 and served[2] >= 1, (served, parity.counters_with_prefix(both.fast[1].stats, "cache."))


def test_served_call_counts_as_stock_miss():
    """cache_info() after a first call served from another ShapeEnv's entry: one
    miss, as stock's; the second call one hit."""
    real = torch.randn(4, 6, 8)

    def counts(fast):
        fastfake.install() if fast else fastfake.uninstall()
        try:
            mode = _mode()
            x = _sym(mode, real)
            with mode:
                x.sum(0)  # a first static evaluation (see _portable)
                before = FakeTensorMode.cache_info()
                torch.softmax(x, -1)
                mid = FakeTensorMode.cache_info()
                torch.softmax(x, -1)
                after = FakeTensorMode.cache_info()
            return [(b.hits - a.hits, b.misses - a.misses) for a, b in ((before, mid), (mid, after))]
        finally:
            fastfake.uninstall()

    fastfake.cache_clear()
    stock = counts(False)
    counts(True)  # learns
    fastfake.reset_stats()
    fast = counts(True)  # served from the entries of the run before
    assert fastfake.stats()["cache.symbolic.portable.served"] >= 2
    assert fast == stock == [(0, 1), (1, 0)], (fast, stock)


def _program(x, w, b):
    h = torch.addmm(b, x, w)
    h = F.gelu(h)
    h = h.view(h.shape[0], 2, -1).transpose(0, 1)
    h = torch.softmax(h, -1).sum(0)
    return F.layer_norm(h, (h.shape[-1],))


def test_served_in_every_later_shape_env_with_crosscheck():
    fastfake.cache_clear()
    reals = [torch.randn(6, 8), torch.randn(8, 10), torch.randn(10)]
    both = parity.run_both(_with_stock_cache(_program), _inputs(reals), mode_factory=_mode, fast_runs=3)
    parity.assert_symbolic_parity(both, "program")
    assert all(f.stats.get("cache.symbolic.portable.served", 0) >= 5 for f in both.fast[1:]), [
        parity.counters_with_prefix(f.stats, "cache.symbolic") for f in both.fast
    ]
    # and with every served result recomputed by stock
    fastfake.install(crosscheck=True)
    try:
        fastfake.reset_stats()
        mode = _mode()
        args = tuple(_sym(mode, r) for r in reals)
        with mode:
            _program(*args)
        s = fastfake.stats()
    finally:
        fastfake.uninstall()
    assert s["cache.symbolic.portable.served"] >= 5 and s["crosscheck.mismatch"] == 0, s


def _guarded_program(x, w, b):
    torch._check(x.shape[0] < 1000)  # a guard on s0: another range, another axiom
    return _program(x, w, b)


def test_declined_where_the_shape_env_knows_more():
    """Learned without the guard, then a ShapeEnv that has it: static evaluation
    could answer differently there, so stock computes (and parity holds)."""
    fastfake.cache_clear()
    reals = [torch.randn(6, 8), torch.randn(8, 10), torch.randn(10)]
    make = _inputs(reals)
    parity.run_both(_program, make, mode_factory=_mode, stock_runs=0, fast_runs=1)
    both = parity.run_both(_with_stock_cache(_guarded_program), make, mode_factory=_mode, fast_runs=1)
    parity.assert_symbolic_parity(both, "guarded")
    s = both.fast[0].stats
    assert s.get("cache.symbolic.portable.declined.shape_env", 0) >= 1, parity.counters_with_prefix(s, "cache.")


def _guarding_add(x, y):
    return x + y  # [s0, s1] + [s2, s3], equal hints: stock guards / replaces


def test_call_that_changes_the_shape_env_is_not_recorded():
    fastfake.cache_clear()
    reals = [torch.randn(4, 6), torch.randn(4, 6)]

    def make(mode):
        return tuple(_sym(mode, r) for r in reals)

    both = parity.run_both(_with_stock_cache(_guarding_add), make, mode_factory=_mode, fast_runs=2)
    parity.assert_symbolic_parity(both, "guarding")
    assert both.fast[1].stats.get("cache.symbolic.portable.served", 0) == 0


def test_make_fx_symbolic_twice_identical_graphs_and_guards():
    """Two make_fx(symbolic) traces in one process: the second's first calls come
    from the first's entries; graph code, node values and guards are stock's."""
    args = (torch.randn(4, 6, 8), torch.randn(8, 16), torch.randn(16, 8))
    fastfake.cache_clear()

    def f(*a):
        return _mlp(*a)

    stock1, fast1, _ = _trace_symbolic(f, args)
    stock2, fast2, stats = _trace_symbolic(f, args)
    assert fast1 == stock1 and fast2 == stock2
    assert stats["cache.symbolic.portable.served"] >= 3, parity.counters_with_prefix(stats, "cache.")


def test_no_shape_env_or_mode_kept_alive():
    fastfake.install()

    def run():
        mode = _mode()
        x = _sym(mode, torch.randn(4, 6, 8))
        with mode:
            F.layer_norm(x, (8,))
            torch.softmax(x, -1)
        return weakref.ref(mode.shape_env), weakref.ref(mode)

    try:
        fastfake.cache_clear()
        env, mode = run()
        assert fastfake._C.portable_size() >= 1
        parity.clear_shape_env_lru_caches()
        assert env() is None and mode() is None
    finally:
        fastfake.uninstall()


def test_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_PORTABLE", "1")
    fastfake.cache_clear()
    reals = [torch.randn(6, 8), torch.randn(8, 10), torch.randn(10)]
    both = parity.run_both(_program, _inputs(reals), mode_factory=_mode, fast_runs=2)
    parity.assert_symbolic_parity(both, "off")
    assert all(f.stats.get("cache.symbolic.portable.served", 0) == 0 for f in both.fast)
    assert fastfake._C.portable_size() == 0


def test_uninstall_turns_it_off_and_cache_clear_empties_it():
    fastfake.install()
    try:
        fastfake.cache_clear()
        mode = _mode()
        x = _sym(mode, torch.randn(4, 6, 8))
        with mode:
            torch.softmax(x, -1)
        assert fastfake._C.portable_size() >= 1
        fastfake.cache_clear()
        assert fastfake._C.portable_size() == 0
    finally:
        fastfake.uninstall()
    assert fastfake._C.set_portable(False) is False


class _EpochTwin(Twin):
    """A Twin whose random cache clears (which empty the portable records too,
    rightly) are rarer, so that records live on into later epochs."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(True)
        self.rng = rng

    def clear_caches(self) -> None:
        if self.rng.random() < 0.15:
            super().clear_caches()


def random_epochs(seed: int) -> None:
    """10 epochs of 240 seeded random steps, each epoch in new modes and ShapeEnvs
    (stock and fastfake side by side, every step compared), one of 3 programs per
    epoch so programs recur across epochs; some epochs guard a symbol in between."""
    fastfake.cache_clear()
    fastfake.reset_stats()
    master = random.Random(seed)
    for epoch in range(10):
        twin = _EpochTwin(random.Random(master.random()))
        program = master.randrange(3)
        rng = random.Random(9000 + 10 * seed + program)
        random_steps(twin, rng, 120)
        if master.random() < 0.3 and twin.stock.pool:
            bound = 500 + epoch % 2
            twin.step(0, "guard", lambda t: torch._check(t.shape[0] < bound), [0])
        random_steps(twin, rng, 120)


# Seeds 0 and 1 of these programs run in tests/test_portable_fast.py, served by the
# C++ admission with every decision compared with fastfake.cache.portable.admit's;
# seed 2 runs here, admitted and committed by fastfake.cache.portable itself.
# (The long random sequences over epochs of ShapeEnvs, random_epochs, run there
# too, with the same comparison.)
@pytest.mark.parametrize("seed", [2])
def test_records_with_replaced_symbols_across_shape_envs(seed):
    """Programs that check two sizes equal in between (the ShapeEnv replaces one
    symbol by the other), each run again in new ShapeEnvs with every record kept,
    stock and fastfake side by side, every step compared: records whose call
    involves a replaced symbol are served in the later ShapeEnvs, as stock's miss
    there, over the replacement closure's signature (admitted and committed in
    Python here)."""
    served_replaced = []

    def admit(mode, func, args, kwargs, record):
        ok = _portable.admit(mode, func, args, kwargs, record)
        if ok is not None and any(mode.shape_env.replacements.get(s) is not None for s in record[0]):
            served_replaced.append(str(func))
        return ok

    fastfake.cache_clear()
    fastfake.reset_stats()
    fastfake.install()  # (the hooks are set up once per process, at the first install)
    fastfake.uninstall()
    _C.setup_portable(_portable.before, _portable.learn, admit, _portable.commit, _portable.log_hit, _portable.replay)
    # (the admission in fastfake.cache.portable: the C++ one is compared with it over
    # these programs in tests/test_portable_fast.py)
    fast = _C.set_portable_fast(False)
    try:
        master = random.Random(seed)
        for _ in range(6):
            program = master.randrange(2)
            view_steps(_EpochTwin(random.Random(master.random())), random.Random(2277 + 10 * seed + program),
                       200, repeat=0.2, equate=0.06)
    finally:
        _portable.setup(_C)
        _C.set_portable_fast(fast)
    s = fastfake.stats()
    assert s.get("cache.symbolic.portable.served", 0) >= 10, parity.counters_with_prefix(s, "cache.symbolic")
    assert served_replaced, "no record with a replaced symbol was served"


def test_specialised_symbol_in_later_shape_envs():
    """A size checked equal to a number (the ShapeEnv replaces its symbol by the
    number), then calls on it, in new ShapeEnvs in turn, every step compared with
    stock: stock's key reads such a SymInt as the number while its kernel's output
    keeps the SymInt, so no record involving it may serve (found by the random
    programs: a served ``detach`` returned the number)."""
    fastfake.cache_clear()
    for _ in range(3):
        twin = Twin(True)
        h = twin.new(0, (2, 3, 4), None, torch.float32, "cpu", False)
        twin.step(0, "check(size(0) == 2)", lambda t: torch._check(t.shape[0] == 2), [h])
        for name, fn in (("detach", torch.Tensor.detach), ("clone", torch.Tensor.clone),
                         ("mul", lambda t: t * 2), ("transpose", lambda t: t.transpose(0, 1))):
            twin.step(0, name, fn, [h])


def test_micro_first_call_rows_are_served_first_calls():
    """bench.micro's *_sym_first rows time what they name: with fastfake, each
    sample's call is a first call in its new ShapeEnv served from the record
    learned earlier, not a stock miss nor a hit."""
    from bench import micro

    for name in micro.FIRST_CALL_OPS:
        fastfake.reset_stats()
        micro.measure_first(name, "fastfake", samples=3)
        stats = fastfake.stats()
        fastfake.uninstall()
        assert stats.get("cache.symbolic.portable.served", 0) >= 3, (name, parity.counters_with_prefix(stats, "cache."))
