"""``SymNode.maybe_as_int`` in C (fastfake/symbolic/symnode_int.py): the same answers, the
same replacement cache on the nodes and the same ShapeEnv as stock's method over
long random sequences of SymInt arithmetic, replacements and specialisations in
one process (with ``SymNode.expr`` fastfake's or stock's), also where C++ asks
(tensors built from SymInt sizes); stock's errors; subclasses left to stock; the
``is_number`` memo holding no node or ShapeEnv; faults caught by the self-test
and by crosscheck; uninstall, the environment switch and an unknown stock source
keep stock's method."""
from __future__ import annotations

import gc
import random
import weakref

import pytest
import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.sym_node import SymNode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
from fastfake import _C
from fastfake.symbolic import symnode_int as _symnode_int
from faults import fault_turns_off_only, switches_restore_stock, unknown_source_stays_stock
from parity import clear_shape_env_lru_caches, outcome, shape_env_fields, symbolic_fake

pytestmark = pytest.mark.skipif(
    not _symnode_int.available(), reason="SymNode.maybe_as_int's stock source is not one fastfake was proven on"
)

STOCK = vars(SymNode)["maybe_as_int"]
#: (in a fresh process) whether SymNode.maybe_as_int is fastfake's
_INT_PATCHED = (
    'type(vars(__import__("torch").fx.experimental.sym_node.SymNode)["maybe_as_int"]).__name__ '
    '== "instancemethod"'
)


def _node_state(n) -> tuple:
    return (repr(getattr(n, "_expr_ver", "-")), sympy.srepr(getattr(n, "_expr_cache", None)))


def _program(seed: int, steps: int) -> list:
    """Random SymInt arithmetic over two symbolic tensors' sizes, with equalities
    and specialisations along the way; asks ``maybe_as_int`` of random (old and
    new) nodes and builds tensors from random sizes (C++ asks then): every answer,
    the nodes' replacement caches, and the ShapeEnv at the end."""
    rng = random.Random(seed)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    hints = [rng.choice([2, 3, 4, 6]) for _ in range(6)]
    x = symbolic_fake(mode, *hints[:3])
    y = symbolic_fake(mode, *hints[3:])
    ints = list(x.shape) + list(y.shape)
    consts = [SymNode(sympy.Integer(7), env, int, 7), SymNode(sympy.Float(2.5), env, float, 2.5),
              SymNode(sympy.Integer(2) + sympy.sqrt(3), env, float, 2 + 3**0.5)]
    nodes = [i.node for i in ints] + consts
    out = []
    for step in range(steps):
        r = rng.random()
        a, b = rng.choice(ints), rng.choice(ints)
        if r < 0.4:
            op = rng.choice(["add", "mul", "sub", "floordiv", "max", "lt", "truediv"])
            if op in ("floordiv", "truediv") and b.node.hint <= 0:
                op = "add"
            v = {"add": lambda: a + b, "mul": lambda: a * b, "sub": lambda: a - b,
                 "floordiv": lambda: a // b, "max": lambda: torch.sym_max(a, b),
                 "lt": lambda: a < b, "truediv": lambda: a / b}[op]()
            nodes.append(v.node)
            if isinstance(v, torch.SymInt) and len(ints) < 60:
                ints.append(v)
        elif r < 0.45 and a.node.hint == b.node.hint:
            out.append((step, "check", outcome(lambda: torch._check(a == b)), len(env.replacements)))
        elif r < 0.47:
            k = rng.choice(ints[:6])
            out.append((step, "specialise", outcome(lambda: torch._check(k == k.node.hint)),
                        len(env.replacements)))
        elif r < 0.6:
            sizes = [s for s in rng.sample(ints, 2) if s.node.hint > 0]
            with mode:
                t = torch.empty(sizes)
            out.append((step, "tensor", [repr(s) for s in t.shape], [repr(s) for s in t.stride()]))
        else:
            for n in rng.sample(nodes, min(3, len(nodes))):
                out.append((step, outcome(n.maybe_as_int), _node_state(n)))
    out.append(("env", shape_env_fields(env)))
    return out


@pytest.mark.parametrize("expr_in_c", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_sequences_match_stock(seed, expr_in_c, monkeypatch):
    if not expr_in_c:
        monkeypatch.setenv("FASTFAKE_NO_SYMNODE_EXPR", "1")
    fastfake.install()
    fastfake.reset_stats()
    fast = _program(seed, 400)
    stats = fastfake.stats()
    fastfake.uninstall()
    stock = _program(seed, 400)
    assert fast == stock
    assert stats["symnode.int.served"] > 500
    assert any(o[1] == "check" and o[3] > 0 for o in stock if len(o) == 4)  # replacements happened
    answers = [o[1] for o in stock if len(o) == 3 and o[1][0] == "ok"]
    assert any(a[1] is None for a in answers) and any(isinstance(a[1], int) for a in answers)


def test_errors_match_stock():
    """No ShapeEnv under a symbolic expression; an _expr that is no sympy
    expression; numbers int() refuses."""
    env = ShapeEnv()

    def cases():
        s = sympy.Symbol("s0", positive=True, integer=True)
        no_env = SymNode(s + 1, None, int, 3)
        odd = SymNode(s, env, int, 3)
        odd._expr = object()
        nodes = [no_env, odd] + [SymNode(v, env, int, 1) for v in (sympy.oo, -sympy.oo, sympy.nan, sympy.zoo)]
        return [outcome(n.maybe_as_int) for n in nodes]

    fastfake.install()
    fast = cases()
    fastfake.uninstall()
    stock = cases()
    assert fast == stock
    assert [o[0] for o in stock[:2]] == ["error"] * 2, stock  # (2.9's message differs)


class _Node(SymNode):
    pass


def test_subclass_and_class_access():
    fastfake.install()
    env = ShapeEnv()
    s = sympy.Symbol("s0", positive=True, integer=True)
    fastfake.reset_stats()
    assert _Node(sympy.Integer(4), env, int, 4).maybe_as_int() == 4
    assert _Node(s * 2, env, int, 6).maybe_as_int() is None
    assert fastfake.stats()["symnode.int.stock.type"] == 2
    assert fastfake.stats()["symnode.int.served"] == 0
    node = SymNode(sympy.Integer(9), env, int, 9)
    assert SymNode.maybe_as_int(node) == 9 == STOCK(node)
    assert fastfake.stats()["symnode.int.served"] == 1


def test_memo_keeps_no_node_or_shape_env_alive():
    fastfake.install()
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = symbolic_fake(mode, 4, 6)
    a, b = x.shape
    for _ in range(3):
        assert (a * b + a).node.maybe_as_int() is None
    refs = [weakref.ref(env), weakref.ref(mode), weakref.ref(a.node)]
    del env, mode, x, a, b
    clear_shape_env_lru_caches()  # (stock's own lru caches hold the ShapeEnv)
    gc.collect()
    assert all(r() is None for r in refs)
    assert _C.symnode_expr_memo_size() > 0
    fastfake.cache_clear()
    assert _C.symnode_expr_memo_size() == 0


def test_crosscheck_catches_a_wrong_answer():
    fastfake.install(crosscheck=True)
    env = ShapeEnv()
    assert SymNode(sympy.Integer(5), env, int, 5).maybe_as_int() == 5  # checked, equal
    _C._inject_fault(1, "symnode_int")
    with pytest.raises(fastfake.CrosscheckError, match="SymNode.maybe_as_int"):
        SymNode(sympy.Integer(6), env, int, 6).maybe_as_int()


def test_uninstall_and_environment_switch_restore_stock():
    switches_restore_stock(SymNode, "maybe_as_int", STOCK, "FASTFAKE_NO_SYMNODE_INT")


def test_selftest_catches_a_wrong_answer():
    fault_turns_off_only(
        'fastfake._C._inject_fault(100, "symnode_int")', "symnode_int", keep="cache",
        still_on=_INT_PATCHED,
    )


def test_unknown_source_stays_stock():
    unknown_source_stays_stock("SYMNODE_MAYBE_AS_INT_SOURCES", "symnode_int", still_on=_INT_PATCHED)


def test_random_comparison_sees_a_wrong_answer():
    """The comparison above can fail: with wrong answers injected it differs."""
    fastfake.install()
    _C._inject_fault(1000, "symnode_int")
    fast = _program(0, 400)
    _C._inject_fault(0, "symnode_int")
    fastfake.uninstall()
    stock = _program(0, 400)
    differ = sum(f != s for f, s in zip(fast, stock))
    assert differ > 10, differ
