// fastfake: shared declarations of the C++ extension.
//
// One translation unit per concern:
//   stats.cpp        cheap counters behind fastfake.stats()
//   fake.cpp         inspecting and building FakeTensor Python objects
//   elementwise.cpp  the pointwise fast path (signatures, admission, serving)
//   elementwise_strides.cpp  its two stride rules (elementwise_internal.h)
//   cache*.cpp       the per-op result cache (static and symbolic shapes; split by
//                    concern, see cache_internal.h)
//   keys.h           encoding Python values into integer keys (both of the above)
//   compat.h         differences between torch releases (compile time)
//   stock_counts.cpp stock's cache statistics for the calls served here
//   real_inputs.cpp  non-fake tensor arguments converted by the mode's converter
//   detach.cpp       fast_detach: the FakeTensor snapshots of make_fx / FakeTensorProp
//   dispatch.cpp     the C-level FakeTensorMode.__torch_dispatch__ and device descriptor
//   module.cpp       pybind11 bindings
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
  // Real tensors converted in C++ (csrc/convert.cpp).
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
  PyObject* crosscheck_hook = nullptr; // fastfake._crosscheck.check
  PyObject* fake_dict_template = nullptr; // __dict__ of a stock-built FakeTensor
  PyObject* meta_device = nullptr; // torch.device("meta")
  PyObject* compiler_dict = nullptr; // torch.compiler.__dict__
  PyObject* export_leak_check = nullptr; // () -> bool
  PyObject* s_is_exporting_flag = nullptr;
  PyObject* cache_learn_hook = nullptr; // fastfake._cache.learn
  PyObject* op_overload_type = nullptr; // torch._ops.OpOverload
  PyObject* prim_device_op = nullptr; // torch.ops.prim.device.default
  PyObject* pre_dispatch_infra_modes = nullptr; // torch._ops pre-dispatch [PROXY, FUNCTIONAL]
  PyObject* s_shape_env = nullptr;
  PyObject* s_settings = nullptr;
  PyObject* s_cache_enabled = nullptr;
  PyObject* s_cache_crosscheck_enabled = nullptr;
  // interned attribute names
  PyObject* s_fake_mode = nullptr;
  PyObject* s_fake_device = nullptr; // the FakeTensor's device attribute (fastfake._compat)
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
  PyObject* sym_vid_hook = nullptr; // fastfake._cache.sym_vid
  PyObject* sym_vids = nullptr; // fastfake._cache._VIDS, the hook's interning dict
  PyObject* sym_valid_hook = nullptr; // fastfake._cache.still_valid
  PyObject* sym_capture_hook = nullptr; // fastfake._cache.capture_begin
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
  PyObject* real_policy_hook = nullptr; // fastfake._real_inputs.policy
  PyObject* s_allow_override = nullptr; // "allow_non_fake_inputs_override"
  PyObject* s_allow_non_fake_inputs = nullptr;
  PyObject* s_fake_tensor_converter = nullptr;
  PyObject* s_from_real_tensor = nullptr;
  // csrc/convert.cpp
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

// dispatch.cpp: torch.export's non-strict fake-tensor leak tracker is on (every
// FakeTensor must then be built by stock, whose __init__ registers it).
bool export_leak_tracking();

// detach.cpp: the C-level stand-in for torch._subclasses.fake_impls.fast_detach
// (vectorcall signature; stock's function, g_py.stock_fast_detach, serves every
// call it does not).
PyObject* fast_detach(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);

// convert.cpp: FakeTensorConverter.from_real_tensor(mode, t) for a plain real
// tensor (no shape env, source, symbolic context or make_constant: the caller
// checks those). New reference: the FakeTensor; NotImplemented where stock must
// convert (counted convert.stock.<why>); nullptr with an error set.
PyObject* convert_real(PyObject* converter, PyObject* mode, PyObject* t);

// The Python SymNode behind a SymNode implementation (nullptr if it is not one
// backed by Python). Borrowed.
PyObject* py_sym_node(c10::SymNodeImpl* node);

// Compare two fake results field by field. Returns an empty string when equal,
// otherwise a human-readable description of the first differing field.
std::string compare_fake(PyObject* a, PyObject* b);

// ---------------------------------------------------------------------------
// elementwise.cpp
// ---------------------------------------------------------------------------
enum class ArgKind : uint8_t {
  Tensor = 0,
  OptTensor,
  Scalar,
  OptScalar,
  Bool,
  OptBool,
  Int,
  OptInt,
  Float,
  OptFloat,
  Str,
  OptStr,
};

// Register a pointwise overload by its name (``str(op)``); bound to the overload
// object when one with that name is first dispatched.
void register_elementwise(
    const std::string& name,
    bool inplace,
    const std::vector<std::tuple<std::string, int, bool, PyObject*>>& args);
void clear_elementwise();
// Forget learned signatures, keep the registrations.
void forget_signatures();
bool is_elementwise_registered(PyObject* op);
// Testing: sizes of the registration tables; the bound on remembered non-pointwise
// overload objects.
PyObject* elementwise_sizes();
size_t set_not_pointwise_max(size_t n);

// Try the fast path. *handled: the call was dealt with here (the return value is
// the result, or nullptr with stock's error set); otherwise the caller passes it
// on. *served: the result was built here rather than by stock (admission).
PyObject* try_elementwise(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    bool* handled,
    bool* served);

// Per-op view of the learned signature tables (for reports and tests).
PyObject* elementwise_report();

// ---------------------------------------------------------------------------
// cache*.cpp (the result cache)
// ---------------------------------------------------------------------------
// Same contract as try_elementwise; *served: rebuilt from a cache entry.
PyObject* try_cache(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    bool* handled,
    bool* served);
void cache_clear();
// Recipe of a synthesised symbolic output (storage size if `fresh`, derived
// values, version) and building one from sizes / strides / offset + recipe.
PyObject* synth_recipe(PyObject* synth, bool fresh);
PyObject* synth_build(PyObject* mode, PyObject* dtype, PyObject* device, PyObject* sizes,
                      PyObject* strides, PyObject* offset, PyObject* base, PyObject* recipe);
size_t cache_size();
size_t cache_bytes();

// ---------------------------------------------------------------------------
// stock_counts.cpp: FakeTensorMode.cache_info() as stock would report it
// ---------------------------------------------------------------------------
struct StockCounts {
  bool enabled = true; // off while the install-time self-test runs
  bool non_fake_call = false; // serving a call whose real tensors were converted
  uint64_t hits = 0; // not yet added to FakeTensorMode.cache_hits
  uint64_t misses = 0; // not yet added to FakeTensorMode.cache_misses
  uint64_t non_fake_bypasses = 0; // not yet added to cache_bypasses["non-fake tensor"]
  uint64_t unsafe_view_bypasses = 0; // not yet added to cache_bypasses["unsafe view"]
  uint64_t sym_scalar_bypasses = 0; // not yet added to cache_bypasses["symbolic shape"]
  uint64_t entries = 0; // entries stock's cache would hold beyond its own
};
extern StockCounts g_stock_counts;
// A result-cache hit: stock would have hit too (stock bypasses its cache for a
// call with real tensor arguments). With `unsafe_view` (an entry stock's cache
// refuses, "unsafe view"): stock bypasses its cache for the call itself and runs
// its kernel, which dispatches one op of its own that stock's cache answers.
inline void stock_count_hit(bool unsafe_view = false) {
  if (!g_stock_counts.enabled) return;
  if (g_stock_counts.non_fake_call) {
    ++g_stock_counts.non_fake_bypasses;
  } else if (unsafe_view) {
    ++g_stock_counts.unsafe_view_bypasses;
  } else {
    ++g_stock_counts.hits;
  }
  if (unsafe_view) ++g_stock_counts.hits;
}
// An elementwise result built here for the call with this hash.
void stock_count_served(uint64_t call);
// Stock ran this call itself (and now holds an entry for it).
void stock_count_seen(uint64_t call);
// Take back the counts added since `before` (stock is about to count the call
// itself, when crosscheck re-runs it).
inline void stock_counts_restore(const StockCounts& before) {
  g_stock_counts.hits = before.hits;
  g_stock_counts.misses = before.misses;
  g_stock_counts.non_fake_bypasses = before.non_fake_bypasses;
  g_stock_counts.entries = before.entries;
}
// Stock's cache was cleared.
void stock_counts_clear();
size_t stock_counts_seen_size();

// ---------------------------------------------------------------------------
// real_inputs.cpp
// ---------------------------------------------------------------------------
enum class RealInputs {
  None, // no non-fake tensor argument
  Converted, // *new_args / *new_kwargs (new references; kwargs may stay nullptr)
  Stock, // the call is stock's (counted)
};
RealInputs convert_real_inputs(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    PyObject** new_args,
    PyObject** new_kwargs);

// ---------------------------------------------------------------------------
// dispatch.cpp
// ---------------------------------------------------------------------------
PyObject* new_fast_dispatch();
PyObject* new_device_descriptor(PyObject* stock_property);
PyObject* call_stock_dispatch(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs);
bool init_types();

} // namespace fastfake
