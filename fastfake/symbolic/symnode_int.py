"""``SymNode.maybe_as_int`` in C.

c10's ``PythonSymNodeImpl`` asks the Python SymNode ``maybe_as_int()`` for every
SymInt that crosses into C++ (the arguments of every op with symbolic sizes, the
sizes of every FakeTensor and FunctionalTensor wrapper built, proxy tracing's
size reads), and Python code asks it too: ~3 % of a ``dynamic=True`` BERT
``aot_eager`` compile. Stock's method reads ``self.expr.is_number`` -- sympy's
property, which walks the expression's arguments in Python, uncached -- and then
``int(self.expr)``.

``install()`` replaces it on the ``SymNode`` class with
``fastfake._C.symnode_int_method()`` (``csrc/symbolic/symnode_int.cpp``): the same reads in
the same order (``self.expr`` through whatever ``SymNode.expr`` is, ``is_number``,
``self.expr`` again, ``int()``), with ``is_number`` memoised on the expression's
identity (the memo of :mod:`fastfake.symbolic.symnode_expr`; sympy expressions are
immutable). Exact ``SymNode`` instances only; anything else calls stock's function.

Offered only where stock's method is source-identical to one it was proven on
(:data:`fastfake.common.compat.SYMNODE_MAYBE_AS_INT_SOURCES`: 2.9.0; 2.13.0, 2.14.1 and
2.15.0 share one), and after the install-time self-test (feature ``symnode_int``).
``FASTFAKE_DISABLE=symnode_int`` turns it off.

Counters (``stats()``): ``symnode.int.served``, ``symnode.int.stock.type`` (not
exactly a SymNode).
"""
from __future__ import annotations

from fastfake import _C
from fastfake.common import compat as _compat


def stock_function():
    """Stock's ``SymNode.maybe_as_int`` (also while fastfake's is in place)."""
    from torch.fx.experimental.sym_node import SymNode

    from fastfake.common.originals import ORIGINALS

    return ORIGINALS.get((SymNode, "maybe_as_int"), SymNode.__dict__.get("maybe_as_int"))


def available() -> bool:
    fn = stock_function()
    return fn is not None and _compat.symnode_maybe_as_int_source_digest(fn) in _compat.SYMNODE_MAYBE_AS_INT_SOURCES


def method(*, crosscheck: bool = False):
    """What ``SymNode.maybe_as_int`` becomes. With it in place, the result cache
    lays out rebuilt outputs' symbolic sizes without c10's per-value Python calls
    (``csrc/cache/rebuild.cpp``) if ``SymNode.clone`` returns its node
    (:func:`clone_returning_node`)."""
    from torch.fx.experimental.sym_node import SymNode

    _C.setup_symnode_int(SymNode, stock_function())
    _C.set_symnode_int_check(check if crosscheck else None)
    _C.set_symint_clone(clone_returning_node())
    return _C.symnode_int_method()


def clone_returning_node():
    """``SymNode.clone`` if it is a function that returns the node it is called on
    (stock's ``return self`` on every supported release; shown on a probe node and
    by its code, which has no other instruction than returning its argument), else
    None."""
    import sympy
    from torch.fx.experimental.sym_node import SymNode

    fn = SymNode.__dict__.get("clone")
    code = getattr(fn, "__code__", None)
    if code is None or code.co_argcount != 1:
        return None
    if _compat.instructions(fn) != [("LOAD_FAST", code.co_varnames[0]), ("RETURN_VALUE", None)]:
        return None
    probe = SymNode(sympy.Integer(1), None, int, 1)
    return fn if fn(probe) is probe else None


def check(node, served) -> bool:
    """crosscheck: stock's method on the same node gives the same answer."""
    from fastfake.parity.crosscheck import CrosscheckError

    stock = stock_function()(node)
    if type(stock) is not type(served) or stock != served:
        raise CrosscheckError(
            f"fastfake crosscheck: SymNode.maybe_as_int of {node._expr!r} differs from stock: "
            f"fastfake {served!r}, stock {stock!r}"
        )
    return True


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): ``SymNode.maybe_as_int``
    computed in C, or the method restored."""
    if not available():
        return
    from torch.fx.experimental.sym_node import SymNode

    from fastfake.common.originals import patch

    patch(SymNode, "maybe_as_int", method(crosscheck=crosscheck) if on else None)
    if not on:
        _C.set_symnode_int_check(None)
