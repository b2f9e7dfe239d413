"""``SymNode.expr`` as a C-level descriptor.

Every SymInt operation, guard, cache key and proxy-tracer registration reads
``SymNode.expr`` (the node's expression with the ShapeEnv's replacements
applied), several times per operation: hundreds of thousands of reads in a
``dynamic=True`` training compile. On torch 2.13 the property first asks sympy's
``_expr.is_number``, which walks the expression's arguments in Python, uncached
(~7 % of a ``dynamic=True`` T5 training compile; 2.14 replaced it by the class
attribute ``is_Number``, 2.15 added boolean atoms).

``install()`` replaces the property on the ``SymNode`` class with
``fastfake._C.symnode_expr_descriptor`` (``csrc/symbolic/symnode_expr.cpp``), which
computes the body of *the installed release's* property in C: the same reads
(``_expr``, ``shape_env``, the replacement version counter, ``_expr_cache``,
``_expr_ver``), the same writes and the same call to ``shape_env.replace``; on
2.13 ``is_number`` is memoised on the identity of the expression (sympy
expressions are immutable; each entry owns its key; bounded at 65,536 entries,
emptied when full). Exact ``SymNode`` instances only: a subclass, class access,
setting and deleting go to the stock property.

Offered only where the stock property is source-identical to one it was proven on
(:data:`fastfake.common.compat.SYMNODE_EXPR_SOURCES`, which also names the rule), where
``SymNode`` defines none of the attributes the descriptor reads from the instance,
and after the install-time self-test (feature ``symnode_expr``); 2.9's property is
a bare ``shape_env.replace(_expr)`` and stays stock's. ``FASTFAKE_DISABLE=symnode_expr``
turns it off.

Counters (``stats()``): ``symnode.expr.served``, ``.stock.type`` (not exactly a
SymNode), ``.learned`` / ``.full`` (the ``is_number`` memo).
"""
from __future__ import annotations

from fastfake import _C
from fastfake.common import compat as _compat

_READ_FROM_INSTANCE = ("_expr", "shape_env", "_expr_cache", "_expr_ver")


def _on_class(cls, name: str) -> bool:
    """``name in dir(cls)``: for a class whose metaclass lists attributes as
    ``type`` does, a name in the ``__dict__`` of the class or a base (``dir`` builds
    and sorts the whole list, at every ``install()``)."""
    if type(cls).__dir__ is not type.__dir__:
        return name in dir(cls)
    return any(name in vars(k) for k in cls.__mro__)


def stock_property():
    from torch.fx.experimental.sym_node import SymNode

    return SymNode.expr  # class access: the stock property, also when patched


def rule() -> int | None:
    """The rule of the installed release's ``SymNode.expr`` (None: not offered)."""
    from torch.fx.experimental.sym_node import SymNode

    if any(_on_class(SymNode, name) for name in _READ_FROM_INSTANCE):
        return None
    if SymNode.__setattr__ is not object.__setattr__:
        return None
    return _compat.symnode_expr_rule()


def available() -> bool:
    return rule() is not None


def setup() -> None:
    from torch.fx.experimental.sym_node import SymNode

    _C.setup_symnode_expr(SymNode)


def descriptor(*, crosscheck: bool = False):
    """What ``SymNode.expr`` becomes (None where not offered)."""
    r = rule()
    if r is None:
        return None
    _C.set_symnode_expr_check(check if crosscheck else None)
    return _C.symnode_expr_descriptor(stock_property(), r)


def check(node, served) -> bool:
    """crosscheck: stock's property on the same node gives an equal expression."""
    from fastfake.parity.crosscheck import CrosscheckError

    stock = stock_property().fget(node)
    if type(stock) is not type(served) or stock != served:
        raise CrosscheckError(
            f"fastfake crosscheck: SymNode.expr of {node._expr!r} differs from stock: "
            f"fastfake {served!r}, stock {stock!r}"
        )
    return True


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): ``SymNode.expr`` computed
    in C, or the property restored."""
    if not available():
        return
    from torch.fx.experimental.sym_node import SymNode

    from fastfake.common.originals import patch

    patch(SymNode, "expr", descriptor(crosscheck=crosscheck) if on else None)
    if not on:
        _C.set_symnode_expr_check(None)
