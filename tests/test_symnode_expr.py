"""``SymNode.expr`` as a C-level descriptor (fastfake/symbolic/symnode_expr.py): the same
expression, the same replacement cache on the node and the same ShapeEnv as stock's
property over long random sequences of SymInt arithmetic, replacements and
specialisations in one process; stock's errors; subclasses, class access, setting
and deleting left to stock; the ``is_number`` memo bounded and holding no node or
ShapeEnv; faults caught by the self-test and by crosscheck; uninstall, the
environment switch and an unknown stock source keep stock's property."""
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
from fastfake.symbolic import symnode_expr as _symnode_expr
from faults import fault_turns_off_only, switches_restore_stock, unknown_source_stays_stock
from parity import clear_shape_env_lru_caches, outcome, shape_env_fields, symbolic_fake

pytestmark = pytest.mark.skipif(
    not _symnode_expr.available(), reason="SymNode.expr's stock source is not one fastfake was proven on"
)

STOCK = vars(SymNode)["expr"]
#: (in a fresh process) whether SymNode.expr is fastfake's descriptor
_EXPR_PATCHED = (
    'type(vars(__import__("torch").fx.experimental.sym_node.SymNode)["expr"]).__module__ '
    '== "fastfake._C"'
)


def _state(n) -> tuple:
    return (sympy.srepr(n.expr), repr(n._expr_ver), sympy.srepr(n._expr_cache))


def _program(seed: int, steps: int) -> list:
    """Random SymInt arithmetic over three symbolic tensors' sizes, with equalities
    and specialisations made along the way, reading ``expr`` of random (old and
    new) nodes: every read's expression and node cache, and the ShapeEnv at the end."""
    rng = random.Random(seed)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    hints = [rng.choice([2, 3, 4, 6]) for _ in range(6)]
    x = symbolic_fake(mode, *hints[:3])
    y = symbolic_fake(mode, *hints[3:])
    ints = list(x.shape) + list(y.shape)
    consts = [SymNode(sympy.Integer(7), env, int, 7),
              SymNode(sympy.Integer(2) + sympy.sqrt(3), env, float, 2 + 3**0.5),
              SymNode(sympy.true, env, bool, True)]
    nodes = [i.node for i in ints] + consts
    out = []
    for step in range(steps):
        r = rng.random()
        a, b = rng.choice(ints), rng.choice(ints)
        if r < 0.45:
            op = rng.choice(["add", "mul", "sub", "floordiv", "max", "lt", "eq"])
            if op == "floordiv" and b.node.hint <= 0:
                op = "add"
            v = {"add": lambda: a + b, "mul": lambda: a * b, "sub": lambda: a - b,
                 "floordiv": lambda: a // b, "max": lambda: torch.sym_max(a, b),
                 "lt": lambda: a < b, "eq": lambda: a == b}[op]()
            nodes.append(v.node)
            if isinstance(v, torch.SymInt) and len(ints) < 60:
                ints.append(v)
        elif r < 0.5 and a.node.hint == b.node.hint:
            # a replacement (or nothing new; or stock's error, e.g. where the ranges
            # already decide it)
            out.append((step, "check", outcome(lambda: torch._check(a == b)), len(env.replacements)))
        elif r < 0.52:
            k = rng.choice(ints[:6])
            out.append((step, "specialise", outcome(lambda: torch._check(k == k.node.hint)),
                        len(env.replacements)))  # a specialisation
        else:
            for n in rng.sample(nodes, min(3, len(nodes))):
                out.append((step, _state(n)))
    out.append(("env", shape_env_fields(env)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_sequences_match_stock(seed):
    fastfake.install()
    fastfake.reset_stats()
    fast = _program(seed, 400)
    stats = fastfake.stats()
    fastfake.uninstall()
    stock = _program(seed, 400)
    assert fast == stock
    assert stats["symnode.expr.served"] > 1000
    if _symnode_expr.rule() == 1:
        assert stats["symnode.expr.learned"] > 0
    assert any(o[1] == "check" and o[3] > 0 for o in stock if len(o) == 4)  # replacements happened


def test_bounded_memo_still_matches_stock():
    fastfake.install()
    old = _C.symnode_expr_set_max(8)
    _C.symnode_expr_clear()  # (a lower bound applies from the next new entry on)
    try:
        fastfake.reset_stats()
        fast = _program(3, 300)
        stats = fastfake.stats()
        assert _C.symnode_expr_memo_size() <= 8
    finally:
        _C.symnode_expr_set_max(old)
    fastfake.uninstall()
    assert fast == _program(3, 300)
    if _symnode_expr.rule() == 1:
        assert stats["symnode.expr.full"] > 0


def test_errors_match_stock():
    """No ShapeEnv under a symbolic expression; an _expr sympy does not know; an
    _expr_ver that is gone."""
    env = ShapeEnv()

    def cases():
        s = sympy.Symbol("s0", positive=True, integer=True)
        no_env = SymNode(s + 1, None, int, 3)
        odd = SymNode(s, env, int, 3)
        odd._expr = object()
        env._replacements_version_counter += 1  # (as a replacement would)
        gone = SymNode(s * 2, env, int, 6)
        gone._expr_cache = s
        del gone._expr_ver
        return [outcome(lambda n=n: n.expr) for n in (no_env, odd, gone)]

    fastfake.install()
    fast = cases()
    fastfake.uninstall()
    stock = cases()
    assert fast == stock
    assert [o[0] for o in stock] == ["error"] * 3, stock
    assert "shape_env is required" in stock[0][2]


class _Node(SymNode):
    pass


def test_subclass_class_access_setting_and_deleting_go_to_stock():
    fastfake.install()
    env = ShapeEnv()
    s = sympy.Symbol("s0", positive=True, integer=True)
    fastfake.reset_stats()
    assert _Node(s * 2, env, int, 6).expr == s * 2
    assert fastfake.stats()["symnode.expr.stock.type"] == 1
    assert SymNode.expr is STOCK and type(vars(SymNode)["expr"]).__module__ == "fastfake._C"
    node = SymNode(s, env, int, 3)
    fast = [outcome(lambda: setattr(node, "expr", s)), outcome(lambda: delattr(node, "expr"))]
    fastfake.uninstall()
    node = SymNode(s, env, int, 3)
    stock = [outcome(lambda: setattr(node, "expr", s)), outcome(lambda: delattr(node, "expr"))]
    assert fast == stock and stock[0][0] == "error"


def test_memo_keeps_no_node_or_shape_env_alive():
    fastfake.install()
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = symbolic_fake(mode, 4, 6)
    a, b = x.shape
    for _ in range(3):
        _ = (a * b + a).node.expr
    refs = [weakref.ref(env), weakref.ref(mode), weakref.ref(a.node)]
    del env, mode, x, a, b
    clear_shape_env_lru_caches()  # (stock's own lru caches hold the ShapeEnv)
    gc.collect()
    assert all(r() is None for r in refs)
    assert _C.symnode_expr_memo_size() > 0 or _symnode_expr.rule() != 1
    fastfake.cache_clear()
    assert _C.symnode_expr_memo_size() == 0


def test_crosscheck_catches_a_wrong_expression():
    fastfake.install(crosscheck=True)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = symbolic_fake(mode, 4, 4)
    a, b = x.shape
    assert (a * b).node.expr is not None  # checked, equal
    torch._check(a == b)
    _C._inject_fault(1, "symnode_expr")
    with pytest.raises(fastfake.CrosscheckError, match="SymNode.expr"):
        (b * 3).node.expr  # noqa: B018


def test_uninstall_and_environment_switch_restore_stock():
    switches_restore_stock(SymNode, "expr", STOCK, "FASTFAKE_NO_SYMNODE_EXPR")


def test_selftest_catches_an_unreplaced_expression():
    fault_turns_off_only(
        'fastfake._C._inject_fault(100, "symnode_expr")', "symnode_expr", keep="cache",
        still_on=_EXPR_PATCHED,
    )


def test_unknown_source_stays_stock():
    unknown_source_stays_stock("SYMNODE_EXPR_SOURCES", "symnode_expr", still_on=_EXPR_PATCHED)


def test_not_offered_when_the_class_has_an_instance_field():
    """A SymNode class (or base) that defines one of the fields the C getter reads
    from the instance (``_expr``, ``shape_env``, ``_expr_cache``, ``_expr_ver``)
    is not offered; the class lookup says what ``dir`` says, for classes whose
    metaclass lists attributes otherwise too."""
    rule = _symnode_expr.rule()
    for name in _symnode_expr._READ_FROM_INSTANCE:
        setattr(SymNode, name, None)
        try:
            assert _symnode_expr.rule() is None, name
        finally:
            delattr(SymNode, name)
        assert _symnode_expr.rule() == rule

    class Base:
        shape_env = None

    class Meta(type):
        def __dir__(cls):
            return ["_expr"]

    class Listed(metaclass=Meta):
        pass

    for cls in (SymNode, Base, type("Sub", (Base,), {}), Listed, int, torch.SymInt):
        for name in (*_symnode_expr._READ_FROM_INSTANCE, "__init__", "expr", "__name__", "mro", "_hint"):
            assert _symnode_expr._on_class(cls, name) == (name in dir(cls)), (cls, name)
