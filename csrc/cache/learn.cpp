// Reading the description fastfake.cache.learn.learn() gives of stock's own entry
// (and, for symbolic outputs, of the tensor stock's hit builds) into an Entry.
#include "cache/internal.h"
#include "runtime/untrack.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/tensor/python_tensor.h>
#include <torch/csrc/utils/python_symnode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/SymInt.h>

#include <cstring>
#include <list>
#include <unordered_map>

namespace fastfake {
namespace cache_detail {

bool learn_node(const KeyCtx& ctx, PyObject* node, SymVal& out);

// The recipe for one int-like of a synthesised symbolic output.
bool learn_symval(const KeyCtx& ctx, const c10::SymInt& x, SymVal& out) {
  if (!x.is_heap_allocated()) {
    out.kind = SymVal::Int;
    out.v = x.as_int_unchecked();
    return true;
  }
  return learn_node(ctx, py_sym_node(x.toSymNodeImplUnowned()), out);
}

bool learn_symbool(const KeyCtx& ctx, const c10::SymBool& x, SymVal& out) {
  if (!x.is_heap_allocated()) {
    out.kind = SymVal::Int;
    out.v = x.as_bool_unchecked() ? 1 : 0;
    return true;
  }
  return learn_node(ctx, py_sym_node(x.toSymNodeImplUnowned()), out);
}

bool learn_node(const KeyCtx& ctx, PyObject* node, SymVal& out) {
  if (node == nullptr || instance_attr(node, g_py.s_shape_env) != ctx.shape_env) {
    return false;
  }
  for (size_t i = 0; i < ctx.nodes.size(); ++i) {
    if (ctx.nodes[i] == node) {
      out.kind = SymVal::Input;
      out.v = static_cast<int64_t>(i);
      return true;
    }
  }
  PyObject* names[] = {g_py.s_expr, g_py.s_pytype, g_py.s_hint, g_py.s_constant,
                       g_py.s_fx_node, g_py.s_optimized_summation};
  PyObject* t = PyTuple_New(6);
  if (t == nullptr) return false;
  for (int i = 0; i < 6; ++i) {
    PyObject* a = PyObject_GetAttr(node, names[i]);
    if (a == nullptr) {
      Py_DECREF(t);
      return false;
    }
    PyTuple_SET_ITEM(t, i, a);
  }
  out.kind = SymVal::New;
  out.fields = t;
  untrack_inert(t);
  return true;
}

// The derived values (numel, contiguity flags) a symbolic tensor has computed.
bool learn_derived(
    const KeyCtx& ctx,
    const c10::TensorImpl* impl,
    std::vector<std::pair<Derived, SymVal>>& out) {
  if (!impl->has_symbolic_sizes_strides()) return true;
  const c10::SymbolicShapeMeta* m = shape_meta(impl);
  if (m == nullptr) return false;
  if (m->has_numel()) {
    out.emplace_back(kNumel, SymVal{});
    if (!learn_symval(ctx, m->numel(), out.back().second)) return false;
  }
  for (const auto& [d, flag] : memoised_flags(*m)) {
    out.emplace_back(d, SymVal{});
    if (!learn_symbool(ctx, *flag, out.back().second)) return false;
  }
  return true;
}

std::vector<std::pair<Derived, const c10::SymBool*>> memoised_flags(const c10::SymbolicShapeMeta& m) {
  using M = c10::SymbolicShapeMeta;
  using GetBool = const c10::SymBool& (M::*)() const;
  const std::tuple<Derived, bool, GetBool> flags[] = {
      {kContiguous, m.has_is_contiguous(), static_cast<GetBool>(&M::is_contiguous)},
      {kChannelsLastContiguous, m.has_is_channels_last_contiguous(), &M::is_channels_last_contiguous},
      {kChannelsLast3dContiguous, m.has_is_channels_last_3d_contiguous(),
       &M::is_channels_last_3d_contiguous},
      {kChannelsLast, m.has_is_channels_last(), &M::is_channels_last},
      {kChannelsLast3d, m.has_is_channels_last_3d(), &M::is_channels_last_3d},
      {kNonOverlappingAndDense, m.has_is_non_overlapping_and_dense(),
       &M::is_non_overlapping_and_dense},
  };
  std::vector<std::pair<Derived, const c10::SymBool*>> out;
  for (const auto& [d, avail, get] : flags) {
    if (avail) out.emplace_back(d, &(m.*get)());
  }
  return out;
}

// Whether a memoised derived value is one learn_derived can describe: a plain
// value, or a SymNode of this call's ShapeEnv (its fields are not read here).
bool describable(const KeyCtx& ctx, const c10::SymNodeImpl* n) {
  PyObject* node = py_sym_node(const_cast<c10::SymNodeImpl*>(n));
  return node != nullptr && instance_attr(node, g_py.s_shape_env) == ctx.shape_env;
}

// A bit per derived value a symbolic FakeTensor argument has memoised; 0 for
// anything else. Sets *ok = false when a value is not one learn_derived can
// describe.
uint32_t derived_mask(const KeyCtx& ctx, PyObject* a, bool* ok) {
  if (!is_fake_exact(a)) return 0;
  const c10::TensorImpl* impl = THPVariable_Unpack(a).unsafeGetTensorImpl();
  if (!impl->has_symbolic_sizes_strides()) return 0;
  uint32_t m = 1u << 31;
  const c10::SymbolicShapeMeta* meta = shape_meta(impl);
  if (meta == nullptr) {
    *ok = false;
    return m;
  }
  if (meta->has_numel()) {
    m |= 1u << kNumel;
    const c10::SymInt& n = meta->numel();
    if (n.is_heap_allocated() && !describable(ctx, n.toSymNodeImplUnowned())) *ok = false;
  }
  for (const auto& [d, flag] : memoised_flags(*meta)) {
    m |= 1u << d;
    if (flag->is_heap_allocated() && !describable(ctx, flag->toSymNodeImplUnowned())) *ok = false;
  }
  return m;
}

bool masks_of(const KeyCtx& ctx, PyObject* args, std::vector<uint32_t>& out) {
  bool ok = true;
  out.clear();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    out.push_back(derived_mask(ctx, PyTuple_GET_ITEM(args, i), &ok));
  }
  return ok;
}

// What the kernel memoised on argument tensors: the values present now whose bit
// was not in the mask before.
bool seeds_of(
    const KeyCtx& ctx,
    PyObject* args,
    const std::vector<uint32_t>& before,
    std::vector<Seed>& out) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    if (!is_fake_exact(a)) continue;
    const c10::TensorImpl* impl = THPVariable_Unpack(a).unsafeGetTensorImpl();
    auto values = std::make_shared<SymShape>();
    std::vector<std::pair<Derived, SymVal>> d;
    if (!learn_derived(ctx, impl, d)) {
      for (auto& p : d) Py_CLEAR(p.second.fields);
      return false;
    }
    for (auto& p : d) {
      if (before[static_cast<size_t>(i)] & (1u << p.first)) {
        Py_CLEAR(p.second.fields);
      } else {
        values->derived.push_back(std::move(p));
      }
    }
    if (!values->derived.empty()) out.push_back(Seed{i, std::move(values)});
  }
  return true;
}

// ("tensor_sym", synthesised FakeTensor, view_idx): read every int-like off the
// tensor stock's cache hit would return for this call.
bool learn_symbolic_tensor(const KeyCtx& ctx, PyObject* o, OutSpec& s) {
  if (PyTuple_GET_SIZE(o) != 3) return false;
  PyObject* synth = PyTuple_GET_ITEM(o, 1);
  if (!is_fake_exact(synth)) return false;
  PyObject* device = instance_attr(synth, g_py.s_fake_device);
  if (device == nullptr || !THPDevice_Check(device)) return false;
  const at::Tensor& t = THPVariable_Unpack(synth);
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->layout() != at::kStrided || t.requires_grad() || impl->is_quantized() ||
      !impl->has_storage()) {
    return false;
  }
  auto sym = std::make_shared<SymShape>();
  for (const auto& x : impl->sym_sizes()) {
    sym->sizes.emplace_back();
    if (!learn_symval(ctx, x, sym->sizes.back())) return false;
  }
  for (const auto& x : impl->sym_strides()) {
    sym->strides.emplace_back();
    if (!learn_symval(ctx, x, sym->strides.back())) return false;
  }
  if (!learn_symval(ctx, impl->sym_storage_offset(), sym->offset) ||
      !learn_symval(ctx, impl->storage().sym_nbytes(), sym->nbytes)) {
    return false;
  }
  sym->version = t.is_inference() ? 0 : static_cast<int64_t>(impl->version_counter().current_version());
  if (!learn_derived(ctx, impl, sym->derived)) return false;
  s.dtype = impl->dtype().toScalarType();
  Py_INCREF(device);
  s.device = device;
  s.conj = impl->is_conj();
  s.neg = impl->is_neg();
  const long long view_idx = PyLong_AsLongLong(PyTuple_GET_ITEM(o, 2));
  if (view_idx == -1 && PyErr_Occurred()) return false;
  s.kind = view_idx >= 0 ? OutSpec::View : OutSpec::Fresh;
  s.idx = view_idx;
  s.sym = std::move(sym);
  return true;
}

// Parse the description fastfake.cache.learn.learn() returns:
//   str                                   -> negative entry (stock bypassed)
//   (is_tuple, [out, ...]) with out one of
//     ("inplace", idx) | ("none",) | ("constant", int) |
//     ("tensor", dtype, sizes, strides, offset, device, is_conj, is_neg, view_idx) |
//     ("tensor", ..., view_idx, "unsafe view")   (a view with a version of its own) |
//     ("tensor_sym", synthesised FakeTensor, view_idx)      (symbolic keys only)
//   symbolic keys: (is_tuple, [out, ...], validity)
bool parse_entry(const KeyCtx& ctx, PyObject* desc, Entry& e) {
  if (PyUnicode_Check(desc)) {
    e.negative = true;
    return true;
  }
  if (!PyTuple_Check(desc) || PyTuple_GET_SIZE(desc) != (ctx.symbolic ? 3 : 2)) return false;
  if (ctx.symbolic) {
    e.validity = PyTuple_GET_ITEM(desc, 2);
    Py_INCREF(e.validity);
    untrack_inert(e.validity);
    e.env_version = replacements_version(ctx.shape_env);
  }
  e.tuple = PyObject_IsTrue(PyTuple_GET_ITEM(desc, 0)) == 1;
  PyObject* outs = PyTuple_GET_ITEM(desc, 1);
  if (!PyList_Check(outs) || PyList_GET_SIZE(outs) == 0 ||
      (!e.tuple && PyList_GET_SIZE(outs) != 1)) {
    return false;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outs); ++i) {
    PyObject* o = PyList_GET_ITEM(outs, i);
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) < 1) return false;
    const char* kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(o, 0));
    if (kind == nullptr) {
      PyErr_Clear();
      return false;
    }
    OutSpec s;
    if (std::strcmp(kind, "inplace") == 0) {
      s.kind = OutSpec::Inplace;
      s.idx = PyLong_AsLongLong(PyTuple_GET_ITEM(o, 1));
    } else if (std::strcmp(kind, "none") == 0) {
      s.kind = OutSpec::None;
    } else if (std::strcmp(kind, "constant") == 0) {
      // stock's hit returns its entry's constant_value (an int): keep it
      if (PyTuple_GET_SIZE(o) != 2 || !PyLong_CheckExact(PyTuple_GET_ITEM(o, 1))) return false;
      s.kind = OutSpec::Constant;
      s.constant = PyTuple_GET_ITEM(o, 1);
      Py_INCREF(s.constant);
    } else if (std::strcmp(kind, "tensor_sym") == 0 && ctx.symbolic) {
      if (!learn_symbolic_tensor(ctx, o, s)) {
        PyErr_Clear();
        Py_CLEAR(s.device);
        return false;
      }
    } else if (std::strcmp(kind, "tensor") == 0 &&
               (PyTuple_GET_SIZE(o) == 9 || PyTuple_GET_SIZE(o) == 10) && !ctx.symbolic) {
      PyObject* dtype = PyTuple_GET_ITEM(o, 1);
      PyObject* device = PyTuple_GET_ITEM(o, 5);
      if (!THPDtype_Check(dtype) || !THPDevice_Check(device)) return false;
      s.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
      for (int f : {2, 3}) {
        PyObject* seq = PyTuple_GET_ITEM(o, f);
        if (!PyTuple_Check(seq)) return false;
        auto& dst = f == 2 ? s.sizes : s.strides;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(seq); ++k) {
          dst.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(seq, k)));
        }
      }
      s.offset = PyLong_AsLongLong(PyTuple_GET_ITEM(o, 4));
      Py_INCREF(device);
      s.device = device;
      s.conj = PyTuple_GET_ITEM(o, 6) == Py_True;
      s.neg = PyTuple_GET_ITEM(o, 7) == Py_True;
      const long long view_idx = PyLong_AsLongLong(PyTuple_GET_ITEM(o, 8));
      s.kind = view_idx >= 0 ? OutSpec::View : OutSpec::Fresh;
      s.idx = view_idx;
      if (PyTuple_GET_SIZE(o) == 10) {
        // ("tensor", ..., view_idx, "unsafe view"): learned from stock's own
        // uncached output where stock bypasses its cache (fastfake.cache.learn)
        if (s.kind != OutSpec::View) return false;
        s.fresh_version = true;
        e.stock_bypasses = true;
      }
    } else {
      return false;
    }
    if (PyErr_Occurred()) {
      PyErr_Clear();
      Py_CLEAR(s.device);
      Py_CLEAR(s.constant);
      return false;
    }
    e.outs.push_back(std::move(s));
  }
  return true;
}

// A new SymNode with a recorded value, as stock's _DeconstructedSymNode.extract
// builds it: SymNode(expr, shape_env, pytype, hint, constant, fx_node).

} // namespace cache_detail
} // namespace fastfake
