// The pointwise fast path.
//
// For an ATen overload tagged `pointwise`, the output of a FakeTensorMode call is
// determined by:
//   * shape:   broadcasting of the tensor operands (computed here);
//   * strides: the TensorIterator rule (C++ structured meta kernels) or the
//              torch._prims_common rule (Python reference meta kernels), both
//              implemented here;
//   * device:  stock's common-device rule with the CPU-scalar exception (here);
//   * dtype:   type promotion, a pure function of the "signature" of the call
//              (input dtypes, dims-are-zero, devices, Python scalar types and
//              values, default dtype).
//
// The first call with a new signature is *admitted*: it runs the stock path,
// learns the output dtype from it, checks which stride rule reproduces stock's
// result exactly, and returns stock's own result. Later calls with that
// signature are served from here. A signature whose stock call raised, or that
// no rule reproduces, is rejected and always goes to stock; so errors are always
// stock's own. The signature also carries the layout class of every operand
// (contiguous / channels-last / dense / broadcast / size-0 / size-1), which is
// what the stride rules branch on, so an admitted rule is only reused where it
// was verified to apply.
#include "elementwise/internal.h"
#include "common/fastfake.h"
#include "common/keys.h"
#include "cache/cache.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/Contiguity.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace fastfake {


using namespace elementwise_detail;

namespace {

struct ArgSpec {
  PyObject* name = nullptr; // interned, owned
  ArgKind kind = ArgKind::Tensor;
  bool kwarg_only = false;
  PyObject* dflt = nullptr; // owned; nullptr means required
};

enum RuleBits : uint8_t { kRuleTI = 1, kRuleRef = 2 };

struct SigEntry {
  int8_t state = 0; // 1 admitted, -1 rejected
  at::ScalarType dtype = at::ScalarType::Undefined;
  uint8_t rules = 0;
};

struct OpSpec {
  PyObject* op = nullptr; // owned
  std::string name;
  bool inplace = false;
  std::vector<ArgSpec> args;
  std::unordered_map<Key, SigEntry, KeyHash> sigs;
  uint64_t hits = 0;
  std::string last_mismatch;
};

std::unordered_map<PyObject*, std::unique_ptr<OpSpec>> g_ops;


// Signature tags (numbers and strings use keys.h's).
enum : int64_t {
  kTagTensor = 1,
  kTagWrapped = 2,
  kTagScalar = 3,
  kTagNone = 4,
};

// push_number() for a signature, mapping failures to this path's counters.
bool encode_number(PyObject* v, Key& sig, Stat* why) {
  switch (push_number(v, sig)) {
    case NumberKey::Ok:
      return true;
    case NumberKey::Symbolic:
      *why = EwFbSymScalar;
      return false;
    case NumberKey::NotANumber:
    default:
      *why = EwFbArgType;
      return false;
  }
}

// Layout-class flags of an operand (what the stride rules branch on).
int64_t layout_flags(const at::Tensor& t, at::IntArrayRef out_shape, const at::Tensor* prev) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  int64_t f = 0;
  if (impl->is_contiguous(at::MemoryFormat::Contiguous)) f |= 1;
  if (impl->is_contiguous(at::MemoryFormat::ChannelsLast)) f |= 2;
  if (impl->is_contiguous(at::MemoryFormat::ChannelsLast3d)) f |= 4;
  if (impl->is_non_overlapping_and_dense()) f |= 8;
  bool size0 = false, size1 = false, stride0 = false;
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  for (size_t i = 0; i < sizes.size(); ++i) {
    size0 |= sizes[i] == 0;
    size1 |= sizes[i] == 1;
    stride0 |= strides[i] == 0;
  }
  if (size0) f |= 16;
  if (size1) f |= 32;
  if (stride0) f |= 64;
  if (sizes.equals(out_shape)) f |= 128;
  if (prev != nullptr && prev->strides().equals(strides)) f |= 256;
  return f;
}

at::Tensor allocate(const OutLayout& l, at::IntArrayRef shape, at::ScalarType dtype) {
  switch (l.kind) {
    case OutLayout::Contiguous:
      return at::detail::empty_meta(
          shape, dtype, std::nullopt, std::nullopt, std::nullopt, at::MemoryFormat::Contiguous);
    case OutLayout::ChannelsLast:
      return at::detail::empty_meta(
          shape, dtype, std::nullopt, std::nullopt, std::nullopt, at::MemoryFormat::ChannelsLast);
    case OutLayout::Strided:
    default:
      return at::detail::empty_strided_meta(shape, l.strides, dtype);
  }
}

PyObject* build_output(
    PyObject* mode,
    uint8_t rule,
    const std::vector<Operand>& ops,
    at::IntArrayRef shape,
    at::ScalarType dtype,
    PyObject* device) {
  OutLayout l;
  if (rule == kRuleTI) {
    ti_layout(ops, shape, l);
  } else {
    ref_layout(ops, shape, l);
  }
  return make_fake_tensor(mode, allocate(l, shape, dtype), device);
}

// Keep only the stride rules whose result equals stock's; reject the signature
// when none does.
void narrow_rules(
    OpSpec& spec,
    SigEntry& e,
    PyObject* mode,
    const std::vector<Operand>& ops,
    at::IntArrayRef shape,
    PyObject* device,
    PyObject* stock) {
  if (!is_fake_exact(stock)) {
    e.state = -1;
    spec.last_mismatch = std::string("result type ") + Py_TYPE(stock)->tp_name;
    bump(EwRejectMismatch);
    return;
  }
  for (uint8_t rule : {kRuleTI, kRuleRef}) {
    if (!(e.rules & rule)) continue;
    PyObject* cand = build_output(mode, rule, ops, shape, e.dtype, device);
    std::string diff = cand ? compare_fake(cand, stock) : std::string("build failed");
    Py_XDECREF(cand);
    if (PyErr_Occurred()) PyErr_Clear();
    if (!diff.empty()) {
      e.rules &= ~rule;
      spec.last_mismatch = diff;
    }
  }
  if (e.rules == 0) {
    e.state = -1;
    bump(EwRejectMismatch);
  }
}

const c10::Device& dev_of(PyObject* device) {
  return reinterpret_cast<THPDevice*>(device)->device;
}

// What stock's dispatch-cache key would tell apart for this call (the signature
// plus every operand's exact metadata), as a 64-bit hash: only to count the call
// as the hit or miss stock's cache would report (stock_counts.cpp).
uint64_t call_hash(PyObject* mode, PyObject* func, const Key& sig, const std::vector<Operand>& ops) {
  uint64_t h = KeyHash{}(sig);
  auto mix = [&h](int64_t x) {
    h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  };
  // What stock's key holds besides the operands: default dtype and device,
  // inference mode, proxy tracing, the ShapeEnv's settings (or none).
  Key global;
  global.reserve(8); // (one allocation: growing it item by item cost ~1k instructions)
  if (cache_detail::global_key(mode, func, global)) {
    mix(static_cast<int64_t>(KeyHash{}(global)));
  } else {
    mix(-13);
  }
  for (const Operand& o : ops) {
    if (o.t == nullptr) {
      mix(-7);
      continue;
    }
    const auto* impl = o.t->unsafeGetTensorImpl();
    mix(static_cast<int64_t>(impl->dim()));
    for (int64_t v : impl->sizes()) mix(v);
    for (int64_t v : impl->strides()) mix(v);
    mix(impl->storage_offset());
    // (static sizes can sit on a storage of symbolic size: a view of a symbolic base)
    const c10::SymInt& nbytes = impl->storage().sym_nbytes();
    if (auto n = nbytes.maybe_as_int()) {
      mix(*n);
    } else {
      mix(-11);
      mix(reinterpret_cast<intptr_t>(nbytes.toSymNodeImplUnowned()));
    }
    mix(o.t->requires_grad());
    mix(o.t->is_inference());
  }
  return h;
}

} // namespace

namespace {

// Registered by name; bound to the overload object the first time one with that
// name is dispatched (so install() creates no OpOverload objects).
struct PendingSpec {
  bool inplace = false;
  std::vector<ArgSpec> args; // names and defaults owned
};
std::unordered_map<std::string, PendingSpec> g_pending;

// Overload objects seen that are not registered (owned references), so each
// object's name is looked up once; past the bound it is looked up again.
std::unordered_set<PyObject*> g_not_pointwise;
size_t g_not_pointwise_max = 8192;

void release_args(std::vector<ArgSpec>& args) {
  for (auto& a : args) {
    Py_XDECREF(a.name);
    Py_XDECREF(a.dflt);
  }
  args.clear();
}

void release_spec(OpSpec& spec) {
  release_args(spec.args);
  Py_XDECREF(spec.op);
  spec.op = nullptr;
}

void clear_not_pointwise() {
  for (PyObject* o : g_not_pointwise) Py_DECREF(o);
  g_not_pointwise.clear();
}

// The spec for `func`: bound, bound now from a registration of its name
// (``str(func)``), or nullptr.
OpSpec* find_spec(PyObject* func) {
  auto it = g_ops.find(func);
  if (it != g_ops.end()) return it->second.get();
  if (g_pending.empty() || g_not_pointwise.count(func) != 0) return nullptr;
  PyObject* s = PyObject_Str(func);
  if (s == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  Py_ssize_t n = 0;
  const char* c = PyUnicode_AsUTF8AndSize(s, &n);
  if (c == nullptr) {
    PyErr_Clear();
    Py_DECREF(s);
    return nullptr;
  }
  auto pit = g_pending.find(std::string(c, static_cast<size_t>(n)));
  Py_DECREF(s);
  if (pit == g_pending.end()) {
    if (g_not_pointwise.size() < g_not_pointwise_max) {
      Py_INCREF(func);
      g_not_pointwise.insert(func);
    }
    return nullptr;
  }
  auto spec = std::make_unique<OpSpec>();
  Py_INCREF(func);
  spec->op = func;
  spec->name = pit->first;
  spec->inplace = pit->second.inplace;
  spec->args = std::move(pit->second.args);
  g_pending.erase(pit);
  OpSpec* out = spec.get();
  g_ops[func] = std::move(spec);
  return out;
}

} // namespace

void register_elementwise(
    const std::string& name,
    bool inplace,
    const std::vector<std::tuple<std::string, int, bool, PyObject*>>& args) {
  PendingSpec spec;
  spec.inplace = inplace;
  for (const auto& [aname, kind, kwarg_only, dflt] : args) {
    ArgSpec a;
    a.name = PyUnicode_InternFromString(aname.c_str());
    a.kind = static_cast<ArgKind>(kind);
    a.kwarg_only = kwarg_only;
    Py_XINCREF(dflt);
    a.dflt = dflt;
    spec.args.push_back(a);
  }
  // A new registration replaces a bound or pending one of the same name.
  for (auto it = g_ops.begin(); it != g_ops.end();) {
    if (it->second->name == name) {
      release_spec(*it->second);
      it = g_ops.erase(it);
    } else {
      ++it;
    }
  }
  auto pit = g_pending.find(name);
  if (pit != g_pending.end()) {
    release_args(pit->second.args);
    g_pending.erase(pit);
  }
  g_pending.emplace(name, std::move(spec));
  // An object seen before is looked up again.
  clear_not_pointwise();
}

PyObject* elementwise_sizes() {
  return Py_BuildValue(
      "{s:n,s:n,s:n,s:n}",
      "bound", (Py_ssize_t)g_ops.size(),
      "pending", (Py_ssize_t)g_pending.size(),
      "not_pointwise", (Py_ssize_t)g_not_pointwise.size(),
      "not_pointwise_max", (Py_ssize_t)g_not_pointwise_max);
}

size_t set_not_pointwise_max(size_t n) {
  size_t old = g_not_pointwise_max;
  g_not_pointwise_max = n;
  return old;
}

void clear_elementwise() {
  for (auto& [k, spec] : g_ops) release_spec(*spec);
  g_ops.clear();
  for (auto& [k, p] : g_pending) release_args(p.args);
  g_pending.clear();
  clear_not_pointwise();
}

void forget_signatures() {
  for (auto& [k, spec] : g_ops) {
    spec->sigs.clear();
    spec->hits = 0;
    spec->last_mismatch.clear();
  }
}

bool is_elementwise_registered(PyObject* op) {
  return find_spec(op) != nullptr;
}

PyObject* elementwise_report() {
  PyObject* out = PyDict_New();
  if (out == nullptr) return nullptr;
  for (auto& [k, spec] : g_ops) {
    int64_t admitted = 0, rejected = 0;
    for (auto& [key, e] : spec->sigs) {
      (e.state > 0 ? admitted : rejected) += 1;
    }
    PyObject* v = Py_BuildValue(
        "{s:L,s:L,s:K,s:s,s:O}",
        "admitted", (long long)admitted,
        "rejected", (long long)rejected,
        "hits", (unsigned long long)spec->hits,
        "last_mismatch", spec->last_mismatch.c_str(),
        "inplace", spec->inplace ? Py_True : Py_False);
    if (v == nullptr || PyDict_SetItemString(out, spec->name.c_str(), v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(v);
  }
  // Registered, not yet dispatched.
  for (auto& [name, p] : g_pending) {
    PyObject* v = Py_BuildValue(
        "{s:L,s:L,s:K,s:s,s:O}",
        "admitted", 0LL,
        "rejected", 0LL,
        "hits", 0ULL,
        "last_mismatch", "",
        "inplace", p.inplace ? Py_True : Py_False);
    if (v == nullptr || PyDict_SetItemString(out, name.c_str(), v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(v);
  }
  return out;
}

PyObject* try_elementwise(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    bool* handled,
    bool* served) {
  *handled = false;
  *served = false;
  OpSpec* found = find_spec(func);
  if (found == nullptr) {
    return nullptr;
  }
  OpSpec& spec = *found;
  auto fallback = [&](Stat s) -> PyObject* {
    bump(s);
    return nullptr;
  };
  if (!g_config.elementwise) {
    return fallback(EwFbDisabled);
  }

  // Mode state that changes what stock does.
  PyObject* in_kernel = instance_attr(mode, g_py.s_in_kernel_invocation);
  PyObject* prop_real = instance_attr(mode, g_py.s_propagate_real_tensors);
  if ((in_kernel != nullptr && in_kernel != Py_False) ||
      (prop_real != nullptr && prop_real != Py_False) || !allows_meta(mode)) {
    return fallback(EwFbModeState);
  }

  // ---- parse arguments against the schema ----
  if (!PyTuple_Check(args)) {
    return fallback(EwFbArgs);
  }
  const Py_ssize_t nargs = PyTuple_GET_SIZE(args);
  const size_t nspec = spec.args.size();
  if (static_cast<size_t>(nargs) > nspec) {
    return fallback(EwFbArgs);
  }
  Py_ssize_t nkw = 0;
  if (kwargs != nullptr && kwargs != Py_None) {
    if (!PyDict_Check(kwargs)) {
      return fallback(EwFbArgs);
    }
    nkw = PyDict_GET_SIZE(kwargs);
  }

  Key sig;
  sig.reserve(8 + 12 * nspec);
  sig.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));

  std::vector<Operand> ops;
  ops.reserve(4);
  Py_ssize_t kw_used = 0;
  Stat why = EwFbArgType;
  for (size_t i = 0; i < nspec; ++i) {
    const ArgSpec& a = spec.args[i];
    PyObject* v = nullptr;
    if (static_cast<Py_ssize_t>(i) < nargs) {
      v = PyTuple_GET_ITEM(args, i);
    } else if (nkw > 0 && (v = PyDict_GetItemWithError(kwargs, a.name)) != nullptr) {
      ++kw_used;
    } else {
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return fallback(EwFbArgs);
      }
      v = a.dflt;
      if (v == nullptr) {
        return fallback(EwFbArgs);
      }
    }
    switch (a.kind) {
      case ArgKind::Tensor:
      case ArgKind::OptTensor: {
        if (v == Py_None) {
          if (a.kind != ArgKind::OptTensor) return fallback(EwFbArgType);
          sig.push_back(kTagNone);
          break;
        }
        if (is_fake_exact(v)) {
          if (instance_attr(v, g_py.s_fake_mode) != mode) {
            return fallback(EwFbOtherMode);
          }
          PyObject* constant = instance_attr(v, g_py.s_constant);
          if (constant != nullptr && constant != Py_None) {
            return fallback(EwFbConstant);
          }
          const at::Tensor& t = THPVariable_Unpack(v);
          const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
          if (impl->has_symbolic_sizes_strides()) {
            return fallback(EwFbSymbolic);
          }
          if (impl->layout() != at::kStrided || impl->is_quantized() || impl->is_nested() ||
              has_own_dispatch_keys(v)) {
            return fallback(EwFbLayout);
          }
          if (impl->is_conj() || impl->is_neg()) {
            return fallback(EwFbConjNeg);
          }
          PyObject* dev = instance_attr(v, g_py.s_fake_device);
          if (dev == nullptr || !THPDevice_Check(dev)) {
            return fallback(EwFbArgType);
          }
          Operand op;
          op.obj = v;
          op.t = &t;
          op.device = dev;
          ops.push_back(op);
          break;
        }
        if (THPVariable_Check(v)) {
          return fallback(EwFbNonFake);
        }
        // A Python number in a Tensor slot: stock wraps it as a CPU scalar.
        sig.push_back(kTagWrapped);
        if (!encode_number(v, sig, &why)) {
          return fallback(why);
        }
        Operand op;
        op.obj = v;
        ops.push_back(op);
        break;
      }
      case ArgKind::Scalar:
      case ArgKind::OptScalar:
        if (v == Py_None) {
          if (a.kind != ArgKind::OptScalar) return fallback(EwFbArgType);
          sig.push_back(kTagNone);
          break;
        }
        sig.push_back(kTagScalar);
        if (!encode_number(v, sig, &why)) {
          return fallback(why);
        }
        break;
      case ArgKind::Bool:
      case ArgKind::OptBool:
      case ArgKind::Int:
      case ArgKind::OptInt:
      case ArgKind::Float:
      case ArgKind::OptFloat:
        if (v == Py_None) {
          if (a.kind == ArgKind::Bool || a.kind == ArgKind::Int || a.kind == ArgKind::Float) {
            return fallback(EwFbArgType);
          }
          sig.push_back(kTagNone);
          break;
        }
        if (!encode_number(v, sig, &why)) {
          return fallback(why);
        }
        break;
      case ArgKind::Str:
      case ArgKind::OptStr: {
        if (v == Py_None) {
          if (a.kind != ArgKind::OptStr) return fallback(EwFbArgType);
          sig.push_back(kTagNone);
          break;
        }
        if (!PyUnicode_CheckExact(v)) {
          return fallback(EwFbArgType);
        }
        if (!push_str(v, sig)) {
          return fallback(EwFbArgType);
        }
        break;
      }
    }
  }
  if (kw_used != nkw) {
    return fallback(EwFbArgs);
  }

  // ---- broadcast shape ----
  Shape shape;
  bool any_tensor = false;
  for (const auto& op : ops) {
    if (op.t == nullptr) continue;
    any_tensor = true;
    const auto s = op.t->sizes();
    if (s.size() > shape.size()) {
      shape.insert(shape.begin(), s.size() - shape.size(), 1);
    }
    const size_t off = shape.size() - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& o = shape[off + d];
      if (o == s[d] || s[d] == 1) continue;
      if (o == 1) {
        o = s[d];
        continue;
      }
      return fallback(EwFbBroadcast);
    }
  }
  if (!any_tensor) {
    return fallback(EwFbNoTensor);
  }

  // ---- common device (FakeTensor._find_common_device) ----
  PyObject* common = nullptr;
  bool common_cpu0 = false;
  for (const auto& op : ops) {
    if (op.t == nullptr) continue;
    const c10::Device& d = dev_of(op.device);
    const bool cpu0 = d.is_cpu() && op.t->dim() == 0;
    if (common == nullptr) {
      common = op.device;
      common_cpu0 = cpu0;
      continue;
    }
    if (d == dev_of(common)) {
      if (common_cpu0) common_cpu0 = cpu0;
      continue;
    }
    if (cpu0) continue;
    if (common_cpu0) {
      common = op.device;
      common_cpu0 = cpu0;
      continue;
    }
    return fallback(EwFbDevice);
  }

  // ---- signature: layout class and device of every tensor operand ----
  const at::Tensor* prev = nullptr;
  for (const auto& op : ops) {
    if (op.t == nullptr) continue;
    const c10::Device& d = dev_of(op.device);
    sig.push_back(kTagTensor);
    sig.push_back(static_cast<int64_t>(op.t->scalar_type()));
    sig.push_back(device_code(d));
    sig.push_back(op.t->dim());
    const int64_t flags = layout_flags(*op.t, shape, prev);
    sig.push_back(flags);
    if ((flags & 32) != 0 && op.t->dim() >= 2) {
      // A size-1 dimension: its stride is free, and stock's kernels disagree on
      // what it means (TensorIterator ignores it, the reference rule sorts by it,
      // some meta kernels keep it), so no class of such layouts is proven by one
      // member. The operand's exact sizes and strides join the signature: a rule
      // is reused only for the very layout it was verified on.
      for (int64_t v : op.t->sizes()) sig.push_back(v);
      for (int64_t v : op.t->strides()) sig.push_back(v);
    }
    prev = op.t;
  }

  // ---- in-place: result is `self`, after stock's shape / overlap checks ----
  PyObject* self_obj = nullptr;
  if (spec.inplace) {
    const Operand& self = ops.front();
    if (nargs < 1 || self.t == nullptr || self.obj != PyTuple_GET_ITEM(args, 0)) {
      return fallback(EwFbArgs);
    }
    if (!self.t->sizes().equals(shape)) {
      return fallback(EwFbInplaceShape);
    }
    const auto* simpl = self.t->unsafeGetTensorImpl();
    if (!simpl->is_non_overlapping_and_dense()) {
      // may have internal overlap: let stock decide
      const auto ss = simpl->strides();
      const auto sz = simpl->sizes();
      for (size_t d = 0; d < ss.size(); ++d) {
        if (ss[d] == 0 && sz[d] > 1) {
          return fallback(EwFbInplaceOverlap);
        }
      }
    }
    const auto* sst = simpl->storage().unsafeGetStorageImpl();
    for (size_t k = 1; k < ops.size(); ++k) {
      if (ops[k].t == nullptr) continue;
      if (ops[k].t->unsafeGetTensorImpl() == simpl) continue;
      if (ops[k].t->unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() == sst) {
        return fallback(EwFbInplaceOverlap);
      }
    }
    self_obj = self.obj;
  }

  // ---- learned signature ----
  auto sit = spec.sigs.find(sig);
  if (sit != spec.sigs.end()) {
    SigEntry& e = sit->second;
    if (e.state < 0) {
      return fallback(EwFbRejected);
    }
    if (!spec.inplace && e.rules == (kRuleTI | kRuleRef)) {
      // Both rules reproduced stock when this signature was admitted. Where they
      // disagree for this call, stock decides, and the entry keeps only the
      // rule(s) that reproduced it.
      OutLayout lt, lr;
      ti_layout(ops, shape, lt);
      ref_layout(ops, shape, lr);
      if (explicit_strides(lt, shape) != explicit_strides(lr, shape)) {
        *handled = true;
        bump(EwDisambiguate);
        PyObject* stock = call_stock_dispatch(mode, func, types, args, kwargs);
        if (stock == nullptr) {
          return nullptr;
        }
        stock_count_seen(call_hash(mode, func, sig, ops));
        narrow_rules(spec, e, mode, ops, shape, common, stock);
        return stock;
      }
    }
    *handled = true;
    *served = true;
    ++spec.hits;
    bump(EwHit);
    stock_count_served(call_hash(mode, func, sig, ops));
    if (spec.inplace) {
      Py_INCREF(self_obj);
      return self_obj;
    }
    const uint8_t rule = (e.rules & kRuleTI) ? kRuleTI : kRuleRef;
    at::ScalarType dtype = e.dtype;
    if (g_config.inject_fault > 0) {
      --g_config.inject_fault;
      dtype = dtype == at::kFloat ? at::kDouble : at::kFloat;
    }
    return build_output(mode, rule, ops, shape, dtype, common);
  }
  if (spec.sigs.size() >= g_config.max_signatures_per_op) {
    return fallback(EwFbSigLimit);
  }

  // ---- admission: run stock once, learn dtype, verify the stride rules ----
  *handled = true;
  PyObject* stock = call_stock_dispatch(mode, func, types, args, kwargs);
  SigEntry entry;
  if (stock != nullptr) {
    stock_count_seen(call_hash(mode, func, sig, ops));
  }
  if (stock == nullptr) {
    entry.state = -1;
    spec.sigs.emplace(std::move(sig), entry);
    bump(EwRejectError);
    return nullptr; // stock's own error propagates
  }
  if (spec.inplace) {
    if (stock == self_obj) {
      entry.state = 1;
      bump(EwAdmit);
    } else {
      entry.state = -1;
      spec.last_mismatch = "in-place result is not self";
      bump(EwRejectMismatch);
    }
    spec.sigs.emplace(std::move(sig), entry);
    return stock;
  }
  // Learn the dtype; keep the stride rules that reproduce stock's result.
  entry.state = 1;
  entry.rules = kRuleTI | kRuleRef;
  if (is_fake_exact(stock)) {
    entry.dtype = THPVariable_Unpack(stock).scalar_type();
  }
  narrow_rules(spec, entry, mode, ops, shape, common, stock);
  if (entry.state > 0) {
    bump(EwAdmit);
  }
  spec.sigs.emplace(std::move(sig), entry);
  return stock;
}

} // namespace fastfake
