"""make_fx's dead-code-elimination predicate in C (fastfake/tracing/dce_pred.py): the C
predicate's answer for every node of every graph before its elimination equal to
stock's, in random symbolic and static traces of one process; graphs, AOTAutograd's
and ShapeEnvs identical with it on and off; nodes of every kind stock answers
itself; purity that changes between eliminations; crosscheck, uninstall, the switch
and the self-test."""
from __future__ import annotations

import random

import pytest
import torch

import fastfake
from fastfake import _C
from fastfake.core import selftest as _selftest
from fastfake.tracing import dce_pred as dp
from aot_programs import compiled_encoder, program, trace
from faults import fault_turns_off_only, switched_off, unknown_source_stays_stock
from sym_programs import random_sym_program, sym_traced

pytestmark = pytest.mark.skipif(not dp.available(), reason="dce_pred is not proven on this release")

from torch.fx.graph import Graph  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

STOCK = vars(Graph)["eliminate_dead_code"]


@pytest.fixture
def on():
    fastfake.install()
    assert fastfake.core.install.explain()["dce_pred"] == "on"
    yield
    fastfake.uninstall()


def _count(name: str = "served") -> int:
    return fastfake.stats()[f"dce_pred.{name}"]


class _AskBoth:
    """Every make_fx elimination's predicate asked, before the elimination, about
    every node of its graph twice: stock's impure_pred and a C one made for it."""

    def __init__(self):
        self.answers = 0
        self.mismatches: list = []
        self.installed = None

    def __enter__(self):
        self.installed = vars(Graph)["eliminate_dead_code"]
        installed = self.installed

        def capture(graph, is_impure_node=None):
            if getattr(is_impure_node, "__code__", None) is dp._pred_code():
                fast = _C.dce_pred_new(is_impure_node)
                for node in graph.nodes:
                    want, got = is_impure_node(node), fast(node)
                    self.answers += 1
                    if got is not want:
                        self.mismatches.append((node.format_node(), got, want))
            return installed(graph, is_impure_node)

        Graph.eliminate_dead_code = capture
        return self

    def __exit__(self, *exc):
        Graph.eliminate_dead_code = self.installed


def test_the_self_test_program(on):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def run(flag):
        dp.apply(flag)
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            return _selftest._sym_register_program(mode, "cpu")

    want = run(False)
    before = _count()
    got = run(True)
    assert got == want
    assert _count() - before > 50


def _random_traces(rng: random.Random, flags, n_sym: int, n_aot: int) -> None:
    """Random SymInt programs (make_fx symbolic) and random programs of views, in-place
    ops, reductions and random ops (AOTAutograd, static and symbolic), each traced
    under every flag of ``flags`` (the predicate on / off); the traces must agree."""
    for i in range(n_sym):
        fn, src = random_sym_program(rng)
        inputs = (torch.randn(rng.randint(2, 9), rng.randint(2, 9)), torch.randn(rng.randint(2, 12)))
        got = {}
        for flag in flags if i % 2 else flags[::-1]:
            dp.apply(flag)
            try:
                got[flag] = sym_traced(fn, inputs)
            except Exception as e:  # noqa: BLE001 - compared
                got[flag] = (type(e), str(e))
        assert len(set(map(repr, got.values()))) == 1, src
    for i in range(n_aot):
        fn, src = program(rng)
        got = {}
        for flag in flags:
            dp.apply(flag)
            got[flag] = trace(fn, (torch.randn(6, 4, requires_grad=True), torch.randn(6, 4)), bool(i % 2))
        assert len(set(got.values())) == 1, src


def test_every_answer_is_stocks_over_random_traces(on):
    """For every node of every graph before its elimination, over random traces in
    one process, the C answer is stock's."""
    served = _count()
    with _AskBoth() as ask:
        _random_traces(random.Random(20261205), (True,), 36, 12)
    assert ask.mismatches == [] and ask.answers > 2000
    assert _count() - served > 2000


def test_traces_with_it_on_and_off_are_identical(on):
    served = _count()
    _random_traces(random.Random(20261206), (False, True), 16, 6)
    assert _count() - served > 400


def test_a_model_compiled_with_aot_eager(on, compile_state_restored):
    for dynamic in (True, False):
        dp.apply(False)
        want = compiled_encoder(dynamic)
        dp.apply(True)
        before = _count()
        with _AskBoth() as ask:
            assert compiled_encoder(dynamic) == want
        assert ask.mismatches == [] and ask.answers > 0
        assert _count() > before


def _stock_pred():
    """A dispatch_trace's impure_pred (from a tiny trace)."""
    seen = []
    installed = vars(Graph)["eliminate_dead_code"]

    def capture(graph, is_impure_node=None):
        seen.append(is_impure_node)
        return installed(graph, is_impure_node)

    Graph.eliminate_dead_code = capture
    try:
        make_fx(lambda x: x + 1)(torch.randn(2))
    finally:
        Graph.eliminate_dead_code = installed
    return seen[0]


def test_nodes_of_every_kind(on):
    """placeholder, output, get_attr, call_function of ops (pure, in-place, random,
    effectful), builtins and accessors, call_module, call_method, higher-order
    operators, a node whose meta is no dict, SymInt values with tensor and constant
    arguments: the C answer is stock's, the kinds it leaves to stock counted."""
    import operator

    stock = _stock_pred()
    fast = _C.dce_pred_new(stock)
    root = torch.nn.Module()
    root.lin = torch.nn.Linear(2, 2)
    root.register_buffer("buf", torch.ones(2))
    g = torch.fx.Graph(owning_module=root)
    x = g.placeholder("x")
    x.meta["val"] = torch.randn(2)
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch._subclasses.fake_tensor import FakeTensorMode

    env = ShapeEnv()
    with FakeTensorMode(shape_env=env) as mode:
        fx_in = mode.from_tensor(torch.randn(3, 4), symbolic_context=None)
    sym = env.create_unbacked_symint()
    size = g.call_function(torch.ops.aten.sym_size.int, (x, 0))
    size.meta["val"] = sym
    nodes = [
        x, size,
        g.call_function(operator.mul, (size, 2)),
        g.call_function(operator.add, (size, x)),
        g.get_attr("buf"),
        g.call_function(torch.ops.aten.add.Tensor, (x, x)),
        g.call_function(torch.ops.aten.add_.Tensor, (x, x)),
        g.call_function(torch.ops.aten.rand.default, ([2],)),
        g.call_function(torch.ops.aten._print.default, ("hi",)),
        g.call_function(torch.ops.aten.sym_stride.int, (x, 0)),
        g.call_function(torch.ops.aten.add, (x, x)),
        g.call_module("lin", (x,)),
        g.call_method("size", (x,)),
        g.call_method("add", (x, x)),
        g.call_function(torch.ops.higher_order.cond, (x, x, x, ())),
    ]
    for n in nodes[2:]:
        n.meta["val"] = sym if n.target in (operator.mul, operator.add) else fx_in
    nodes[3].meta["val"] = sym
    odd = g.call_function(operator.mul, (size, 3))
    odd.meta = {"val": sym}
    nodes.append(odd)
    weird = g.call_function(operator.mul, (size, 4))
    weird.meta = type("Meta", (dict,), {})(val=sym)
    nodes.append(weird)
    out = g.output((x,))
    nodes.append(out)
    before = {k: _count(k) for k in ("stock.op", "stock.hop", "stock.meta")}
    for n in nodes:
        assert fast(n) is stock(n), n.format_node()
    assert _count("stock.op") - before["stock.op"] == 3
    assert _count("stock.hop") - before["stock.hop"] == 1
    assert _count("stock.meta") - before["stock.meta"] == 1


def test_purity_changed_between_eliminations_is_seen(on):
    """The memo lives for one elimination: a target declared side-effectful between
    two traces is kept by the second, as stock keeps it."""
    import operator

    from torch.fx.node import _side_effectful_functions, has_side_effect

    def f(x):
        _unused = x.shape[0] * 3  # noqa: F841 - a SymInt record the elimination removes
        return x * 2

    try:
        got = {}
        for flag in (False, True):
            dp.apply(flag)
            first = make_fx(f, tracing_mode="symbolic")(torch.randn(3)).code
            has_side_effect(operator.mul)
            second = make_fx(f, tracing_mode="symbolic")(torch.randn(3)).code
            _side_effectful_functions.discard(operator.mul)
            got[flag] = (first, second)
        assert got[True] == got[False]
        assert " * 3" not in got[True][0] and " * 3" in got[True][1]
    finally:
        _side_effectful_functions.discard(operator.mul)


def test_crosscheck_asks_stocks_predicate(compile_state_restored):
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
        _C._inject_fault(1000, "dce_pred")
        with pytest.raises(CrosscheckError, match="impure_pred answered"):
            make_fx(lambda x: x.new_zeros(x.shape[0] * x.shape[1] + 1), tracing_mode="symbolic")(torch.randn(2, 3))
    finally:
        _C._inject_fault(0, "dce_pred")
        fastfake.uninstall()


def test_other_predicates_and_calls_are_stocks(on):
    """A predicate that is not make_fx's, and none: stock's method with it untouched."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.call_function(torch.add, (x, 1))
    g.output(x)
    asked = []
    before = _count()
    assert g.eliminate_dead_code(lambda n: asked.append(n) or False) is True
    assert len(asked) == 3 and _count() == before


def test_uninstall_puts_stocks_method_back():
    assert vars(Graph)["eliminate_dead_code"] is STOCK
    fastfake.install()
    assert vars(Graph)["eliminate_dead_code"] is not STOCK
    assert dp.is_installed()
    fastfake.uninstall()
    assert vars(Graph)["eliminate_dead_code"] is STOCK


def test_switched_off():
    assert switched_off("dce_pred", "fastfake.tracing.dce_pred.is_installed()") == "False"


def test_the_self_test_fails_a_wrong_answer():
    fault_turns_off_only(
        "fastfake._C._inject_fault(1000, 'dce_pred')", "dce_pred", keep="cache",
        still_on="fastfake.tracing.dce_pred.is_installed()",
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock(
        "DCE_PRED_SOURCES", "dce_pred",
        still_on="fastfake.tracing.dce_pred.is_installed()",
    )
