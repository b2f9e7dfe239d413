"""The proxy mode's record of a traced SymNode operation in C (fastfake/tracing/sym_register.py):
make_fx's graphs, AOTAutograd's and ShapeEnvs identical with it on and off (stock's
function), long random sequences of SymInt arithmetic in one process, every reason
a call goes to stock, errors, crosscheck, uninstall, the switch and the self-test."""
from __future__ import annotations

import operator
import random

import pytest
import torch

import fastfake
from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.core import selftest as _selftest
from fastfake.tracing import sym_register as sr
from aot_programs import compiled_encoder, describe
from sym_programs import random_sym_program as _random_program, sym_traced as _traced
from faults import fault_turns_off_only, in_subprocess, switched_off, unknown_source_stays_stock

pytestmark = pytest.mark.skipif(not sr.available(), reason="sym_register is not proven on this release")

from torch.fx.experimental import proxy_tensor  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

STOCK = vars(proxy_tensor)["_sym_register"]


@pytest.fixture
def on():
    fastfake.install()
    assert fastfake.core.install.explain()["sym_register"] == "on"
    yield
    fastfake.uninstall()


def _count(name: str = "served") -> int:
    return fastfake.stats()[f"sym_register.{name}"]


def test_the_self_test_program(on):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def run(flag):
        sr.apply(flag)
        mode = FakeTensorMode(shape_env=ShapeEnv())
        with mode:
            return _selftest._sym_register_program(mode, "cpu")

    want = run(False)
    before = _count()
    got = run(True)
    assert got == want
    assert _count() - before > 50
    assert _count("stock.arguments") > 0  # (torch.sym_sum's one list)


def test_long_random_sequence_in_one_process(on):
    """make_fx symbolic traces of random SymInt arithmetic, stock's function and the C
    one alternating, in one process: graphs, node metas and ShapeEnvs identical."""
    rng = random.Random(20261204)
    served = _count()
    for i in range(60):
        fn, src = _random_program(rng)
        shape = (rng.randint(2, 9), rng.randint(2, 9))
        inputs = (torch.randn(*shape), torch.randn(rng.randint(2, 12)))
        got = {}
        for flag in (False, True) if i % 2 else (True, False):
            sr.apply(flag)
            try:
                got[flag] = _traced(fn, inputs)
            except Exception as e:  # noqa: BLE001 - compared
                got[flag] = (type(e), str(e))
        assert got[True] == got[False], src
    assert _count() - served > 300


def test_a_model_compiled_with_aot_eager(on, compile_state_restored):
    """A TransformerEncoderLayer through Dynamo and AOTAutograd (forward and backward
    graphs with every node meta), dynamic and static."""
    for dynamic in (True, False):
        sr.apply(False)
        want = compiled_encoder(dynamic)
        sr.apply(True)
        before = _count()
        assert compiled_encoder(dynamic) == want
        if dynamic:
            assert _count() > before


@pytest.mark.skipif(not _compat.functional_tensor_recomputes_storage(),
                    reason="this torch's FunctionalTensor is handed its storage size (2.15 on): nothing to replay")
def test_functional_storage_replays_register_through_it(on, compile_state_restored):
    """fastfake's replay of a FunctionalTensor wrapper's storage size registers its
    operations through whatever proxy_tensor._sym_register is (the C one here), as
    stock's __sym_dispatch__ does; under Dynamo they are recorded at once."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def f(x):
        y = x
        for _ in range(4):  # (wrappers of one key: the first records, the others replay)
            y = (y * 2).view(-1).narrow(0, 1, x.shape[0] * x.shape[1] - 1)
            y = torch.cat([y, y[:1]]).view(x.shape[0], x.shape[1])
        return y

    def compiled():
        graphs = []

        def boxed(gm, example_inputs):
            graphs.append(describe(gm))
            return make_boxed_func(gm)

        torch._dynamo.reset()
        torch.compile(f, backend=aot_autograd(fw_compiler=boxed, bw_compiler=boxed), dynamic=True)(
            torch.randn(4, 6, requires_grad=True)).sum().backward()
        return graphs

    want = None
    for flag in (False, True):
        sr.apply(flag)
        fastfake.cache_clear()
        fastfake.reset_stats()
        got = compiled()
        assert fastfake.stats()["functional.storage.replayed"] > 0
        assert (_count() > 0) == flag
        want = got if want is None else want
        assert got == want


def test_lazy_and_untracked_calls_are_stocks(on):
    from torch.fx.experimental.proxy_tensor import _enable_thunkify, get_proxy_mode

    seen = {}

    def f(x):
        mode = get_proxy_mode()
        with _enable_thunkify(mode.tracer):
            lazy = x.shape[0] * 3  # (thunkified: stock's lazy record, built when used)
        return x.new_zeros(lazy + 1), x.shape[1] * x.shape[0]

    for flag in (False, True):
        sr.apply(flag)
        before = _count("stock.lazy")
        seen[flag] = _traced(f, (torch.randn(3, 5),))
        if flag:
            assert _count("stock.lazy") > before
    assert seen[True] == seen[False]


def test_what_changes_between_calls_sends_them_to_stock():
    """A replaced name of proxy_tensor and a sym type registered as an opaque type:
    read per call."""
    r = in_subprocess(
        """
        import torch, fastfake
        from torch.fx.experimental import proxy_tensor
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch._library import opaque_object
        fastfake.install()
        def f(x):
            return x.new_zeros(x.shape[0] * x.shape[1] + 1)
        def run():
            return make_fx(f, tracing_mode="symbolic")(torch.randn(2, 3)).code
        stats = fastfake.stats
        plain = run()
        seen = []
        stock_meta = proxy_tensor.set_meta
        def meta(*a, **k):
            seen.append(1)
            return stock_meta(*a, **k)
        proxy_tensor.set_meta = meta
        before = stats()["sym_register.stock.state"]
        print("patched:", run() == plain, len(seen) > 0, stats()["sym_register.stock.state"] > before)
        proxy_tensor.set_meta = stock_meta
        from fastfake.tracing import sym_register as sr
        import operator
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        def g(x):
            s = x.shape[0]
            out = s + 100
            types = opaque_object._OPAQUE_TYPES
            types[torch.SymInt] = types[next(iter(types))]
            try:  # (a SymInt is an opaque value now: stock looks it up elsewhere)
                vars(proxy_tensor)["_sym_register"](get_proxy_mode().tracer, operator.mul, (s, 7), out)
            except Exception as e:
                seen.append((type(e), str(e).split(" at 0x")[0]))
            finally:
                del types[torch.SymInt]
            return x * 2
        outcomes = {}
        before = stats()["sym_register.stock.opaque"]
        for flag in (False, True):
            sr.apply(flag)
            seen.clear()
            make_fx(g, tracing_mode="symbolic")(torch.randn(2, 3))
            outcomes[flag] = list(seen)
        print("opaque:", stats()["sym_register.stock.opaque"] > before, outcomes[True] == outcomes[False])
        before = stats()["sym_register.served"]
        print("restored:", run() == plain, stats()["sym_register.served"] > before)
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "patched: True True True" in r.stdout, r.stdout
    assert "opaque: True True" in r.stdout and "restored: True True" in r.stdout, r.stdout


def test_errors_are_stocks(on):
    """An argument the tracer does not know (stock builds it from the ShapeEnv's
    expression, or raises), a tracer without the fields, called with keywords: stock's
    outcome each time."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    class Bare:
        pass

    def call(flag, *args, **kwargs):
        sr.apply(flag)
        fn = vars(proxy_tensor)["_sym_register"]
        try:
            return ("ok", fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - compared
            return (type(e), str(e))

    got = {}

    def f(x):
        s = x.shape[0]
        tracer = get_proxy_mode().tracer
        for flag in (False, True):
            got.setdefault(flag, []).append(call(flag, Bare(), operator.mul, (s, 2), s * 2))
            got[flag].append(call(flag, tracer, operator.mul, args=(s, 2), out=3, func=None))
            got[flag].append(call(flag, tracer, operator.mul, (s, 2), None))
        return x * 2

    make_fx(f, tracing_mode="symbolic")(torch.randn(3))
    got[True] = [(a, b.replace(hex(id(b)), "") if isinstance(b, str) else b) for a, b in got[True]]
    assert [g[0] for g in got[True]] == [g[0] for g in got[False]]
    assert [str(g[1]).split(" at 0x")[0] for g in got[True]] == [str(g[1]).split(" at 0x")[0] for g in got[False]]


def test_crosscheck_runs_stocks_functions(compile_state_restored):
    fastfake.install(crosscheck=True)
    try:
        fn, _ = _random_program(random.Random(5))
        _traced(fn, (torch.randn(4, 5), torch.randn(6)))
        assert _count() > 0
    finally:
        fastfake.uninstall()


def test_crosscheck_sees_the_fault(compile_state_restored):
    from fastfake.parity.crosscheck import CrosscheckError

    fastfake.install(crosscheck=True)
    try:
        _C._inject_fault(1000, "sym_register")
        with pytest.raises(CrosscheckError, match="no proxy slot"):
            make_fx(lambda x: x.new_zeros(x.shape[0] * x.shape[1] + 1), tracing_mode="symbolic")(torch.randn(2, 3))
    finally:
        _C._inject_fault(0, "sym_register")
        fastfake.uninstall()


def test_uninstall_puts_stocks_function_back():
    assert vars(proxy_tensor)["_sym_register"] is STOCK
    fastfake.install()
    assert vars(proxy_tensor)["_sym_register"] is not STOCK
    assert sr.is_installed()
    fastfake.uninstall()
    assert vars(proxy_tensor)["_sym_register"] is STOCK


def test_switched_off():
    assert switched_off("sym_register", "fastfake.tracing.sym_register.is_installed()") == "False"


def test_the_self_test_fails_a_wrong_answer():
    fault_turns_off_only(
        "fastfake._C._inject_fault(1000, 'sym_register')", "sym_register", keep="cache",
        still_on="fastfake.tracing.sym_register.is_installed()",
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock(
        "SYM_REGISTER_SOURCES", "sym_register",
        still_on="fastfake.tracing.sym_register.is_installed()",
    )
