"""make_fx's node creation in C (fastfake/tracing/fx_node.py): graphs before and after
dead-code elimination (every node made, names, arguments, every meta key in order,
sequence numbers, scope entries) and ShapeEnvs identical with it on and off (stock's
method), long random sequences under every kind of preserved node meta in one
process, whole AOTAutograd compiles, every reason a call goes to stock, errors,
crosscheck, uninstall, the switch and the self-test."""
from __future__ import annotations

import operator
import random
import re
import warnings

import pytest
import torch

import fastfake
from fastfake import _C
from fastfake.tracing import fx_node as fn_
from aot_programs import compiled_encoder
from faults import fault_turns_off_only, switched_off, unknown_source_stays_stock
from sym_programs import env_state as _env_state

pytestmark = pytest.mark.skipif(not fn_.available(), reason="fx_node is not proven on this release")

from torch.fx import traceback as fx_traceback  # noqa: E402
from torch.fx.experimental.proxy_tensor import PythonKeyTracer, make_fx  # noqa: E402

STOCK = vars(PythonKeyTracer)["create_node"]


@pytest.fixture
def on():
    fastfake.install()
    assert fastfake.core.install.explain()["fx_node"] == "on"
    yield
    fastfake.uninstall()


def _count(name: str = "served") -> int:
    return fastfake.stats()[f"fx_node.{name}"]


def _node(n) -> tuple:
    meta = []
    for k, v in n.meta.items():
        text = str(v) if k == "val" else repr(v)
        meta.append((k, re.sub(r"graph_id=\d+|0x[0-9a-f]+", "#", text)))
    return (n.name, n.op, str(n.target), repr(n.args), repr(n.kwargs), type(n.kwargs).__name__, repr(n.type), meta)


def _graph(graph) -> list:
    nodes = [_node(n) for n in graph.nodes]
    nrs = [v for *_, meta in nodes for k, v in meta if k == "seq_nr"]
    base = min((int(v) for v in nrs if v.lstrip("-").isdigit()), default=0)
    return [(*n[:7], [(k, str(int(v) - base) if k == "seq_nr" and v.lstrip("-").isdigit() else v) for k, v in n[7]])
            for n in nodes]


class _BeforeDCE:
    """Every graph as it is when dead-code elimination starts (the nodes it removes
    too), and each tracer's scope table."""

    def __init__(self):
        self.graphs: list = []

    def __enter__(self):
        self.stock = torch.fx.Graph.eliminate_dead_code
        seen = self.graphs
        stock = self.stock

        def dce(graph, *args, **kwargs):
            seen.append(_graph(graph))
            return stock(graph, *args, **kwargs)

        torch.fx.Graph.eliminate_dead_code = dce
        return self

    def __exit__(self, *exc):
        torch.fx.Graph.eliminate_dead_code = self.stock


def _current(meta: dict):
    g = torch.fx.Graph()
    node = g.create_node("call_function", torch.add, (), {}, name="current")
    node.meta.update(meta)
    return node


def _traced(fn, inputs, meta=None, replay=None) -> tuple:
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.cache_clear()
    with _BeforeDCE() as before:
        if meta is None:
            gm = make_fx(fn, tracing_mode="symbolic")(*inputs)
        else:
            with fx_traceback.preserve_node_meta(), fx_traceback.set_current_meta(_current(meta)), \
                    fx_traceback.set_current_replay_node(replay):
                gm = make_fx(fn, tracing_mode="symbolic")(*inputs)
    return gm.code, before.graphs, _graph(gm.graph), _env_state(gm)


_OPS = (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, torch.sym_max, torch.sym_min,
        abs, max)


def _random_program(rng: random.Random):
    """SymInt arithmetic on the inputs' sizes (targets named like builtins the
    namespace must suffix), sizes made from it, guards, ops and their getitems."""
    steps = []
    for _ in range(rng.randint(3, 10)):
        steps.append((rng.choice(_OPS), rng.randrange(100), rng.randrange(100), rng.randint(1, 3), rng.random()))

    def fn(x, y):
        vals = [x.shape[0], x.shape[1], y.shape[0]]
        outs = []
        for op, i, j, c, p in steps:
            a, b = vals[i % len(vals)], vals[j % len(vals)]
            if op in (operator.floordiv, operator.mod):
                b = b + c
            elif p < 0.3:
                b = c
            v = op(a - 7) if op is abs else op(a, b)
            vals.append(v)
            if p > 0.8:
                outs.append(torch.zeros(v % 5 + 1, device=x.device))
            if 0.6 < p < 0.7:
                outs.extend(torch.split(x.reshape(-1), [1, x.shape[0] * x.shape[1] - 1]))
        outs.append(x.reshape(x.shape[0] * x.shape[1]) * 2)
        return outs

    return fn, repr(steps)


def _random_meta(rng: random.Random):
    """A current node's meta (or none), and a replayed node (or none)."""
    kind = rng.randrange(6)
    if kind == 0:
        return None, None
    meta = {"nn_module_stack": {"m": ("mod", torch.nn.Module)}, "source_fn_stack": [("add", torch.add)]}
    if rng.random() < 0.7:
        meta["stack_trace"] = rng.choice(["File a.py, line 3", f"x {fx_traceback.GRADIENT_ACC_SPECIAL_STACK} y", ""])
    if rng.random() < 0.5:
        meta["custom"] = {"k": rng.randrange(5)}
    if rng.random() < 0.3:
        meta["autograd_backward"] = rng.random() < 0.5
    if kind == 1:
        meta["in_grad_fn"] = 1
        meta["grad_fn_seq_nr"] = [rng.randrange(10), rng.randrange(10)]
    if kind == 2:
        meta["original_aten"] = torch.ops.aten.add.Tensor
    replay = None
    if kind == 3:
        replay = _current({"seq_nr": 4, "custom": {"r": 1}, "stack_trace": "replayed"})
    return meta, replay


def test_long_random_sequence_in_one_process(on):
    """make_fx symbolic traces of random programs under random node-meta settings,
    stock's method and the C one alternating, in one process: the graphs before
    dead-code elimination (every node made), after it, and the ShapeEnvs identical."""
    rng = random.Random(20261205)
    served = _count()
    for i in range(50):
        fn, src = _random_program(rng)
        meta, replay = _random_meta(rng)
        shape = (rng.randint(2, 9), rng.randint(2, 9))
        inputs = (torch.randn(*shape), torch.randn(rng.randint(2, 12)))
        got = {}
        for flag in (False, True) if i % 2 else (True, False):
            fn_.apply(flag)
            try:
                got[flag] = _traced(fn, inputs, meta, replay)
            except Exception as e:  # noqa: BLE001 - compared
                got[flag] = (type(e), str(e))
        assert got[True] == got[False], (src, meta)
    assert _count() - served > 500


def test_compiled_models_with_every_node(on, compile_state_restored):
    """A TransformerEncoderLayer through Dynamo and AOTAutograd, dynamic and static:
    forward and backward graphs and every graph before dead-code elimination."""
    for dynamic in (True, False):
        got = {}
        for flag in (False, True):
            fn_.apply(flag)
            before = _count()
            with _BeforeDCE() as seen:
                graphs = compiled_encoder(dynamic)
            got[flag] = (graphs, seen.graphs)
            assert (_count() > before) == flag
        assert got[True] == got[False]


def test_the_reasons_calls_go_to_stock(on):
    """A raw SymInt argument (stock warns), a name the regex refuses, recorded stack
    traces, a tracer subclass: stock's method, the same node from the same state."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    outcomes: dict = {}

    def f(x):
        tracer = get_proxy_mode().tracer
        ns = tracer.graph._graph_namespace
        s = x.shape[0]
        saved = (set(ns._used_names), dict(ns._base_count))
        for flag in (False, True):
            fn_.apply(flag)
            ns._used_names, ns._base_count = set(saved[0]), dict(saved[1])
            row = []
            made = []
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                made.append(tracer.create_node("call_function", operator.mul, (s, 2), {}))
            row.append((made[-1].name, [str(m.message)[:40] for m in w]))
            made.append(tracer.create_node("call_function", operator.add, (1, 2), {}, "9bad.name"))
            made.append(tracer.create_node("call_function", abs, (1,), {}))
            tracer.record_stack_traces = True
            made.append(tracer.create_node("call_function", operator.neg, (1,), {}))
            tracer.record_stack_traces = False
            row += [n.name for n in made[1:]] + [bool(made[-1].stack_trace)]
            for n in reversed(made):  # (the next run starts from the same graph)
                tracer.graph.erase_node(n)
            outcomes[flag] = row
        return x * 2

    counts = {r: _count(r) for r in ("stock.sym", "stock.stack_traces", "served")}
    make_fx(f, tracing_mode="symbolic")(torch.randn(3))
    assert outcomes[True] == outcomes[False]
    assert outcomes[True][0][1], "stock warns about a raw SymInt argument"
    assert _count("stock.sym") > counts["stock.sym"]
    assert _count("stock.stack_traces") > counts["stock.stack_traces"]
    assert _count() > counts["served"]

    class Sub(PythonKeyTracer):
        pass

    before = _count("stock.tracer")
    got = {}
    for flag in (False, True):
        fn_.apply(flag)
        sub = Sub()
        sub.graph = torch.fx.Graph()
        got[flag] = _node(sub.create_node("call_function", operator.add, (1, 2), {}))
    assert got[True] == got[False]
    assert _count("stock.tracer") > before


def test_names_from_one_state_are_stocks(on):
    """The namespace's answers for candidates with and without numbers, taken
    ones, builtins and keywords, from equal states: the C method's names and
    stock's, call by call."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    cands = [None, "add", "add_3", "add", "add_3", "add_1", "abs", "max", "sum", "if", "x_007", "x_7", "x", "_1",
             "mul_99999999999999999999", "mul"]
    got = {}

    def f(x):
        tracer = get_proxy_mode().tracer
        for flag in (False, True):
            fn_.apply(flag)
            saved = (set(tracer.graph._graph_namespace._used_names), dict(tracer.graph._graph_namespace._base_count))
            made = [tracer.create_node("call_function", operator.add, (1, 2), {}, c) for c in cands]
            got[flag] = [n.name for n in made]
            for n in reversed(made):
                tracer.graph.erase_node(n)
            ns = tracer.graph._graph_namespace
            if not flag:
                ns._used_names, ns._base_count = saved  # (the C run starts from the same state)
        return x + 1

    served = _count()
    make_fx(f, tracing_mode="symbolic")(torch.randn(3))
    assert got[True] == got[False]
    assert _count() - served >= len(cands)


def test_errors_are_stocks(on):
    """A backward node's meta without its sequence numbers (KeyError after the node
    is made, in both), a tracer without a graph: stock's outcome."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    got = {}

    def f(x):
        tracer = get_proxy_mode().tracer
        for flag in (False, True):
            fn_.apply(flag)
            row = []
            with fx_traceback.preserve_node_meta(), fx_traceback.set_current_meta(_current({"in_grad_fn": 2})):
                try:
                    tracer.create_node("call_function", operator.add, (1, 2), {})
                except Exception as e:  # noqa: BLE001 - compared
                    row.append((type(e), str(e)))
            bare = PythonKeyTracer.__new__(PythonKeyTracer)
            try:
                bare.create_node("call_function", operator.add, (1, 2), {})
            except Exception as e:  # noqa: BLE001 - compared
                row.append((type(e), str(e)))
            got[flag] = row
        return x + 1

    make_fx(f, tracing_mode="symbolic")(torch.randn(3))
    assert got[True] == got[False] and len(got[True]) == 2


def test_crosscheck_runs_stocks_method(compile_state_restored):
    fastfake.install(crosscheck=True)
    try:
        fn, _ = _random_program(random.Random(5))
        meta, replay = _random_meta(random.Random(3))
        _traced(fn, (torch.randn(4, 5), torch.randn(6)), {"stack_trace": "s", "custom": {}}, None)
        compiled_encoder(True)
        assert _count() > 100
    finally:
        fastfake.uninstall()


def test_crosscheck_sees_the_fault(compile_state_restored):
    from fastfake.parity.crosscheck import CrosscheckError

    fastfake.install(crosscheck=True)
    try:
        _C._inject_fault(1000, "fx_node")
        with pytest.raises(CrosscheckError, match="the C create_node made"):
            _traced(lambda x: x.new_zeros(x.shape[0] * x.shape[1] + 1), (torch.randn(2, 3),), {"custom": {}})
    finally:
        _C._inject_fault(0, "fx_node")
        fastfake.uninstall()


def test_uninstall_puts_stocks_method_back():
    assert vars(PythonKeyTracer)["create_node"] is STOCK
    fastfake.install()
    assert vars(PythonKeyTracer)["create_node"] is not STOCK
    assert fn_.is_installed()
    fastfake.uninstall()
    assert vars(PythonKeyTracer)["create_node"] is STOCK


def test_switched_off():
    assert switched_off("fx_node", "fastfake.tracing.fx_node.is_installed()") == "False"


def test_the_self_test_fails_a_wrong_answer():
    fault_turns_off_only(
        "fastfake._C._inject_fault(1000, 'fx_node')", "fx_node", keep="cache",
        still_on="fastfake.tracing.fx_node.is_installed()",
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock(
        "FX_NODE_SOURCES", "fx_node",
        still_on="fastfake.tracing.fx_node.is_installed()",
    )
