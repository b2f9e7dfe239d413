"""The proxy mode's SymNode dispatch in C (fastfake/tracing/sym_dispatch.py): make_fx's
graphs, AOTAutograd's and ShapeEnvs identical with it on and off (stock's function),
long random sequences of SymInt arithmetic in one process with the C record on and
off beneath it, the dispatch stack after errors, every reason a call goes to stock,
crosscheck, uninstall, the switch and the self-test."""
from __future__ import annotations

import operator
import random

import pytest
import torch

import fastfake
from fastfake import _C
from fastfake.core import selftest as _selftest
from fastfake.tracing import sym_dispatch as sd
from fastfake.tracing import sym_register as sr
from aot_programs import compiled_encoder
from faults import fault_turns_off_only, in_subprocess, switched_off, unknown_source_stays_stock
from sym_programs import random_sym_program, sym_traced

pytestmark = pytest.mark.skipif(not sd.available(), reason="sym_dispatch is not proven on this release")

from torch.fx.experimental import proxy_tensor  # noqa: E402
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx  # noqa: E402

STOCK = vars(proxy_tensor)["handle_sym_dispatch"]


@pytest.fixture
def on():
    fastfake.install()
    assert fastfake.core.install.explain()["sym_dispatch"] == "on"
    yield
    fastfake.uninstall()


def _count(name: str = "served") -> int:
    return fastfake.stats()[f"sym_dispatch.{name}"]


def _stack() -> tuple:
    return torch._C._len_torch_dispatch_stack(), torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY)


def test_the_self_test_program(on):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def run(flag):
        sd.apply(flag)
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            return _selftest._sym_register_program(mode, "cpu")

    want = run(False)
    before, peep = _count(), _count("peephole")
    got = run(True)
    assert got == want
    assert _count() - before > 50
    assert _count("peephole") > peep  # (x.shape[1] * 1)


def test_long_random_sequence_in_one_process(on):
    """make_fx symbolic traces of random SymInt arithmetic (multiplications by one
    among them), stock's function and the C one alternating, with the C record
    beneath on or off at random, in one process: graphs, every node meta and
    ShapeEnvs identical."""
    rng = random.Random(20261205)
    served, peep = _count(), _count("peephole")
    for i in range(40):
        fn, src = random_sym_program(rng)
        shape = (rng.randint(2, 9), rng.randint(2, 9))
        inputs = (torch.randn(*shape), torch.randn(rng.randint(2, 12)))
        sr.apply(rng.random() < 0.7)
        got = {}
        for flag in (False, True) if i % 2 else (True, False):
            sd.apply(flag)
            try:
                got[flag] = sym_traced(fn, inputs)
            except Exception as e:  # noqa: BLE001 - compared
                got[flag] = (type(e), str(e))
        assert got[True] == got[False], src
        assert _stack()[1] is None
    assert _count() - served > 200
    assert _count("peephole") > peep


def test_a_model_compiled_with_aot_eager(on, compile_state_restored):
    """A TransformerEncoderLayer through Dynamo and AOTAutograd (forward and backward
    graphs with every node meta), dynamic and static."""
    for dynamic in (True, False):
        sd.apply(False)
        want = compiled_encoder(dynamic)
        sd.apply(True)
        before = _count()
        assert compiled_encoder(dynamic) == want
        if dynamic:
            assert _count() > before


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except BaseException as e:  # noqa: BLE001 - compared (StopIteration too)
        return (type(e), str(e), type(e.__context__))


def test_errors_and_the_dispatch_stack_are_stocks(on):
    """An operation that raises under the context (an exception, StopIteration), keyword
    arguments, a list of arguments, a call with no proxy mode: stock's outcome, and the
    proxy mode back on the stack after each."""

    class Boom(Exception):
        pass

    def boom(a, b):
        raise Boom(f"{a} {b}")

    def stop(a, b):
        raise StopIteration("done")

    seen = {}

    def f(x):
        s = x.shape[0]
        for flag in (False, True):
            sd.apply(flag)
            h = vars(proxy_tensor)["handle_sym_dispatch"]
            before = _stack()
            rows = seen.setdefault(flag, [])
            rows.append(_outcome(h, boom, (s, 2), {}))
            rows.append(_stack() == before)
            rows.append(_outcome(h, stop, (s, 2), {}))
            rows.append(_stack() == before)
            rows.append(_outcome(h, operator.add, (s, 2), {"k": 1}))
            rows.append(_stack() == before)
            r = _outcome(h, operator.add, [s, 2], {})
            rows.append((r[0], str(r[1])))
            rows.append(_outcome(h, operator.mul, (s,), {})[0])
            rows.append(_outcome(h, operator.mul, (s, True), {})[1] is s)
            rows.append(_outcome(h, operator.mul, (1, s), {})[1] is s)
            rows.append(_stack() == before)
        return x * 2

    before = _count("stock.arguments")
    make_fx(f, tracing_mode="symbolic")(torch.randn(3))
    assert seen[True] == seen[False], (seen[True], seen[False])
    assert all(r for r in seen[True] if isinstance(r, bool))
    assert _count("stock.arguments") - before >= 3
    for flag in (False, True):
        sd.apply(flag)
        h = vars(proxy_tensor)["handle_sym_dispatch"]
        seen[("none", flag)] = _outcome(h, operator.add, (1, 2), {})
    assert seen[("none", True)] == seen[("none", False)]
    assert seen[("none", True)][0] is AssertionError


def test_pre_dispatch_and_other_modes_are_stocks(on):
    """make_fx's pre-dispatch tracing (the mode on the pre-dispatch stack), a proxy
    mode whose __sym_dispatch__ is patched: stock's function, and the same graphs."""
    def f(x, y):
        n = x.shape[0] * x.shape[1]
        return x.reshape(n) + y.shape[0], n * 1 + 2

    got = {}
    for flag in (False, True):
        sd.apply(flag)
        before = _count("stock.pre_dispatch")
        gm = make_fx(f, tracing_mode="symbolic", pre_dispatch=True)(torch.randn(3, 4), torch.randn(5))
        got[flag] = gm.code
        if flag:
            assert _count("stock.pre_dispatch") > before
    assert got[True] == got[False]

    calls = []
    original = vars(proxy_tensor.ProxyTorchDispatchMode)["__sym_dispatch__"]

    def patched(self, *args):
        calls.append(args[0])
        return original(self, *args)

    proxy_tensor.ProxyTorchDispatchMode.__sym_dispatch__ = patched
    try:
        before = _count("stock.mode")
        code = make_fx(f, tracing_mode="symbolic")(torch.randn(3, 4), torch.randn(5)).code
    finally:
        proxy_tensor.ProxyTorchDispatchMode.__sym_dispatch__ = original
    assert calls and _count("stock.mode") > before
    sd.apply(False)
    assert code == make_fx(f, tracing_mode="symbolic")(torch.randn(3, 4), torch.randn(5)).code


def test_what_changes_between_calls_sends_them_to_stock():
    """A replaced name the path stands for (here _push_mode): read per call; stock's
    function runs the replacement."""
    r = in_subprocess(
        """
        import torch, fastfake
        from torch.utils import _python_dispatch as pd
        from torch.fx.experimental.proxy_tensor import make_fx
        fastfake.install()
        def f(x):
            return x.new_zeros(x.shape[0] * x.shape[1] + 1)
        def run():
            return make_fx(f, tracing_mode="symbolic")(torch.randn(2, 3)).code
        stats = fastfake.stats
        plain = run()
        seen = []
        stock_push = pd._push_mode
        def push(mode):
            seen.append(1)
            return stock_push(mode)
        pd._push_mode = push
        before = stats()["sym_dispatch.stock.state"]
        print("patched:", run() == plain, len(seen) > 0, stats()["sym_dispatch.stock.state"] > before)
        pd._push_mode = stock_push
        before = stats()["sym_dispatch.served"]
        print("restored:", run() == plain, stats()["sym_dispatch.served"] > before)
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "patched: True True True" in r.stdout and "restored: True True" in r.stdout, r.stdout


def test_crosscheck_checks_every_served_call(compile_state_restored):
    fastfake.install(crosscheck=True)
    try:
        fn, _ = random_sym_program(random.Random(5))
        sym_traced(fn, (torch.randn(4, 5), torch.randn(6)))
        assert _count() > 0
    finally:
        fastfake.uninstall()


def test_crosscheck_sees_the_fault(compile_state_restored):
    from fastfake.parity.crosscheck import CrosscheckError

    fastfake.install(crosscheck=True)
    try:
        _C._inject_fault(1000, "sym_dispatch")
        with pytest.raises(CrosscheckError, match="no proxy slot"):
            make_fx(lambda x: x.new_zeros(x.shape[0] * x.shape[1] + 1), tracing_mode="symbolic")(torch.randn(2, 3))
    finally:
        _C._inject_fault(0, "sym_dispatch")
        fastfake.uninstall()


def test_uninstall_puts_stocks_function_back():
    assert vars(proxy_tensor)["handle_sym_dispatch"] is STOCK
    fastfake.install()
    assert vars(proxy_tensor)["handle_sym_dispatch"] is not STOCK
    assert sd.is_installed()
    fastfake.uninstall()
    assert vars(proxy_tensor)["handle_sym_dispatch"] is STOCK


def test_switched_off():
    assert switched_off("sym_dispatch", "fastfake.tracing.sym_dispatch.is_installed()") == "False"


def test_the_self_test_fails_a_wrong_answer():
    fault_turns_off_only(
        "fastfake._C._inject_fault(1000, 'sym_dispatch')", "sym_dispatch", keep="cache",
        still_on="fastfake.tracing.sym_dispatch.is_installed()",
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock(
        "SYM_DISPATCH_SOURCES", "sym_dispatch",
        still_on="fastfake.tracing.sym_dispatch.is_installed()",
    )
