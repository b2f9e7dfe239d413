"""FakeTensorProp's nodes run without the interpreter's wrappers
(fastfake/tracing/fake_prop.py): node metadata, ShapeEnv state, errors and the
interpreter's own state identical to stock's; every case it does not cover goes to
stock's ``run_node`` with its reason counted; the self-test catches a wrong
``run_node``; uninstall and the environment switch restore stock's."""
from __future__ import annotations

import logging
import random

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import fastfake
from fastfake.tracing import fake_prop as _fake_prop
from faults import fault_turns_off_only, unknown_source_stays_stock
from parity import describe_value, error_outcome, shape_env_fields

pytestmark = pytest.mark.skipif(
    not _fake_prop.available(), reason="FakeTensorProp's stock source is not one fastfake was proven on"
)

STOCK_RUN_NODE = vars(FakeTensorProp)["run_node"]
#: (in a fresh process) whether FakeTensorProp.run_node is fastfake's
_RUN_NODE_PATCHED = (
    'vars(__import__("torch").fx.passes.fake_tensor_prop.FakeTensorProp)["run_node"] '
    "is fastfake.tracing.fake_prop.run_node"
)


def _describe_graph(gm, mode) -> list:
    out = []
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        desc = describe_value(val, [], mode) if val is not None else None
        out.append((n.name, desc, str(n.meta.get("unbacked_bindings"))))
    return out


def _propagate(gm, shapes, symbolic: bool, *, mode=None, convert: bool = False):
    """Propagate ``gm`` on fresh inputs of ``shapes`` in a new mode (or ``mode``):
    (node metadata, ShapeEnv state, the env's values) or an error outcome."""
    if mode is None:
        mode = FakeTensorMode(shape_env=ShapeEnv() if symbolic else None)
    reals = [torch.ones(*s) for s in shapes]
    try:
        if convert:
            FakeTensorProp(gm, mode).propagate(*reals)
        else:
            fakes = [mode.from_tensor(r, static_shapes=not symbolic) for r in reals]
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    except Exception as e:  # noqa: BLE001 - compared with stock's
        return error_outcome(e)
    env = shape_env_fields(mode.shape_env) if mode.shape_env is not None else None
    return _describe_graph(gm, mode), env


def _both(gm, shapes, symbolic: bool, **kw):
    fastfake.install()
    fastfake.reset_stats()
    fast = _propagate(gm, shapes, symbolic, **kw)
    stats = fastfake.stats()
    fastfake.uninstall()
    stock = _propagate(gm, shapes, symbolic, **kw)
    return stock, fast, stats


def _mlp(a, w, b):
    h = torch.relu(a @ w + b)
    var, mean = torch.var_mean(h, 0, keepdim=True)
    first, second = torch.split(h, 2)
    return (h - mean) / (var + 1e-5), first.t(), second.sum(), h.shape[0] * 2


@pytest.mark.parametrize("tracing", ["fake", "symbolic"])
@pytest.mark.parametrize("convert", [False, True], ids=["fakes", "propagate-converts"])
def test_graph_metadata_matches_stock(tracing, convert):
    shapes = [(4, 6), (6, 3), (3,)]
    gm = make_fx(_mlp, tracing_mode=tracing)(*[torch.ones(*s) for s in shapes])
    stock, fast, stats = _both(gm, shapes, tracing == "symbolic", convert=convert)
    assert fast == stock
    assert stats["fake_prop.fast"] == len(gm.graph.nodes) - 1  # all but the output node
    assert stats["fake_prop.stock.op"] == 1


def test_unbacked_bindings_rebound_as_stock_does():
    """Data-dependent sizes, propagated again in the ShapeEnv they were traced in:
    the new unbacked symbols are renamed to the graph's (rebind_unbacked), and the
    bindings of the new ones recorded (compute_unbacked_bindings)."""

    def f(x):
        idx = torch.nonzero(x)
        n = idx.shape[0]
        return idx.sum(0), torch.zeros(n * 2), x.sum().item()

    def run():
        gm = make_fx(f, tracing_mode="symbolic")(torch.ones(5, 2))
        mode = next(iter(gm.graph.nodes)).meta["val"].fake_mode
        before = _describe_graph(gm, mode)
        outs = []
        for _ in range(3):
            with mode:
                x = mode.from_tensor(torch.ones(5, 2))
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(x)
            outs.append((_describe_graph(gm, mode), shape_env_fields(mode.shape_env)))
        return before, outs

    fastfake.install()
    fastfake.reset_stats()
    fast = run()
    assert fastfake.stats()["fake_prop.fast"] > 0
    fastfake.uninstall()
    stock = run()
    assert fast == stock
    assert "u" in str(stock[1][-1][1]["replacements"])  # the renaming really happened


def test_errors_match_stock():
    """An op that raises (mismatched shapes); too few inputs; a node whose argument
    was never computed (an ill-formed graph)."""

    def f(a, w):
        return (a @ w).relu()

    gm = make_fx(f, tracing_mode="fake")(torch.ones(4, 6), torch.ones(6, 3))
    stock, fast, _ = _both(gm, [(4, 6), (5, 3)], False)
    assert fast == stock and stock[0] == "error", stock
    assert "While executing" in stock[2]

    stock, fast, stats = _both(gm, [(4, 6)], False)
    assert fast == stock and stock[0] == "error", stock
    assert stats["fake_prop.stock.placeholder"] == 1

    g = torch.fx.Graph()
    a = g.placeholder("a")
    later = torch.fx.Node(g, "later", "call_function", torch.ops.aten.relu.default, (a,), {})
    r = g.call_function(torch.ops.aten.neg.default, (later,))
    g.output(r)
    bad = torch.fx.GraphModule(torch.nn.Module(), g)
    stock, fast, stats = _both(bad, [(3,)], False)
    assert fast == stock and stock[0] == "error", stock
    assert "nonexistent value" in stock[2]
    assert stats["fake_prop.stock.env"] == 1


def test_placeholder_default_and_starred_go_to_stock():
    g = torch.fx.Graph()
    a = g.placeholder("a")
    b = g.placeholder("b", default_value=2.0)
    g.output(g.call_function(torch.ops.aten.mul.Tensor, (a, b)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    stock, fast, stats = _both(gm, [(3,)], False)
    assert fast == stock and stock[0] != "error", stock
    assert stats["fake_prop.fast"] == 2 and stats["fake_prop.stock.placeholder"] == 1

    g = torch.fx.Graph()
    rest = g.placeholder("*rest")
    g.output(rest)
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    stock, fast, stats = _both(gm, [(3,), (2,)], False)
    assert fast == stock, (stock, fast)
    assert stats["fake_prop.stock.placeholder"] == 1


class _Sub(FakeTensorProp):
    pass


class _Recorder(FakeTensorProp):
    seen: list = []

    def call_function(self, target, args, kwargs):
        _Recorder.seen.append(str(target))
        return super().call_function(target, args, kwargs)


def test_overrides_and_settings_go_to_stock(monkeypatch):
    shapes = [(4, 6), (6, 3), (3,)]
    gm = make_fx(_mlp, tracing_mode="fake")(*[torch.ones(*s) for s in shapes])
    fastfake.install()

    def count(fn) -> dict:
        fastfake.reset_stats()
        fn()
        return {k: v for k, v in fastfake.stats().items() if k.startswith("fake_prop.") and v}

    def prop(cls=FakeTensorProp, **attrs):
        def run():
            mode = FakeTensorMode()
            p = cls(gm, mode)
            for k, v in attrs.items():
                setattr(p, k, v)
            p.propagate(*[torch.ones(*s) for s in shapes])

        return run

    nodes = len(gm.graph.nodes)
    assert count(prop(_Sub)) == {"fake_prop.stock.class": nodes}
    _Recorder.seen.clear()
    assert count(prop(_Recorder)) == {"fake_prop.stock.class": nodes}
    assert _Recorder.seen  # its override ran
    seen = []
    assert count(prop(call_function=lambda t, a, k: seen.append(t) or t(*a, **k))) == {
        "fake_prop.stock.class": nodes}
    assert seen
    original = torch.fx.Interpreter.call_function
    monkeypatch.setattr(torch.fx.Interpreter, "call_function",
                        lambda self, t, a, k: seen.append(t) or original(self, t, a, k))
    seen.clear()
    assert count(prop()) == {"fake_prop.stock.class": nodes}
    assert seen
    monkeypatch.undo()
    assert count(prop())["fake_prop.fast"] == nodes - 1

    from torch.fx import traceback as fx_traceback

    with fx_traceback.preserve_node_meta():
        assert count(prop()) == {"fake_prop.stock.node_meta": nodes}
    logger = logging.getLogger("torch.fx.interpreter")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        if getattr(torch.fx.interpreter, "log", None) is not None:
            assert count(prop()) == {"fake_prop.stock.debug_log": nodes}
        else:  # (2.9: stock's run_node logs nothing)
            assert count(prop())["fake_prop.fast"] == nodes - 1
    finally:
        logger.setLevel(level)


def test_node_meta_preserved_matches_stock():
    """With preserve_node_meta on (stock's set_current_meta does work), the graph
    make_fx retraces from a FakeTensorProp'd one is stock's."""
    from torch.fx import traceback as fx_traceback

    shapes = [(4, 6), (6, 3), (3,)]
    gm = make_fx(_mlp, tracing_mode="symbolic")(*[torch.ones(*s) for s in shapes])

    def run():
        with fx_traceback.preserve_node_meta():
            return _propagate(gm, shapes, True)

    fastfake.install()
    fast = run()
    fastfake.uninstall()
    assert fast == run()


_OPS = [
    lambda x: x + 1,
    lambda x: x * x,
    lambda x: torch.relu(x),
    lambda x: x.t(),
    lambda x: x.reshape(-1),
    lambda x: x.sum(0, keepdim=True),
    lambda x: torch.cat([x, x], 0),
    lambda x: x.unsqueeze(0).expand(2, *x.shape).sum(0),
    lambda x: torch.softmax(x.float(), -1),
    lambda x: x[1:],
    lambda x: x.contiguous().view(x.shape[0] * x.shape[1]) if x.dim() == 2 else x,
    lambda x: torch.var_mean(x, -1)[0] if x.dim() else x,
    lambda x: x.clone().mul_(2),
]


def _random_graph(rng: random.Random, tracing: str):
    picks = [rng.randrange(len(_OPS)) for _ in range(rng.randint(2, 7))]
    shape = (rng.randint(3, 6), rng.randint(3, 6))

    def f(x):
        outs = []
        for i in picks:
            x = _OPS[i](x)
            if x.dim() == 0 or x.numel() == 0:
                x = torch.ones(3, 4)
            outs.append(x)
        return tuple(outs)

    return make_fx(f, tracing_mode=tracing)(torch.ones(*shape)), shape


@pytest.mark.parametrize("seed", [0, 1])
def test_random_graph_sequence_matches_stock(seed):
    """200 random graphs propagated in one process, static and symbolic, each in a
    new mode or in the same mode as the previous ones: node metadata and ShapeEnv
    state of each propagation identical to stock's, run for run."""
    rng = random.Random(seed)
    plan = []
    for _ in range(200):
        tracing = rng.choice(["fake", "symbolic"])
        gm, shape = _random_graph(rng, tracing)
        plan.append((gm, shape, tracing == "symbolic", rng.random() < 0.3))

    def run():
        shared = FakeTensorMode(shape_env=ShapeEnv())
        return [
            _propagate(gm, [shape], symbolic, mode=shared if same and symbolic else None)
            for gm, shape, symbolic, same in plan
        ]

    fastfake.install()
    fastfake.reset_stats()
    fast = run()
    served = fastfake.stats()["fake_prop.fast"]
    fastfake.uninstall()
    stock = run()
    assert served > 600
    for i, (s, f) in enumerate(zip(stock, fast)):
        assert f == s, f"propagation {i}: {plan[i][0].code}"


def test_uninstall_and_environment_switch_restore_stock(monkeypatch):
    fastfake.install()
    assert vars(FakeTensorProp)["run_node"] is _fake_prop.run_node
    fastfake.uninstall()
    assert vars(FakeTensorProp)["run_node"] is STOCK_RUN_NODE
    monkeypatch.setenv("FASTFAKE_NO_FAKE_PROP", "1")
    fastfake.install()
    assert vars(FakeTensorProp)["run_node"] is STOCK_RUN_NODE
    fastfake.uninstall()
    monkeypatch.delenv("FASTFAKE_NO_FAKE_PROP")
    fastfake.install(elementwise=False, cache=False)
    assert vars(FakeTensorProp)["run_node"] is STOCK_RUN_NODE


@pytest.mark.parametrize("fault", ["rebind", "bindings"])
def test_selftest_catches_a_wrong_run_node(fault):
    """A run_node that skips rebinding unbacked symbols, or drops their bindings, is
    found by the install-time self-test: fake_prop stays off (warned, counted),
    stock's run_node stays in place, and the other features stay on."""
    out = fault_turns_off_only(
        f'fastfake.tracing.fake_prop._fault = "{fault}"', "fake_prop", keep="cache",
        still_on=_RUN_NODE_PATCHED,
    )
    assert "'detach': True" in out, out


def test_unknown_source_stays_stock():
    """A release (or a patched torch) whose FakeTensorProp source is not one
    fastfake was proven on keeps stock's run_node, and the self-test does not run
    the feature."""
    unknown_source_stays_stock("FAKE_PROP_SOURCES", "fake_prop", still_on=_RUN_NODE_PATCHED)
