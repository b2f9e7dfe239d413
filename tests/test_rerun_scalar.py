"""Pointwise calls with a SymFloat argument, which stock never caches ("symbolic
shape"), served from an earlier call's output (csrc/cache/rerun.cpp,
fastfake/cache/rerun.py's ``SCALAR_OPS``).

Under ``dynamic=True`` Dynamo makes float module attributes SymFloats, so the
``x + eps`` of every RMSNorm layer is such a call, and each pass over the graph
repeats it. Learned state is the risk: an entry learned from one call serves later
ones while the ShapeEnv learns guards (on the tensors' sizes and on the SymFloats
themselves) and the inputs memoise derived values. So the main test is long seeded
random programs in one process, stock and fastfake side by side
(tests/test_stateful.py's Twin), every step compared: outputs, inputs, the values
memoised on input and output, the whole ShapeEnv state. SymFloats of three kinds
enter: backed ones with a source (as Dynamo makes them), ones derived from a size
(``sym_float(s0)``) and unbacked ones from ``.item()``.
"""
from __future__ import annotations

import gc
import random
import weakref

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
import parity
from fastfake import _C
from fastfake.cache import rerun as _rerun
from test_cache_symbolic import _mode, _sym
from test_stateful import Twin
from test_symbolic_views_random import equate_step

pytestmark = [
    parity.requires_symbolic_cache,
    pytest.mark.skipif(not _rerun.scalar_available(),
                       reason="stock does not bypass its cache for a SymFloat with the reason counted here"),
]

OPS = {
    "add": torch.ops.aten.add.Tensor,
    "sub": torch.ops.aten.sub.Tensor,
    "mul": torch.ops.aten.mul.Tensor,
    "div": torch.ops.aten.div.Tensor,
}
SHAPES = [(4, 6, 1), (4, 6, 8), (6, 8), (3, 1, 8), (5,)]
DTYPES = [torch.float32, torch.float32, torch.float64, torch.int64, torch.bool]

# Each world's SymFloats, by its ShapeEnv (a step's function gets only tensors).
_FLOATS: dict[int, list] = {}


def _floats_of(t) -> list:
    return _FLOATS.setdefault(id(t.fake_mode.shape_env), [])


def _memo(t) -> str:
    return repr(_C.synth_recipe(t, True))


def _new_float(kind: str, name: str, value: float):
    """A step that makes a SymFloat in the world of its tensor argument."""

    def make(t):
        env = t.fake_mode.shape_env
        if kind == "source":  # as Dynamo makes a float attribute (backed, hinted)
            from torch._dynamo.source import ConstantSource
            from torch.fx.experimental.symbolic_shapes import DimDynamic

            src = ConstantSource(name)
            sym = env.create_unspecified_symbol(value, source=src, dynamic_dim=DimDynamic.DYNAMIC)
            f = env.create_symfloatnode(sym, hint=value, source=src)
        elif kind == "size":  # derived from a size symbol
            f = torch.sym_float(t.shape[0]) if t.dim() else torch.sym_float(t.numel())
        else:  # unbacked, from .item() of a new 0-d tensor
            f = torch.empty((), dtype=torch.float64).item()
        _floats_of(t).append(f)
        return str(f.node._expr)

    return make


def _op(name: str, k: int, kwargs: dict | None = None):
    op = OPS[name]

    def run(t):
        floats = _floats_of(t)
        if not floats:
            return None
        f = floats[k % len(floats)]
        out = op(t, f, **(kwargs or {}))
        return out, _memo(t), _memo(out)

    return run


def _guard_float(k: int, bound: float):
    def run(t):
        floats = _floats_of(t)
        if floats:
            torch._check(floats[k % len(floats)] > bound)

    return run


def scalar_steps(twin: Twin, rng: random.Random, n: int, repeat: float = 0.35,
                 pre_guard: int | None = None, clears: bool = True, equate: float = 0.0) -> None:
    """``pre_guard``: every new tensor's first size gets ``>= pre_guard`` guarded
    right away (the same program with other ranges); ``clears``: whether some
    steps clear the caches (which drops every record)."""
    live: list[int] = []
    recent: list[tuple] = []
    n_floats = 0
    for _ in range(n):
        if recent and rng.random() < repeat:
            name, fn, handles = rng.choice(recent)
            live.extend(twin.step(0, name, fn, handles))
            continue
        if equate and live and rng.random() < equate:
            equate_step(twin, rng, live)
            continue
        r = rng.random()
        if r < 0.08 or not live:
            h = twin.new(0, rng.choice(SHAPES), None, rng.choice(DTYPES), "cpu", False)
            if h is not None:
                live.append(h)
                if pre_guard is not None:
                    twin.step(0, f"guard(size(0) >= {pre_guard})",
                              lambda t, b=pre_guard: torch._check(t.shape[0] >= b), [h])
            continue
        a = rng.choice(live)
        if r < 0.16 or n_floats == 0:
            kind = rng.choice(["source", "source", "size", "item"])
            name = f"f{n_floats}"
            twin.step(0, f"{name} = new_float({kind})", _new_float(kind, name, rng.choice([1e-6, 0.5, 2.0])), [a])
            n_floats += 1
            continue
        if r < 0.19:
            if clears:
                twin.clear_caches()
            continue
        if r < 0.23:
            k, bound = rng.randrange(8), rng.choice([-1.0, 0.0, 1e-7])
            twin.step(0, f"check(float[{k}] > {bound})", _guard_float(k, bound), [a])
            continue
        if r < 0.27:
            bound = rng.choice([2, 3, 100])
            twin.step(0, f"guard(size(0) >= {bound})",
                      lambda t, b=bound: torch._check(t.shape[0] >= b) if t.dim() else None, [a])
            continue
        if r < 0.40:
            view = rng.choice(["transpose", "slice", "clone", "mul2"])
            fn = {
                "transpose": lambda t: t.transpose(0, -1) if t.dim() > 1 else t.clone(),
                "slice": lambda t: t[1:] if t.dim() else t.clone(),
                "clone": lambda t: t.clone(),
                "mul2": lambda t: t * 2,
            }[view]
            live.extend(twin.step(0, view, fn, [a]))
            continue
        name = rng.choice(list(OPS))
        k = rng.randrange(8)
        kwargs = {"alpha": 2} if name in ("add", "sub") and rng.random() < 0.1 else None
        label = f"{name}(t, float[{k}]{', alpha=2' if kwargs else ''})"
        fn = _op(name, k, kwargs)
        live.extend(twin.step(0, label, fn, [a]))
        recent = [*recent[-9:], (label, fn, [a])]
        if len(live) > 30:
            del live[: len(live) - 30]


@pytest.mark.parametrize("seed", range(4))
def test_long_random_scalar_sequences(seed):
    """Odd seeds also check sizes equal in between (replacements in the ShapeEnv)."""
    fastfake.cache_clear()
    fastfake.reset_stats()
    _FLOATS.clear()
    twin = Twin(True)
    scalar_steps(twin, random.Random(311 + seed), 450, equate=0.05 if seed % 2 else 0.0)
    s = fastfake.stats()
    counts = parity.counters_with_prefix(s, "cache.symbolic.rerun")
    assert s["cache.symbolic.rerun.served_scalar"] >= 10, counts
    assert s["cache.symbolic.rerun.learned_scalar"] >= 5, counts


@pytest.mark.parametrize("seed", range(3))
def test_records_serve_in_new_shape_envs(seed):
    """Learned state across ShapeEnvs (a restarted trace, the next compile): the
    same random program again in new ShapeEnvs with every record kept, then with
    other ranges (a guard on each new tensor), then another program; every step
    compared with stock. Records learned in one ShapeEnv serve in the others only
    where the signature agrees."""
    fastfake.cache_clear()
    fastfake.reset_stats()
    for prog, pre_guard in ((seed, None), (seed, None), (seed, 3), (seed, None), (50 + seed, None)):
        _FLOATS.clear()
        scalar_steps(Twin(True), random.Random(911 + prog), 200, pre_guard=pre_guard, clears=False)
    s = fastfake.stats()
    counts = parity.counters_with_prefix(s, "cache.symbolic.rerun")
    assert s["cache.symbolic.rerun.served_other_env"] >= 10, counts
    assert s["cache.symbolic.rerun.declined.shape_env"] >= 1, counts


def _program(x, floats):
    for _ in range(3):
        for f in floats:
            t = x * 2
            torch.ops.aten.add.Tensor(t, f)
            torch.ops.aten.mul.Tensor(t.t(), f)


def _run_program():
    """``_program`` in a new symbolic mode on a new input; returns the mode."""
    mode = _mode()
    x = _sym(mode, torch.randn(4, 6))
    floats = _floats(mode, x)
    with mode:
        _program(x, floats)
    return mode


def _floats(mode, x):
    with mode:
        return [torch.sym_float(x.shape[0]), torch.empty((), dtype=torch.float64).item()]


def test_served_calls_count_as_stock_counts_them():
    """cache_info(): a served repeat counts stock's "symbolic shape" bypass."""

    def counts(fast: bool) -> tuple:
        fastfake.install() if fast else fastfake.uninstall()
        try:
            mode = _mode()
            x = _sym(mode, torch.randn(4, 6))
            floats = _floats(mode, x)
            with mode:
                _program(x, floats)
                before = FakeTensorMode.cache_info()
                _program(x, floats)
                after = FakeTensorMode.cache_info()
            keys = set(before.bypasses) | set(after.bypasses)
            return (after.hits - before.hits, after.misses - before.misses,
                    {k: after.bypasses.get(k, 0) - before.bypasses.get(k, 0) for k in sorted(keys)},
                    after.size - before.size)
        finally:
            fastfake.uninstall()

    fastfake.cache_clear()
    stock = counts(False)
    fastfake.reset_stats()
    fast = counts(True)
    assert fastfake.stats()["cache.symbolic.rerun.served_scalar"] >= 8
    assert fast == stock, (fast, stock)


def _fault_steps(twin: Twin, n: int) -> None:
    x = twin.new(0, (4, 6, 8), None, torch.float32, "cpu", False)
    twin.step(0, "f = new_float(size)", _new_float("size", "f", 0.0), [x])
    for _ in range(n):
        (t,) = twin.step(0, "mul2", lambda t: t * 2, [x])
        twin.step(0, "add(t, f)", _op("add", 0), [t])


def test_the_comparison_catches_forgotten_input_memos():
    """Served calls that skip what the kernel memoised on their input: the
    comparison must fail (a test that cannot fail proves nothing)."""
    fastfake.cache_clear()
    fastfake.install()  # the install-time self-test runs first (it would meet the fault)
    fastfake.uninstall()
    _FLOATS.clear()
    twin = Twin(True)
    _C._inject_fault(10_000, "rerun_scalar")
    try:
        with pytest.raises(AssertionError, match="fastfake differs from stock"):
            _fault_steps(twin, 8)
    finally:
        _C._inject_fault(0, "rerun_scalar")
        fastfake.uninstall()


def test_the_same_program_without_the_fault_passes():
    fastfake.cache_clear()
    fastfake.reset_stats()
    _FLOATS.clear()
    _fault_steps(Twin(True), 8)
    assert fastfake.stats()["cache.symbolic.rerun.served_scalar"] >= 4


def test_under_crosscheck_no_mismatch():
    fastfake.cache_clear()
    fastfake.install(crosscheck=True)
    try:
        fastfake.reset_stats()
        mode = _run_program()
        s = fastfake.stats()
        assert s["cache.symbolic.rerun.served_scalar"] >= 3 and s["crosscheck.checked"] >= 3 and s["crosscheck.mismatch"] == 0, s
    finally:
        fastfake.uninstall()


class _RMSNorm(torch.nn.Module):
    """T5 / Llama's RMSNorm: ``eps`` is a float attribute, a SymFloat under
    ``dynamic=True``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = 1e-6

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class _Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norms = torch.nn.ModuleList(_RMSNorm(16) for _ in range(3))
        self.lin = torch.nn.Linear(16, 16, bias=False)

    def forward(self, x):
        for n in self.norms:
            x = self.lin(n(x))
        return x


@pytest.mark.usefixtures("compile_state_restored")
@pytest.mark.parametrize("workload", ["compile_dynamic", "compile_train_dynamic"])
def test_compiled_rmsnorm_graphs_identical(workload):
    """A dynamic=True compile of RMSNorm layers: the FX graphs and node metadata
    equal stock's, and in inference the served calls happen (Dynamo's SymFloat
    eps; in training each call on a SymFloat has an input of its own kind, another
    storage-size expression or memo state, so none is a repeat)."""
    from bench import harness

    torch.manual_seed(0)
    mi = (_Stack(), (torch.randn(2, 5, 16),))
    stock = harness.capture_graphs("t5", workload, "stock", model_and_inputs=mi)
    fastfake.reset_stats()
    fast = harness.capture_graphs("t5", workload, "fastfake", model_and_inputs=mi)
    served = fastfake.stats()["cache.symbolic.rerun.served_scalar"]
    from bench.workloads import diff_graphs

    assert diff_graphs(stock, fast) == ""
    if workload == "compile_dynamic":
        assert served >= 1, parity.counters_with_prefix(fastfake.stats(), "cache.symbolic.rerun")


def test_make_fx_graphs_and_guards_identical():
    """make_fx(tracing_mode="symbolic"): the proxy mode hands the call to fake
    dispatch with itself popped (stock's key says "not tracing" there too, and its
    kernel's SymNode arithmetic is not traced), so repeats may be served; the graph,
    node values and guards equal stock's."""
    from test_cache_symbolic import _trace_symbolic

    def f(x):
        s = torch.sym_float(x.shape[0])
        return (x + s).sum() + (x * s).sum() + (x + s).sum() + (x.t() * s).sum()

    stock, fast, _stats = _trace_symbolic(f, (torch.randn(4, 6),))
    assert fast == stock


def test_entries_keep_nothing_alive_and_go_with_clear_and_switch():
    fastfake.install()
    try:
        mode = _run_program()
        assert _C.rerun_size() >= 1
        env = weakref.ref(mode.shape_env)
        del mode
        parity.clear_shape_env_lru_caches()
        gc.collect()
        assert env() is None
        fastfake.cache_clear()
        assert _C.rerun_size() == 0
    finally:
        fastfake.uninstall()
    assert _C.set_rerun_scalar(False) is False


def test_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_RERUN_SCALAR", "1")
    fastfake.install()
    try:
        fastfake.reset_stats()
        mode = _run_program()
        s = fastfake.stats()
        assert s["cache.symbolic.rerun.served_scalar"] == 0
        assert s["cache.bypass.symbolic_scalar"] >= 1
    finally:
        fastfake.uninstall()


def test_the_bypass_probe_gives_stock_s_reason_for_every_kind_of_symfloat():
    """``stock_reason_for_symfloat`` (run at ``install()``) builds its SymFloat
    without the ShapeEnv, so that it records no stack summary (whose first use
    imports torch.export and Inductor); stock's key gives the same reason for a
    backed and an unbacked SymFloat, and for a SymFloat computed from a SymInt."""
    from faults import in_subprocess
    from torch._subclasses import fake_tensor as ft
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def reason(make):
        env = ShapeEnv()
        mode = ft.FakeTensorMode(shape_env=env)
        f = make(env, mode)
        with mode:
            x = torch.empty(2)
        try:
            mode._cache_key(ft._CacheKeyState(env), torch.ops.aten.add.Tensor, (x, f), {})
        except ft._BypassDispatchCache as e:
            return e.reason
        return None

    def backed(env, mode):
        from torch._dynamo.source import ConstantSource

        s = env.create_symbol(2.5, ConstantSource("f"))
        return env.create_symfloatnode(s, hint=2.5, source=ConstantSource("f"))

    def from_int(env, mode):
        return _sym(mode, torch.randn(3, 4)).shape[0] / 2

    probe = _rerun.stock_reason_for_symfloat()
    assert probe == _rerun.SCALAR_REASON
    for make in (lambda env, mode: env.create_unbacked_symfloat(), backed, from_int):
        assert reason(make) == probe
    # (the modules the probe itself imports: an out-of-tree backend loaded at
    # ``import torch``, TorchTPU, imports Inductor on its own)
    code = ("import sys, torch\nfrom fastfake.cache import rerun\n"
            "heavy = ('torch.export._trace', 'torch._inductor.codecache')\n"
            "before = {m for m in heavy if m in sys.modules}\n"
            "assert rerun.stock_reason_for_symfloat() == rerun.SCALAR_REASON\n"
            "print(sorted(m for m in heavy if m in sys.modules and m not in before))")
    out = in_subprocess(code)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])
