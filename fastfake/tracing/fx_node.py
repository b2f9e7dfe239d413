"""make_fx's node creation in C (``fx_node``).

Every node make_fx records (AOTAutograd's trace, export) is made by the tracer's
``create_node``: ``PythonKeyTracer.create_node`` → ``TracerBase.create_node`` →
``Graph.create_node`` (the name from the target's ``__name__`` made unique by the
graph's namespace, the Node, its insertion and lookup-table entry; the tracer's
``node_name_to_scope``; under AOTAutograd's preserved node meta the stack trace,
the copied meta fields, the autograd sequence number; the debug logs;
``_should_save_eager_input_vals``): seven Python functions per node, 9,660 nodes in
a ``dynamic=True`` GPT-2 compile, most of them SymInt operations (a
FunctionalTensor's storage size up to torch 2.14) that dead-code elimination
removes at the end.

``install()`` puts a method written in C (``csrc/tracing/fx_node.cpp``) at
``PythonKeyTracer.create_node``. It serves the plain call -- the tracer exactly a
``PythonKeyTracer``, a ``call_function`` node of a builtin or Python function that
is no higher-order operator, or of an operator overload for which stock's
``_should_save_eager_input_vals`` answers False (asked before the node instead of
after it: a predicate of the op's tags), arguments of nodes and plain
leaves, the graph, namespace and lookup table of stock's classes, no creation
hooks, no mutable-operation check, no recorded stack traces, the names of the
modules it stands for still stock's -- with stock's steps in stock's order (Node,
the insert point and the lookup table's insert are stock's own code, called).
Anything else is stock's method, counted by reason; a subclass's ``super()`` call
reaches stock's method through it.

Offered where that stock code is source-identical to a release it was proven on
(:data:`fastfake.common.compat.FX_NODE_SOURCES`; 2.9's node creation is another
code) and after the install-time self-test (feature ``fx_node``).
``FASTFAKE_DISABLE=fx_node`` turns it off; with ``crosscheck=True`` stock's method
makes the same node on a copy of the tracer's state before every served call, and
the two nodes' names, arguments and metas (in order) must be equal.

Counters (``stats()``): ``fx_node.served``, ``fx_node.stock.<reason>`` (``off``,
``arguments``, ``tracer``, ``kind``, ``target``, ``state``, ``graph``, ``hooks``,
``sym`` (a raw SymInt argument: stock warns), ``mutable``, ``stack_traces``).
"""
from __future__ import annotations

import copy
from typing import Any, Callable

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.common.originals import original, put, stock_or_ours

_DESCRIPTOR: list = []

#: The names of each module the C path stands for or calls; a served call needs
#: each still bound to the object it had at setup. (Not ``torch.fx.graph.pytree``:
#: the raw-SymInt walk is done in C over containers whose leaves every pytree
#: module in place -- stock's, or fastfake's own ``pytree`` -- visits alike.)
GRAPH_NAMES = ("Node", "immutable_dict", "_name_regex", "_illegal_names", "_snake_case", "_Namespace",
               "_FindNodesLookupTable")
PROXY_NAMES = ("fx_traceback", "_COPY_META_FIELDS", "copy", "log", "annotation_log", "_get_seq_nr", "torch",
               "check_for_mutable_operation")
PT_NAMES = ("_should_save_eager_input_vals", "PythonKeyTracer")
TB_NAMES = ("has_preserved_node_meta", "get_current_meta", "get_current_replay_node", "_is_preserving_node_seq_nr")


def _tracer_class() -> type:
    from torch.fx.experimental.proxy_tensor import PythonKeyTracer

    return PythonKeyTracer


def _stock_method() -> Any:
    return original(_tracer_class(), "create_node")


def _unsafe_targets() -> tuple[tuple, tuple]:
    """(classes a target of which may need eager input values, targets
    ``_should_save_eager_input_vals`` singles out)."""
    import torch
    from torch._higher_order_ops.invoke_subgraph import InvokeSubgraphHOP
    from torch._higher_order_ops.triton_kernel_wrap import (
        TritonKernelWrapperFunctional,
        TritonKernelWrapperMutation,
    )

    classes = (torch._ops.OpOverload, torch._ops.HigherOrderOperator, TritonKernelWrapperFunctional,
               TritonKernelWrapperMutation, InvokeSubgraphHOP)
    hop = torch.ops.higher_order
    return classes, (hop.auto_functionalized, hop.auto_functionalized_v2, hop.with_effects)


def _objects() -> dict:
    import logging

    import torch
    import torch.fx
    from torch.fx import graph as fx_graph
    from torch.fx import immutable_collections
    from torch.fx import proxy as fx_proxy
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental import proxy_tensor as pt

    classes, special = _unsafe_targets()
    return {
        "stock": _stock_method(), "tracer_type": pt.PythonKeyTracer, "graph_type": fx_graph.Graph,
        "namespace_type": fx_graph._Namespace, "table_type": fx_graph._FindNodesLookupTable,
        "node_type": fx_graph.Node, "immutable_dict": immutable_collections.immutable_dict,
        "immutable_list": immutable_collections.immutable_list,
        "sym_types": (torch.SymInt, torch.SymFloat, torch.SymBool), "unsafe_targets": classes,
        "special_targets": special, "op_overload": torch._ops.OpOverload,
        "graph_dict": vars(fx_graph), "graph_names": {n: vars(fx_graph)[n] for n in GRAPH_NAMES},
        "proxy_dict": vars(fx_proxy), "proxy_names": {n: vars(fx_proxy)[n] for n in PROXY_NAMES},
        "pt_dict": vars(pt), "pt_names": {n: vars(pt)[n] for n in PT_NAMES},
        "tb_dict": vars(fx_traceback), "tb_names": {n: vars(fx_traceback)[n] for n in TB_NAMES},
        "fx_dict": vars(torch.fx), "tb_module": fx_traceback, "autograd_dict": vars(torch.autograd),
        "get_sequence_nr": torch.autograd._get_sequence_nr,
        "copy_dispatch": copy._copy_dispatch, "copy_immutable": copy._copy_immutable,  # type: ignore[attr-defined]
        "dict_copy": dict.copy, "list_copy": list.copy, "copy_copy": copy.copy, "logger_type": logging.Logger,
    }


def _fields(node: Any, scope: list) -> tuple:
    return (node.name, node.op, node.target, node.args, dict(node.kwargs), type(node.kwargs), node.type,
            list(node.meta.items()), scope)


def _same(a: Any, b: Any) -> bool:
    """Equal, or copies of one object that compare by identity (copy.copy of an
    OpOverload in a node's ``original_aten`` is a new object, for stock too): the
    same type and equal attributes."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a == b:
        return True
    return hasattr(a, "__dict__") and vars(a) == vars(b)


def before(tracer: Any, kind: str, target: Any, args: tuple, kwargs: dict, name: Any,
           type_expr: Any) -> Callable[[Any], bool]:
    """crosscheck: stock's method makes the same node on a copy of the tracer's
    state (the graph's namespace, an empty graph, its own scope table); the
    answer compares it with the node the C method then makes, and takes the copy's
    node out of its arguments' users."""
    import torch.fx
    from fastfake.parity.crosscheck import CrosscheckError

    graph = tracer.graph
    shadow_graph = torch.fx.Graph()
    ns = shadow_graph._graph_namespace
    ns._used_names = set(graph._graph_namespace._used_names)
    ns._base_count = dict(graph._graph_namespace._base_count)
    shadow = copy.copy(tracer)
    shadow.graph = shadow_graph
    shadow.node_name_to_scope = {}
    want = _stock_method()(shadow, kind, target, args, kwargs, name, type_expr)
    want_fields = _fields(want, list(shadow.node_name_to_scope.items()))
    shadow_graph.erase_node(want)

    def after(node: Any) -> bool:
        got = _fields(node, [(node.name, tracer.node_name_to_scope.get(node.name))])
        if not _same(got, want_fields):
            raise CrosscheckError(f"fastfake: the C create_node made {got}, stock's method {want_fields}")
        if graph._find_nodes_lookup_table.find_nodes(op="call_function", target=target)[-1] is not node:
            raise CrosscheckError("fastfake: the C create_node's node is not last in its lookup-table entry")
        return True

    return after


def available() -> bool:
    try:
        cls = _tracer_class()
        _unsafe_targets()
    except (ImportError, AttributeError):
        return False
    if not stock_or_ours(cls, "create_node", _DESCRIPTOR[0] if _DESCRIPTOR else None):
        return False
    return _compat.fx_node_proven()


def _setup() -> Any:
    if not _DESCRIPTOR:
        if not _C.setup_fx_node(_objects()):
            raise RuntimeError("fastfake: the C create_node could not bind what it reads")
        _DESCRIPTOR.append(_C.fx_node_method())
    return _DESCRIPTOR[0]


def is_installed() -> bool:
    return bool(_DESCRIPTOR) and vars(_tracer_class()).get("create_node") is _DESCRIPTOR[0]


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the C method put at
    ``PythonKeyTracer.create_node`` (on) or stock's back (off)."""
    if not on and not _DESCRIPTOR:
        return
    if on and not available():
        return
    cls = _tracer_class()
    descriptor = _setup()
    if on:
        _C.set_fx_node_check(before if crosscheck else None)
        _C.fx_node_enable(True)
        put(cls, "create_node", descriptor, True)
    else:
        _C.fx_node_enable(False)
        _C.set_fx_node_check(None)
        _C.fx_node_clear()
        put(cls, "create_node", descriptor, False)
