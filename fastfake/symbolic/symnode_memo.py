"""SymNode binary arithmetic memoised on the operands' expressions.

Fake propagation with symbolic shapes computes the same SymInt arithmetic again
and again: numel, contiguity and storage sizes of every new tensor, broadcast
checks, the reshapes of ``linear`` / ``matmul`` decompositions. Stock's
``SymNode.<op>`` (``sym_node._make_node_magic`` -> ``binary_magic_impl``) runs ~20
lines of Python and a sympy constructor each time (a relational such as
``sympy.Eq`` costs ~20 µs); its own ``lru_cache(256)`` over the sympy function is
too small for a model (T5, ``dynamic=True``: ~900 distinct operations, 29,000
calls outside proxy tracing).

:mod:`fastfake._C` replaces ``SymNode._add``, ``_mul``, ``_eq``, ... (every
method stock builds from ``binary_magic_impl`` except ``_mod``, which reads value
ranges) with a C function that serves a repeat from a memo keyed on the identity of
the operands' (replaced) expressions, their pytypes and optimized-summation flags:
the result expression, pytype and flag are the earlier call's; the hint is computed
and the SymNode built by stock's own code, a new one every call, as stock does.
Calls under proxy tracing, with translation validation, ShapeEnv event recording,
structured tracing or the ``sym_node`` / shape-event debug logs on, or with a
missing hint, go to stock (csrc/symbolic/symnode_memo.cpp says why each of these matters).

The memo is correct only where ``binary_magic_impl`` has no other effect, so it is
offered only on releases whose ``binary_magic_impl`` (and its provenance wrapper) is
source-identical to one it was proven on
(``_compat.SYMNODE_BINARY_SOURCES``), and then proven
again by the install-time self-test (feature ``symnode_memo``). torch 2.15 memoises
these operations itself (``ShapeEnv._symop_cache``), so there stock's source
differs and the memo stays off. ``FASTFAKE_DISABLE=symnode_memo`` turns it off.

Counters (``stats()``): ``symnode.memo.hit``, ``.learned``, ``.full`` (the memo was
emptied at its bound), and ``.stock.<reason>`` for calls handed to stock:
``proxy_tracing``, ``state`` (one of the settings above), ``hint`` (an operand
without a plain hint), ``type`` (an operand not exactly a SymNode), ``error`` (the
hint computation raised: stock raises it).
"""
from __future__ import annotations

from fastfake.common.stock_sources import symnode_binary_methods
from fastfake import _C
from fastfake.common import compat as _compat

_hooks: dict[str, object] = {}




def available() -> bool:
    """Stock's binary ops are the ones the memo was proven against, and everything
    the C++ side reads exists."""
    if not _compat.symnode_binary_ops_proven():
        return False
    try:
        import sympy.core.parameters  # noqa: F401
        import torch._logging._internal as logging_internal
        from torch.fx.experimental import recording, sym_node  # noqa: F401
    except ImportError:
        return False
    return (
        isinstance(vars(logging_internal).get("GET_DTRACE_STRUCTURED"), bool)
        and hasattr(sym_node, "sym_node_log")
        and hasattr(recording, "trace_shape_events_log")
    )


def setup(C=_C) -> None:
    """Bind the C++ memo and build one hook per method (once per process)."""
    if _hooks or not available():
        return
    import sympy.core.parameters
    import torch._logging._internal as logging_internal
    from torch.fx.experimental import recording, sym_node

    C.setup_symnode_memo(
        sym_node.SymNode,
        sym_node.METHOD_TO_OPERATOR,
        sympy.core.parameters.global_parameters,
        vars(logging_internal),
        (sym_node.sym_node_log, recording.trace_shape_events_log),
    )
    for attr, method, fn in symnode_binary_methods():
        _hooks[attr] = C.symnode_memo_hook(method, fn)


def hooks() -> dict[str, object]:
    """SymNode attribute -> the memo's method object (empty if unavailable)."""
    return dict(_hooks)


def describe(node) -> tuple:
    """Every field of a SymNode a served one must share with stock's."""
    import sympy

    expr = node._expr
    return (
        sympy.srepr(expr) if isinstance(expr, sympy.Basic) else repr(expr),
        getattr(node.pytype, "__name__", repr(node.pytype)),
        type(node._hint).__name__,
        repr(node._hint),
        node.constant,
        repr(node.fx_node),
        node._optimized_summation,
        node.shape_env is not None,
    )


def check(method: str, fast, stock_fn, a, b) -> bool:
    """crosscheck: stock's result of the served call, compared field by field."""
    from fastfake.parity.crosscheck import CrosscheckError

    stock = stock_fn(a, b)
    if type(stock) is not type(fast) or describe(stock) != describe(fast) or (
        stock.shape_env is not fast.shape_env
    ):
        raise CrosscheckError(
            f"fastfake crosscheck: SymNode.{method}({a.expr}, {b.expr}) differs from stock: "
            f"fastfake {describe(fast)}, stock {describe(stock)}"
        )
    return True


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): SymNode's binary op
    methods patched with the memo's hooks, or restored."""
    from torch.fx.experimental.sym_node import SymNode

    from fastfake.common.originals import patch

    for attr, hook in hooks().items():
        patch(SymNode, attr, hook if on else None)
    _C.set_symnode_memo_check(check if on and crosscheck else None)
    _C.set_symnode_memo(on and bool(hooks()))
