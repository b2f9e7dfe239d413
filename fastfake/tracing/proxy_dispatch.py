"""The proxy mode's per-op dispatch in C (``proxy_dispatch``).

make_fx -- so AOTAutograd's joint trace and ``torch.export`` -- records every op
through ``ProxyTorchDispatchMode`` (torch/fx/experimental/proxy_tensor.py). Stock's
``__torch_dispatch__`` is Python from end to end: a call counter, the original-aten
context, and ``proxy_call``: a pytree flatten of the arguments and a type check of
every tensor, the decomposition table, ``autograd_would_have_decomposed`` (for an op
the device's backend has no kernel for, the mode entered and left around a
``decompose`` that answers NotImplemented), a tracker lookup per tensor and the
proxies of SymInt arguments, a pytree unflatten, the node's name, the tracer's
``create_proxy``, the op run with thunkification on, then ``track_tensor_tree``
(the unbacked bindings, the proxy slot, the node's ``val`` and ``tensor_meta``) and
the pointwise barrier.

``install()`` puts a method written in C (``csrc/tracing/proxy_dispatch.cpp``) at
``ProxyTorchDispatchMode.__torch_dispatch__``. It serves a call whose answers are
the plain ones -- the exact mode class, not pre-dispatch; an OpOverload that is no
metadata query, not ``is_nonzero`` or ``lift_fresh``, has no
``data_dependent_output`` tag and is not in the mode's decomposition table;
arguments of tensors of stock's ``HANDLED_TYPES`` and plain leaves in tuples and
lists, every tensor tracked without a constant; no decomposition -- doing stock's
steps in stock's order. What makes the graph stays stock's: the tracer's own
``create_proxy`` (names, arguments, every node meta), ``fetch_sym_proxy`` for a
SymInt argument, ``set_proxy_slot``, ``snapshot_fake`` and
``_extract_tensor_metadata`` for an output that is one strided FakeTensor (with
symbolic sizes: each SymInt size, stride, numel and offset whose node the tracer
does not know yet gets stock's ``set_proxy_slot`` with a thunk computing what
stock's lambda computes; where a torch-function mode is on, which would see
stock's reads of them, or proxy_tensor's debug log is shown, stock's function),
``track_tensor_tree`` for any other output, ``_maybe_record_pointwise_barrier``
where it can do something. ``prim.device`` is served as stock serves it. Every
other call is stock's method, counted by reason.

Offered where the stock code it stands for is source-identical to a release it was
proven on (:data:`fastfake.common.compat.PROXY_DISPATCH_SOURCES`), while the names
of ``proxy_tensor`` it relies on are still stock's (checked per call), and after the
install-time self-test (feature ``proxy_dispatch``). ``FASTFAKE_DISABLE=proxy_dispatch``
turns it off; with ``crosscheck=True`` stock's own predicates are asked about every
served call first.

Counters (``stats()``): ``proxy_dispatch.served``, ``proxy_dispatch.served.device``,
``proxy_dispatch.stock.<reason>`` (``mode``, ``op``, ``arguments``, ``decompose``,
``state``), ``proxy_dispatch.tracked_by_stock`` (served calls whose outputs stock's
``track_tensor_tree`` tracked: several outputs, a torch-function mode on),
``proxy_dispatch.tracked.symbolic`` (outputs with symbolic sizes tracked in C).
"""
from __future__ import annotations

from typing import Any

import torch

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.common.originals import original, put, stock_or_ours

_DESCRIPTOR: list = []

#: The names of ``proxy_tensor`` the C path calls or stands in for; a served call
#: needs each still bound to the object it had at setup. (``_extract_tensor_metadata``
#: is looked up at every call instead, as stock's ``set_meta`` looks it up: a
#: function rebound there, such as the benchmark's fixed memory-format order on 2.9,
#: is the one called, by stock and by the C path alike.)
MODULE_NAMES = (
    "proxy_call", "set_original_aten_op", "maybe_handle_decomp",
    "_fetch_proxies_and_all_constant_flag", "fetch_object_proxy", "fetch_sym_proxy", "get_proxy_slot",
    "_enable_thunkify", "track_tensor_tree", "track_tensor", "set_meta", "extract_val", "is_fake",
    "snapshot_fake", "set_proxy_slot", "_set_unbacked_bindings",
    "_maybe_record_pointwise_barrier", "_ProxyTensor", "HANDLED_TYPES", "fx_traceback",
    "prim", "_unset_infra_mode", "thunkify", "is_sparse_any", "_SymNodeDict", "log",
)


def _module_names() -> tuple:
    """MODULE_NAMES and what the proven release adds (2.14+: ``_coor_enabled``; 2.13+:
    ``autograd_would_have_decomposed`` and the ``ORIGINAL_ATEN`` ContextVar; on 2.9
    ``ORIGINAL_ATEN`` is a global the method itself sets and clears, read per call)."""
    variant = _compat.proxy_dispatch_variant()
    return (MODULE_NAMES + (("_coor_enabled",) if variant["coor"] else ())
            + (() if variant["layout_2_9"] else ("autograd_would_have_decomposed", "ORIGINAL_ATEN")))


def _pt():
    from torch.fx.experimental import proxy_tensor

    return proxy_tensor


def _stock_method() -> Any:
    return original(_pt().ProxyTorchDispatchMode, "__torch_dispatch__")


def facts(func: Any) -> tuple | None:
    """What the C method needs to know of an op that cannot change: None where every
    call of it is stock's; else (the node name stock's ``Graph._target_to_str`` gives
    it, the schema name, the overload name)."""
    aten = torch.ops.aten
    if type(func) is not torch._ops.OpOverload:
        return None
    if func in (aten.size.default, aten.stride.default, aten.storage_offset.default, aten.is_nonzero.default,
                aten.lift_fresh.default, aten.lift_fresh_copy.default, torch.ops.prim.device.default):
        return None
    if torch.Tag.data_dependent_output in func.tags:
        return None
    name = torch.fx.Graph._target_to_str(None, func.overloadpacket.__name__)  # (it reads no graph)
    schema = func._schema
    return (name, schema.name, schema.overload_name)


def sym_proxy(tracer: Any, e: Any) -> Any:
    """Stock's proxy (or constant) of a SymInt / SymFloat / SymBool argument."""
    return _pt().fetch_sym_proxy(tracer)(e)


def sym_slot_proxy(tracer: Any, op: Any, proxy: Any, x: Any, *index: int) -> Any:
    """What the thunk of a SymInt size / stride / numel / offset computes in stock's
    ``track_tensor`` when forced: the node of ``op(proxy, *index)``, ``x`` its val
    (stock's lambdas, with what they close over passed in)."""
    return _pt().set_meta(tracer.create_proxy("call_function", op, (proxy, *index), {}), x)


def check(mode: Any, func: Any, args: tuple, kwargs: dict) -> bool:
    """crosscheck: stock's own predicates say the call takes the plain path."""
    import torch.utils._pytree as pytree
    from torch.utils import _python_dispatch

    from fastfake.parity.crosscheck import CrosscheckError

    pt = _pt()
    why = []
    flat = pytree.tree_leaves((args, kwargs))
    layout_2_9 = _compat.proxy_dispatch_variant()["layout_2_9"]
    table = pt.CURRENT_DECOMPOSITION_TABLE if layout_2_9 else mode.decomposition_table
    if func in table:
        why.append("it is in the decomposition table")
    if any(isinstance(x, torch.Tensor) and type(x) not in pt.HANDLED_TYPES for x in flat):
        why.append("an argument is a tensor subclass")
    # (2.9's proxy_call asks decompose of every op)
    if (layout_2_9 or _python_dispatch.autograd_would_have_decomposed(func, flat)) and func._can_decompose():
        why.append("it decomposes")
    if torch.Tag.data_dependent_output in func.tags:
        why.append("it is data-dependent")
    for x in flat:
        if isinstance(x, torch.Tensor):
            entry = pt.get_proxy_slot(x, mode.tracer, None)
            if entry is None or entry.constant is not None:
                why.append("an argument is untracked or a constant")
                break
    name = mode.tracer.graph._target_to_str(func.overloadpacket.__name__)
    if name != facts(func)[0]:
        why.append(f"the graph names it {name}")
    if why:
        raise CrosscheckError(f"fastfake: the proxy mode served {func} on the plain path, but: {', '.join(why)}")
    return True


def available() -> bool:
    try:
        pt = _pt()
        from torch._ops import _get_dispatch_mode_pre_dispatch  # noqa: F401
        from torch.fx import traceback as fx_traceback
        from torch.utils import _stats
    except ImportError:
        return False
    cls = getattr(pt, "ProxyTorchDispatchMode", None)
    if not isinstance(cls, type) or not isinstance(getattr(_stats, "simple_call_counter", None), dict):
        return False
    if not stock_or_ours(cls, "__torch_dispatch__", _DESCRIPTOR[0] if _DESCRIPTOR else None):
        return False
    if any(name not in vars(pt) for name in MODULE_NAMES):
        return False
    if not hasattr(fx_traceback, "has_preserved_node_meta") or not isinstance(getattr(fx_traceback, "current_meta", None), dict):
        return False
    if not _compat.proxy_dispatch_proven():
        return False
    variant = _compat.proxy_dispatch_variant()
    if variant["pyobj_dispatcher"] and "_pyobj_dispatcher" not in vars(torch.ops.aten.add.Tensor):
        return False
    if variant["layout_2_9"]:
        if type(vars(pt).get("CURRENT_DECOMPOSITION_TABLE")) is not dict:
            return False
    else:
        try:
            from torch._C._dynamo.guards import set_is_in_mode_without_ignore_compile_internals  # noqa: F401
        except ImportError:
            return False
    return all(name in vars(pt) for name in _module_names())


def _setup() -> Any:
    if not _DESCRIPTOR:
        import functools

        from torch._ops import _get_dispatch_mode_pre_dispatch
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.fx import traceback as fx_traceback
        from torch.utils import _python_dispatch, _stats
        from torch.utils._thunk import Thunk

        aten = torch.ops.aten
        pt = _pt()
        layout_2_9 = _compat.proxy_dispatch_variant()["layout_2_9"]
        if layout_2_9:
            set_flag = None  # (2.9's enter / exit set no compile-internals flag in C)
        else:
            from torch._C._dynamo.guards import set_is_in_mode_without_ignore_compile_internals as set_flag
        stock = _stock_method()
        inner = getattr(stock, "__wrapped__", None)
        if inner is None:
            raise RuntimeError("fastfake: stock's ProxyTorchDispatchMode.__torch_dispatch__ is not the counted method")
        _C.setup_proxy_dispatch({
            "mode_type": pt.ProxyTorchDispatchMode, "stock": stock, "facts": facts, "sym_proxy": sym_proxy,
            "module_dict": vars(pt), "module_names": {name: vars(pt)[name] for name in _module_names()},
            "stats_dict": vars(_stats), "counter_key": inner.__qualname__, "traceback_dict": vars(fx_traceback),
            "has_preserved": fx_traceback.has_preserved_node_meta,
            # (2.13+: a ContextVar; 2.9: None, the global's value, read and set in the module's dict)
            "original_aten": pt.ORIGINAL_ATEN,
            "device_op": torch.ops.prim.device.default, "handled_types": tuple(pt.HANDLED_TYPES),
            "fake_type": FakeTensor, "proxy_type": torch.fx.Proxy,
            "sym_types": (torch.SymInt, torch.SymFloat, torch.SymBool), "op_type": torch._ops.OpOverload,
            "target_to_str": vars(torch.fx.Graph)["_target_to_str"], "dispatch_dict": vars(_python_dispatch),
            "set_flag": set_flag,
            "cia_key": torch._C.DispatchKey.CompositeImplicitAutograd,
            "pre_dispatch_proxy": functools.partial(_get_dispatch_mode_pre_dispatch,
                                                    torch._C._TorchDispatchModeKey.PROXY),
            "thunk_type": Thunk, "partial": functools.partial, "sym_slot_proxy": sym_slot_proxy,
            "sym_ops": (aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
                        aten.sym_storage_offset.default),
            "disabled_torch_function": torch._C._disabled_torch_function_impl,
            "pyobj_dispatcher": _compat.proxy_dispatch_variant()["pyobj_dispatcher"],
            "layout_2_9": layout_2_9,
        })
        _DESCRIPTOR.append(_C.proxy_dispatch_function())
    return _DESCRIPTOR[0]


def is_installed() -> bool:
    return bool(_DESCRIPTOR) and vars(_pt().ProxyTorchDispatchMode).get("__torch_dispatch__") is _DESCRIPTOR[0]


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the C method put at
    ``ProxyTorchDispatchMode.__torch_dispatch__`` (on) or stock's back (off)."""
    if not on and not _DESCRIPTOR:
        return
    if on and not available():
        return
    cls = _pt().ProxyTorchDispatchMode
    descriptor = _setup()
    if on:
        _C.set_proxy_dispatch_check(check if crosscheck else None)
        _C.proxy_dispatch_enable(True)
        put(cls, "__torch_dispatch__", descriptor, True)
    else:
        _C.proxy_dispatch_enable(False)
        _C.set_proxy_dispatch_check(None)
        _C.proxy_dispatch_clear()
        put(cls, "__torch_dispatch__", descriptor, False)
