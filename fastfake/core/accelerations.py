"""The one table of fastfake's accelerations.

Every acceleration is one entry here, with the same fields: what in torch it
replaces, how it is proven on a release, the self-test feature that proves it at
``install()`` (and the counters that show it served), the prefix of its counters,
which ``install()`` option it rides on, what it needs, whether this release has what
it stands in for, the hook that turns it on and off, its names for
``FASTFAKE_DISABLE``, and how ``crosscheck=True`` verifies it.

``install()`` and ``uninstall()`` walk this table (fastfake/core/install.py), and so
do the self-test's feature list, ``stats()``' counter sources (fastfake/core/counters.py),
the command line's report and
the README's table (``python -m fastfake accelerations``). PyTorch's
``fake_impls.py``, rules registered into one table, is the model. To add an
acceleration: write its module with ``available()`` and ``apply(on, crosscheck)``,
add its entry here, its self-test feature in fastfake/core/selftest.py, and its
tests (docs/design.md, "Adding an acceleration").

Pure data: imports nothing of fastfake (hooks are named, resolved when used).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

#: What an acceleration rides on: the ``install()`` option that must be on
#: ("either": elementwise or cache; "plain": either, and not under
#: ``TORCH_FAKE_TENSOR_DEBUG``).
RIDES = ("elementwise", "cache", "device", "either", "plain")


@dataclass(frozen=True)
class Acceleration:
    name: str  # its name: the self-test feature, and FASTFAKE_DISABLE=<name>
    title: str  # the README's name for it
    replaces: str  # what in torch it stands in for
    proof: str  # why its result is stock's on a release
    served: tuple[str, ...]  # the counters that show it served a call
    counters: str  # prefix of its counters in fastfake.stats()
    rides: str  # the install() option it needs on (RIDES); decided before it in the table
    needs: tuple[str, ...] = ()  # accelerations that must be on too
    available: str = ""  # "module:function" -> bool: this release has it ("" = every release)
    apply: str = ""  # "module:function(on, crosscheck)"; "" = a field of the C++ configuration
    aliases: tuple[str, ...] = ()  # other names FASTFAKE_DISABLE accepts
    legacy: str = ""  # the FASTFAKE_NO_* variable, still honoured (deprecated)
    crosscheck: str = "the served result against stock's, field by field"
    selftest: bool = True  # proven by its own self-test feature at install()
    # its self-test program's results are stock's whether it serves or not (no value
    # passes through it): the feature passes only where it served
    selftest_must_serve: bool = False
    # off unless FASTFAKE_ENABLE names it (proven and tested, but not worth its cost
    # on the measured workloads yet: docs/performance.md)
    opt_in: bool = False
    module: str = ""  # where it lives
    # where stats() reads its counters beyond the extension's main map (``_C.counters()``):
    # a module with counters() / reset_counters() / saved_counters() / restore_counters(),
    # or "ext:<get>,<set>" for a name -> count map the extension keeps under ``counters``
    counts: str = ""

    @property
    def switch(self) -> str:
        """Its off switch."""
        return f"FASTFAKE_DISABLE={self.name}"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def resolve(ref: str) -> Callable:
    """The function a ``"module:function"`` field names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


ACCELERATIONS: tuple[Acceleration, ...] = (
    Acceleration(
        "elementwise", "elementwise path",
        "`FakeTensorMode.__torch_dispatch__` for pointwise ATen overloads (static shapes)",
        "dtype and errors from stock's first call per signature; the stride rule that reproduces stock's result, checked per signature",
        ("elementwise.hit",), "elementwise.", "elementwise",
        module="csrc/elementwise/, fastfake/elementwise/registry.py"),
    Acceleration(
        "cache", "result cache",
        "stock's dispatch-cache hit (`_cached_dispatch_impl` → `_output_from_cache_entry`)",
        "learned from stock's own cache entry; a hit builds what stock's hit builds",
        ("cache.hit",), "cache.", "cache",
        module="csrc/cache/, fastfake/cache/learn.py"),
    Acceleration(
        "cache_symbolic", "symbolic result cache",
        "stock's dispatch-cache hit with symbolic shapes, per ShapeEnv",
        "stock's entry, valid while the replacements it was read under hold",
        ("cache.symbolic.hit",), "cache.symbolic.", "cache",
        needs=("cache",), available="fastfake.common.compat:shape_env_counts_replacements",
        aliases=("symbolic_cache",), legacy="FASTFAKE_NO_SYMBOLIC_CACHE", module="csrc/cache/"),
    Acceleration(
        "stock_key", "stock's cache key in C++",
        "`FakeTensorMode._cache_key`",
        "compared with stock's key at install on every release",
        ("stock_key.built",), "stock_key.", "cache",
        needs=("cache",), apply="fastfake.stock.key:apply", legacy="FASTFAKE_NO_STOCK_KEY",
        selftest=False, crosscheck="proved at install()",
        counts="fastfake.stock.key",
        module="csrc/stock/key.cpp, fastfake/stock/key.py"),
    Acceleration(
        "cache_portable", "records served in other ShapeEnvs",
        "a new ShapeEnv's first call (stock's miss) and its nested calls",
        "the signature of what static evaluation reads; stock's cache effects repeated; the kernel's ShapeEnv evaluations replayed",
        ("cache.symbolic.portable.served",), "cache.symbolic.portable.", "cache",
        needs=("cache_symbolic",), available="fastfake.cache.portable:available",
        apply="fastfake.cache.portable:apply", aliases=("portable",), legacy="FASTFAKE_NO_PORTABLE",
        crosscheck="the result, the ShapeEnv delta, and no evaluation stock's kernel makes that was not replayed",
        counts="fastfake.cache.portable",
        module="csrc/cache/portable*.cpp, fastfake/cache/portable.py, fastfake/parity/evals.py"),
    Acceleration(
        "cache_rerun", "repeats stock reruns",
        "calls stock never caches (`_unsafe_view` on 2.13 / 2.14)",
        "fingerprint and signature unchanged by the earlier call; its evaluations replayed",
        ("cache.symbolic.rerun.served",), "cache.symbolic.rerun.", "cache",
        needs=("cache_symbolic",), available="fastfake.common.compat:stock_reruns_unsafe_view",
        apply="fastfake.cache.rerun:apply", aliases=("rerun",), legacy="FASTFAKE_NO_RERUN",
        counts="fastfake.cache.rerun",
        module="csrc/cache/rerun.cpp, fastfake/cache/rerun.py"),
    Acceleration(
        "cache_rerun_scalar", "pointwise repeats with a SymFloat",
        "pointwise calls with a SymFloat argument (stock never caches them)",
        "as the repeats above",
        ("cache.symbolic.rerun.served_scalar",), "cache.symbolic.rerun.", "cache",
        needs=("cache_symbolic",), available="fastfake.cache.rerun:scalar_available",
        apply="fastfake.cache.rerun:apply_scalar", aliases=("rerun_scalar",), legacy="FASTFAKE_NO_RERUN_SCALAR",
        counts="fastfake.cache.rerun",
        module="csrc/cache/rerun.cpp, fastfake/cache/rerun.py"),
    Acceleration(
        "cache_item_memo", "`.item()` repeats",
        "`.item()` answered from the tensor's item memo",
        "where stock's dispatch would answer from the same memo",
        ("cache.item_memo.served",), "cache.item_memo.", "cache",
        needs=("cache",), available="fastfake.cache.item_memo:available", apply="fastfake.cache.item_memo:apply",
        aliases=("item_memo",), legacy="FASTFAKE_NO_ITEM_MEMO",
        counts="ext:item_memo_counts,item_memo_set_counts",
        module="csrc/cache/item_memo.cpp, fastfake/cache/item_memo.py"),
    Acceleration(
        "store", "records kept on disk",
        "a later process's first call of the same op on the same shapes, strides and dtypes (stock's miss, calls without symbols)",
        "the miss's key, entry and nested calls kept exactly and read back equal; served only where stock's hit builds what the miss returned and stock's cache is as where it was recorded",
        ("store.served",), "store.", "cache",
        needs=("cache",), available="fastfake.store.records:available", apply="fastfake.store.records:apply",
        crosscheck="a call a record could serve runs stock's miss, whose record must equal the kept one",
        counts="fastfake.store.records",
        module="fastfake/store/"),
    Acceleration(
        "store_symbolic", "records served in other ShapeEnvs, kept on disk",
        "a later process's first call of a symbolic call (stock's miss) whose record an earlier process kept",
        "the record, its key's SymNode values and its op kept exactly and read back as the same values; admitted by the checks of a record from another ShapeEnv of the same process (signature, stock's cache, replayed evaluations)",
        ("store.symbolic.served",), "store.symbolic.", "cache",
        needs=("cache_portable", "store"), available="fastfake.store.symbolic:available",
        apply="fastfake.store.symbolic:apply",
        crosscheck="as a record from another ShapeEnv: the result, the ShapeEnv delta, and every evaluation replayed",
        selftest_must_serve=True, opt_in=True,
        counts="fastfake.store.symbolic",
        module="csrc/cache/entry_io.cpp, fastfake/store/symbolic.py, fastfake/store/symcodec.py"),
    Acceleration(
        "funcnames", "Dynamo's function-name tables kept on disk",
        "`torch._dynamo.funcname_cache._add_file`: a source file's first ask in a process, the whole file through the pure-Python `tokenize` (for a debug log's header Dynamo builds per FX node)",
        "the table is a function of the file's bytes: the one stock's own code built from the same bytes in an earlier process, kept under their digest and that of the code; a miss runs stock's code on the bytes read",
        ("funcnames.served",), "funcnames.", "either",
        available="fastfake.store.funcnames:available", apply="fastfake.store.funcnames:apply",
        crosscheck="stock's code runs on the same bytes; its table must equal the kept one",
        selftest_must_serve=True,
        counts="fastfake.store.funcnames",
        module="fastfake/store/funcnames.py"),
    Acceleration(
        "device", "`FakeTensor.device`",
        "the Python property",
        "self-test",
        ("device.fast",), "device.", "device",
        module="csrc/dispatch/dispatch.cpp"),
    Acceleration(
        "functional_storage", "FunctionalTensor storage size",
        "the storage-size computation of AOTAutograd's `FunctionalTensor` wrappers",
        "read off a wrapper stock builds; replayed into proxy tracing",
        ("functional.storage.hit", "functional.storage.replayed"), "functional.storage.", "cache",
        available="fastfake.common.compat:functional_tensor_recomputes_storage",
        apply="fastfake.tracing.functional:apply", aliases=("functional",), legacy="FASTFAKE_NO_FUNCTIONAL_MEMO",
        counts="fastfake.tracing.functional",
        module="fastfake/tracing/functional.py"),
    Acceleration(
        "detach", "snapshots",
        "`proxy_tensor.snapshot_fake` / `fast_detach`",
        "self-test",
        ("detach.fast",), "detach.", "plain",
        apply="fastfake.convert.detach:apply", legacy="FASTFAKE_NO_FAST_DETACH",
        module="csrc/convert/detach.cpp, fastfake/convert/detach.py"),
    Acceleration(
        "convert", "converter",
        "`FakeTensorConverter.from_real_tensor` for plain CPU leaves",
        "the converter's layout checked; self-test",
        ("convert.fast",), "convert.", "plain",
        available="fastfake.common.compat:converter_layout_known", apply="fastfake.convert.converter:apply",
        legacy="FASTFAKE_NO_FAST_CONVERT", module="csrc/convert/convert.cpp, fastfake/convert/converter.py"),
    Acceleration(
        "symnode_memo", "SymInt arithmetic",
        "`SymNode` binary ops (`binary_magic_impl`)",
        "source-identical to a proven release; self-test",
        ("symnode.memo.hit",), "symnode.memo.", "either",
        available="fastfake.symbolic.symnode_memo:available", apply="fastfake.symbolic.symnode_memo:apply",
        aliases=("symnode",), legacy="FASTFAKE_NO_SYMNODE_MEMO",
        counts="ext:symnode_memo_counts,symnode_memo_set_counts",
        module="csrc/symbolic/symnode_memo.cpp, fastfake/symbolic/symnode_memo.py"),
    Acceleration(
        "fake_prop", "`FakeTensorProp` nodes",
        "`FakeTensorProp.run_node`'s interpreter wrappers",
        "the stock functions it stands for are source-identical to a proven release; self-test",
        ("fake_prop.fast",), "fake_prop.", "either",
        available="fastfake.tracing.fake_prop:available", apply="fastfake.tracing.fake_prop:apply",
        legacy="FASTFAKE_NO_FAKE_PROP", counts="fastfake.tracing.fake_prop",
        module="fastfake/tracing/fake_prop.py"),
    Acceleration(
        "pytree", "pytree maps in the tracing stack",
        "`torch.utils._pytree.tree_map_only` / `tree_map` / `tree_leaves` as functional and fake tensors and AOTAutograd call them, `tree_iter` in FX's `Graph.create_node`",
        "the stock functions it stands for are source-identical to a proven release; plain trees only; self-test",
        ("pytree.map_only.served", "pytree.map.served", "pytree.leaves.served", "pytree.iter.served"), "pytree.",
        "either",
        available="fastfake.tracing.pytree:available", apply="fastfake.tracing.pytree:apply",
        crosscheck="stock's flattening of the same tree: the same leaves, the same structure, fresh containers",
        counts="ext:pytree_counts,pytree_set_counts",
        module="csrc/tracing/pytree.cpp, fastfake/tracing/pytree.py"),
    Acceleration(
        "symnode_expr", "`SymNode.expr`",
        "the Python property",
        "source-identical to a proven release; self-test",
        ("symnode.expr.served",), "symnode.expr.", "either",
        available="fastfake.symbolic.symnode_expr:available", apply="fastfake.symbolic.symnode_expr:apply",
        legacy="FASTFAKE_NO_SYMNODE_EXPR",
        counts="ext:symnode_expr_counts,symnode_expr_set_counts",
        module="csrc/symbolic/symnode_expr.cpp, fastfake/symbolic/symnode_expr.py"),
    Acceleration(
        "symnode_int", "`SymNode.maybe_as_int`",
        "the Python method",
        "source-identical to a proven release; self-test",
        ("symnode.int.served",), "symnode.int.", "either",
        available="fastfake.symbolic.symnode_int:available", apply="fastfake.symbolic.symnode_int:apply",
        legacy="FASTFAKE_NO_SYMNODE_INT",
        counts="ext:symnode_int_counts,symnode_int_set_counts",
        module="csrc/symbolic/symnode_int.cpp, fastfake/symbolic/symnode_int.py"),
    Acceleration(
        "config_attr", "configuration reads",
        "`ConfigModule.__getattr__` (torch/utils/_config_module.py): every read of a setting of `torch._dynamo.config`, `torch._functorch.config`, ... after the module's own lookup failed",
        "stock's `__getattr__`, its helpers and `_ConfigEntry` source-identical to a proven release; a plain entry answered from the same fields in the same order, anything else stock's; self-test",
        ("config_attr.served",), "config_attr.", "either",
        available="fastfake.tracing.config_attr:available", apply="fastfake.tracing.config_attr:apply",
        crosscheck="stock's `__getattr__` on the same module and name answers the same object",
        counts="ext:config_attr_counts,config_attr_set_counts",
        module="csrc/tracing/config_attr.cpp, fastfake/tracing/config_attr.py"),
    Acceleration(
        "functional_dispatch", "the functional mode's dispatch",
        "`FunctionalTensorMode.__torch_dispatch__` (AOTAutograd's functionalization of every op) for plain calls: an aten op that does not decompose, auto-functionalize or have effects, on FunctionalTensors that need no sync",
        "stock's method and everything it calls source-identical to a proven release; an op's fixed facts read with stock's own predicates, everything that can change read per call; outputs wrapped by stock's class, aliasing fixed by stock's function; self-test",
        ("functional_dispatch.served",), "functional_dispatch.", "either",
        available="fastfake.tracing.functional_dispatch:available",
        apply="fastfake.tracing.functional_dispatch:apply",
        crosscheck="stock's own predicates (decompose, auto-functionalize, effects, metadata query) asked about every served call",
        counts="ext:functional_dispatch_counts,functional_dispatch_set_counts",
        module="csrc/tracing/functional_dispatch.cpp, fastfake/tracing/functional_dispatch.py"),
    Acceleration(
        "proxy_dispatch", "the proxy mode's dispatch",
        "`ProxyTorchDispatchMode.__torch_dispatch__` (make_fx's recording of every op: AOTAutograd, export) for plain calls: an op that does not decompose, is in no decomposition table and is not data-dependent, on tracked tensors without constants",
        "stock's method and everything it calls source-identical to a proven release, the module names it relies on checked per call; the node made by the tracer's own create_proxy, SymInt proxies, proxy slots, val and tensor_meta by stock's functions; self-test",
        ("proxy_dispatch.served",), "proxy_dispatch.", "either",
        available="fastfake.tracing.proxy_dispatch:available",
        apply="fastfake.tracing.proxy_dispatch:apply",
        crosscheck="stock's own predicates (decomposition table, autograd_would_have_decomposed and decompose, tensor types, tracked proxies, data-dependence, the node name) asked about every served call",
        counts="ext:proxy_dispatch_counts,proxy_dispatch_set_counts",
        module="csrc/tracing/proxy_dispatch.cpp, fastfake/tracing/proxy_dispatch.py"),
    Acceleration(
        "sym_register", "the proxy mode's SymNode records",
        "`proxy_tensor._sym_register` (make_fx's record of every traced SymNode operation: a size's arithmetic, a view's shape, a FunctionalTensor's storage size) for plain calls: thunkification off, every symbolic argument tracked",
        "stock's function and what its plain call runs source-identical to a proven release, the module names it relies on checked per call; the node made by the tracer's own create_node, the proxy slot set by stock's set_proxy_slot with stock's computed thunk; self-test",
        ("sym_register.served",), "sym_register.", "either",
        available="fastfake.tracing.sym_register:available",
        apply="fastfake.tracing.sym_register:apply",
        crosscheck="stock's get_proxy_slot on every served record: the node's target, arguments and val, and the result's proxy slot",
        counts="ext:sym_register_counts,sym_register_set_counts",
        module="csrc/tracing/sym_register.cpp, fastfake/tracing/sym_register.py"),
    Acceleration(
        "sym_dispatch", "the proxy mode's SymNode dispatch",
        "`proxy_tensor.handle_sym_dispatch` (every SymNode operation under make_fx: `get_proxy_mode`, the context that takes the proxy mode off the dispatch stack and puts it back, `__sym_dispatch__`'s multiply-by-one peephole, the operation and its record) for plain calls: no pre-dispatch mode, stock's mode class and method, positional arguments in a tuple",
        "stock's function and what its plain call runs source-identical to a proven release, the module names it relies on checked per call; the mode taken off and put back by the bindings stock calls, the operation and `_sym_register` called as stock calls them; self-test",
        ("sym_dispatch.served",), "sym_dispatch.", "either",
        available="fastfake.tracing.sym_dispatch:available",
        apply="fastfake.tracing.sym_dispatch:apply",
        crosscheck="after every served call the dispatch stack is as before (same length, the proxy mode back) and the operation's result has its proxy slot",
        counts="ext:sym_dispatch_counts,sym_dispatch_set_counts",
        module="csrc/tracing/sym_dispatch.cpp, fastfake/tracing/sym_dispatch.py"),
    Acceleration(
        "fx_node", "make_fx's node creation",
        "`PythonKeyTracer.create_node` (with `TracerBase.create_node` and `Graph.create_node`: every node make_fx records) for plain calls: a call_function node of a builtin or Python function, arguments of nodes and plain leaves, stock's graph classes, no hooks",
        "stock's method and everything its plain call runs source-identical to a proven release, the module names it relies on checked per call; Node, the insert point and the lookup table's insert are stock's own code; self-test",
        ("fx_node.served",), "fx_node.", "either",
        available="fastfake.tracing.fx_node:available",
        apply="fastfake.tracing.fx_node:apply",
        crosscheck="stock's method makes the same node on a copy of the tracer's state: name, arguments, type, meta (in order) and scope entry equal",
        counts="ext:fx_node_counts,fx_node_set_counts",
        module="csrc/tracing/fx_node.cpp, fastfake/tracing/fx_node.py"),
    Acceleration(
        "dce_pred", "make_fx's dead-code predicate",
        "`dispatch_trace`'s `impure_pred` (asked by `Graph.eliminate_dead_code` about every node of every make_fx trace: `Node.is_impure`, `is_accessor_node`, the sym values of the node and its arguments) for exact `fx.Node`s of placeholder, output, get_attr and call_function of targets that are no higher-order operators",
        "the predicate and what it reads source-identical to a proven release, the names it reads checked per elimination; each target's purity and accessor answers taken from stock's functions on its first node (they read the target only); self-test",
        ("dce_pred.served",), "dce_pred.", "either",
        available="fastfake.tracing.dce_pred:available",
        apply="fastfake.tracing.dce_pred:apply",
        crosscheck="stock's predicate answers for every node too; the answers must be equal",
        counts="ext:dce_pred_counts,dce_pred_set_counts",
        module="csrc/tracing/dce_pred.cpp, fastfake/tracing/dce_pred.py"),
    Acceleration(
        "real_inputs", "real inputs",
        "converting real tensor arguments under `allow_non_fake_inputs`",
        "the mode's own converter, as stock converts them",
        ("real_inputs.converted",), "real_inputs.", "either",
        legacy="FASTFAKE_NO_REAL_INPUTS", selftest=False,
        module="csrc/convert/real_inputs.cpp, fastfake/convert/real_inputs.py"),
    Acceleration(
        "frame_stack", "Python frame-stack chunks",
        "CPython's unmapping of a thread's frame-stack chunk each time the stack drops below it, and the fresh mapping when it grows again (3.11 / 3.12; CPython gh-142183)",
        "memory only: freed chunks handed back to the next requests of their size; offered where a probe at install() sees the interpreter map a chunk at every crossing of a boundary",
        ("frame_stack.reused",), "frame_stack.", "either",
        available="fastfake.runtime.frame_stack:available", apply="fastfake.runtime.frame_stack:apply",
        crosscheck="nothing to compare: no value of a trace passes through it",
        selftest_must_serve=True,
        counts="ext:frame_stack_counts,frame_stack_set_counts",
        module="csrc/runtime/frame_stack.cpp, fastfake/runtime/frame_stack.py"),
    Acceleration(
        "untrack", "learned records out of the cyclic collector",
        "the cyclic collector's tracking of fastfake's own learned containers (not torch's): tens of thousands of tuples and dicts after a dynamic compile, which counted towards CPython's next full collection and were walked by every collection",
        "memory only: a container is untracked when a table stores it and its items are all inert (no GC support, immutable types, sympy expressions, tuples and frozensets of those), so it is on no reference cycle; self-test",
        ("untrack.tuples",), "untrack.", "cache",
        needs=("cache_portable",), available="fastfake.runtime.untrack:available",
        apply="fastfake.runtime.untrack:apply",
        crosscheck="nothing to compare: no value of a trace passes through it",
        selftest_must_serve=True,
        counts="ext:untrack_counts,untrack_set_counts",
        module="csrc/runtime/untrack.cpp, fastfake/runtime/untrack.py"),
)

BY_NAME: dict[str, Acceleration] = {a.name: a for a in ACCELERATIONS}
#: every name FASTFAKE_DISABLE accepts -> the acceleration's name
NAMES: dict[str, str] = {n: a.name for a in ACCELERATIONS for n in a.names}


def selftest_features() -> dict[str, tuple[str, ...]]:
    """Self-test feature -> the counters that show it served (fastfake.core.selftest)."""
    return {a.name: a.served for a in ACCELERATIONS if a.selftest}


def closure(name: str) -> tuple[str, ...]:
    """``name`` and every acceleration it needs, transitively, in table order."""
    found = set()
    todo = [name]
    while todo:
        n = todo.pop()
        if n not in found:
            found.add(n)
            todo.extend(BY_NAME[n].needs)
    return tuple(a.name for a in ACCELERATIONS if a.name in found)


def markdown() -> str:
    """The README's table."""
    rows = ["| acceleration | replaces in torch | off switch | counters |", "| --- | --- | --- | --- |"]
    for a in ACCELERATIONS:
        switch = f"`{a.switch}`"
        if a.rides in ("elementwise", "cache", "device") and a.name == a.rides:
            switch += f" or `install({a.name}=False)`"
        if a.opt_in:
            switch = f"off unless `FASTFAKE_ENABLE={a.name}`; then `{a.switch}`"
        rows.append(f"| {a.title} | {a.replaces} | {switch} | `{a.counters}*` |")
    return "\n".join(rows)
