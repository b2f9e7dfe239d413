"""Symbolic values of rebuilt outputs made without per-value Python calls
(csrc/cache/rebuild.cpp).

Sizes laid out directly (set_symbolic_sizes; proven by fastfake/symbolic/symnode_int.py):
c10's ``set_sizes_and_strides`` stores ``SymInt::clone()`` of every value: the
int where the node's ``maybe_as_int()`` gives one, else the same Python node. The
direct layout must give exactly that -- which values are ints, which SymNodes,
the ShapeEnv after the ``expr`` reads -- over random values (symbols, derived
expressions, constants, symbols specialised or replaced after the nodes were
made), and it is offered only where ``SymNode.clone`` returns its node.

New SymNodes from a template (new_node; fastfake.common.compat.SYMNODE_INIT_SOURCES):
a recipe value's later SymNodes are copies of the instance dict the constructor
built for its first one, with their own ShapeEnv. Each must equal what
``SymNode(...)`` builds in that ShapeEnv (the same attributes in the same order,
the same values), for random fields, and the constructor must be used where the
template does not hold (a missing hint, translation validation, another
``__init__``). Where the value is interned for the result cache's keys, a
template node also carries the id ``fastfake.cache.learn.sym_vid`` gives it then, also
across the interning dict being emptied between two nodes of the same value."""
from __future__ import annotations

import random

import pytest
import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.sym_node import SymNode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
from fastfake import _C
from fastfake.cache import learn as _cache
from fastfake.common import compat as _compat
from fastfake.symbolic import symnode_int as _symnode_int
from parity import shape_env_fields, symbolic_fake

pytestmark = pytest.mark.skipif(
    not _symnode_int.available(), reason="SymNode.maybe_as_int's stock source is not one fastfake was proven on"
)


def _describe(values) -> list:
    out = []
    for v in values:
        if isinstance(v, torch.SymInt):
            out.append(("sym", id(v.node), str(v.node._expr)))
        else:
            out.append(("int", type(v).__name__, v))
    return out


def _world(seed: int):
    """A ShapeEnv with symbolic sizes, derived SymInts, constant nodes, and (later)
    specialisations and replacements of some symbols."""
    rng = random.Random(seed)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = symbolic_fake(mode, *[rng.choice([2, 3, 5, 7]) for _ in range(3)])
    y = symbolic_fake(mode, *[rng.choice([2, 3, 5, 7]) for _ in range(2)])
    base = list(x.shape) + list(y.shape) + list(x.stride())
    syms = [s for s in base if isinstance(s, torch.SymInt)]
    derived = [syms[0] * syms[1], syms[-1] + 1, syms[1] * 2]
    const = [torch.SymInt(SymNode(sympy.Integer(6), env, int, 6))]
    return rng, env, syms, base + derived + const


@pytest.mark.parametrize("seed", range(6))
def test_direct_layout_equals_c10s(installed, seed):
    """Random values laid out both ways, in twin worlds (the reads have effects on
    the ShapeEnv): the same ints, the same SymNodes, the same ShapeEnv; between
    rounds a symbol is specialised or two are made equal, so some nodes' values
    become numbers (c10 stores those as ints)."""
    worlds = [_world(seed), _world(seed)]
    for rnd in range(8):
        picks = None
        results = []
        for direct, (rng, env, syms, values) in zip((True, False), worlds):
            if picks is None:
                n = rng.randrange(1, 5)
                picks = [rng.randrange(len(values)) for _ in range(2 * n + 1)]
            sizes = [values[i] for i in picks[:n]]
            strides = [values[i] for i in picks[n:2 * n]]
            offset = values[picks[-1]]
            s, t, o, symbolic = _C._symbolic_layout(sizes, strides, offset, direct)
            results.append((_describe(s), _describe(t), _describe([o]), symbolic,
                            shape_env_fields(env)))
        # (the twin worlds' SymNodes are distinct objects: compare positions)
        for part in range(3):
            a = [(k, x if k == "int" else None, z) for k, x, z in results[0][part]]
            b = [(k, x if k == "int" else None, z) for k, x, z in results[1][part]]
            assert a == b, (rnd, part, results[0][part], results[1][part])
        assert results[0][3:] == results[1][3:], rnd
        for _, env, syms, values in worlds:
            rng2 = random.Random(seed * 100 + rnd)  # (the same change in both worlds)
            r = rng2.random()
            s = syms[rng2.randrange(len(syms))]
            if r < 0.3:
                torch._check(s == s.node.hint)  # specialised: its nodes' value is a number
            elif r < 0.6:
                other = syms[rng2.randrange(len(syms))]
                if other.node.hint == s.node.hint:
                    torch._check(s == other)  # replaced by the other symbol


def test_direct_layout_keeps_the_nodes(installed):
    """Where no value is a number, the laid-out sizes are the very SymNodes given
    (c10's clone returns the node itself)."""
    _, env, syms, values = _world(0)
    s, t, o, symbolic = _C._symbolic_layout(syms[:2], syms[1:3], values[-2], True)
    assert symbolic and [v.node for v in s] == [v.node for v in syms[:2]]
    assert [v.node for v in t] == [v.node for v in syms[1:3]]


def test_clone_proven_on_this_release():
    assert _symnode_int.clone_returning_node() is vars(SymNode)["clone"]


@pytest.mark.parametrize("kind", ["copy", "extra_code"])
def test_other_clones_are_not_proven(monkeypatch, kind):
    """A clone that returns another node, or does anything but return its node, is
    not proven: symbolic sizes are then laid out by c10."""
    if kind == "copy":
        def clone(self):
            return SymNode(self._expr, self.shape_env, self.pytype, self._hint)
    else:
        def clone(self):
            self._cloned = True
            return self
    monkeypatch.setattr(SymNode, "clone", clone)
    assert _symnode_int.clone_returning_node() is None


def _fields(rng: random.Random) -> tuple:
    s0, s1 = sympy.Symbol("s0", positive=True, integer=True), sympy.Symbol("s1", positive=True, integer=True)
    expr = rng.choice([s0, s0 * s1, s1 + 1, 4 * s0 * s1 - s1, sympy.Integer(6)])
    hint = rng.choice([2, 3, 12, 96])
    return (expr, int, hint, rng.choice([None, None, 5]), rng.choice([None, False]), rng.random() < 0.3)


def _constructed(fields: tuple, env) -> SymNode:
    expr, pytype, hint, constant, fx_node, summation = fields
    return SymNode(expr, env, pytype, hint, constant, fx_node, summation)


def _same_node(a: SymNode, b: SymNode, vids: dict | None = None) -> None:
    """``a`` (made by fastfake) equals the constructor's ``b``; a value id memo on
    ``a`` (a template node whose value was interned) must be its last attribute and
    the id the interning dict ``vids`` held for the value when ``a`` was made (ids
    are never reused: a memo set before the dict was emptied still names its value)."""
    assert type(a) is type(b) is SymNode
    va, vb = dict(vars(a)), vars(b)
    if "_fastfake_vid" in va:
        assert vids is not None and list(va)[-1] == "_fastfake_vid"
        value = (a._expr, a.pytype, a._hint, a.constant, a.fx_node)
        assert va.pop("_fastfake_vid") == vids.get(value), "a stale or wrong value id"
    assert list(va) == list(vb), (list(va), list(vb))
    for k in va:
        assert type(va[k]) is type(vb[k]) and (va[k] is vb[k] or va[k] == vb[k]), (k, va[k], vb[k])


def _template_runs(rng: random.Random, runs: int, vids_on: bool = True) -> int:
    """Random recipe values, each built in a run of ShapeEnvs, their values interned
    (or not) and the interning dict emptied in between; returns how many template
    nodes carried a value id. With ``vids_on``, every template node (all but the
    first of a run) whose value was interned when it was made must carry its id:
    a failed lookup is remembered per template until the dict changes, and that
    memo must not outlive a change."""
    carried = 0
    for _ in range(runs):
        fields = _fields(rng)
        if rng.random() < 0.5:  # the value interned, as a key of an earlier call does
            _cache.sym_vid(_constructed(fields, ShapeEnv()))
        envs = [ShapeEnv() for _ in range(rng.randrange(2, 6))]
        steps, seen = [], []
        for env in envs:  # after each node: the dict as it was, then other values
            # interned (the dict fills and empties)
            steps += [env, lambda: seen.append(dict(_cache._VIDS))]
            steps += [lambda: _intern_other(rng)] * rng.randrange(3)
            if rng.random() < 0.3:  # this value interned now (by a key, say)
                steps.append(lambda f=fields: _cache.sym_vid(_constructed(f, ShapeEnv())))
        nodes = _C._new_symnodes(fields, steps)
        for i, (env, node, vids) in enumerate(zip(envs, nodes, seen)):
            assert node.shape_env is env
            _same_node(node, _constructed(fields, env), vids)
            carried += "_fastfake_vid" in vars(node)
            if vids_on and i > 0 and fields[2] is not None:
                value = (node._expr, node.pytype, node._hint, node.constant, node.fx_node)
                assert ("_fastfake_vid" in vars(node)) == (value in vids), "an interned value's id not carried"
        assert len({id(n) for n in nodes}) == len(nodes)
    return carried


def _intern_other(rng: random.Random) -> None:
    fields = _fields(rng)
    if rng.random() < 0.7:  # another value
        fields = (fields[0], int, rng.randrange(1000, 2000), None, None, False)
    _cache.sym_vid(_constructed(fields, ShapeEnv()))


@pytest.mark.parametrize("seed", range(4))
def test_template_nodes_equal_constructed_ones(installed, monkeypatch, seed):
    """Random recipe values, each built in a run of ShapeEnvs (the first by the
    constructor, the rest from its dict): every node equals the constructor's in
    its ShapeEnv and holds that ShapeEnv; where the value is interned, it carries
    the id the hook gives it, also after the interning dict was emptied."""
    monkeypatch.setattr(_cache, "_MAX_VIDS", 7)
    assert _template_runs(random.Random(seed), 25) > 5


def test_a_stale_value_id_is_caught(installed, monkeypatch):
    """The check can fail: if emptying the interning dict did not reach C++, ids
    from before it would be carried."""
    monkeypatch.setattr(_cache, "_MAX_VIDS", 7)
    monkeypatch.setattr(_C, "vids_cleared", lambda: None)
    with pytest.raises(AssertionError, match="stale or wrong value id"):
        _template_runs(random.Random(0), 25)


def test_template_left_where_it_does_not_hold(installed, monkeypatch):
    """A missing hint (computed from each ShapeEnv: here 3 in one, 5 in the other),
    and another ``__init__`` than the proven one: each node is the constructor's."""
    from torch._dynamo.source import ConstantSource

    envs = [ShapeEnv(), ShapeEnv()]
    syms = [env.create_symbol(v, ConstantSource("x")) for env, v in zip(envs, (3, 5))]
    assert syms[0] == syms[1]
    fields = (syms[0] * 2, int, None, None, None, False)
    nodes = _C._new_symnodes(fields, envs)
    assert [n._hint for n in nodes] == [6, 10]
    for env, node in zip(envs, nodes):
        _same_node(node, _constructed(fields, env))

    calls = []
    real = vars(SymNode)["__init__"]

    def counting(self, *args, **kwargs):
        calls.append(1)
        real(self, *args, **kwargs)

    hinted = (syms[0] * 2, int, 6, None, None, False)
    _C._new_symnodes(hinted, envs)
    monkeypatch.setattr(SymNode, "__init__", counting)
    _C._new_symnodes(hinted, envs + envs)
    assert len(calls) == 4, "another __init__ must be called for every node"


def test_init_proven_on_this_release():
    assert _compat.symnode_init_source_digest(vars(SymNode)["__init__"]) in _compat.SYMNODE_INIT_SOURCES


def test_template_vids_switch(installed):
    was = _C.set_template_vids(False)
    try:
        assert _template_runs(random.Random(1), 10, vids_on=False) == 0
    finally:
        _C.set_template_vids(was)
    assert was is True


@pytest.mark.skipif(not _compat.portable_entries_known(), reason="no portable entries on this release")
def test_known_kinds_follow_the_class(installed, monkeypatch):
    """The new SymNodes of a served first call skip c10's ``is_int()`` calls only
    while ``SymNode.is_int`` (as attribute access finds it) is the proven method:
    the same counting wrapper is not called where it is registered as proven, and
    is called once it is only the class's attribute."""
    def inputs():
        mode = FakeTensorMode(shape_env=ShapeEnv())
        x = symbolic_fake(mode, 4, 8)
        with mode:
            y = torch.ops.aten.neg.default(x)
        return mode, x, y

    for _ in range(3):  # learned
        mode, x, y = inputs()
        with mode:
            torch.ops.aten.mul.Tensor(x, y)
    calls = []
    real = vars(SymNode)["is_int"]

    def counting(self):
        calls.append(1)
        return real(self)

    def first_call_calls() -> int:
        mode, x, y = inputs()
        served = fastfake.stats().get("cache.symbolic.portable.served", 0)
        calls.clear()
        with mode:
            torch.ops.aten.mul.Tensor(x, y)
        assert fastfake.stats().get("cache.symbolic.portable.served", 0) == served + 1
        return len(calls)

    methods = _compat.symnode_kind_methods()
    assert methods[0] is real
    monkeypatch.setattr(SymNode, "is_int", counting)
    try:
        _C.set_symnode_kinds(counting, *methods[1:])
        assert first_call_calls() == 0
        _C.set_symnode_kinds(*methods)
        assert first_call_calls() > 0
    finally:
        _C.set_symnode_kinds(*methods)
