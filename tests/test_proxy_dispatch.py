"""The proxy mode's dispatch in C (csrc/tracing/proxy_dispatch.cpp).

What must hold: whole traces are stock's with it on -- AOTAutograd's forward and
backward graphs (code, every node's metadata, the outputs' shapes), make_fx graphs
in real, fake and symbolic mode, exported programs -- over the self-test's program
and a long random sequence in one process (the per-op facts it keeps are reused
across them); stock's call counter and the original-aten context end as stock's;
what can change between calls (a decomposition table, a kernel registered for an
op, a name of proxy_tensor replaced, constants) sends the calls to stock; errors
are stock's; it serves; ``uninstall()`` puts stock's method back; the switch, the
self-test (a fault) and an unproven release turn it off.
"""
from __future__ import annotations

import random

import pytest
import torch

import fastfake
from fastfake import _C
from fastfake.core import selftest as _selftest
from fastfake.tracing import proxy_dispatch as pd
from aot_programs import compiled_encoder, describe, program, trace
from faults import fault_turns_off_only, in_subprocess, switched_off, unknown_source_stays_stock

pytestmark = pytest.mark.skipif(not pd.available(), reason="proxy_dispatch is not proven on this release")

from torch.fx.experimental import proxy_tensor  # noqa: E402
from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode, make_fx  # noqa: E402

STOCK = vars(ProxyTorchDispatchMode)["__torch_dispatch__"]


@pytest.fixture
def on():
    fastfake.install()
    assert fastfake.core.install.explain()["proxy_dispatch"] == "on"
    yield
    fastfake.uninstall()


def _served() -> int:
    return fastfake.stats()["proxy_dispatch.served"]


def _make_fx(fn, inputs, mode: str, **kw) -> str:
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.cache_clear()
    return describe(make_fx(fn, tracing_mode=mode, **kw)(*inputs))


def test_the_self_test_program_static_and_symbolic(on):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def run(flag):
        pd.apply(flag)
        mode = FakeTensorMode(shape_env=ShapeEnv())
        with mode:
            return [(n, repr(r)) for n, _, r in _selftest._functional_dispatch_program(mode, "cpu")
                    if n.startswith("AOTAutograd")]

    want = run(False)
    before = _served()
    got = run(True)
    assert got == want
    assert _served() - before > 100
    assert fastfake.stats()["proxy_dispatch.tracked_by_stock"] > 0  # (several outputs)
    assert fastfake.stats()["proxy_dispatch.tracked.symbolic"] > 0


def test_long_random_sequence_in_one_process(on):
    """AOTAutograd traces and make_fx graphs (symbolic, fake) of random programs,
    the C method off and on, in one process; the facts dropped now and then."""
    rng = random.Random(20261203)
    served = _served()
    for i in range(14):  # (each: four traces; the suite's time budget)
        fn, src = program(rng)
        rows = rng.choice([3, 5, 6])
        dynamic = rng.random() < 0.5

        def inputs():
            g = torch.Generator().manual_seed(i)
            return (torch.randn(rows, 4, generator=g, requires_grad=True), torch.randn(4, generator=g))

        traces = {}
        for flag in (False, True):
            pd.apply(flag)
            traces[flag] = (trace(fn, inputs(), dynamic), _make_fx(fn, inputs(), "symbolic" if dynamic else "fake"))
        assert traces[True] == traces[False], src
        if i % 7 == 6:
            _C.proxy_dispatch_clear()
    assert _served() - served > 300


def test_a_model_compiled_with_aot_eager(on, compile_state_restored):
    for dynamic in (False, True):
        pd.apply(False)
        want = compiled_encoder(dynamic)
        pd.apply(True)
        before = _served()
        assert compiled_encoder(dynamic) == want
        assert _served() > before


def test_export_and_make_fx_modes(on):
    """An exported program (its pre-dispatch trace is stock's; the decompositions'
    trace is served), and make_fx in real mode (real tensors, constants)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.register_buffer("b", torch.ones(3))

        def forward(self, x):
            y = self.lin(x).relu() + self.b
            return torch.cat([y, y.t().contiguous().t()], 0).softmax(-1), y.max(1)

    def exported(flag):
        pd.apply(flag)
        from torch._subclasses.fake_tensor import FakeTensorMode

        FakeTensorMode.cache_clear()
        ep = torch.export.export(M(), (torch.randn(2, 4),)).run_decompositions()
        return describe(ep.graph_module)

    torch.manual_seed(0)
    want = exported(False)
    torch.manual_seed(0)
    before = _served()
    assert exported(True) == want
    assert _served() > before

    def f(x):
        c = torch.tensor([1.0, 2.0, 3.0, 4.0])  # (a constant: its ops go to stock)
        return (x * c).sum(0) + c.sum(), x.t() @ x

    x = torch.randn(3, 4)
    for mode in ("real", "fake", "symbolic"):
        pd.apply(False)
        want = _make_fx(f, (x,), mode)
        pd.apply(True)
        assert _make_fx(f, (x,), mode) == want, mode


class _Seen(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def _symbolic_outputs(x, y):
    z = torch.cat([x, x]).view(-1, 2)[1:] * y[:1]  # sizes, strides and numel SymInts new to the tracer
    g = torch.autograd.grad(z.sin().sum(), x)[0]
    return g.t()[:, 1:], z.shape[0] * 2, g.numel() + z.stride(0)


def _symbolic_trace(fn, flag: bool) -> str:
    pd.apply(flag)
    return _make_fx(fn, (torch.randn(6, 4, requires_grad=True), torch.randn(12)), "symbolic")


def test_symbolic_outputs_tracked_as_stock_tracks_them(on):
    """Outputs with symbolic sizes: their SymInts' slots (the thunks forced later into
    sym_size / sym_stride / sym_numel nodes, first one wins) as stock's track_tensor
    leaves them; a fault that leaves them unset is seen by the same comparison."""
    want = _symbolic_trace(_symbolic_outputs, False)
    assert "sym_size" in want and "sym_numel" in want
    before = fastfake.stats()["proxy_dispatch.tracked.symbolic"]
    assert _symbolic_trace(_symbolic_outputs, True) == want
    assert fastfake.stats()["proxy_dispatch.tracked.symbolic"] - before >= 10
    _C._inject_fault(1000, "proxy_dispatch_syms")
    try:
        try:
            broken = _symbolic_trace(_symbolic_outputs, True)
        except Exception as e:  # noqa: BLE001  (a SymInt without a proxy)
            broken = repr(e)
    finally:
        _C._inject_fault(0, "proxy_dispatch_syms")
    assert broken != want


def test_symbolic_outputs_under_a_torch_function_mode_or_debug_log_are_stocks(on):
    """Where a torch-function mode is on at the proxy mode (an op redispatched under
    one), stock's reads of the output's sizes, strides, numel and offset run it; with
    proxy_tensor's debug log shown, set_proxy_slot logs every SymInt: both stock's."""
    import logging

    seen: list = []

    def under_mode(x, y):
        z = torch.cat([x, x])
        with _Seen() as m:
            w = torch.ops.aten.sin.default.redispatch(torch._C._dispatch_keyset_full(), z)
        seen.append(m.seen)
        return w.t(), w.shape[0] + y.shape[0]

    def run(fn, flag):
        seen.clear()
        return _symbolic_trace(fn, flag), [list(s) for s in seen]

    want = run(under_mode, False)
    assert any(name in ("stride", "numel", "storage_offset") for name in want[1][0])
    before = fastfake.stats()["proxy_dispatch.tracked_by_stock"]
    assert run(under_mode, True) == want
    assert fastfake.stats()["proxy_dispatch.tracked_by_stock"] > before

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.msgs: list = []

        def emit(self, record):
            self.msgs.append(record.msg)

    log = logging.getLogger(proxy_tensor.__name__)
    level = log.level
    keep = Keep()
    log.addHandler(keep)
    log.setLevel(logging.DEBUG)
    try:
        logged = {}
        for flag in (False, True):
            keep.msgs.clear()
            logged[flag] = (_symbolic_trace(_symbolic_outputs, flag), list(keep.msgs))
    finally:
        log.removeHandler(keep)
        log.setLevel(level)
    assert logged[False][1].count("set_proxy_slot %s (%s) %s") > 10
    assert logged[True] == logged[False]


def test_a_decomposition_table_and_precision_barriers(on):
    """Ops in the mode's decomposition table are stock's (the table decomposes them);
    with emulate_precision_casts, stock's barrier pass marks the nodes it marks."""
    import torch._inductor.config as inductor_config
    from torch._decomp import get_decompositions

    table = get_decompositions([torch.ops.aten.addmm, torch.ops.aten.gelu, torch.ops.aten._softmax])

    def f(x, w, b):
        return torch.nn.functional.gelu(torch.addmm(b, x, w)).softmax(-1).to(torch.bfloat16) * 2

    inputs = (torch.randn(3, 4), torch.randn(4, 5), torch.randn(5))
    for emulate in (False, True):
        with inductor_config.patch(emulate_precision_casts=emulate):
            pd.apply(False)
            want = _make_fx(f, inputs, "fake", decomposition_table=table)
            pd.apply(True)
            stock_op = fastfake.stats()["proxy_dispatch.stock.op"]
            assert _make_fx(f, inputs, "fake", decomposition_table=table) == want
            assert fastfake.stats()["proxy_dispatch.stock.op"] > stock_op
    assert "low_precision_pointwise_barrier" in want


def test_a_rebound_extract_tensor_metadata_is_the_one_called(on, monkeypatch):
    """Stock's set_meta looks ``_extract_tensor_metadata`` up in proxy_tensor at every
    call, so the C path does too: a function rebound there (the benchmark's fixed
    memory-format order on 2.9 is one) is called as often as stock calls it, and the
    calls are still served (it is no name that must hold)."""
    orig = proxy_tensor._extract_tensor_metadata
    calls = []

    def mine(t, *args, **kwargs):
        calls.append(tuple(t.shape))
        return orig(t, *args, **kwargs)

    def f(x, w):
        return ((x @ w).sin() + 1).t() * 2

    inputs = (torch.randn(3, 4), torch.randn(4, 5))
    monkeypatch.setattr(proxy_tensor, "_extract_tensor_metadata", mine)
    out = {}
    for flag in (False, True):
        pd.apply(flag)
        calls.clear()
        served = _served()
        out[flag] = (_make_fx(f, inputs, "fake"), list(calls))
        if flag:
            assert _served() - served >= 4
    assert out[True] == out[False] and len(out[False][1]) >= 4


def _original_aten():
    """proxy_tensor's ORIGINAL_ATEN now (a ContextVar; on 2.9 a module global the mode sets and clears)."""
    aten = proxy_tensor.ORIGINAL_ATEN
    return aten.get() if hasattr(aten, "get") else aten


def test_counter_and_context_end_as_stocks(on):
    from torch.fx import traceback as fx_traceback
    from torch.utils._stats import simple_call_counter

    def f(x):
        return (x.sin() + 1).sum(0)

    def run(flag):
        pd.apply(flag)
        simple_call_counter.clear()
        with fx_traceback.preserve_node_meta():
            g = _make_fx(f, (torch.randn(3, 4),), "symbolic")
            meta = dict(fx_traceback.current_meta)
        return g, dict(simple_call_counter), meta, _original_aten()

    run(False)  # (the process's first symbolic trace counts one fake dispatch more)
    want = run(False)
    assert want[1].get("ProxyTorchDispatchMode.__torch_dispatch__", 0) > 0
    assert run(True) == want


def test_what_changes_between_calls_sends_them_to_stock(on):
    """A kernel in an op's py_kernels, a replaced name of proxy_tensor: read per call."""
    r = in_subprocess(
        """
        import torch, fastfake
        from torch.fx.experimental import proxy_tensor
        from torch.fx.experimental.proxy_tensor import make_fx
        from fastfake.tracing import proxy_dispatch as pd
        fastfake.install()
        def f(x):
            return x.t().sin() * 2
        def run():
            return make_fx(f, tracing_mode="fake")(torch.randn(2, 3)).code
        plain = run()
        op = torch.ops.aten.t.default
        DK = torch._C.DispatchKey.CompositeImplicitAutograd
        called = []
        def decomp(x):
            called.append(1)
            return torch.ops.aten.permute.default(x, [1, 0])
        op.py_kernels[DK] = decomp
        op._dispatch_cache.clear()
        out = {}
        for flag in (False, True):
            pd.apply(flag)
            called.clear()
            out[flag] = (run(), len(called))
        print("kernel:", out[False] == out[True], out[True][1] > 0)
        del op.py_kernels[DK]
        op._dispatch_cache.clear()
        seen = []
        stock_tree = proxy_tensor.track_tensor_tree
        def tree(*a, **k):
            seen.append(1)
            return stock_tree(*a, **k)
        proxy_tensor.track_tensor_tree = tree
        before = fastfake.stats()["proxy_dispatch.stock.mode"]
        print("patched:", run() == plain, len(seen) > 0, fastfake.stats()["proxy_dispatch.stock.mode"] > before)
        proxy_tensor.track_tensor_tree = stock_tree
        before = fastfake.stats()["proxy_dispatch.served"]
        print("restored:", run() == plain, fastfake.stats()["proxy_dispatch.served"] > before)
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "kernel: True True" in r.stdout, r.stdout
    assert "patched: True True True" in r.stdout and "restored: True True" in r.stdout, r.stdout


@pytest.mark.skipif(not hasattr(torch.compiler.config, "compile_on_one_rank"),
                    reason="this release's proxy_call has no compile-on-one-rank device rewrite")
def test_device_arguments_under_compile_on_one_rank_are_stocks(on):
    """2.14+'s proxy_call rewrites (or refuses) a torch.device argument while
    ``torch.compiler.config.compile_on_one_rank`` is on: such a call is stock's (here,
    with no accelerator, stock's error), and served as before with it off."""
    def f(x):
        return x.sin(), torch.ones(3, device="cuda")

    def attempt(flag, coor):
        pd.apply(flag)
        with torch.compiler.config.patch(compile_on_one_rank=coor):
            try:
                return _make_fx(f, [torch.randn(3)], "fake")
            except Exception as e:  # noqa: BLE001
                return f"{type(e).__name__}: {e}"

    for coor in (False, True):
        want = attempt(False, coor)
        stock_args = fastfake.stats()["proxy_dispatch.stock.arguments"]
        served = _served()
        got = attempt(True, coor)
        assert got == want, coor
        if coor:
            assert "device_as_parameter" in want, want
            assert fastfake.stats()["proxy_dispatch.stock.arguments"] > stock_args
        else:
            assert _served() - served >= 2


@pytest.mark.skipif(not hasattr(torch.ops.aten.sin.default, "_pyobj_dispatcher"),
                    reason="this release's OpOverload has no _pyobj_dispatcher")
def test_an_op_with_a_pyobj_dispatcher_is_called_through_its_call(on, monkeypatch):
    """2.14+'s OpOverload.__call__ goes to ``_cpp_dispatch_handle`` instead of ``_op``
    while the op has a ``_pyobj_dispatcher`` and the dispatcher's TLS says to skip
    torch functions: the C method calls such an op through ``__call__``, as
    proxy_call does (``_op`` counted: stock's calls of it are the C method's)."""
    op = torch.ops.aten.sin.default
    was = op._pyobj_dispatcher is not None
    op._enable_pyobj_dispatch(True)
    assert op._pyobj_dispatcher is not None
    inner = op._op
    calls = []

    def counted(*a, **k):
        calls.append(1)
        return inner(*a, **k)

    monkeypatch.setattr(op, "_op", counted)
    try:
        def f(x):
            return x.sin() * 2

        out = {}
        for skip in (False, True):
            monkeypatch.setattr(torch._C, "_peek_should_skip_torch_function", lambda skip=skip: skip)
            for flag in (False, True):
                pd.apply(flag)
                calls.clear()
                served = _served()
                code = _make_fx(f, [torch.randn(3)], "fake")
                out[skip, flag] = (code, len(calls), _served() - served > 0)
            assert out[skip, True][:1] == out[skip, False][:1] and out[skip, True][2]
        # (stock, with the TLS saying skip: no _op call; without it, one per call of the op)
        assert out[True, False][1] == 0 and out[False, False][1] >= 1
        assert out[True, True][1] == 0, out
    finally:
        monkeypatch.undo()
        op._enable_pyobj_dispatch(was)


def test_errors_are_stocks(on):
    def f(x, y):
        return torch.mm(x, y)

    def attempt(flag):
        pd.apply(flag)
        try:
            make_fx(f, tracing_mode="fake")(torch.ones(2, 3), torch.ones(2, 3))
        except RuntimeError as e:
            return type(e), str(e), _original_aten()
        return None

    want = attempt(False)
    assert want is not None
    assert attempt(True) == want


def test_subclassed_and_pre_dispatch_modes_are_stocks(on):
    before = fastfake.stats()["proxy_dispatch.stock.mode"]

    def f(x):
        return (x + 1).t()

    g = make_fx(f, tracing_mode="fake", pre_dispatch=True)(torch.randn(2, 3))
    assert "aten.t" in g.code
    assert fastfake.stats()["proxy_dispatch.stock.mode"] > before


def test_crosscheck_runs_stocks_predicates(compile_state_restored):
    fastfake.install(crosscheck=True)
    try:
        fn, _ = program(random.Random(3))
        trace(fn, (torch.randn(5, 4, requires_grad=True), torch.randn(4)), True)
        assert _served() > 0
    finally:
        fastfake.uninstall()


def test_uninstall_puts_stocks_method_back():
    assert vars(ProxyTorchDispatchMode)["__torch_dispatch__"] is STOCK
    fastfake.install()
    assert vars(ProxyTorchDispatchMode)["__torch_dispatch__"] is not STOCK
    assert pd.is_installed()
    fastfake.uninstall()
    assert vars(ProxyTorchDispatchMode)["__torch_dispatch__"] is STOCK


def test_switched_off():
    assert switched_off("proxy_dispatch", "fastfake.tracing.proxy_dispatch.is_installed()") == "False"


def test_the_self_test_fails_a_wrong_answer():
    fault_turns_off_only(
        "fastfake._C._inject_fault(1000, 'proxy_dispatch')", "proxy_dispatch", keep="cache",
        still_on="fastfake.tracing.proxy_dispatch.is_installed()",
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock(
        "PROXY_DISPATCH_SOURCES", "proxy_dispatch",
        still_on="fastfake.tracing.proxy_dispatch.is_installed()",
    )
