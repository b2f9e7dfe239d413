"""Which stock functions an acceleration stands in for: the lists whose sources
``fastfake.common.compat`` digests (the proof that the running release is one the
acceleration was proven on) and the accelerations themselves use. Imports nothing of
fastfake but the record of originals.
"""
from __future__ import annotations

from fastfake.common.originals import ORIGINALS


def symnode_binary_methods() -> list[tuple[str, str, object]]:
    """(attribute, method, stock function) of every SymNode method stock builds from
    ``binary_magic_impl``, ``mod`` excepted."""
    from torch.fx.experimental import sym_node as sn

    out = []
    trailing = getattr(sn, "magic_methods_on_operator_with_trailing_underscore", set())
    for method in getattr(sn, "magic_methods", {}):
        if method == "mod" or method not in getattr(sn, "METHOD_TO_OPERATOR", {}):
            continue
        attr = f"_{method}_" if method in trailing else f"_{method}"
        fn = vars(sn.SymNode).get(attr)
        inner = getattr(fn, "__wrapped__", None)
        if getattr(inner, "__name__", None) != "binary_magic_impl":
            continue
        out.append((attr, method, fn))
    return out


def fake_prop_functions() -> list[object]:
    """The stock functions ``fastfake.tracing.fake_prop.run_node`` stands for (their source
    is what ``_compat.fake_prop_source_digest`` hashes): stock's
    ``FakeTensorProp.run_node`` (the original while fastfake's is in place), the
    ``Interpreter`` methods it reaches, the unbacked-binding helpers, ``snapshot_fake``."""
    from torch.fx import interpreter, traceback
    from torch.fx.experimental import proxy_tensor, symbolic_shapes
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    I = interpreter.Interpreter
    return [
        ORIGINALS.get((FakeTensorProp, "run_node")) or vars(FakeTensorProp)["run_node"],
        I.run_node,
        getattr(I._set_current_node, "__wrapped__", I._set_current_node),
        getattr(traceback.set_current_meta, "__wrapped__", traceback.set_current_meta),
        I.fetch_args_kwargs_from_env,
        I.map_nodes_to_values,
        I.call_function,
        I.placeholder,
        proxy_tensor.snapshot_fake,
        symbolic_shapes.rebind_unbacked,
        symbolic_shapes.resolve_unbacked_bindings,
    ]


def pytree_functions() -> list[object]:
    """The stock functions ``csrc/tracing/pytree.cpp`` stands for (fastfake/tracing/pytree.py):
    ``tree_map_only`` and ``map_only``, ``tree_map``, ``tree_flatten``, ``tree_leaves``
    and ``tree_iter``, what decides a leaf, ``TreeSpec.unflatten`` and the tuple, list
    and dict entries of the registry. Read from ``torch.utils._pytree`` itself, which
    fastfake never patches."""
    import torch.utils._pytree as p

    return [p.tree_map_only, p.map_only, p.tree_map, p.tree_flatten, p.tree_leaves, p.tree_iter,
            p.tree_is_leaf, p._get_node_type, p.is_namedtuple_class, p.TreeSpec.unflatten,
            p._tuple_flatten, p._tuple_unflatten, p._list_flatten, p._list_unflatten,
            p._dict_flatten, p._dict_unflatten]


def pytree_fx_containers() -> list[object]:
    """FX's ``immutable_list`` / ``immutable_dict`` (the classes: they inherit
    iteration, ``values`` and ``keys``) and the flatten functions registered for them,
    which ``tree_leaves`` / ``tree_iter`` in C flatten as list and dict."""
    from torch.fx import immutable_collections as ic

    return [ic.immutable_list, ic.immutable_dict, ic._immutable_list_flatten, ic._immutable_dict_flatten]


def store_functions() -> list[object]:
    """The stock code the learned-record store (fastfake/store/records.py) relies on:
    ``_cached_dispatch_impl`` (key, lookup, hit, miss and their counters), the hit's
    output builders, the cache's store function and key (the originals while
    fastfake's wrappers are in place)."""
    from torch._subclasses import fake_tensor as ft

    M = ft.FakeTensorMode

    def stock(name: str) -> object:
        return ORIGINALS.get((M, name)) or vars(M)[name]

    return [stock("_cached_dispatch_impl"), stock("_output_from_cache_entry"),
            M._get_output_tensor_from_cache_entry, ft._set_cache_key, ft._DispatchCacheKey.__init__,
            ft._DispatchCacheKey.__eq__, ft._DispatchCacheKey.__hash__]


def funcnames_functions() -> list[object]:
    """The stock code fastfake/store/funcnames.py runs and stands for: Dynamo's
    ``funcname_cache._add_file`` (stock's own, also while fastfake's is in place) and
    ``get_funcname``, and ``tokenize.open``, which fastfake's shim reproduces on bytes
    already read."""
    import tokenize

    from torch._dynamo import funcname_cache

    add_file = ORIGINALS.get((funcname_cache, "_add_file")) or funcname_cache.__dict__["_add_file"]
    return [add_file, funcname_cache.get_funcname, tokenize.open]


def config_attr_functions() -> list[object]:
    """The stock code csrc/tracing/config_attr.cpp answers for: ``ConfigModule.__getattr__``
    and the helpers it calls for a plain entry."""
    from torch.utils._config_module import ConfigModule

    d = vars(ConfigModule)
    return [d["__getattr__"], d["_warn_if_deprecated"], d["_get_alias_val"], d["_get_alias_module_and_name"]]


def opaque_value_test() -> tuple[str, str]:
    """The names of the test ``proxy_tensor``'s ``get_proxy_slot`` / ``extract_val``
    ask whether a value is an opaque object with (a name of ``proxy_tensor``), and
    of the type test it calls (a name of ``torch._library.opaque_object``):
    ``is_opaque_value`` / ``is_opaque_type`` on 2.13; 2.14 renamed opaque types
    custom classes (``is_custom_class_obj`` / ``is_custom_class``, the same
    registry, ``_OPAQUE_TYPES``, read the same way)."""
    from torch.fx.experimental import proxy_tensor

    if "is_custom_class_obj" in vars(proxy_tensor):
        return "is_custom_class_obj", "is_custom_class"
    return "is_opaque_value", "is_opaque_type"


def sym_register_functions() -> list[object]:
    """The stock code csrc/tracing/sym_register.cpp stands for: ``_sym_register`` and
    what its plain call runs (``thunkify``, ``_compute_proxy``, ``get_proxy_slot``,
    ``set_meta``, ``extract_val``, ``is_fake`` (and 2.14's ``is_fake_tensor``),
    ``_enable_thunkify``, the opaque-value test a SymInt passes through (by its
    release's name: :func:`opaque_value_test`),
    ``_SymNodeDict.get`` and ``Thunk``; ``set_proxy_slot``, ``_SymNodeDict``'s
    ``__contains__`` / ``__setitem__`` and the logger's ``debug`` / ``isEnabledFor``
    its SymInt branch in C stands for)."""
    import logging

    from torch._library import opaque_object
    from torch._subclasses import fake_tensor
    from torch.fx.experimental import proxy_tensor as pt
    from torch.utils import _python_dispatch as pd
    from torch.utils import _thunk

    value_test, type_test = opaque_value_test()
    fake_test = [fake_tensor.is_fake_tensor] if hasattr(fake_tensor, "is_fake_tensor") else []  # (2.14+)
    return [
        pt._sym_register, pt.thunkify, pt._compute_proxy, pt.get_proxy_slot, pt.set_meta, pt.extract_val,
        pt.is_fake, *fake_test, pd.is_traceable_wrapper_subclass, pt._enable_thunkify.__wrapped__,
        vars(pt)[value_test], vars(opaque_object)[type_test], opaque_object._resolve_opaque_type_info,
        vars(pt._SymNodeDict)["get"], vars(_thunk.Thunk)["__init__"], vars(_thunk.Thunk)["force"],
        pt.set_proxy_slot, vars(pt._SymNodeDict)["__contains__"], vars(pt._SymNodeDict)["__setitem__"],
        logging.Logger.debug, logging.Logger.isEnabledFor,
    ]


def sym_dispatch_functions() -> list[object]:
    """The stock code csrc/tracing/sym_dispatch.cpp stands for:
    ``handle_sym_dispatch`` and what its plain call runs (``get_proxy_mode``, the
    pre-dispatch state's reader and ``get``, ``disable_proxy_modes_tracing`` and the
    ``_disable_infra_mode`` / ``_unset_infra_mode`` / ``_push_mode`` it enters and
    leaves, ``ProxyTorchDispatchMode.__sym_dispatch__``)."""
    import torch._ops as ops
    from torch.fx.experimental import proxy_tensor as pt
    from torch.utils import _python_dispatch as pd

    return [
        pt.handle_sym_dispatch, pt.get_proxy_mode, pt.disable_proxy_modes_tracing.__wrapped__,
        vars(pt.ProxyTorchDispatchMode)["__sym_dispatch__"], pd._disable_infra_mode, pd._unset_infra_mode,
        pd._push_mode, ops._get_dispatch_mode_pre_dispatch, ops.mode_stack_state_for_pre_dispatch,
        vars(ops._ModeStackStateForPreDispatch)["get"], vars(ops._ModeStackStateForPreDispatch)["__init__"],
    ]


def dce_pred_functions() -> list[object]:
    """The stock code csrc/tracing/dce_pred.cpp stands for: ``dispatch_trace`` (its
    ``impure_pred``), ``Node.is_impure`` and the ``is_impure`` of torch._library.utils
    it calls, ``is_accessor_node``, the ``args`` property, and the elimination's
    loop and ``erase_node`` (what runs between two questions)."""
    import torch._library.utils as library_utils
    from torch.fx import graph as fx_graph
    from torch.fx import node as fx_node
    from torch.fx.experimental import proxy_tensor as pt
    from torch.fx.experimental import symbolic_shapes

    return [
        pt.dispatch_trace.__wrapped__, vars(fx_node.Node)["is_impure"], library_utils.is_impure,
        symbolic_shapes.is_accessor_node, vars(fx_node.Node)["args"].fget,
        vars(fx_graph.Graph)["eliminate_dead_code"], vars(fx_graph.Graph)["erase_node"],
    ]


def fx_node_functions() -> list[object]:
    """The stock code csrc/tracing/fx_node.cpp stands for: make_fx's tracer's
    ``create_node`` and what its plain call runs (``TracerBase.create_node``,
    ``Graph.create_node``, the namespace's ``create_name``, ``_target_to_str``,
    ``_snake_case``, ``owning_module``, ``_get_seq_nr`` and the node-meta context's
    readers, ``_should_save_eager_input_vals``), what the two direct writes stand
    for (``Node.__setattr__``, the ``stack_trace`` property, the lookup table's
    ``__contains__`` / ``insert`` / ``remove`` / ``_key``; ``Logger.debug`` and
    ``isEnabledFor``) and ``copy.copy``."""
    import copy
    import logging

    from torch.fx import graph as fx_graph
    from torch.fx import node as fx_node
    from torch.fx import proxy as fx_proxy
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental import proxy_tensor as pt

    table = vars(fx_graph._FindNodesLookupTable)
    stack_trace = vars(fx_node.Node)["stack_trace"]
    return [
        vars(pt.PythonKeyTracer)["create_node"], vars(fx_proxy.TracerBase)["create_node"],
        vars(fx_graph.Graph)["create_node"], vars(fx_graph._Namespace)["create_name"],
        vars(fx_graph.Graph)["_target_to_str"], fx_graph._snake_case, vars(fx_graph.Graph)["owning_module"].fget,
        table["_key"], table["__contains__"], table["insert"], table["remove"],
        vars(fx_node.Node)["__setattr__"], stack_trace.fget, stack_trace.fset,
        fx_proxy._get_seq_nr, fx_traceback.has_preserved_node_meta, fx_traceback.get_current_meta,
        fx_traceback.get_current_replay_node, fx_traceback._is_preserving_node_seq_nr,
        pt._should_save_eager_input_vals, logging.Logger.debug, logging.Logger.isEnabledFor, copy.copy,
    ]


def functional_dispatch_functions() -> list[object]:
    """The stock code csrc/tracing/functional_dispatch.cpp stands for: the functional
    mode's ``__torch_dispatch__`` (stock's own, also while fastfake's is in place) and
    everything it calls on the plain path or that the C method's proof of a no-op
    reads (the mode's enter / exit, ``decompose``, the effect registry, the sync of a
    FunctionalTensor, the replay-node context)."""
    from torch._subclasses import functional_tensor as ft

    if "_can_decompose_fast" not in vars(ft):
        return _functional_dispatch_functions_2_9()
    import torch
    import torch._compile
    from torch._dynamo import eval_frame
    from torch._higher_order_ops import auto_functionalize, effects
    from torch._library import effects as library_effects
    from torch._library import simple_registry
    from torch._library import utils as library_utils
    from torch.fx import traceback as fx_traceback
    from torch.utils import _python_dispatch as pd

    mode = ft.FunctionalTensorMode
    dispatch = ORIGINALS.get((mode, "__torch_dispatch__")) or vars(mode)["__torch_dispatch__"]
    d = vars(mode)
    tdm = vars(pd.TorchDispatchMode)
    return [
        dispatch, d["__init__"], d["__enter__"], d["__exit__"], d["_sync_view_replay_annotations"],
        d["_can_decompose"], ft._can_decompose_fast.__wrapped__, ft._has_unrecognized_tensor_types,
        ft._assert_functionalize_not_active, vars(ft.FunctionalTensor)["__new__"],
        tdm["__init__"], tdm["__enter__"], tdm["__exit__"], tdm["_lazy_init_old_dispatch_mode_flags"],
        pd._push_mode, pd._pop_mode, pd.autograd_would_have_decomposed, pd.return_and_correct_aliasing,
        pd._correct_storage_aliasing, pd.get_alias_info.__wrapped__,
        vars(torch._ops.OpOverload)["decompose"], effects.has_effects, effects.has_aliasing, effects._get_effect,
        effects._get_op_qualname, vars(simple_registry.SimpleLibraryRegistry)["find"],
        vars(library_effects.EffectHolder)["effect"].fget, auto_functionalize.can_auto_functionalize,
        library_utils.is_builtin, torch._utils._functionalize_sync,
        fx_traceback.set_current_replay_node.__wrapped__,
        # the torch._disable_dynamo wrapper around stock's method
        vars(pd.TorchDispatchMode)["__init_subclass__"], torch._compile._disable_dynamo,
        vars(eval_frame.DisableContext)["__call__"], eval_frame._callback_from_stance,
    ]


def _functional_dispatch_functions_2_9() -> list[object]:
    """The same for the functional mode of 2.9's layout (no ``_can_decompose_fast``):
    its ``_can_decompose`` is a closure inside the method (every op decomposes outside
    export), effects are ``effects.SIDE_EFFECTS`` and ScriptObject arguments, the
    method has no ``_disable_dynamo`` wrapper and no view-replay sync, and the mode's
    enter / exit set no compile-internals flag."""
    import torch
    from torch._decomp import _should_decompose_because_unsafe_op
    from torch._higher_order_ops import auto_functionalize, effects
    from torch._subclasses import functional_tensor as ft
    from torch.utils import _python_dispatch as pd

    mode = ft.FunctionalTensorMode
    dispatch = ORIGINALS.get((mode, "__torch_dispatch__")) or vars(mode)["__torch_dispatch__"]
    d = vars(mode)
    tdm = vars(pd.TorchDispatchMode)
    return [
        dispatch, d["__init__"], d["__enter__"], d["__exit__"], vars(ft.FunctionalTensor)["__new__"],
        tdm["__init__"], tdm["__enter__"], tdm["__exit__"], tdm["_lazy_init_old_dispatch_mode_flags"],
        pd._push_mode, pd._pop_mode, pd.return_and_correct_aliasing, pd._correct_storage_aliasing,
        vars(torch._ops.OpOverload)["decompose"], effects.has_effects, effects.has_aliasing,
        effects.get_effect_key, auto_functionalize.can_auto_functionalize, _should_decompose_because_unsafe_op,
    ]


def proxy_dispatch_functions() -> list[object]:
    """The stock code csrc/tracing/proxy_dispatch.cpp stands for: the proxy mode's
    ``__torch_dispatch__`` (stock's own, also while fastfake's is in place: the
    counting wrapper and the method), ``proxy_call`` and everything it does on the
    plain path or the C method's proof of a no-op reads (the decomposition checks,
    the mode's enter / exit, the proxy fetches, the output's tracking, the
    original-aten context, the node's name)."""
    import torch
    from torch.fx import graph as fx_graph
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental import proxy_tensor as pt
    from torch.fx.experimental import symbolic_shapes
    from torch.fx.passes import shape_prop
    from torch.utils import _python_dispatch as pd
    from torch.utils import _stats
    from torch.utils import _thunk

    mode = pt.ProxyTorchDispatchMode
    dispatch = ORIGINALS.get((mode, "__torch_dispatch__")) or vars(mode)["__torch_dispatch__"]
    d = vars(mode)
    tdm = vars(pd.TorchDispatchMode)
    # (2.9 has no autograd_would_have_decomposed: its proxy_call asks decompose of every op)
    would_decompose = [pd.autograd_would_have_decomposed] if "autograd_would_have_decomposed" in vars(pd) else []
    return [
        dispatch, dispatch.__wrapped__, _stats.count, d["__init__"], d["__enter__"], d["__exit__"],
        pt.set_original_aten_op.__wrapped__, fx_traceback.has_preserved_node_meta, pt.proxy_call,
        pt.maybe_handle_decomp, *would_decompose, vars(torch._ops.OpOverload)["decompose"],
        vars(torch._ops.OpOverload)["__call__"], pt._fetch_proxies_and_all_constant_flag, pt.fetch_object_proxy,
        pt.get_proxy_slot, pt.track_tensor_tree, pt.track_tensor, pt.set_meta, pt.extract_val, pt.is_fake,
        pt._set_unbacked_bindings, symbolic_shapes.compute_unbacked_bindings, pt._enable_thunkify.__wrapped__,
        pt._maybe_record_pointwise_barrier, shape_prop._extract_tensor_metadata,
        tdm["__init__"], tdm["__enter__"], tdm["__exit__"], tdm["_lazy_init_old_dispatch_mode_flags"],
        pd._unset_infra_mode, pd._push_mode, pd._pop_mode, vars(fx_graph.Graph)["_target_to_str"],
        fx_graph._snake_case, fx_graph._is_magic,
        # a symbolic output's SymInt slots (track_tensor's try_set_proxy_slot)
        pt.set_proxy_slot, pt.thunkify, pt.is_sparse_any, vars(pt._SymNodeDict)["__contains__"],
        vars(pt._SymNodeDict)["__setitem__"], vars(pt._SymNodeDict)["__init__"], vars(_thunk.Thunk)["__init__"],
    # 2.14+: proxy_call's compile-on-one-rank test of a torch.device argument
    ] + ([pt._coor_enabled] if "_coor_enabled" in vars(pt) else [])
