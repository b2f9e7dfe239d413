// pybind11 bindings of fastfake._C (documented in fastfake/_C.pyi).
#include "common/compat.h"
#include "common/fastfake.h"
#include "cache/portable.h"
#include "cache/portable_fast.h"
#include "cache/internal.h"
#include "stock/key.h"
#include "cache/rerun.h"
#include "cache/item_memo.h"
#include "symbolic/symnode_expr.h"
#include "symbolic/symnode_int.h"
#include "tracing/pytree.h"
#include "common/file_listing.h"
#include "common/code_digest.h"
#include "stock/calls.h"
#include "symbolic/symnode_memo.h"
#include "dispatch/dispatch.h"
#include "elementwise/elementwise.h"
#include "cache/cache.h"
#include "convert/convert.h"
#include "stock/counts.h"
#include "runtime/frame_stack.h"
#include "runtime/untrack.h"
#include "tracing/config_attr.h"
#include "tracing/functional_dispatch.h"
#include "tracing/proxy_dispatch.h"
#include "tracing/sym_register.h"
#include "tracing/fx_node.h"
#include "tracing/sym_dispatch.h"
#include "tracing/dce_pred.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace fastfake;

namespace {

PyObject* intern(const char* s) {
  PyObject* o = PyUnicode_InternFromString(s);
  if (o == nullptr) throw py::error_already_set();
  return o;
}

void set_ref(PyObject*& slot, py::handle h) {
  PyObject* o = h.is_none() ? nullptr : h.ptr();
  Py_XINCREF(o);
  Py_XSETREF(slot, o);
}

py::object steal_or_throw(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

// Non-zero _inject_fault requests in this process: a self-test result kept on
// disk is not used once a fault was asked for (fastfake/core/selftest_store.py).
long g_faults_requested = 0;

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "fastfake C++ core: fast FakeTensorMode dispatch for pointwise ops.";
  if (!init_types()) throw py::error_already_set();

  g_py.s_fake_mode = intern("fake_mode");
  g_py.s_dispatch_keys = intern("dispatch_keys");
  g_py.s_constant = intern("constant");
  g_py.s_real_tensor = intern("real_tensor");
  g_py.s_in_kernel_invocation = intern("in_kernel_invocation");
  g_py.s_propagate_real_tensors = intern("propagate_real_tensors");
  g_py.s_allow_unsafe_data_ptr_access = intern("_allow_unsafe_data_ptr_access");
  g_py.s_dispatch_counter_key = intern("FakeTensorMode.__torch_dispatch__");
  g_py.s_is_exporting_flag = intern("_is_exporting_flag");
  g_py.s_shape_env = intern("shape_env");
  g_py.s_settings = intern("settings");
  g_py.s_cache_enabled = intern("cache_enabled");
  g_py.s_cache_crosscheck_enabled = intern("cache_crosscheck_enabled");
  g_py.s_node = intern("node");
  g_py.s_fastfake_vid = intern("_fastfake_vid");
  g_py.s_expr = intern("_expr");
  g_py.s_hint = intern("_hint");
  g_py.s_pytype = intern("pytype");
  g_py.s_fx_node = intern("fx_node");
  g_py.s_optimized_summation = intern("_optimized_summation");
  g_py.s_replacements_version = intern("_replacements_version_counter");
  g_py.s_translation_validation = intern("_translation_validation_enabled");
  g_py.s_allow_override = intern("allow_non_fake_inputs_override");
  g_py.s_allow_non_fake_inputs = intern("allow_non_fake_inputs");
  g_py.s_fake_tensor_converter = intern("fake_tensor_converter");
  g_py.s_from_real_tensor = intern("from_real_tensor");
  g_py.s_cache_hits = intern("cache_hits");
  g_py.s_meta_converter = intern("meta_converter");
  g_py.s_describer = intern("describer");
  g_py.s_copy_data = intern("copy_data");
  g_py.s_get_memo = intern("_get_memo");
  g_py.s_tensor_memo = intern("tensor_memo");
  g_py.s_storage_memo = intern("storage_memo");
  g_py.s_lookup_storage = intern("lookup_storage");
  g_py.s_get = intern("get");
  g_py.s_hit = intern("hit");
  g_py.s_arg_cnt = intern("arg_cnt");
  g_py.s_get_storage_id = intern("get_storage_id");
  g_py.s_get_tensor_id = intern("get_tensor_id");
  g_py.s_untyped_storage = intern("untyped_storage");
  g_py.s_requires_grad = intern("requires_grad");
  g_py.s_is_param = intern("_is_param");
  g_py.s_grad_dtype = intern("grad_dtype");
  g_py.s_dynamo_dynamic_indices = intern("_dynamo_dynamic_indices");
  g_py.s_dynamo_hint_overrides = intern("_dynamo_hint_overrides");
  g_py.s_is_buffer = intern("_is_buffer");
  g_py.s_allow_meta = intern("allow_meta");
  g_py.s_cache_misses = intern("cache_misses");

  m.def(
      "setup",
      [](py::handle fake_tensor_type,
         py::handle fake_mode_type,
         py::handle stock_torch_dispatch,
         py::handle simple_call_counter,
         py::handle crosscheck_hook,
         py::handle fake_dict_template,
         py::handle meta_device,
         py::handle compiler_dict,
         py::handle export_leak_check,
         py::handle cache_learn_hook,
         py::handle op_overload_type,
         py::handle pre_dispatch_infra_modes,
         py::handle prim_device_op,
         const std::string& fake_device_attr) {
        Py_XSETREF(g_py.s_fake_device, intern(fake_device_attr.c_str()));
        PyObject* ftt = nullptr;
        set_ref(ftt, fake_tensor_type);
        Py_XSETREF(reinterpret_cast<PyObject*&>(g_py.fake_tensor_type), ftt);
        set_ref(g_py.fake_mode_type, fake_mode_type);
        set_ref(g_py.stock_torch_dispatch, stock_torch_dispatch);
        set_ref(g_py.simple_call_counter, simple_call_counter);
        set_ref(g_py.crosscheck_hook, crosscheck_hook);
        set_ref(g_py.fake_dict_template, fake_dict_template);
        set_ref(g_py.meta_device, meta_device);
        set_ref(g_py.compiler_dict, compiler_dict);
        set_ref(g_py.export_leak_check, export_leak_check);
        set_ref(g_py.cache_learn_hook, cache_learn_hook);
        set_ref(g_py.op_overload_type, op_overload_type);
        set_ref(g_py.pre_dispatch_infra_modes, pre_dispatch_infra_modes);
        set_ref(g_py.prim_device_op, prim_device_op);
      },
      "Bind the torch objects the extension works with.");
  m.def(
      "built_for",
      []() { return std::string(compat::built_for()); },
      "The torch release (major.minor.patch) the extension was compiled against.");
  m.def(
      "setup_symbolic",
      [](py::handle symnode_type,
         py::handle symint_type,
         py::handle sym_vid_hook,
         py::handle sym_valid_hook,
         py::handle sym_capture_hook,
         py::handle sym_vids) {
        set_ref(g_py.symnode_type, symnode_type);
        set_ref(g_py.symint_type, symint_type);
        set_ref(g_py.sym_vid_hook, sym_vid_hook);
        set_ref(g_py.sym_valid_hook, sym_valid_hook);
        set_ref(g_py.sym_capture_hook, sym_capture_hook);
        if (!sym_vids.is_none() && !PyDict_CheckExact(sym_vids.ptr())) {
          throw py::type_error("sym_vids must be a dict or None");
        }
        set_ref(g_py.sym_vids, sym_vids);
      },
      py::arg("symnode_type"), py::arg("symint_type"), py::arg("sym_vid_hook"),
      py::arg("sym_valid_hook"), py::arg("sym_capture_hook"), py::arg("sym_vids") = py::none(),
      "Bind SymNode, SymInt and the helpers of symbolic cache keys and entries.");

  m.def(
      "setup_portable",
      [](py::handle before, py::handle learn, py::handle admit, py::handle commit, py::handle log_hit,
         py::handle replay) {
        portable_setup(before.ptr(), learn.ptr(), admit.ptr(), commit.ptr(),
                       log_hit.is_none() ? nullptr : log_hit.ptr(), replay.ptr());
      },
      py::arg("before"), py::arg("learn"), py::arg("admit"), py::arg("commit"),
      py::arg("log_hit"), py::arg("replay"),
      "Bind fastfake.cache.portable's hooks (symbolic entries reused in another ShapeEnv).");
  m.def(
      "setup_stock_key",
      [](py::handle key_type,
         py::handle stub_type,
         py::handle backref_type,
         py::handle size_type,
         bool tracing_item,
         bool on) {
        stock_key_setup(key_type.ptr(), stub_type.ptr(), backref_type.ptr(), size_type.ptr(), tracing_item, on);
      },
      py::arg("key_type"), py::arg("stub_type"), py::arg("backref_type"), py::arg("size_type"),
      py::arg("tracing_item"), py::arg("on"),
      "Bind stock's _DispatchCacheKey, _PySymInputStub, _InputBackref and torch.Size; turn the C++ "
      "stock-key builder on or off.");
  m.def("stock_key_on", []() { return stock_key_on(); });
  m.def(
      "stock_cache_key",
      [](py::handle mode, py::handle state, py::handle func, py::handle args, py::handle kwargs) {
        PyObject* r = stock_key_build(mode.ptr(), state.ptr(), func.ptr(), args.ptr(), kwargs.ptr());
        if (r == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(r);
      },
      py::arg("mode"), py::arg("state"), py::arg("func"), py::arg("args"), py::arg("kwargs"),
      "Stock's FakeTensorMode._cache_key(state, func, args, kwargs), or None where it is left to "
      "stock; with state None, (key, holds a SymNode) without a key state.");
  m.def("stock_key_counts", []() { return stock_key_counts(); });
  m.def("stock_key_set_counts", [](uint64_t built, uint64_t fallback) {
    stock_key_set_counts(built, fallback);
  });
  m.def(
      "setup_rerun",
      [](py::handle before, py::handle learn, py::handle admit, py::handle ops, py::handle scalar_ops,
         py::handle symfloat_type) {
        set_ref(g_py.symfloat_type, symfloat_type);
        rerun_setup(before.ptr(), learn.ptr(), admit.ptr(), ops.ptr(), scalar_ops.ptr());
      },
      py::arg("before"), py::arg("learn"), py::arg("admit"), py::arg("ops"), py::arg("scalar_ops"),
      py::arg("symfloat_type"),
      "Bind fastfake.cache.rerun's hooks, its ops (symbolic calls stock never caches) and its scalar ops "
      "(calls with a SymFloat argument, which stock never caches), and torch.SymFloat.");
  m.def(
      "set_rerun",
      [](bool on) { return rerun_set(on); },
      py::arg("on"),
      "Serve and learn rerun entries; returns the previous setting.");
  m.def(
      "set_rerun_scalar",
      [](bool on) { return rerun_scalar_set(on); },
      py::arg("on"),
      "Serve and learn rerun entries of calls with a SymFloat argument; returns the previous setting.");
  m.def("rerun_size", []() { return rerun_size(); });
  m.def("rerun_counts", []() { return rerun_counts(); });
  m.def("rerun_reset_counts", []() { rerun_reset_counts(); });
  m.def("rerun_set_counts", [](uint64_t served, uint64_t declined_inputs, uint64_t served_scalar,
                                uint64_t other_env) {
    rerun_set_counts(served, declined_inputs, served_scalar, other_env);
  });
  m.def(
      "setup_item_memo",
      [](py::handle op, py::handle reason, py::handle eligible) {
        item_memo_setup(op.ptr(), reason.ptr(), eligible.ptr());
      },
      "Bind the op, stock's bypass reason and fastfake.cache.item_memo.eligible (`.item()` repeats).");
  m.def(
      "set_item_memo",
      [](bool on) { return item_memo_set(on); },
      py::arg("on"),
      "Serve and learn `.item()` repeats from the argument's memo; returns the previous setting.");
  m.def(
      "frame_stack_hook",
      [](bool on) { return frame_stack_hook(on); },
      py::arg("on"),
      "Put fastfake's arena allocator in front of the interpreter's (or the interpreter's back); "
      "returns whether fastfake's is in place.");
  m.def(
      "frame_stack_keep",
      [](size_t chunk, int keep) { frame_stack_keep(chunk, keep); },
      py::arg("chunk"), py::arg("keep"),
      "Keep up to `keep` freed blocks of exactly `chunk` bytes for the next requests of that size.");
  m.def("frame_stack_probe", [](bool on) { frame_stack_probe(on); }, py::arg("on"),
        "Count the arena requests passed to the interpreter's allocator per size from now on (on), or stop.");
  m.def("frame_stack_sizes", []() { return frame_stack_sizes(); });
  m.def("frame_stack_state", []() { return frame_stack_state(); },
        "(fastfake's allocator is current, chunk size, blocks it may keep, blocks kept now).");
  m.def("frame_stack_counts", []() { return frame_stack_counts(); });
  m.def("frame_stack_set_counts", [](const std::map<std::string, uint64_t>& c) {
    frame_stack_set_counts(c);
  });
  m.def(
      "untrack_set",
      [](bool on, py::handle basic) { untrack_set(on, basic.is_none() ? nullptr : basic.ptr()); },
      py::arg("on"), py::arg("sympy_basic"),
      "Keep fastfake's inert learned containers out of the cyclic collector from now on (or not).");
  m.def("untrack_inert", [](py::handle o) { return untrack_inert(o.ptr()); }, py::arg("value"),
        "Untrack the inert tuples and frozensets in `value` (as a table does on storing it); whether it is inert.");
  m.def("untrack_counts", []() { return untrack_counts(); });
  m.def("untrack_set_counts", [](const std::map<std::string, uint64_t>& c) { untrack_set_counts(c); });
  m.def("item_memo_counts", []() { return item_memo_counts(); });
  m.def("item_memo_set_counts", [](const std::map<std::string, uint64_t>& c) {
    item_memo_set_counts(c);
  });
  m.def(
      "setup_symnode_memo",
      [](py::handle symnode, py::handle m2o, py::handle params, py::handle logging_dict,
         py::tuple loggers) {
        symnode_memo_setup(symnode.ptr(), m2o.ptr(), params.ptr(), logging_dict.ptr(), loggers.ptr());
      },
      "Bind what the SymNode memo reads on every call (fastfake.symbolic.symnode_memo).");
  m.def(
      "symnode_memo_hook",
      [](py::handle method, py::handle stock) {
        return steal_or_throw(symnode_memo_hook(method.ptr(), stock.ptr()));
      },
      "A method object for SymNode._<op> serving `method` from the memo, else calling stock.");
  m.def(
      "set_symnode_memo",
      [](bool on) { return symnode_memo_set(on); },
      py::arg("on"),
      "Serve and learn SymNode binary ops; returns the previous setting (off keeps the entries).");
  m.def("set_symnode_memo_check", [](py::handle check) { symnode_memo_set_check(check.ptr()); });
  m.def("symnode_memo_size", []() { return symnode_memo_size(); });
  m.def("symnode_memo_set_max", [](size_t n) { return symnode_memo_set_max(n); });
  m.def("symnode_memo_clear", []() { symnode_memo_clear(); });
  m.def("symnode_memo_counts", []() { return symnode_memo_counts(); });
  m.def("symnode_memo_set_counts", [](const std::map<std::string, uint64_t>& c) {
    symnode_memo_set_counts(c);
  });
  m.def(
      "setup_symnode_expr",
      [](py::handle symnode) { symnode_expr_setup(symnode.ptr()); },
      "Bind the SymNode class the C-level SymNode.expr serves exactly.");
  m.def(
      "symnode_expr_descriptor",
      [](py::handle stock, int rule) {
        return steal_or_throw(symnode_expr_descriptor(stock.ptr(), rule));
      },
      py::arg("stock"),
      py::arg("rule"),
      "A descriptor for SymNode.expr computing `rule` (1: 2.13's is_number, 2: 2.14's "
      "is_Number, 3: 2.15's is_Number or boolean atom); `stock` is the stock property.");
  m.def("set_symnode_expr_check", [](py::handle check) { symnode_expr_set_check(check.ptr()); });
  m.def("symnode_expr_memo_size", []() { return symnode_expr_memo_size(); });
  m.def("symnode_expr_set_max", [](size_t n) { return symnode_expr_set_max(n); });
  m.def("symnode_expr_clear", []() { symnode_expr_clear(); });
  m.def("symnode_expr_counts", []() { return symnode_expr_counts(); });
  m.def("symnode_expr_set_counts", [](const std::map<std::string, uint64_t>& c) {
    symnode_expr_set_counts(c);
  });
  m.def(
      "setup_symnode_int",
      [](py::handle symnode, py::handle stock) { symnode_int_setup(symnode.ptr(), stock.ptr()); },
      "Bind the SymNode class the C-level SymNode.maybe_as_int serves exactly, and stock's "
      "function for everything else.");
  m.def(
      "symnode_int_method",
      []() { return steal_or_throw(symnode_int_method()); },
      "What SymNode.maybe_as_int becomes: a method computing stock's body in C.");
  m.def(
      "setup_pytree",
      [](py::handle supported, py::handle tuple_def, py::handle list_def, py::handle dict_def, py::handle map_only,
         py::handle map, py::handle leaves, py::handle iter) {
        pytree_setup(supported.ptr(), tuple_def.ptr(), list_def.ptr(), dict_def.ptr(), map_only.ptr(), map.ptr(),
                     leaves.ptr(), iter.ptr());
      },
      "Binds torch.utils._pytree's registry, its tuple / list / dict entries and stock's four functions.");
  m.def(
      "setup_pytree_fx",
      [](py::handle list_type, py::handle dict_type, py::handle list_def, py::handle dict_def) {
        pytree_setup_fx(list_type.ptr(), dict_type.ptr(), list_def.ptr(), dict_def.ptr());
      },
      "Binds FX's immutable_list / immutable_dict and their registry entries (None, None: not offered).");
  m.def(
      "pytree_functions",
      []() { return steal_or_throw(pytree_functions()); },
      "(tree_map_only, tree_map, tree_leaves, tree_iter) in C (csrc/tracing/pytree.cpp).");
  m.def("set_pytree_check", [](py::handle check) { pytree_set_check(check.ptr()); });
  m.def("pytree_counts", []() { return pytree_counts(); });
  m.def("pytree_set_counts", [](const std::map<std::string, uint64_t>& c) { pytree_set_counts(c); });
  m.def(
      "setup_config_attr",
      [](py::handle module_type, py::handle entry_type, py::handle sentinel, py::handle stock_getattr,
         py::handle warn, py::handle alias_val) {
        config_attr_setup(module_type.ptr(), entry_type.ptr(), sentinel.ptr(), stock_getattr.ptr(), warn.ptr(),
                          alias_val.ptr());
      },
      "Binds ConfigModule, _ConfigEntry, _UNSET_SENTINEL and the functions stock's read goes through.");
  m.def(
      "config_attr_descriptor",
      []() { return steal_or_throw(config_attr_descriptor()); },
      "What ConfigModule.__getattribute__ becomes (csrc/tracing/config_attr.cpp).");
  m.def("config_attr_enable", [](bool on) { config_attr_enable(on); });
  m.def("set_config_attr_check", [](py::handle check) { config_attr_set_check(check.ptr()); });
  m.def("config_attr_counts", []() { return config_attr_counts(); });
  m.def("config_attr_set_counts", [](const std::map<std::string, uint64_t>& c) { config_attr_set_counts(c); });
  m.def(
      "setup_sym_register",
      [](py::handle stock, py::handle module_dict, py::handle module_names, py::handle fx_dict, py::handle sym_types,
         py::handle symnode_dict_type, py::handle thunk_type, py::handle proxy_type, py::handle set_proxy_slot,
         py::handle computed_thunk, py::handle opaque_types, py::handle opaque_keys) {
        sym_register_setup(stock.ptr(), module_dict.ptr(), module_names.ptr(), fx_dict.ptr(), sym_types.ptr(),
                           symnode_dict_type.ptr(), thunk_type.ptr(), proxy_type.ptr(), set_proxy_slot.ptr(),
                           computed_thunk.ptr(), opaque_types.ptr(), opaque_keys.ptr());
      },
      "Binds stock's _sym_register and what its plain path reads and calls (csrc/tracing/sym_register.cpp).");
  m.def(
      "setup_sym_register_slot",
      [](py::handle symbol_type, py::handle tracker_value_type, py::handle logger_type) {
        sym_register_setup_slot(symbol_type.ptr(), tracker_value_type.ptr(), logger_type.ptr());
      },
      "Binds what set_proxy_slot's SymInt branch in C reads (csrc/tracing/sym_register.cpp).");
  m.def(
      "sym_register_function",
      []() { return steal_or_throw(sym_register_function()); },
      "What proxy_tensor._sym_register becomes (csrc/tracing/sym_register.cpp).");
  m.def("sym_register_enable", [](bool on) { sym_register_enable(on); });
  m.def("set_sym_register_check", [](py::handle check) { sym_register_set_check(check.ptr()); });
  m.def("sym_register_counts", []() { return sym_register_counts(); });
  m.def("sym_register_set_counts", [](const std::map<std::string, uint64_t>& c) { sym_register_set_counts(c); });
  m.def(
      "setup_fx_node", [](py::handle objects) { return fx_node_setup(objects.ptr()); },
      "Binds stock's PythonKeyTracer.create_node and what its plain path reads and calls (csrc/tracing/fx_node.cpp).");
  m.def(
      "fx_node_method",
      []() { return steal_or_throw(fx_node_method()); },
      "What PythonKeyTracer.create_node becomes (csrc/tracing/fx_node.cpp).");
  m.def("fx_node_enable", [](bool on) { fx_node_enable(on); });
  m.def("set_fx_node_check", [](py::handle check) { fx_node_set_check(check.ptr()); });
  m.def("fx_node_clear", []() { fx_node_clear(); });
  m.def("fx_node_counts", []() { return fx_node_counts(); });
  m.def("fx_node_set_counts", [](const std::map<std::string, uint64_t>& c) { fx_node_set_counts(c); });
  m.def(
      "setup_sym_dispatch", [](py::handle objects) { return sym_dispatch_setup(objects.ptr()); },
      "Binds stock's handle_sym_dispatch and what its plain path reads and calls (csrc/tracing/sym_dispatch.cpp).");
  m.def(
      "sym_dispatch_function",
      []() { return steal_or_throw(sym_dispatch_function()); },
      "What proxy_tensor.handle_sym_dispatch becomes (csrc/tracing/sym_dispatch.cpp).");
  m.def("sym_dispatch_enable", [](bool on) { sym_dispatch_enable(on); });
  m.def("set_sym_dispatch_check", [](py::handle check) { sym_dispatch_set_check(check.ptr()); });
  m.def("sym_dispatch_counts", []() { return sym_dispatch_counts(); });
  m.def("sym_dispatch_set_counts", [](const std::map<std::string, uint64_t>& c) { sym_dispatch_set_counts(c); });
  m.def(
      "setup_dce_pred", [](py::handle objects) { return dce_pred_setup(objects.ptr()); },
      "Binds what make_fx's dead-code predicate in C reads and calls (csrc/tracing/dce_pred.cpp).");
  m.def(
      "dce_pred_new",
      [](py::handle stock) { return steal_or_throw(dce_pred_new(stock.ptr())); },
      "A predicate standing for one impure_pred during one elimination (csrc/tracing/dce_pred.cpp).");
  m.def("dce_pred_enable", [](bool on) { dce_pred_enable(on); });
  m.def("dce_pred_counts", []() { return dce_pred_counts(); });
  m.def("dce_pred_set_counts", [](const std::map<std::string, uint64_t>& c) { dce_pred_set_counts(c); });
  m.def(
      "setup_functional_dispatch",
      [](py::handle mode_type, py::handle tensor_type, py::handle stock, py::handle facts, py::handle wrap_outputs,
         py::handle alias_fix, py::handle registry, py::handle dispatch_dict, py::handle set_flag,
         py::handle functionalize_key, py::handle cia_key, py::tuple types, py::int_ extra_keys_raw) {
        return functional_dispatch_setup(mode_type.ptr(), tensor_type.ptr(), stock.ptr(), facts.ptr(),
                                         wrap_outputs.ptr(), alias_fix.ptr(), registry.ptr(), dispatch_dict.ptr(),
                                         set_flag.ptr(), functionalize_key.ptr(), cia_key.ptr(), types.ptr(),
                                         extra_keys_raw.ptr());
      },
      "Binds what the C FunctionalTensorMode.__torch_dispatch__ uses; returns the text of the extra key set.");
  m.def(
      "setup_functional_dispatch_dynamo",
      [](py::handle get_callback, py::handle eval_frame_dict) {
        functional_dispatch_setup_dynamo(get_callback.ptr(), eval_frame_dict.ptr());
      },
      "Binds Dynamo's frame-callback getter and torch._dynamo.eval_frame's dict.");
  m.def(
      "setup_functional_dispatch_variant",
      [](py::handle preserve_keys, py::handle alias_op, py::handle detach_op, bool effect_first,
         py::handle side_effects, bool layout_2_9) {
        functional_dispatch_setup_variant(preserve_keys.ptr(), alias_op.ptr(), detach_op.ptr(), effect_first,
                                          side_effects.ptr(), layout_2_9);
      },
      "Binds what the release adds to the functional mode's plain path (compat.functional_dispatch_variant).");
  m.def(
      "functional_dispatch_function",
      []() { return steal_or_throw(functional_dispatch_function()); },
      "What FunctionalTensorMode.__torch_dispatch__ becomes (csrc/tracing/functional_dispatch.cpp).");
  m.def("functional_dispatch_enable", [](bool on) { functional_dispatch_enable(on); });
  m.def("set_functional_dispatch_check", [](py::handle check) { functional_dispatch_set_check(check.ptr()); });
  m.def("functional_dispatch_clear", []() { functional_dispatch_clear(); });
  m.def("functional_dispatch_counts", []() { return functional_dispatch_counts(); });
  m.def("functional_dispatch_set_counts",
        [](const std::map<std::string, uint64_t>& c) { functional_dispatch_set_counts(c); });
  m.def(
      "setup_proxy_dispatch",
      [](py::dict refs) {
        if (proxy_dispatch_setup(refs.ptr()) < 0) throw py::error_already_set();
      },
      "Binds what the C ProxyTorchDispatchMode.__torch_dispatch__ uses (a dict by name).");
  m.def(
      "proxy_dispatch_function",
      []() { return steal_or_throw(proxy_dispatch_function()); },
      "What ProxyTorchDispatchMode.__torch_dispatch__ becomes (csrc/tracing/proxy_dispatch.cpp).");
  m.def("proxy_dispatch_enable", [](bool on) { proxy_dispatch_enable(on); });
  m.def("set_proxy_dispatch_check", [](py::handle check) { proxy_dispatch_set_check(check.ptr()); });
  m.def("proxy_dispatch_clear", []() { proxy_dispatch_clear(); });
  m.def("proxy_dispatch_counts", []() { return proxy_dispatch_counts(); });
  m.def("proxy_dispatch_set_counts", [](const std::map<std::string, uint64_t>& c) { proxy_dispatch_set_counts(c); });
  m.def("set_symnode_int_check", [](py::handle check) { symnode_int_set_check(check.ptr()); });
  m.def("symnode_int_counts", []() { return symnode_int_counts(); });
  m.def("symnode_int_set_counts", [](const std::map<std::string, uint64_t>& c) {
    symnode_int_set_counts(c);
  });
  m.def(
      "set_portable",
      [](bool on) { return portable_set(on); },
      "Serve and record symbolic entries across ShapeEnvs; returns the previous setting.");
  m.def(
      "portable_memo_counts",
      []() { return portable_memo_counts(); },
      "(refused, declined): portable records refused and first calls declined over "
      "the arguments' memoised derived values.");
  m.def("portable_set_memo_counts", [](uint64_t refused, uint64_t declined) {
    portable_set_memo_counts(refused, declined);
  });
  m.def(
      "set_symint_clone",
      [](py::handle clone) { cache_detail::set_symint_clone(clone.ptr()); },
      "SymNode.clone, proven to return its node (None: not proven): symbolic sizes of "
      "rebuilt outputs are then laid out without c10's per-value Python calls.");
  m.def(
      "_node_vid",
      [](py::handle node) { return cache_detail::node_vid(node.ptr()); },
      "Test hook: the value id the result cache keys a SymNode by (-1: none).");
  m.def(
      "set_settings_fields",
      [](py::handle type, std::vector<py::handle> names, py::handle eq, py::handle hash) {
        std::vector<PyObject*> n;
        for (auto h : names) n.push_back(h.ptr());
        cache_detail::set_settings_fields(type.is_none() ? nullptr : type.ptr(), n,
                                          eq.is_none() ? nullptr : eq.ptr(), hash.is_none() ? nullptr : hash.ptr());
      },
      py::arg("type"), py::arg("names"), py::arg("eq"), py::arg("hash"),
      "ShapeEnvSettings, its field names, __eq__ and __hash__ where "
      "fastfake.common.compat.settings_fields proves they read nothing but the fields "
      "(None, (), None, None otherwise): the cache key then holds such settings as "
      "their fields' values instead of their hash.");
  m.def(
      "_settings_key",
      [](py::handle settings) { return cache_detail::settings_bits(settings.ptr()); },
      "Test hook: the fields' bits the cache key holds for a ShapeEnvSettings (-1: "
      "its hash instead).");
  m.def(
      "vids_cleared",
      []() { cache_detail::vids_cleared(); },
      "fastfake.cache.learn.sym_vid emptied its interning dict: value ids C++ looked up "
      "before are not reused.");
  m.def(
      "set_template_vids",
      [](bool on) { return cache_detail::set_template_vids(on); },
      py::arg("on"),
      "Whether SymNodes made from a template carry the value id memo "
      "(`_fastfake_vid`) where their value is interned; returns the previous setting.");
  m.def(
      "set_symnode_template",
      [](py::handle init) { cache_detail::set_symnode_template(init.ptr()); },
      "SymNode.__init__ where it is one fastfake knows (fastfake.common.compat."
      "SYMNODE_INIT_SOURCES), else None: while it is SymNode's constructor, a recipe's "
      "new SymNodes are copies of the instance dict it built for the first one.");
  m.def(
      "_new_symnodes",
      [](py::handle fields, std::vector<py::object> envs) {
        // (one recipe value, new SymNodes of it built in each ShapeEnv in turn)
        cache_detail::SymVal v;
        v.kind = cache_detail::SymVal::New;
        v.fields = fields.inc_ref().ptr();
        py::list out;
        for (const auto& env : envs) {
          if (PyCallable_Check(env.ptr())) { // (a step between two nodes)
            try {
              env();
            } catch (...) {
              Py_CLEAR(v.fields);
              Py_CLEAR(v.proto);
              throw;
            }
            continue;
          }
          cache_detail::KeyCtx ctx{Py_None, {}, {}, CacheBypassArgType};
          ctx.shape_env = env.ptr();
          c10::SymInt s;
          if (!cache_detail::make_symint(ctx, v, s)) {
            Py_CLEAR(v.fields);
            Py_CLEAR(v.proto);
            throw py::error_already_set();
          }
          out.append(py::reinterpret_borrow<py::object>(py_sym_node(s.toSymNodeImplUnowned())));
        }
        Py_CLEAR(v.fields);
        Py_CLEAR(v.proto);
        return out;
      },
      "Testing: the SymNodes a result-cache recipe value (expr, pytype, hint, constant, "
      "fx_node, optimized_summation) gets in each ShapeEnv in turn, as rebuilt outputs "
      "get them (a callable among the ShapeEnvs is called at its turn).");
  m.def(
      "set_symnode_kinds",
      [](py::handle is_int, py::handle is_float, py::handle is_bool) {
        cache_detail::set_symnode_kinds(is_int.ptr(), is_float.ptr(), is_bool.ptr());
      },
      "SymNode.is_int / is_float / is_bool where each is proven to return `self.pytype is "
      "<type>` (else None): a recipe's new SymNodes answer c10's kind questions in C++.");
  m.def(
      "_symbolic_layout",
      [](std::vector<c10::SymInt> sizes, std::vector<c10::SymInt> strides, c10::SymInt offset, bool direct) {
        at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
            cache_detail::meta_storage(c10::SymInt(0)), c10::DispatchKeySet(c10::DispatchKey::Meta),
            caffe2::TypeMeta::Make<float>());
        c10::TensorImpl* impl = t.unsafeGetTensorImpl();
        if (direct) {
          if (!cache_detail::set_symbolic_sizes(impl, sizes, strides, offset)) throw py::error_already_set();
        } else {
          impl->set_sizes_and_strides(sizes, strides, offset);
        }
        std::vector<c10::SymInt> s(impl->sym_sizes().begin(), impl->sym_sizes().end());
        std::vector<c10::SymInt> st(impl->sym_strides().begin(), impl->sym_strides().end());
        return py::make_tuple(s, st, impl->sym_storage_offset(), impl->has_symbolic_sizes_strides());
      },
      "Testing: the sizes, strides, offset and symbolic flag a meta tensor gets from "
      "these values, laid out by fastfake (direct) or by c10's set_sizes_and_strides.");
  m.def(
      "setup_portable_fast",
      [](py::handle refs, py::handle hints_attr) { portable_fast_setup(refs.ptr(), hints_attr.ptr()); },
      "Bind what portable records admitted in C++ need: (_PySymInputStub, "
      "_DeconstructedSymType, _DispatchCacheKey, _DispatchCacheBypassEntry, "
      "_DeconstructedSymNode.from_node, fastfake.cache.facts.match, FakeTensorMode, "
      "fastfake.cache.portable._KEY_LOG, fastfake.cache.portable._OPEN) and "
      "the name of the ShapeEnv's backed hints.");
  m.def(
      "set_portable_fast",
      [](bool on) { return portable_fast_set(on); },
      "Admit and commit portable records in C++ (else in fastfake.cache.portable); returns "
      "the previous setting.");
  m.def(
      "set_stub_extract",
      [](py::handle fn) { portable_fast_set_stub_extract(fn.is_none() ? nullptr : fn.ptr()); },
      py::arg("fn"),
      "_DeconstructedSymNode.extract where fastfake.common.compat.stub_extract proves it "
      "returns SymNode(self._expr, shape_env, self.pytype, self._hint, self.constant, "
      "self.fx_node) (None otherwise): the new SymNodes of stock's keys that a served "
      "first call stores are then made in C++ as the constructor makes them.");
  m.def(
      "portable_fast_verifier",
      [](py::handle fn) { portable_fast_set_verifier(fn.ptr()); },
      "Testing: fn(mode, func, args, kwargs, record, admitted, own_key) on every "
      "decision made in C++ (None: none).");
  m.def(
      "portable_fast_counts",
      []() { return portable_fast_counts(); },
      "[(name, n)]: portable first calls served / declined by the C++ admission, and "
      "left to fastfake.cache.portable ('python').");
  m.def("portable_fast_set_counts", [](const std::vector<std::pair<std::string, uint64_t>>& c) {
    portable_fast_set_counts(c);
  });
  m.def(
      "portable_size",
      []() { return portable_size(); },
      "Number of recorded symbolic entries other ShapeEnvs may reuse.");
  m.def(
      "portable_set_loader",
      [](py::handle fn) { portable_set_loader(fn.ptr()); },
      "Called once, at the next symbolic miss (the store reads its records); None: not at all.");
  m.def("portable_set_fast_for", [](py::handle fn) { portable_set_fast_for(fn.ptr()); },
        "fn(record, keys): the C++ fast form of a record read from disk, after its first "
        "admission in Python (None: not built).");
  m.def("portable_disk_served", []() { return portable_disk_served(); },
        "First calls served from records the store read from disk.");
  m.def("portable_set_disk_served", [](uint64_t n) { portable_set_disk_served(n); });
  m.def(
      "portable_export",
      []() {
        PyObject* r = portable_export();
        if (r == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(r);
      },
      "The portable records learned since the last export: [(key, value-id positions, hit, "
      "miss, masks, seeds, record)] (csrc/cache/entry_io.cpp's forms).");
  m.def(
      "portable_import",
      [](py::handle items) { return portable_import(items.ptr()); },
      "Add records [(key, hit, miss, masks, seeds, record)] (the key with this process's op id "
      "and value ids); returns how many were added.");
  m.def(
      "setup_real_inputs",
      [](py::handle tensor_type, py::handle parameter_type, py::handle tls, py::handle policy) {
        set_ref(g_py.tensor_type, tensor_type);
        set_ref(g_py.parameter_type, parameter_type);
        set_ref(g_py.fake_tensor_tls, tls);
        set_ref(g_py.real_policy_hook, policy);
      },
      "Bind torch.Tensor, nn.Parameter, fake_tensor_tls and the per-op conversion policy.");

  m.def(
      "setup_convert",
      [](py::handle converter_type, py::handle meta_converter_type, py::handle describer_type,
         py::handle nested_int_registry, py::handle cpu_device, bool check_grad_dtype) {
        g_py.check_grad_dtype = check_grad_dtype;
        set_ref(g_py.converter_type, converter_type);
        set_ref(g_py.meta_converter_type, meta_converter_type);
        set_ref(g_py.describer_type, describer_type);
        set_ref(g_py.nested_int_registry, nested_int_registry);
        set_ref(g_py.cpu_device, cpu_device);
      },
      "Bind FakeTensorConverter, MetaConverter, MetaTensorDescriber, the nested-int "
      "registry and torch.device('cpu') for convert_real; whether stock copies a "
      "differing grad_dtype.");
  m.def(
      "convert_real",
      [](py::handle converter, py::handle mode, py::handle t) {
        return steal_or_throw(convert_real(converter.ptr(), mode.ptr(), t.ptr()));
      },
      "FakeTensorConverter.from_real_tensor(mode, t) in C++ for a plain real tensor "
      "(NotImplemented where stock must convert).");
  m.def(
      "set_convert",
      [](bool on) {
        const bool was = g_config.convert;
        g_config.convert = on;
        return was;
      },
      "Serve plain conversions in C++ (returns the previous setting).");

  static PyMethodDef fast_detach_def = {
      "fast_detach",
      reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_detach)),
      METH_FASTCALL | METH_KEYWORDS,
      "fast_detach(fake_mode, x, include_real=False): stock's fast_detach, built in C++ "
      "for plain FakeTensors (stock's function for everything else)."};
  m.attr("fast_detach") = steal_or_throw(PyCFunction_NewEx(&fast_detach_def, nullptr, m.attr("__name__").ptr()));
  m.def(
      "setup_detach",
      [](py::handle stock) { set_ref(g_py.stock_fast_detach, stock); },
      "Bind stock's torch._subclasses.fake_impls.fast_detach (called for every case not served).");

  m.def(
      "make_fast_dispatch",
      []() { return steal_or_throw(new_fast_dispatch()); },
      "A new C-level __torch_dispatch__ method object for FakeTensorMode.");
  m.def(
      "make_device_descriptor",
      [](py::handle stock) { return steal_or_throw(new_device_descriptor(stock.ptr())); },
      "A new C-level data descriptor serving FakeTensor.device.");

  m.def(
      "set_config",
      [](bool elementwise,
         bool cache,
         bool crosscheck,
         size_t max_signatures_per_op,
         size_t cache_max_entries,
         bool cache_symbolic,
         bool real_inputs,
         size_t cache_max_bytes) {
        g_config.elementwise = elementwise;
        g_config.cache_symbolic = cache_symbolic;
        g_config.real_inputs = real_inputs;
        g_config.cache = cache;
        g_config.cache_max_entries = cache_max_entries;
        g_config.cache_max_bytes = cache_max_bytes;
        g_config.crosscheck = crosscheck;
        g_config.max_signatures_per_op = max_signatures_per_op;
      },
      py::arg("elementwise"),
      py::arg("cache"),
      py::arg("crosscheck"),
      py::arg("max_signatures_per_op"),
      py::arg("cache_max_entries"),
      py::arg("cache_symbolic") = true,
      py::arg("real_inputs") = true,
      py::arg("cache_max_bytes") = size_t(64) << 20);
  m.def("cache_clear", &cache_clear, "Drop every result-cache entry.");
  m.def(
      "take_stock_counts",
      []() {
        auto r = py::make_tuple(g_stock_counts.hits, g_stock_counts.misses,
                                g_stock_counts.non_fake_bypasses, g_stock_counts.unsafe_view_bypasses,
                                g_stock_counts.sym_scalar_bypasses);
        g_stock_counts.hits = g_stock_counts.misses = g_stock_counts.non_fake_bypasses = 0;
        g_stock_counts.unsafe_view_bypasses = g_stock_counts.sym_scalar_bypasses = 0;
        return r;
      },
      "(hits, misses, non-fake-tensor bypasses, unsafe-view bypasses, symbolic-shape bypasses) stock's cache "
      "would have counted for the calls served since the last take; zeroes them.");
  m.def(
      "stock_cache_extra_entries",
      []() { return g_stock_counts.entries; },
      "Entries stock's cache would hold for elementwise calls served here.");
  m.def(
      "stock_cache_cleared",
      &stock_counts_clear,
      "Stock's cache was cleared: forget the calls it would hold, drop pending counts.");
  m.def(
      "set_stock_counting",
      [](bool on) {
        const bool was = g_stock_counts.enabled;
        g_stock_counts.enabled = on;
        return was;
      },
      "Count served calls for stock's cache statistics (returns the previous setting).");
  m.def("cache_size", &cache_size, "Number of result-cache entries.");
  m.def("cache_bytes", &cache_bytes, "Bytes the result-cache entries hold (estimated as the byte bound counts them).");
  m.def(
      "synth_recipe",
      [](py::handle synth, bool fresh) { return steal_or_throw(synth_recipe(synth.ptr(), fresh)); },
      "What a synthesised symbolic output carries beyond its sizes/strides/offset.");
  m.def(
      "synth_build",
      [](py::handle mode, py::handle dtype, py::handle device, py::handle sizes,
         py::handle strides, py::handle offset, py::handle base, py::handle recipe) {
        return steal_or_throw(synth_build(mode.ptr(), dtype.ptr(), device.ptr(), sizes.ptr(),
                                          strides.ptr(), offset.ptr(), base.ptr(), recipe.ptr()));
      },
      "Build a synthesised symbolic output from sizes/strides/offset and a recipe.");
  m.def(
      "_inject_fault",
      [](int n, const std::string& kind) {
        if (n != 0) {
          ++g_faults_requested;
        }
        if (kind == "dtype") {
          g_config.inject_fault = n;
        } else if (kind == "device") {
          g_config.inject_device_fault = n;
        } else if (kind == "convert") {
          g_config.inject_convert_fault = n;
        } else if (kind == "portable") {
          portable_inject_fault(n);
        } else if (kind == "portable_admit" || kind == "portable_commit") {
          portable_fast_inject_fault(n, kind == "portable_commit");
        } else if (kind == "stub_node") {
          portable_fast_inject_stub_fault(n);
        } else if (kind == "rerun") {
          rerun_inject_fault(n, false);
        } else if (kind == "rerun_scalar") {
          rerun_inject_fault(n, true);
        } else if (kind == "symnode") {
          symnode_memo_inject_fault(n);
        } else if (kind == "symnode_expr") {
          symnode_expr_inject_fault(n);
        } else if (kind == "symnode_int") {
          symnode_int_inject_fault(n);
        } else if (kind == "item_memo") {
          item_memo_inject_fault(n);
        } else if (kind == "pytree") {
          pytree_inject_fault(n);
        } else if (kind == "config_attr") {
          config_attr_inject_fault(n);
        } else if (kind == "functional_dispatch") {
          functional_dispatch_inject_fault(n);
        } else if (kind == "proxy_dispatch") {
          proxy_dispatch_inject_fault(n);
        } else if (kind == "proxy_dispatch_syms") {
          proxy_dispatch_inject_sym_fault(n);
        } else if (kind == "sym_register") {
          sym_register_inject_fault(n);
        } else if (kind == "fx_node") {
          fx_node_inject_fault(n);
        } else if (kind == "sym_dispatch") {
          sym_dispatch_inject_fault(n);
        } else if (kind == "dce_pred") {
          dce_pred_inject_fault(n);
        } else {
          throw py::value_error(
              "_inject_fault: kind is 'dtype', 'device', 'convert', 'portable', 'portable_admit', "
              "'portable_commit', 'rerun', "
              "'symnode', 'symnode_expr', 'symnode_int', 'item_memo', 'pytree', 'config_attr', "
              "'functional_dispatch', 'proxy_dispatch', 'proxy_dispatch_syms', 'sym_register', 'fx_node', 'sym_dispatch' or 'dce_pred'");
        }
      },
      py::arg("n"),
      py::arg("kind") = "dtype",
      "Testing only: give the next n fast results a wrong dtype, or store a wrong "
      "device on the next n FakeTensors built, or leave requires_grad unset on the next "
      "n conversions, or serve the next n portable entries from stock's hit recipe, or "
      "skip the signature comparison in the next n portable admissions made in C++ (or the "
      "nested entries and counts in the next n commits), or "
      "leave the inputs of the next n served rerun calls without the kernel's memoised values, "
      "or give the next n SymNodes served from the memo the other optimized-summation flag, "
      "or answer the next n SymNode.expr reads after a replacement with the unreplaced _expr, "
      "or answer None for the next n SymNode.maybe_as_int calls whose answer is an int.");
  m.def(
      "_faults_requested",
      []() { return g_faults_requested; },
      "Testing only: how many non-zero faults _inject_fault was asked for in this process.");
  m.def("get_config", []() {
    return py::make_tuple(
        g_config.elementwise,
        g_config.crosscheck,
        g_config.max_signatures_per_op,
        g_config.cache,
        g_config.cache_max_entries,
        g_config.cache_symbolic);
  });

  m.def(
      "register_elementwise",
      [](const std::string& name,
         bool inplace,
         const std::vector<std::tuple<std::string, int, bool, bool, py::object>>& args) {
        std::vector<std::tuple<std::string, int, bool, PyObject*>> a;
        for (const auto& [n, k, kw, has_default, d] : args) {
          a.emplace_back(n, k, kw, has_default ? d.ptr() : nullptr);
        }
        register_elementwise(name, inplace, a);
      },
      "Register a pointwise overload by name (str(op)): (name, inplace, [(arg, kind, kwarg_only, has_default, default)]).");
  m.def("clear_elementwise", &clear_elementwise, "Forget registrations and learned signatures.");
  m.def(
      "is_elementwise_registered",
      [](py::handle op) { return is_elementwise_registered(op.ptr()); });
  m.def("elementwise_report", []() { return steal_or_throw(elementwise_report()); });
  m.def(
      "file_listing",
      [](const std::string& root,
         const std::vector<std::string>& suffixes,
         const std::vector<std::string>& skip_dirs) {
        std::string out;
        {
          py::gil_scoped_release nogil;
          out = file_listing(root, suffixes, skip_dirs);
        }
        return py::bytes(out);
      },
      "The file listing behind the self-test store's key (csrc/common/file_listing.h).");
  m.def(
      "module_code_stream",
      [](py::handle module, py::handle volatile_) {
        return steal_or_throw(module_code_stream(module.ptr(), volatile_.ptr()));
      },
      "The code of a module behind the self-test store's key, as bytes (csrc/common/code_digest.h).");
  m.def(
      "stable_stream",
      [](py::handle v) { return steal_or_throw(stable_stream(v.ptr())); },
      "A value's bytes that are the same in every process (csrc/common/code_digest.h).");
  m.def(
      "last_code_line",
      [](py::handle code) { return steal_or_throw(last_code_line(code.ptr())); },
      "The last source line a code object's instructions span (csrc/common/code_digest.h).");
  m.def("_elementwise_sizes", []() { return steal_or_throw(elementwise_sizes()); });
  m.def("stock_calls", &stock_calls, "Calls handed to stock per overload: name -> (outermost, nested).");
  m.def("stock_calls_set", &stock_calls_set);
  m.def("_set_stock_calls_max", &stock_calls_set_max);
  m.def("_set_not_pointwise_max", &set_not_pointwise_max);

  m.def("counters", []() {
    py::list out;
    for (int i = 0; i < kNumStats; ++i) {
      out.append(py::make_tuple(stat_name(i), g_stats[i]));
    }
    return out;
  });
  m.def("reset_counters", &reset_stats);
  m.def(
      "set_counters",
      [](const std::vector<uint64_t>& values) {
        if (values.size() != static_cast<size_t>(kNumStats)) {
          throw py::value_error("set_counters: one value per counter, in counters() order");
        }
        for (int i = 0; i < kNumStats; ++i) g_stats[i] = values[i];
      },
      "Set every counter (values in counters() order).");
  m.def(
      "forget_signatures",
      &forget_signatures,
      "Forget every learned elementwise signature (registrations stay).");

  m.def(
      "compare",
      [](py::handle a, py::handle b) { return compare_fake(a.ptr(), b.ptr()); },
      "Empty string if two results are identical, else the first differing field.");
}
