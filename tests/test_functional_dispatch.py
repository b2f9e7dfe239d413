"""The functional mode's dispatch in C (csrc/tracing/functional_dispatch.cpp).

What must hold: whole AOTAutograd traces (forward and backward graph code, every
node's metadata, the outputs' shapes) are stock's with it on, static and symbolic,
over the self-test's program and a long random sequence of programs in one process
(the per-op facts it keeps are reused across them); what can change between calls
(a kernel registered for an op, an effect registered, the mode's flags) is read
per call, so such a change sends the calls to stock; errors are stock's and leave
the dispatch-key TLS as stock's do; it serves; ``uninstall()`` puts stock's method
back; the switch, the self-test (a fault) and an unproven release turn it off.
"""
from __future__ import annotations

import random

import pytest
import torch

import fastfake
from fastfake import _C
from fastfake.core import selftest as _selftest
from fastfake.tracing import functional_dispatch as fd
from aot_programs import compiled_encoder
from aot_programs import program as _program
from aot_programs import trace as _trace
from faults import fault_turns_off_only, in_subprocess, switched_off, unknown_source_stays_stock

pytestmark = pytest.mark.skipif(not fd.available(), reason="functional_dispatch is not proven on this release")

from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode  # noqa: E402

STOCK = vars(FunctionalTensorMode)["__torch_dispatch__"]


def _both(fn, make_inputs, dynamic: bool) -> tuple[str, str]:
    """(stock's trace, fastfake's), fastfake installed, the C method off and on."""
    fd.apply(False)
    want = _trace(fn, make_inputs(), dynamic)
    fd.apply(True)
    got = _trace(fn, make_inputs(), dynamic)
    return want, got


@pytest.fixture
def on():
    fastfake.install()
    assert fastfake.core.install.explain()["functional_dispatch"] == "on"
    yield
    fastfake.uninstall()


def test_the_self_test_program_static_and_symbolic(on):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def run(flag):
        fd.apply(flag)
        mode = FakeTensorMode(shape_env=ShapeEnv())
        with mode:
            return [(n, repr(r)) for n, _, r in _selftest._functional_dispatch_program(mode, "cpu")
                    if n.startswith("AOTAutograd")]

    want = run(False)
    before = fastfake.stats()["functional_dispatch.served"]
    got = run(True)
    assert got == want
    assert fastfake.stats()["functional_dispatch.served"] - before > 100
    assert fastfake.stats()["functional_dispatch.stock.sync"] > 0  # (the view replay went to stock)


def test_long_random_sequence_in_one_process(on):
    rng = random.Random(20261202)
    served = fastfake.stats()["functional_dispatch.served"]
    for i in range(28):
        fn, src = _program(rng)
        rows = rng.choice([3, 5, 6])
        dynamic = rng.random() < 0.5

        def inputs():
            g = torch.Generator().manual_seed(i)
            return (torch.randn(rows, 4, generator=g, requires_grad=True), torch.randn(4, generator=g))

        want, got = _both(fn, inputs, dynamic)
        assert got == want, src
        if i % 9 == 8:
            _C.functional_dispatch_clear()  # (facts read again: the same traces)
    assert fastfake.stats()["functional_dispatch.served"] - served > 700


def test_a_model_compiled_with_aot_eager(on, compile_state_restored):
    for dynamic in (False, True):
        fd.apply(False)
        want = compiled_encoder(dynamic)
        fd.apply(True)
        before = fastfake.stats()["functional_dispatch.served"]
        assert compiled_encoder(dynamic) == want
        assert fastfake.stats()["functional_dispatch.served"] > before


def test_an_effect_registered_later_sends_the_op_to_stock(on):
    """The effect registry is read per call: an effect registered for an op the mode
    has served before makes its calls stock's (and the graph stock's, tokens and all)."""
    r = in_subprocess(
        """
        import torch, fastfake
        from functorch.compile import aot_function, make_boxed_func
        from torch._higher_order_ops import effects
        from fastfake.tracing import functional_dispatch as fd
        fastfake.install()
        codes = []
        def boxed(gm, ex):
            codes.append(gm.code)
            return make_boxed_func(gm)
        def f(x):
            return torch.sin(x) * 2
        def trace(flag):
            fd.apply(flag)
            codes.clear()
            aot_function(f, fw_compiler=boxed, bw_compiler=boxed)(torch.randn(3))
            return list(codes)
        from fastfake.common import compat
        assert trace(True) == trace(False)
        if compat.functional_dispatch_variant()["layout_2_9"]:
            # (2.9: effects are kept in effects.SIDE_EFFECTS)
            op = torch.ops.aten.sin.default
            effects._register_effectful_op(op, effects._EffectType.ORDERED)
            forget = lambda: effects._deregister_effectful_op(op)
        else:
            handle = torch._library.simple_registry.singleton.find("aten::sin").effect.register(
                effects.EffectType.ORDERED)
            forget = handle.destroy
        before = fastfake.stats()["functional_dispatch.stock.effects"]
        with_effect = trace(True)
        print("effects:", fastfake.stats()["functional_dispatch.stock.effects"] - before)
        print("same:", with_effect == trace(False), "with_effects" in with_effect[0])
        forget()
        print("after:", trace(True) == trace(False))
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "effects: 1" in r.stdout or "effects: 2" in r.stdout, r.stdout
    assert "same: True True" in r.stdout and "after: True" in r.stdout, r.stdout


def _detached_keys():
    """alias / detach of FunctionalTensors over a FakeTensor that carries
    ``dispatch_keys`` (as one made from an mkldnn tensor does) and over one that does
    not: the dispatch_keys each output's FakeTensor ends with."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode()
    real = fake_mode.from_tensor(torch.randn(3, 4))
    real.dispatch_keys = torch._C._dispatch_keys(torch.randn(1))
    with fake_mode:
        fresh = torch.empty(3, 4)
    out = []
    with fake_mode, FunctionalTensorMode():
        for x in (real, fresh):
            f = FunctionalTensor.to_functional(x)
            for y in (f.detach(), torch.ops.aten.alias.default(f), f.detach().detach()):
                inner = torch._from_functional_tensor(y.elem)
                out.append(repr(inner.dispatch_keys))
    return out


def test_alias_and_detach_keep_dispatch_keys_as_stock_does(on):
    """2.14+ gives alias / detach outputs of a FunctionalTensor the dispatch_keys of
    the input's FakeTensor (2.13's functional mode leaves them as its fake mode makes them): the C method does as the
    release's stock does, and a C method without that step would differ there."""
    fd.apply(False)
    want = _detached_keys()
    fd.apply(True)
    before = fastfake.stats()["functional_dispatch.served"]
    got = _detached_keys()
    assert fastfake.stats()["functional_dispatch.served"] - before >= 6
    assert got == want
    from fastfake.common import compat

    if compat.functional_dispatch_variant()["preserve_dispatch_keys"]:
        assert want[0] != "None" and want[3] == "None", want
        fd.bind_variant(None)
        try:
            assert _detached_keys() != want
        finally:
            fd.bind_variant(fd.preserve_dispatch_keys)
        assert _detached_keys() == want
    else:
        assert want[3:] == ["None"] * 3, want


def test_a_kernel_registered_later_sends_the_op_to_stock(on):
    """A CompositeImplicitAutograd kernel put in an op's py_kernels after the mode
    served it: stock's decompose runs it (and what it calls then is stock's too)."""
    r = in_subprocess(
        """
        import torch, fastfake
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
        from fastfake.tracing import functional_dispatch as fd
        fastfake.install()
        op = torch.ops.aten.t.default
        def run():
            try:
                m = FakeTensorMode()
                x0 = m.from_tensor(torch.ones(2, 3))
                with m, FunctionalTensorMode():
                    x = FunctionalTensor.to_functional(x0)
                    return tuple(op(x).shape)
            except Exception as e:
                return type(e).__name__, str(e)
        print("before:", run())
        called = []
        DK = torch._C.DispatchKey.CompositeImplicitAutograd
        def decomp(x):
            called.append(1)
            return torch.ops.aten.permute.default(x, [1, 0])
        op.py_kernels[DK] = decomp
        op._dispatch_cache.clear()
        out = {}
        for flag in (False, True):
            fd.apply(flag)
            called.clear()
            before = fastfake.stats()["functional_dispatch.stock.decompose"]
            out[flag] = (run(), len(called))
            print(flag, out[flag], fastfake.stats()["functional_dispatch.stock.decompose"] - before)
        print("same:", out[False] == out[True])
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "before: (3, 2)" in r.stdout, r.stdout
    assert "same: True" in r.stdout and "True ((3, 2), 1) 1" in r.stdout, r.stdout


def _tls() -> tuple:
    return (str(torch._C._dispatch_tls_local_include_set()), str(torch._C._dispatch_tls_local_exclude_set()),
            torch._C._functionalization_reapply_views_tls())


def test_errors_are_stocks_and_leave_the_tls_as_stocks(on):
    from torch._subclasses.fake_tensor import FakeTensorMode

    def attempt(flag):
        fd.apply(flag)
        m = FakeTensorMode()
        a0, b0 = m.from_tensor(torch.ones(2, 3)), m.from_tensor(torch.ones(2, 3))
        with m, FunctionalTensorMode():
            a = FunctionalTensor.to_functional(a0)
            b = FunctionalTensor.to_functional(b0)
            before = _tls()
            try:
                torch.mm(a, b)
            except RuntimeError as e:
                return type(e), str(e), before == _tls()
        return None

    want = attempt(False)
    assert want is not None and want[2]
    assert attempt(True) == want


def test_export_and_subclassed_modes_are_stocks(on):
    class Mine(FunctionalTensorMode):
        pass

    from torch._subclasses.fake_tensor import FakeTensorMode

    stock_mode = fastfake.stats()["functional_dispatch.stock.mode"]
    for mode in (FunctionalTensorMode(export=True), Mine()):
        m = FakeTensorMode()
        x0 = m.from_tensor(torch.ones(2, 3))
        with m, mode:
            x = FunctionalTensor.to_functional(x0)
            assert tuple((x + 1).t().shape) == (3, 2)
    assert fastfake.stats()["functional_dispatch.stock.mode"] - stock_mode >= 4


def test_crosscheck_runs_stocks_predicates(compile_state_restored):
    fastfake.install(crosscheck=True)
    try:
        fn, _ = _program(random.Random(3))
        _trace(fn, (torch.randn(5, 4, requires_grad=True), torch.randn(4)), True)
        assert fastfake.stats()["functional_dispatch.served"] > 0
    finally:
        fastfake.uninstall()


def test_uninstall_puts_stocks_method_back():
    assert vars(FunctionalTensorMode)["__torch_dispatch__"] is STOCK
    fastfake.install()
    assert vars(FunctionalTensorMode)["__torch_dispatch__"] is not STOCK
    assert fd.is_installed()
    fastfake.uninstall()
    assert vars(FunctionalTensorMode)["__torch_dispatch__"] is STOCK


def test_switched_off():
    assert switched_off(
        "functional_dispatch",
        "fastfake.tracing.functional_dispatch.is_installed()",
    ) == "False"


def test_the_self_test_fails_a_wrong_answer():
    fault_turns_off_only(
        "fastfake._C._inject_fault(1000, 'functional_dispatch')", "functional_dispatch", keep="cache",
        still_on="fastfake.tracing.functional_dispatch.is_installed()",
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock(
        "FUNCTIONAL_DISPATCH_SOURCES", "functional_dispatch",
        still_on="fastfake.tracing.functional_dispatch.is_installed()",
    )
