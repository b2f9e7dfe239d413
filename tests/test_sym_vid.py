"""SymNode value ids read in C++ (csrc/cache/keys.cpp, ``interned_vid``).

The result cache keys a SymNode by an interned value id: ``fastfake.cache.learn.sym_vid``
interns ``(_expr, pytype, _hint, constant, fx_node)`` in ``_cache._VIDS`` (equal ids
iff stock's ``_PySymInputStub``s compare equal) and memoises the id on the node. A
new ShapeEnv's nodes have no memo yet; where their value is already interned, C++
reads the five fields from the instance dict and looks them up in the same dict,
without calling the hook. The id must be the hook's, over long random sequences in
one process (new ShapeEnvs, derived values, the dict emptied when full, nodes with
and without hints), and anything C++ cannot read the way the hook does (a data
descriptor on the class, a missing field) must go to the hook."""
from __future__ import annotations

import random

import pytest
import sympy
import torch
from torch.fx.experimental.sym_node import SymNode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
from fastfake import _C
from fastfake.cache import learn as _cache
from parity import symbolic_fake


@pytest.fixture
def counting_hook():
    """fastfake installed, its vid hook wrapped to count the calls C++ makes."""
    fastfake.install()
    calls = []

    def hook(node):
        calls.append(node)
        return _cache.sym_vid(node)

    def bind(vids=_cache._VIDS, h=hook):
        _C.setup_symbolic(SymNode, torch.SymInt, h, _cache.still_valid, _cache.capture_begin, vids)

    bind()
    try:
        yield calls, bind
    finally:
        bind(_cache._VIDS, _cache.sym_vid)
        fastfake.uninstall()


def _nodes(rng: random.Random, env: ShapeEnv) -> list:
    """Fresh SymNodes of one ShapeEnv: symbols, derived values, SymBools, constants,
    nodes without a hint."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(shape_env=env)
    shape = [rng.choice([2, 3, 4, 8, 300, 1024]) for _ in range(rng.randint(1, 3))]
    t = symbolic_fake(mode, *shape)
    syms = list(t.shape)
    out = [s.node for s in syms] + [s.node for s in t.stride() if isinstance(s, torch.SymInt)]
    for _ in range(rng.randint(1, 4)):
        a, b = rng.choice(syms), rng.choice(syms)
        v = rng.choice([lambda: a * b, lambda: a + b, lambda: a + rng.randint(1, 3), lambda: a // 2, lambda: a == b, lambda: a < b])()
        if isinstance(v, (torch.SymInt, torch.SymBool)):
            out.append(v.node)
    n = syms[0].node
    out.append(SymNode(n._expr, env, n.pytype, None))  # no hint
    out.append(SymNode(sympy.Integer(rng.randint(1, 5)), env, int, rng.randint(1, 5), constant=rng.randint(1, 5)))
    return out


def _python_vid(node) -> int:
    """The hook's answer for the node, memo dropped first."""
    vars(node).pop("_fastfake_vid", None)
    return _cache.sym_vid(node)


def _walk(rng: random.Random, steps: int, calls: list) -> tuple[int, int, list]:
    served = fell_back = 0
    mismatches = []
    env = ShapeEnv()
    for step in range(steps):
        if rng.random() < 0.3:
            env = ShapeEnv()
        for node in _nodes(rng, env):
            vars(node).pop("_fastfake_vid", None)
            value = (node._expr, node.pytype, node._hint, node.constant, node.fx_node)
            interned = value in _cache._VIDS
            before = len(calls)
            vid = _C._node_vid(node)
            if len(calls) == before:
                served += 1
                assert interned, "C++ answered for a value the hook never interned"
            else:
                fell_back += 1
            if vid != _python_vid(node):
                mismatches.append((step, str(node._expr), vid))
    return served, fell_back, mismatches


@pytest.mark.parametrize("seed", range(3))
def test_ids_are_the_hooks_over_random_sequences(counting_hook, monkeypatch, seed):
    calls, _ = counting_hook
    monkeypatch.setattr(_cache, "_MAX_VIDS", 97)  # the dict is emptied every few steps
    served, fell_back, mismatches = _walk(random.Random(seed), 150, calls)
    assert mismatches == []
    # both paths ran: values seen before are read in C++, new ones interned by the hook
    assert served > 200 and fell_back > 50, (served, fell_back)


def test_a_wrong_dict_is_caught(counting_hook):
    """The comparison can fail: C++ bound to a dict with other ids gives them."""
    calls, bind = counting_hook
    rng = random.Random(7)
    _walk(rng, 20, calls)  # intern some values
    bind({k: v + 1 for k, v in _cache._VIDS.items()})
    _, _, mismatches = _walk(random.Random(7), 20, calls)
    assert mismatches


def test_descriptors_and_missing_fields_go_to_the_hook(counting_hook):
    calls, _ = counting_hook
    env = ShapeEnv()
    from torch._subclasses.fake_tensor import FakeTensorMode

    t = symbolic_fake(FakeTensorMode(shape_env=env), 4, 8)
    node = t.shape[0].node
    _cache.sym_vid(node)  # interned
    twin = SymNode(node._expr, env, node.pytype, node._hint)

    class Shadowed(SymNode):
        _hint = property(lambda self: 12345)  # what the hook reads instead of the dict's

    shadowed = SymNode(node._expr, env, node.pytype, node._hint)
    shadowed.__class__ = Shadowed
    missing = SymNode(node._expr, env, node.pytype, node._hint)
    del missing.constant

    before = len(calls)
    assert _C._node_vid(twin) == node._fastfake_vid  # C++ reads it
    assert len(calls) == before
    assert _C._node_vid(shadowed) == _python_vid(shadowed) != node._fastfake_vid
    assert len(calls) == before + 1
    assert _C._node_vid(missing) == -1  # the hook raises AttributeError: no id
    assert len(calls) == before + 2
