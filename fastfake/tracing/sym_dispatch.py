"""The proxy mode's SymNode dispatch in C (``sym_dispatch``).

Under make_fx (AOTAutograd's trace, export) every SymNode operation on traced
SymInts -- ``SymNode.<op>`` built by ``sym_node._make_node_magic`` -- finds a proxy
mode and calls ``proxy_tensor.handle_sym_dispatch(op, args, {})``: ``get_proxy_mode()``,
a ``disable_proxy_modes_tracing()`` context (a contextmanager over the generator
``_disable_infra_mode``: the proxy mode taken off the dispatch stack by
``_unset_infra_mode`` and put back by ``_push_mode`` in a ``finally``), then
``mode.__sym_dispatch__(op, [], args, {})``: the multiply-by-one peephole,
``op(*args)`` with tracing off, ``_sym_register(self.tracer, op, args, out)``.
Seven Python frames and a generator around each of the 7,996 SymNode operations of
a ``dynamic=True`` GPT-2 compile (about 5 % of its first compile by a sampling
profile, without the operation and its record).

``install()`` puts a function written in C (``csrc/tracing/sym_dispatch.cpp``) at
``proxy_tensor.handle_sym_dispatch`` (sym_node's callers import it from there at
every call). It serves the plain call -- positional ``(op, args, kwargs)``, an exact
tuple of arguments, an exact empty kwargs dict, no pre-dispatch proxy mode, a
dispatch mode of key PROXY that is exactly ``ProxyTorchDispatchMode`` with stock's
``__sym_dispatch__``, an exact int or bool where the peephole compares with 1, and
the module names it stands for still stock's (checked per call) -- with stock's
steps in stock's order: the mode taken off the stack by the binding stock calls,
the peephole or ``op(*args)`` and ``_sym_register`` (whatever the module holds:
fastfake's C record or stock's), the mode put back as ``_push_mode`` does in every
case, the body's error kept unless the push raises. Anything else is stock's
function, counted by reason.

Offered where that stock code is source-identical to a release it was proven on
(:data:`fastfake.common.compat.SYM_DISPATCH_SOURCES`; 2.9's ``__sym_dispatch__``
records with ``thunkify`` itself and compares with ``==``: not offered) and after
the install-time self-test (feature ``sym_dispatch``). ``FASTFAKE_DISABLE=sym_dispatch``
turns it off; with ``crosscheck=True`` every served call is checked against the
dispatch stack and the tracer afterwards (the same mode back on top of a stack of
the same length, the result of an operation recorded in the tracer).

Counters (``stats()``): ``sym_dispatch.served`` (``sym_dispatch.peephole`` of them
answered by the multiply-by-one peephole), ``sym_dispatch.stock.<reason>``
(``off``, ``arguments``, ``state`` (a name of the path rebound), ``pre_dispatch``,
``mode`` (no proxy mode, or not stock's class or method)).
"""
from __future__ import annotations

from typing import Any

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.common.originals import original, put, stock_or_ours

_FUNCTION: list = []

#: The names of each module the C path stands for or calls; a served call needs
#: each still bound to the object it had at setup.
PT_NAMES = ("get_proxy_mode", "disable_proxy_modes_tracing", "ProxyTorchDispatchMode", "operator", "torch")
OPS_NAMES = ("_get_dispatch_mode_pre_dispatch", "mode_stack_state_for_pre_dispatch",
             "_mode_stack_state_for_pre_dispatch", "_ModeStackStateForPreDispatch")
PD_NAMES = ("_disable_infra_mode", "_unset_infra_mode", "_push_mode", "_push_on_torch_dispatch_stack")
C_NAMES = ("_get_dispatch_mode", "_unset_dispatch_mode", "_push_on_torch_dispatch_stack", "_TorchDispatchModeKey",
           "_len_torch_dispatch_stack")


def _pt():
    from torch.fx.experimental import proxy_tensor

    return proxy_tensor


def _stock() -> Any:
    return original(_pt(), "handle_sym_dispatch")


def _objects() -> dict:
    import operator

    import torch
    import torch._ops as ops
    from torch.utils import _python_dispatch as pd

    pt = _pt()
    mode_type = pt.ProxyTorchDispatchMode
    state_type = ops._ModeStackStateForPreDispatch
    c = vars(torch._C)
    return {
        "stock": _stock(), "pt_dict": vars(pt), "ops_dict": vars(ops), "pd_dict": vars(pd), "c_dict": c,
        "operator_dict": vars(operator),
        "pt_names": {n: vars(pt)[n] for n in PT_NAMES}, "ops_names": {n: vars(ops)[n] for n in OPS_NAMES},
        "pd_names": {n: vars(pd)[n] for n in PD_NAMES}, "c_names": {n: c[n] for n in C_NAMES},
        "operator_names": {"mul": operator.mul},
        "proxy_key": torch._C._TorchDispatchModeKey.PROXY, "mode_type": mode_type,
        "sym_dispatch": vars(mode_type)["__sym_dispatch__"], "state": ops._mode_stack_state_for_pre_dispatch,
        "state_type": state_type, "state_get": vars(state_type)["get"], "mul": operator.mul,
        "get_mode": c["_get_dispatch_mode"], "unset_mode": c["_unset_dispatch_mode"],
        "push_stack": c["_push_on_torch_dispatch_stack"], "push_mode": pd._push_mode,
        "len_stack": c["_len_torch_dispatch_stack"],
    }


def check(mode: Any, func: Any, args: tuple, out: Any, depth: int) -> bool:
    """crosscheck: after a served call the dispatch stack is as before it (the same
    length, the proxy mode back as the mode of key PROXY) and, where the operation
    ran (no peephole) and gave a sym value, the tracer holds its proxy slot."""
    import torch
    from fastfake.parity.crosscheck import CrosscheckError

    pt = _pt()
    why = []
    if torch._C._len_torch_dispatch_stack() != depth:
        why.append(f"the dispatch stack has {torch._C._len_torch_dispatch_stack()} modes, {depth} before")
    if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY) is not mode:
        why.append("the proxy mode is not back on the stack")
    ran = not any(out is a for a in args)
    if ran and isinstance(out, pt.py_sym_types):  # (a lazy record is a slot too)
        if out not in mode.tracer.symnode_tracker:
            why.append(f"{func}'s result has no proxy slot")
    if why:
        raise CrosscheckError(f"fastfake: the C handle_sym_dispatch served {func}, but: {', '.join(why)}")
    return True


def available() -> bool:
    try:
        pt = _pt()
        import torch._ops as ops
        from torch.utils import _python_dispatch as pd
    except ImportError:
        return False
    if not stock_or_ours(pt, "handle_sym_dispatch", _FUNCTION[0] if _FUNCTION else None):
        return False
    import torch

    if any(n not in vars(pt) for n in PT_NAMES) or any(n not in vars(ops) for n in OPS_NAMES) or \
            any(n not in vars(pd) for n in PD_NAMES) or any(n not in vars(torch._C) for n in C_NAMES):
        return False
    # (`if not mode`: a mode of the class is always true)
    if any("__bool__" in vars(c) or "__len__" in vars(c) for c in pt.ProxyTorchDispatchMode.__mro__):
        return False
    return _compat.sym_dispatch_proven()


def _setup() -> Any:
    if not _FUNCTION:
        if not _C.setup_sym_dispatch(_objects()):
            raise RuntimeError("fastfake: the C handle_sym_dispatch could not bind stock's objects")
        _FUNCTION.append(_C.sym_dispatch_function())
    return _FUNCTION[0]


def is_installed() -> bool:
    return bool(_FUNCTION) and vars(_pt()).get("handle_sym_dispatch") is _FUNCTION[0]


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the C function put at
    ``proxy_tensor.handle_sym_dispatch`` (on) or stock's back (off)."""
    if not on and not _FUNCTION:
        return
    if on and not available():
        return
    pt = _pt()
    fn = _setup()
    if on:
        _C.set_sym_dispatch_check(check if crosscheck else None)
        _C.sym_dispatch_enable(True)
        put(pt, "handle_sym_dispatch", fn, True)
    else:
        _C.sym_dispatch_enable(False)
        _C.set_sym_dispatch_check(None)
        put(pt, "handle_sym_dispatch", fn, False)
