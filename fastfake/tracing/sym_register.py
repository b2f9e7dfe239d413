"""The proxy mode's record of a traced SymNode operation in C (``sym_register``).

Under make_fx (AOTAutograd's trace, export) each SymNode operation on traced
SymInts -- a decomposition's size arithmetic, a view's computed shape, and up to
torch 2.14 the storage size of every FunctionalTensor wrapper -- goes through the
proxy mode's ``__sym_dispatch__`` into ``proxy_tensor._sym_register(tracer, func,
args, out)``. Outside ``_enable_thunkify`` (where these run) stock's ``thunkify``
computes ``_compute_proxy`` at once: each symbolic argument's proxy slot looked up
(``get_proxy_slot``) and forced, the tracer's ``create_node``, an ``fx.Proxy``,
``set_meta`` (the node's ``val``; a context entered and left), then
``set_proxy_slot(out, tracer, Thunk(lambda: r))``: five Python functions, two
context-manager frames and a generator per operation, 7,996 of them in a
``dynamic=True`` GPT-2 compile (0.6-0.9 s of a 3.4 s first compile, timed without
a profiler).

``install()`` puts a function written in C (``csrc/tracing/sym_register.cpp``) at
``proxy_tensor._sym_register`` (both of stock's callers look it up there; so does
fastfake's own replay of a FunctionalTensor storage size, fastfake/tracing/functional.py).
It does the plain call in stock's order -- an exact SymInt / SymFloat / SymBool
result, thunkification off, a tuple of arguments that is not ``torch.sym_sum``'s one
list, each symbolic argument of an exact sym type whose node the tracer's
``_SymNodeDict`` holds as a ``Thunk``, no sym type registered as an opaque type --
with the tracer's own ``create_node`` (every node meta stock's), stock's
already-computed thunk, and ``set_proxy_slot``'s SymInt branch done in C (the
tracker's entry by the SymNode unless it has one, the ``sympy_expr_tracker`` entry
of a result that is a Symbol; stock's function where its debug log is on). Anything else is stock's
function, counted by reason (a lazy thunk under ``_enable_thunkify``, an
argument the tracer does not know, ...); a result of no sym type is nothing, as in
stock.

Offered where that stock code is source-identical to a release it was proven on
(:data:`fastfake.common.compat.SYM_REGISTER_SOURCES`), while the names of
``proxy_tensor`` it stands for are still stock's (checked per call), and after the
install-time self-test (feature ``sym_register``). ``FASTFAKE_DISABLE=sym_register``
turns it off; with ``crosscheck=True`` every served record is compared with what
stock's functions answer for it.

Counters (``stats()``): ``sym_register.served``, ``sym_register.not_sym`` (a result
of no sym type: nothing to record), ``sym_register.stock.<reason>`` (``lazy``,
``arguments``, ``untracked``, ``opaque``, ``state``, ``off``).
"""
from __future__ import annotations

from typing import Any

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.common import stock_sources as _stock_sources
from fastfake.common.originals import original, put, stock_or_ours

_FUNCTION: list = []

#: The names of ``proxy_tensor`` the C path stands for or calls; a served call needs
#: each still bound to the object it had at setup. (The opaque-value test's, by
#: release, is added by :func:`module_names`.)
MODULE_NAMES = (
    "thunkify", "_compute_proxy", "get_proxy_slot", "set_proxy_slot", "set_meta", "extract_val", "is_fake",
    "_enable_thunkify", "py_sym_types", "Thunk", "fx", "_SymNodeDict", "_SympyExprTrackerValue", "_AnyScriptObject",
)


def module_names() -> tuple:
    return (*MODULE_NAMES, _stock_sources.opaque_value_test()[0])


def _pt():
    from torch.fx.experimental import proxy_tensor

    return proxy_tensor


def _stock() -> Any:
    return original(_pt(), "_sym_register")


def computed_thunk_function(thunk_type: type) -> Any:
    """``r -> Thunk(lambda: r)``: the thunk stock's ``thunkify`` returns once it has
    computed ``r``."""

    def computed(r: Any) -> Any:
        return thunk_type(lambda: r)

    return computed


def check(tracer: Any, func: Any, args: tuple, out: Any, node: Any) -> bool:
    """crosscheck: stock's own functions on the served record: the node is a
    call_function of ``func`` on the arguments' proxies (get_proxy_slot, forced) whose
    ``val`` is the result, and the result's proxy slot is set."""
    from fastfake.parity.crosscheck import CrosscheckError

    pt = _pt()
    why = []
    want = tuple(pt.get_proxy_slot(a, tracer).force().node if isinstance(a, pt.py_sym_types) else a for a in args)
    if node.op != "call_function" or node.target is not func or node.args != want or node.kwargs != {}:
        why.append(f"the node is {node.format_node()}, stock's arguments {want}")
    if node.meta.get("val") is not out:
        why.append("its val is not the result")
    if tracer.enable_thunkify:
        why.append("thunkification was on")
    slot = tracer.symnode_tracker.get(out)
    if slot is None:  # (get_proxy_slot would build one from the expression)
        why.append("the result has no proxy slot")
    import sympy

    if slot is not None and isinstance(out.node.expr, sympy.Symbol):
        entry = tracer.sympy_expr_tracker.get(out.node.expr)
        if entry is None:  # (an earlier SymInt of the Symbol may hold it: first slot wins)
            why.append("the result's Symbol has no sympy_expr_tracker entry of its slot")
    if why:
        raise CrosscheckError(f"fastfake: the C _sym_register recorded {func} on the plain path, but: {', '.join(why)}")
    return True


def _opaque_registry(opaque_object: Any) -> tuple:
    """(the dict the opaque-type registry keeps its classes in, the keys it would hold
    for SymInt, SymFloat, SymBool and ``object``), or (None, None) where the
    registry is of another kind (then not offered)."""
    import weakref

    import torch

    types = getattr(opaque_object, "_OPAQUE_TYPES", None)
    classes = (torch.SymInt, torch.SymFloat, torch.SymBool, object)
    if type(types) is weakref.WeakKeyDictionary and type(types.data) is dict:
        return types.data, tuple(weakref.ref(c) for c in classes)  # (WeakKeyDictionary.__contains__)
    if type(types) is dict:
        return types, classes
    return None, None


def available() -> bool:
    try:
        pt = _pt()
        from torch._library import opaque_object
        from torch.utils._thunk import Thunk  # noqa: F401
    except ImportError:
        return False
    if not stock_or_ours(pt, "_sym_register", _FUNCTION[0] if _FUNCTION else None):
        return False
    if any(name not in vars(pt) for name in module_names()):
        return False
    if _opaque_registry(opaque_object)[0] is None:
        return False
    return _compat.sym_register_proven()


def _setup() -> Any:
    if not _FUNCTION:
        import torch
        from torch._library import opaque_object
        from torch.utils._thunk import Thunk

        pt = _pt()
        registry, keys = _opaque_registry(opaque_object)
        _C.setup_sym_register(
            _stock(), vars(pt), {name: vars(pt)[name] for name in module_names()}, vars(torch.fx),
            (torch.SymInt, torch.SymFloat, torch.SymBool), pt._SymNodeDict, Thunk, torch.fx.Proxy,
            pt.set_proxy_slot, computed_thunk_function(Thunk), registry, keys)
        import logging

        import sympy

        _C.setup_sym_register_slot(sympy.Symbol, pt._SympyExprTrackerValue, logging.Logger)
        _FUNCTION.append(_C.sym_register_function())
    return _FUNCTION[0]


def is_installed() -> bool:
    return bool(_FUNCTION) and vars(_pt()).get("_sym_register") is _FUNCTION[0]


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the C function put at
    ``proxy_tensor._sym_register`` (on) or stock's back (off)."""
    if not on and not _FUNCTION:
        return
    if on and not available():
        return
    pt = _pt()
    fn = _setup()
    if on:
        _C.set_sym_register_check(check if crosscheck else None)
        _C.sym_register_enable(True)
        put(pt, "_sym_register", fn, True)
    else:
        _C.sym_register_enable(False)
        _C.set_sym_register_check(None)
        put(pt, "_sym_register", fn, False)
