"""make_fx's dead-code-elimination predicate in C (``dce_pred``).

``dispatch_trace`` ends every make_fx trace (AOTAutograd's, export's) with
``graph.eliminate_dead_code(impure_pred)``, and the graph's loop asks the predicate
about every node, the ones with users too: ``n.is_impure()`` (for a call_function,
``torch._library.utils.is_impure`` of its target), ``is_accessor_node(n)``, then
whether the node's ``val`` and its node arguments' are all sym values. Two imports
and four Python functions per node: 9,168 nodes in a ``dynamic=True`` GPT-2 compile,
most of them the SymInt records the elimination removes (about 3 % of its first
compile by a sampling profile).

``install()`` wraps ``Graph.eliminate_dead_code``: when the predicate it is handed
is a ``dispatch_trace``'s ``impure_pred`` (its code object, found in
``dispatch_trace``'s constants at setup) and the names that predicate reads are still
stock's, stock's method runs with a predicate written in C
(``csrc/tracing/dce_pred.cpp``) in its place, for that one elimination. It answers
as stock's does; for a call_function node of a target that is no higher-order
operator it takes ``n.is_impure()`` and ``is_accessor_node(n)`` from a memo of the
target, filled by those stock functions on the target's first node (both read the
target only, and the loop runs no code that changes what they read). Any other
predicate, graph method or node is stock's, counted by reason.

Offered where that stock code is source-identical to a release it was proven on
(:data:`fastfake.common.compat.DCE_PRED_SOURCES`; 2.9 has another purity check: not
offered) and after the install-time self-test (feature ``dce_pred``).
``FASTFAKE_DISABLE=dce_pred`` turns it off; with ``crosscheck=True`` stock's
predicate answers for every node as well, and the two answers must be equal.

Counters (``stats()``): ``dce_pred.served`` (nodes answered in C), ``dce_pred.learned``
(targets whose stock answers the memo took), ``dce_pred.stock.<reason>`` (``off``,
``node`` (another node class), ``op`` (call_module, call_method), ``hop``, ``meta``
(a meta that is no dict)).
"""
from __future__ import annotations

import functools
from typing import Any

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.common.originals import original, put, stock_or_ours

_STATE: dict = {}


def _graph_class() -> type:
    from torch.fx.graph import Graph

    return Graph


def _stock_method() -> Any:
    return original(_graph_class(), "eliminate_dead_code")


def _pred_code() -> Any:
    """The code object of ``dispatch_trace``'s ``impure_pred`` (None if not found)."""
    from torch.fx.experimental import proxy_tensor as pt

    fn = getattr(vars(pt).get("dispatch_trace"), "__wrapped__", None)
    codes = [c for c in getattr(getattr(fn, "__code__", None), "co_consts", ())
             if getattr(c, "co_name", None) == "impure_pred"]
    return codes[0] if len(codes) == 1 else None


def _names() -> tuple:
    """What the predicate reads, as bound now: proxy_tensor's ``py_sym_types`` and
    ``fx``, ``fx.Node``, ``symbolic_shapes.is_accessor_node``, ``Node.is_impure``
    and ``torch._library.utils.is_impure``."""
    import torch._library.utils as library_utils
    from torch.fx.experimental import proxy_tensor as pt
    from torch.fx.experimental import symbolic_shapes

    fx = vars(pt).get("fx")
    node = getattr(fx, "Node", None)
    return (vars(pt).get("py_sym_types"), fx, node, vars(symbolic_shapes).get("is_accessor_node"),
            vars(node).get("is_impure") if isinstance(node, type) else None, vars(library_utils).get("is_impure"))


def _objects() -> dict:
    import torch

    sym_types, _, node, accessor, _, _ = _names()
    return {"node_type": node, "sym_types": sym_types, "hop_type": torch._ops.HigherOrderOperator,
            "is_accessor": accessor}


def _mismatch(node: Any, got: bool, want: bool) -> None:
    from fastfake.parity.crosscheck import CrosscheckError

    raise CrosscheckError(f"fastfake: the C impure_pred answered {got} for {node.format_node()}, stock's {want}")


def _crosschecked(fast: Any, stock: Any) -> Any:
    def pred(node: Any) -> bool:
        got, want = fast(node), stock(node)
        if got is not want:
            _mismatch(node, got, want)
        return got

    return pred


def _wrapper(stock: Any) -> Any:
    @functools.wraps(stock)
    def eliminate_dead_code(self: Any, is_impure_node: Any = None) -> bool:
        st = _STATE
        if (st.get("on") and getattr(is_impure_node, "__code__", None) is st["code"]
                and all(a is b for a, b in zip(_names(), st["names"]))):
            fast = _C.dce_pred_new(is_impure_node)
            is_impure_node = _crosschecked(fast, is_impure_node) if st.get("crosscheck") else fast
        return stock(self, is_impure_node)

    eliminate_dead_code.__fastfake__ = True  # type: ignore[attr-defined]
    return eliminate_dead_code


def available() -> bool:
    try:
        import torch._library.utils  # noqa: F401
        from torch.fx.experimental import proxy_tensor as pt  # noqa: F401
    except ImportError:
        return False
    graph = _graph_class()
    if not stock_or_ours(graph, "eliminate_dead_code", _STATE.get("method")):
        return False
    names = _names()
    if _pred_code() is None or any(n is None for n in names) or names[1] is not __import__("torch").fx:
        return False
    return _compat.dce_pred_proven()


def _setup() -> Any:
    if "method" not in _STATE:
        if not _C.setup_dce_pred(_objects()):
            raise RuntimeError("fastfake: the C impure_pred could not bind stock's objects")
        _STATE.update(code=_pred_code(), names=_names(), method=_wrapper(_stock_method()))
    return _STATE["method"]


def is_installed() -> bool:
    return "method" in _STATE and vars(_graph_class()).get("eliminate_dead_code") is _STATE["method"]


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the wrapper put at
    ``Graph.eliminate_dead_code`` (on) or stock's method back (off)."""
    if not on and "method" not in _STATE:
        return
    if on and not available():
        return
    graph = _graph_class()
    method = _setup()
    if on:
        _STATE.update(on=True, crosscheck=crosscheck)
        _C.dce_pred_enable(True)
        put(graph, "eliminate_dead_code", method, True)
    else:
        _STATE.update(on=False, crosscheck=False)
        _C.dce_pred_enable(False)
        put(graph, "eliminate_dead_code", method, False)
