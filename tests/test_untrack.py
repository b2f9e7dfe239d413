"""fastfake's learned records out of the cyclic collector (fastfake/runtime/untrack.py)."""
from __future__ import annotations

import gc
import random
import weakref

import pytest
import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
import parity
from fastfake import _C
from fastfake.common import compat as _compat
from faults import fault_turns_off_only, switched_off

# (untrack needs cache_portable: the records it keeps out of the collector are the
# symbolic cache's, offered where the portable entries are known)
pytestmark = [
    parity.requires_symbolic_cache,
    pytest.mark.skipif(not _compat.portable_entries_known(), reason="no portable entries on this release"),
]


@pytest.fixture
def on():
    fastfake.install()
    assert fastfake.core.install.explain()["untrack"] == "on"
    yield
    fastfake.uninstall()


class Obj:
    pass


def test_inert_containers_are_untracked(on):
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    cases = [
        (("evaluate_expr", (sympy.Eq(s0, 1), False, False, False), (("fx_node", None),), False, sympy.false), True),
        ((s0 * s1**2, int, 131072, None, False, False), True),
        (((s0, s1), (None, None)), True),
        ((frozenset({sympy.Gt(s0, 1)}), 1.5, b"x", "s", 3 + 1j), True),
        ((int, float, bool, type(None)), True),
        ((Obj, 1), False),  # a heap class: mutable
        ((Obj(), 1), False),
        (([], 1), False),
        (({}, 1), False),
        ((lambda: 0, 1), False),
        ((torch.empty(1), 1), False),
        ((ShapeEnv(), 1), False),
    ]
    for value, inert in cases:
        assert gc.is_tracked(value)
        assert _C.untrack_inert(value) is inert, value
        assert gc.is_tracked(value) is not inert, value


def test_inert_parts_of_other_containers(on):
    s0 = sympy.Symbol("s0")
    inner = (s0 + 1, 2)
    other = ((s0, 1), [(s0, 2)], {"k": (s0, 3)}, Obj())
    assert all(gc.is_tracked(x) for x in (inner, other[0], other[1][0], other[2]["k"]))
    assert _C.untrack_inert((inner, [])) is False
    assert not gc.is_tracked(inner)
    assert _C.untrack_inert(other) is False
    assert gc.is_tracked(other) and gc.is_tracked(other[1]) and gc.is_tracked(other[2])
    assert not gc.is_tracked(other[0]) and not gc.is_tracked(other[1][0]) and not gc.is_tracked(other[2]["k"])


def test_too_deep_is_left_tracked(on):
    v: tuple = (1,)
    for _ in range(200):
        v = (v,)
    assert _C.untrack_inert(v) is False
    assert gc.is_tracked(v)


def test_random_values_untracked_exactly_when_inert(on):
    rng = random.Random(7)
    syms = sympy.symbols("a b c", integer=True)
    leaves = [lambda: rng.randrange(100), lambda: "n", lambda: None, lambda: rng.random(),
              lambda: rng.choice(syms) * rng.randrange(1, 4), lambda: sympy.true, lambda: int]
    mutable = [lambda: [], lambda: {}, Obj, lambda: torch.empty(0), lambda: Obj]

    def hashable(v) -> bool:
        try:
            hash(v)
        except TypeError:
            return False
        return True

    def make(depth: int) -> tuple[object, bool]:
        """A random value and whether it is inert."""
        r = rng.random()
        if depth > 3 or r < 0.35:
            return rng.choice(leaves)(), True
        if r < 0.42:
            return rng.choice(mutable)(), False
        items = [make(depth + 1) for _ in range(rng.randrange(0, 4))]
        if r < 0.5:
            items = [(v, i) for v, i in items if hashable(v)]
            return frozenset(v for v, _ in items), all(i for _, i in items)
        return tuple(v for v, _ in items), all(i for _, i in items)

    seen = 0
    for _ in range(3000):
        v, want = make(0)
        if type(v) not in (tuple, frozenset) or not gc.is_tracked(v):
            continue
        seen += 1
        assert _C.untrack_inert(v) is want, v
        assert gc.is_tracked(v) is not want, v
    assert seen > 1000


def test_a_cycle_through_a_record_is_still_collected(on):
    """A container on a cycle holds a mutable object, so it stays tracked and the
    cycle is collected as before."""
    o = Obj()
    t = (o, 1, "x")
    o.t = t
    assert _C.untrack_inert(t) is False and gc.is_tracked(t)
    w = weakref.ref(o)
    del o, t
    gc.collect()
    assert w() is None


def test_off_untracks_nothing():
    fastfake.install()
    try:
        fastfake.uninstall()
        t = tuple([1, (2, str(3))])  # (built at run time: a constant tuple is never tracked)
        assert gc.is_tracked(t)
        assert _C.untrack_inert(t) is False and gc.is_tracked(t)
    finally:
        fastfake.uninstall()


def _trace_twice():
    def f(x, w):
        y = torch.cat([x, x]).relu() @ w
        return torch.softmax(y, -1).sum(0) + y.mean()

    gms = []
    for _ in range(2):  # the second trace is served from records of the first ShapeEnv
        gms.append(make_fx(f, tracing_mode="symbolic")(torch.randn(6, 8), torch.randn(8, 4)))
    return gms


def _tracked_eval_logs() -> int:
    """Tracked tuples alive that are logged ShapeEnv evaluations, ``(name, args, kwargs, suppressed, result)``."""
    names = {"evaluate_expr", "_maybe_evaluate_static", "simplify"}
    return sum(1 for o in gc.get_objects()
               if type(o) is tuple and len(o) == 5 and type(o[0]) is str and o[0] in names)


def test_records_of_a_trace_are_untracked():
    fastfake.install()
    try:
        fastfake.cache_clear()
        fastfake.reset_stats()
        gms_on = _trace_twice()
        s = fastfake.stats()
        assert s["cache.symbolic.portable.served"] > 0
        assert s["untrack.tuples"] > 0 and s["untrack.dicts"] > 0
        on = _tracked_eval_logs()
        from fastfake.runtime import untrack

        untrack.apply(False)  # (the table's hook, as FASTFAKE_DISABLE=untrack leaves it)
        fastfake.cache_clear()
        gms_off = _trace_twice()
        off = _tracked_eval_logs()
        assert on == 0 and off > 0, (on, off)
        assert [g.code for g in gms_on] == [g.code for g in gms_off]
    finally:
        fastfake.uninstall()


def test_counts_do_not_follow_the_collectors_timing():
    """CPython's collector untracks tuples and dicts of untracked items itself when a
    collection passes them; the counters count what the walk found inert either way,
    so the same trace counts the same under any collection thresholds (a count of
    the walk's own untrackings varied with them: 336 / 260-282 / 236-257 tuples)."""
    old = gc.get_threshold()
    counts = []
    fastfake.install()
    try:
        for threshold in (old[0], 10, 3, old[0], 1):
            gc.set_threshold(threshold, old[1], old[2])
            try:
                fastfake.cache_clear()
                fastfake.reset_stats()
                _trace_twice()
                counts.append(parity.counters_with_prefix(fastfake.stats(), "untrack."))
            finally:
                gc.set_threshold(*old)
    finally:
        fastfake.uninstall()
    assert counts[0]["untrack.tuples"] > 0 and counts[0]["untrack.dicts"] > 0
    assert all(c == counts[0] for c in counts), counts


def test_nodes_from_a_template_keep_their_attributes_in_the_object(on):
    """A SymNode the result cache makes from a template has its attributes set as
    the constructor sets them: no dict object of its own (as a node the constructor
    made; the node the template was read from has one), the same attributes in the
    same order."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    from fastfake.symbolic import symnode_int

    # (SymNode.maybe_as_int in C looks its method up through the instance dict,
    # which makes the dict object of any node it is asked about)
    symnode_int.apply(False)
    fastfake.cache_clear()
    fastfake.reset_stats()
    mode = FakeTensorMode(shape_env=ShapeEnv())
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 2)
    x = mode.from_tensor(torch.empty(6, 8), symbolic_context=ctx)
    with mode:
        outs = [torch.cat([x, x]) for _ in range(5)]
    assert fastfake.stats()["cache.symbolic.hit"] == 4
    nodes = [o.shape[0].node for o in outs]
    assert len({id(n) for n in nodes}) == len(nodes)  # new nodes, as stock's hits make
    has_dict = [any(type(r) is dict for r in gc.get_referents(n)) for n in nodes]
    # stock's miss, the first hit (built by the constructor, the template read from
    # it), then nodes from the template
    assert has_dict == [False, True, False, False, False], has_dict
    first = vars(nodes[1])
    for n in nodes[2:]:
        d = {k: v for k, v in vars(n).items() if k != "_fastfake_vid"}
        assert list(d) == [k for k in first if k != "_fastfake_vid"]
        assert d["shape_env"] is mode.shape_env
        assert {k: v for k, v in d.items() if k != "shape_env"} == {
            k: v for k, v in first.items() if k not in ("shape_env", "_fastfake_vid")}


def test_switched_off():
    assert switched_off("untrack", "_C.untrack_inert(tuple([1, str(2)]))") == "False"


def test_fault_nothing_untracked_turns_off_only_untrack():
    fault_turns_off_only(
        "import fastfake.runtime.untrack as u; u.inert_expressions = lambda: None", "untrack", keep="cache",
        still_on="fastfake._C.untrack_inert((1, 'x'))",
    )
