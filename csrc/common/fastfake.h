// fastfake: what every subsystem of the C++ extension shares: the counters
// behind fastfake.stats(), the switches install() sets, the Python objects the
// extension holds, and inspecting / building FakeTensor objects (common/fake.cpp).
//
// The extension by folder (each subsystem includes only common/ and the folders
// before it in this list; tests/test_layout.py checks it):
//   common/      counters, config, Python references, FakeTensor helpers, integer
//                keys (keys.h), release differences (compat.h), file listings
//   stock/       stock's cache key in C++, stock's cache statistics for served calls,
//                calls handed to stock per overload
//   symbolic/    SymNode arithmetic memo, SymNode.expr, SymNode.maybe_as_int
//   tracing/     the tracing stack around the ops: pytree maps over plain trees
//   cache/       the per-op result cache: keys (the global part of which the
//                elementwise signatures share: cache.h), learning, rebuilding,
//                synthesised outputs, portable records, reruns, item memo
//                (cache/internal.h)
//   elementwise/ the pointwise fast path and its stride rules
//   convert/     real tensors into FakeTensors, snapshots (fast_detach), real inputs
//   dispatch/    the C-level FakeTensorMode.__torch_dispatch__ and device descriptor
//   module.cpp   pybind11 bindings
#pragma once

#include <Python.h>
#include <structmember.h>

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fastfake {

// ---------------------------------------------------------------------------
// Counters. Names are the dotted keys of fastfake.stats().
// ---------------------------------------------------------------------------
#define FASTFAKE_FOR_EACH_STAT(_)                                   \
  _(DispatchTotal, "dispatch.total")                                \
  _(DispatchStock, "dispatch.stock")                                \
  _(DispatchPrimDevice, "dispatch.prim_device")                     \
  _(EwHit, "elementwise.hit")                                       \
  _(EwAdmit, "elementwise.admit")                                   \
  _(EwDisambiguate, "elementwise.disambiguate")                     \
  _(EwRejectError, "elementwise.reject.stock_error")                \
  _(EwRejectMismatch, "elementwise.reject.rule_mismatch")           \
  _(EwFbDisabled, "elementwise.fallback.disabled")                  \
  _(EwFbArgs, "elementwise.fallback.arguments")                     \
  _(EwFbArgType, "elementwise.fallback.argument_type")              \
  _(EwFbNonFake, "elementwise.fallback.non_fake_tensor")            \
  _(EwFbOtherMode, "elementwise.fallback.other_fake_mode")          \
  _(EwFbConstant, "elementwise.fallback.constant")                  \
  _(EwFbSymbolic, "elementwise.fallback.symbolic_shape")            \
  _(EwFbSymScalar, "elementwise.fallback.symbolic_scalar")          \
  _(EwFbLayout, "elementwise.fallback.layout")                      \
  _(EwFbConjNeg, "elementwise.fallback.conj_neg")                   \
  _(EwFbModeState, "elementwise.fallback.mode_state")               \
  _(EwFbNoTensor, "elementwise.fallback.no_tensor")                 \
  _(EwFbBroadcast, "elementwise.fallback.broadcast_error")          \
  _(EwFbInplaceShape, "elementwise.fallback.inplace_shape")         \
  _(EwFbInplaceOverlap, "elementwise.fallback.inplace_overlap")     \
  _(EwFbDevice, "elementwise.fallback.device_mix")                  \
  _(EwFbRejected, "elementwise.fallback.rejected_signature")        \
  _(EwFbSigLimit, "elementwise.fallback.signature_limit")           \
  _(CacheHit, "cache.hit")                                          \
  _(CacheMiss, "cache.miss")                                        \
  _(CacheEvict, "cache.evict")                                      \
  _(CacheBypassNotOp, "cache.bypass.not_an_op_overload")            \
  _(CacheBypassModeState, "cache.bypass.mode_state")                \
  _(CacheBypassOtherMode, "cache.bypass.other_fake_mode")           \
  _(CacheBypassConstant, "cache.bypass.constant")                   \
  _(CacheBypassSymbolic, "cache.bypass.symbolic_shape")             \
  _(CacheBypassLayout, "cache.bypass.layout")                       \
  _(CacheBypassNonFake, "cache.bypass.non_fake_tensor")             \
  _(CacheBypassArgType, "cache.bypass.argument_type")               \
  _(CacheBypassStock, "cache.bypass.stock_uncacheable")             \
  _(CacheBypassSymScalar, "cache.bypass.symbolic_scalar")           \
  _(CacheBypassSymOther, "cache.bypass.symbolic_other")             \
  _(CacheBypassDeviceIndex, "cache.bypass.device_without_index")    \
  _(CacheSymHit, "cache.symbolic.hit")                              \
  _(CacheSymMiss, "cache.symbolic.miss")                            \
  _(CacheSymReject, "cache.symbolic.unlearnable")                   \
  _(CacheSymRecheck, "cache.symbolic.rechecked")                    \
  _(CacheSymStale, "cache.symbolic.stale")                          \
  _(CacheSymSynthReuse, "cache.symbolic.synth_reused")              \
  _(CacheSymUnrebuildable, "cache.symbolic.unrebuildable")          \
  _(CrossChecked, "crosscheck.checked")                             \
  _(CrossMismatch, "crosscheck.mismatch")                           \
  _(RealConverted, "real_inputs.converted")                         \
  _(RealStockDisabled, "real_inputs.stock.disabled")                \
  _(RealStockForeign, "real_inputs.stock.other_tensor_kind")        \
  _(RealStockNotAllowed, "real_inputs.stock.not_allowed")           \
  _(RealStockOp, "real_inputs.stock.op")                            \
  _(RealStockError, "real_inputs.stock.conversion_error")           \
  _(ConvertFast, "convert.fast")                                    \
  _(ConvertMemo, "convert.memo")                                    \
  _(ConvertStockDisabled, "convert.stock.disabled")                 \
  _(ConvertStockArgs, "convert.stock.arguments")                    \
  _(ConvertStockTensor, "convert.stock.tensor")                     \
  _(ConvertStockState, "convert.stock.state")                       \
  _(ConvertStockSharedStorage, "convert.stock.shared_storage")      \
  _(DetachFast, "detach.fast")                                      \
  _(DetachStockArgs, "detach.stock.arguments")                      \
  _(DetachStockTensor, "detach.stock.tensor")                       \
  _(DetachStockState, "detach.stock.state")                         \
  _(DeviceFast, "device.fast")                                      \
  _(DeviceStock, "device.stock")

enum Stat : int {
#define FASTFAKE_ENUM(e, s) e,
  FASTFAKE_FOR_EACH_STAT(FASTFAKE_ENUM)
#undef FASTFAKE_ENUM
      kNumStats
};

extern uint64_t g_stats[kNumStats];
inline void bump(Stat s) {
  ++g_stats[s];
}
const char* stat_name(int s);
void reset_stats();

// ---------------------------------------------------------------------------
// Global switches (set by fastfake.install / enabled).
// ---------------------------------------------------------------------------
struct Config {
  bool elementwise = false;
  bool crosscheck = false;
  // Maximum number of learned signatures per elementwise op.
  size_t max_signatures_per_op = 1024;
  bool cache = false;
  size_t cache_max_entries = 1 << 16;
  // ... and by the bytes its entries hold (estimated: keys, index, output specs,
  // the Python tuples of new SymNode values); the LRU end goes first either way.
  size_t cache_max_bytes = size_t(64) << 20;
  // Also cache calls with symbolic shapes (per ShapeEnv).
  bool cache_symbolic = true;
  // Convert non-fake tensor arguments (allow_non_fake_inputs) and serve the call.
  bool real_inputs = true;
  // Testing only: corrupt the dtype of the next N fast results.
  int inject_fault = 0;
  // Testing only: store a wrong device (meta) on the next N results served fast.
  int inject_device_fault = 0;
  // Real tensors converted in C++ (csrc/convert/convert.cpp).
  bool convert = false;
  // Testing only: the next n conversions leave requires_grad unset.
  int inject_convert_fault = 0;
};
extern Config g_config;

// ---------------------------------------------------------------------------
// Python objects the extension needs (set once by _C.setup()).
// ---------------------------------------------------------------------------
struct PyRefs {
  PyTypeObject* fake_tensor_type = nullptr; // torch._subclasses.fake_tensor.FakeTensor
  PyObject* fake_mode_type = nullptr; // FakeTensorMode
  PyObject* stock_torch_dispatch = nullptr; // original FakeTensorMode.__torch_dispatch__
  PyObject* simple_call_counter = nullptr; // torch.utils._stats.simple_call_counter
  PyObject* crosscheck_hook = nullptr; // fastfake.parity.crosscheck.check
  PyObject* fake_dict_template = nullptr; // __dict__ of a stock-built FakeTensor
  PyObject* meta_device = nullptr; // torch.device("meta")
  PyObject* compiler_dict = nullptr; // torch.compiler.__dict__
  PyObject* export_leak_check = nullptr; // () -> bool
  PyObject* s_is_exporting_flag = nullptr;
  PyObject* cache_learn_hook = nullptr; // fastfake.cache.learn.learn
  PyObject* op_overload_type = nullptr; // torch._ops.OpOverload
  PyObject* prim_device_op = nullptr; // torch.ops.prim.device.default
  PyObject* pre_dispatch_infra_modes = nullptr; // torch._ops pre-dispatch [PROXY, FUNCTIONAL]
  PyObject* s_shape_env = nullptr;
  PyObject* s_settings = nullptr;
  PyObject* s_cache_enabled = nullptr;
  PyObject* s_cache_crosscheck_enabled = nullptr;
  // interned attribute names
  PyObject* s_fake_mode = nullptr;
  PyObject* s_fake_device = nullptr; // the FakeTensor's device attribute (fastfake.common.compat)
  PyObject* s_dispatch_keys = nullptr; // "dispatch_keys"
  PyObject* s_constant = nullptr;
  PyObject* s_real_tensor = nullptr; // "real_tensor"
  PyObject* s_in_kernel_invocation = nullptr;
  PyObject* s_propagate_real_tensors = nullptr;
  PyObject* s_allow_unsafe_data_ptr_access = nullptr;
  PyObject* s_dispatch_counter_key = nullptr; // "FakeTensorMode.__torch_dispatch__"
  // symbolic shapes (set by _C.setup_symbolic())
  PyObject* symnode_type = nullptr; // torch.fx.experimental.sym_node.SymNode
  PyObject* symint_type = nullptr; // torch.SymInt
  PyObject* symfloat_type = nullptr; // torch.SymFloat (set by _C.setup_rerun())
  PyObject* sym_vid_hook = nullptr; // fastfake.cache.learn.sym_vid
  PyObject* sym_vids = nullptr; // fastfake.cache.learn._VIDS, the hook's interning dict
  PyObject* sym_valid_hook = nullptr; // fastfake.cache.learn.still_valid
  PyObject* sym_capture_hook = nullptr; // fastfake.cache.learn.capture_begin
  PyObject* s_node = nullptr; // "node"
  PyObject* s_fastfake_vid = nullptr; // "_fastfake_vid"
  PyObject* s_expr = nullptr; // "_expr"
  PyObject* s_hint = nullptr; // "_hint"
  PyObject* s_pytype = nullptr;
  PyObject* s_fx_node = nullptr;
  PyObject* s_optimized_summation = nullptr;
  PyObject* s_replacements_version = nullptr; // "_replacements_version_counter"
  PyObject* s_translation_validation = nullptr; // "_translation_validation_enabled"
  PyObject* s_cache_hits = nullptr;
  PyObject* s_cache_misses = nullptr;
  // non-fake inputs (set by _C.setup_real_inputs())
  PyObject* tensor_type = nullptr; // torch.Tensor
  PyObject* parameter_type = nullptr; // torch.nn.Parameter
  PyObject* stock_fast_detach = nullptr; // torch._subclasses.fake_impls.fast_detach
  PyObject* fake_tensor_tls = nullptr; // torch._subclasses.fake_tensor.fake_tensor_tls
  PyObject* real_policy_hook = nullptr; // fastfake.convert.real_inputs.policy
  PyObject* s_allow_override = nullptr; // "allow_non_fake_inputs_override"
  PyObject* s_allow_non_fake_inputs = nullptr;
  PyObject* s_fake_tensor_converter = nullptr;
  PyObject* s_from_real_tensor = nullptr;
  // csrc/convert/convert.cpp
  PyObject* converter_type = nullptr; // FakeTensorConverter
  PyObject* meta_converter_type = nullptr; // meta_utils.MetaConverter
  PyObject* describer_type = nullptr; // meta_utils.MetaTensorDescriber
  PyObject* nested_int_registry = nullptr; // nested_tensor._tensor_symint_registry
  PyObject* cpu_device = nullptr; // torch.device("cpu")
  bool check_grad_dtype = true; // stock copies a differing grad_dtype (2.13 on)
  PyObject* s_meta_converter = nullptr;
  PyObject* s_describer = nullptr;
  PyObject* s_copy_data = nullptr;
  PyObject* s_get_memo = nullptr; // "_get_memo"
  PyObject* s_tensor_memo = nullptr;
  PyObject* s_storage_memo = nullptr;
  PyObject* s_lookup_storage = nullptr;
  PyObject* s_get = nullptr;
  PyObject* s_hit = nullptr;
  PyObject* s_arg_cnt = nullptr;
  PyObject* s_get_storage_id = nullptr;
  PyObject* s_get_tensor_id = nullptr;
  PyObject* s_untyped_storage = nullptr;
  PyObject* s_requires_grad = nullptr;
  PyObject* s_is_param = nullptr; // "_is_param"
  PyObject* s_grad_dtype = nullptr;
  PyObject* s_dynamo_dynamic_indices = nullptr;
  PyObject* s_dynamo_hint_overrides = nullptr;
  PyObject* s_is_buffer = nullptr; // "_is_buffer"
  PyObject* s_allow_meta = nullptr; // "allow_meta"
};
extern PyRefs g_py;

// ---------------------------------------------------------------------------
// fake.cpp: FakeTensor helpers
// ---------------------------------------------------------------------------

// Borrowed lookup of an attribute in an object's instance __dict__ (no descriptors);
// nullptr if absent. Never sets a Python error.
PyObject* instance_attr(PyObject* obj, PyObject* name);
// What `obj.<name>` gives where that is a plain value: the instance's own, else a
// class attribute that is no descriptor (borrowed); nullptr otherwise, or if absent.
// Never sets a Python error.
PyObject* plain_attr(PyObject* obj, PyObject* name);
// What `obj.<name>` finds on its class (along the MRO, as attribute access
// looks it up), where the instance has no attribute of that name (borrowed),
// else nullptr: for a method, the function `obj.<name>()` calls.
PyObject* class_attr(PyObject* obj, PyObject* name);

// The offset of the object slot that `d` reads, if it is a member descriptor
// of an object slot (writable ones only, where `writable`), else -1.
inline Py_ssize_t member_slot_offset(PyObject* d, bool writable) {
  if (d == nullptr || Py_TYPE(d) != &PyMemberDescr_Type) return -1;
  PyMemberDef* m = reinterpret_cast<PyMemberDescrObject*>(d)->d_member;
  if (m->type != T_OBJECT_EX || (writable && (m->flags & READONLY))) return -1;
  return m->offset;
}

// Does the FakeTensor carry dispatch keys of its own (`FakeTensor.dispatch_keys`
// not None: a fake mkldnn tensor on 2.14+, whose meta backing looks strided)?
inline bool has_own_dispatch_keys(PyObject* t) {
  PyObject* k = instance_attr(t, g_py.s_dispatch_keys);
  return k != nullptr && k != Py_None;
}

// The mode lets FakeTensors have the meta device (FakeTensorMode.allow_meta,
// torch._functorch.config.fake_tensor_allow_meta; default on). Where it does not,
// stock's FakeTensor.__new__ raises for a meta output, which no FakeTensor built
// here checks: such modes are left to stock.
inline bool allows_meta(PyObject* mode) {
  return instance_attr(mode, g_py.s_allow_meta) == Py_True;
}

// Is `obj` exactly a FakeTensor (not a subclass)?
inline bool is_fake_exact(PyObject* obj) {
  return Py_TYPE(obj) == g_py.fake_tensor_type;
}

// Wrap a freshly allocated meta tensor into a FakeTensor exactly as
// FakeTensor.__new__ does. `device` is a torch.device object (borrowed).
// Returns a new reference or nullptr with a Python error set.
PyObject* make_fake_tensor(PyObject* mode, at::Tensor elem, PyObject* device);

// torch.export's non-strict fake-tensor leak tracker is on (every
// FakeTensor must then be built by stock, whose __init__ registers it).
bool export_leak_tracking();

// Proxy tracing is active (make_fx's PROXY mode, or the pre-dispatch modes);
// common/fake.cpp.
bool proxy_tracing();


// The Python SymNode behind a SymNode implementation (nullptr if it is not one
// backed by Python). Borrowed.
PyObject* py_sym_node(c10::SymNodeImpl* node);

// Compare two fake results field by field. Returns an empty string when equal,
// otherwise a human-readable description of the first differing field.
std::string compare_fake(PyObject* a, PyObject* b);

} // namespace fastfake
