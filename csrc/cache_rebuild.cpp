// Building the outputs of a cache hit as stock's hit builds them: fresh meta
// tensors, views on the current input's storage, symbolic sizes from recipes.
#include "cache_internal.h"

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

c10::SymNode new_node(const KeyCtx& ctx, const SymVal& v) {
  PyObject* f = v.fields;
  PyObject* argv[7] = {PyTuple_GET_ITEM(f, 0), ctx.shape_env, PyTuple_GET_ITEM(f, 1),
                       PyTuple_GET_ITEM(f, 2), PyTuple_GET_ITEM(f, 3),
                       PyTuple_GET_ITEM(f, 4), PyTuple_GET_ITEM(f, 5)};
  PyObject* node = PyObject_Vectorcall(g_py.symnode_type, argv, 7, nullptr);
  if (node == nullptr) return c10::SymNode();
  return c10::SymNode(c10::make_intrusive<torch::impl::PythonSymNodeImpl>(
      py::reinterpret_steal<py::object>(node)));
}

// The SymInt for one recorded int-like: a plain int, the current call's SymNode
// at a slot, or a new SymNode with the recorded value (as stock's
// _DeconstructedSymNode.extract builds it). Python error set on failure.
bool make_symint(const KeyCtx& ctx, const SymVal& v, c10::SymInt& out) {
  switch (v.kind) {
    case SymVal::Int:
      out = c10::SymInt(v.v);
      return true;
    case SymVal::Input:
      if (v.v < 0 || static_cast<size_t>(v.v) >= ctx.syms.size()) {
        PyErr_SetString(PyExc_RuntimeError, "fastfake cache: SymNode slot out of range");
        return false;
      }
      out = ctx.syms[static_cast<size_t>(v.v)];
      return true;
    case SymVal::New: {
      c10::SymNode node = new_node(ctx, v);
      if (!node) return false;
      try {
        out = c10::SymInt(std::move(node));
      } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return false;
      }
      return true;
    }
  }
  return false;
}

bool make_symbool(const KeyCtx& ctx, const SymVal& v, c10::SymBool& out) {
  if (v.kind == SymVal::Int) {
    out = c10::SymBool(v.v != 0);
    return true;
  }
  if (v.kind != SymVal::New) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake cache: bad SymBool recipe");
    return false;
  }
  c10::SymNode node = new_node(ctx, v);
  if (!node) return false;
  out = c10::SymBool(std::move(node));
  return true;
}

// Seed the derived quantities stock's output had computed.
bool seed_derived(const KeyCtx& ctx, c10::TensorImpl* impl, const SymShape& m) {
  if (m.derived.empty()) return true;
  c10::SymbolicShapeMeta* meta = shape_meta(impl);
  if (meta == nullptr) {
    // The recorded values rebuilt a tensor without symbolic sizes (e.g. the call's
    // SymNodes now hold constants) while stock's output had computed derived
    // values: not an output this entry proves. No error set: the caller hands the
    // call to stock (cache.symbolic.unrebuildable).
    return false;
  }
  for (const auto& [d, v] : m.derived) {
    if (d == kNumel) {
      c10::SymInt n;
      if (!make_symint(ctx, v, n)) return false;
      compat::seed_numel(meta, std::move(n));
      continue;
    }
    c10::SymBool b;
    if (!make_symbool(ctx, v, b)) return false;
    switch (d) {
      case kContiguous: meta->assume_contiguous(std::move(b)); break;
      case kChannelsLastContiguous: meta->assume_channels_last_contiguous(std::move(b)); break;
      case kChannelsLast3dContiguous: meta->assume_channels_last_3d_contiguous(std::move(b)); break;
      case kChannelsLast: meta->assume_channels_last(std::move(b)); break;
      case kChannelsLast3d: meta->assume_channels_last_3d(std::move(b)); break;
      case kNonOverlappingAndDense: meta->assume_non_overlapping_and_dense(std::move(b)); break;
      case kNumel: break;
    }
  }
  return true;
}

// A new meta storage of `nbytes` bytes (a SymInt: symbolic sizes need no allocation).
c10::Storage meta_storage(c10::SymInt nbytes) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), std::move(nbytes), c10::GetAllocator(c10::kMeta),
      /*resizable=*/true));
}

// A FakeTensor with the given storage, sizes / strides / offset, the derived values
// and version of `m`, and the conj / neg bits; no SymNode arithmetic.
PyObject* build_symbolic(
    const KeyCtx& ctx,
    PyObject* mode,
    c10::Storage storage,
    at::ScalarType dtype,
    PyObject* device,
    c10::SymIntArrayRef sizes,
    c10::SymIntArrayRef strides,
    const c10::SymInt& offset,
    const SymShape& m,
    bool conj,
    bool neg,
    const c10::TensorImpl* version_of) {
  at::Tensor t;
  try {
    t = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::Meta),
        c10::scalarTypeToTypeMeta(dtype));
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    impl->set_sizes_and_strides(sizes, strides, offset);
    if (!seed_derived(ctx, impl, m)) return nullptr;
    if (conj) impl->_set_conj(true);
    if (neg) impl->_set_neg(true);
    if (version_of != nullptr) {
      impl->set_version_counter(version_of->version_counter());
    } else {
      for (int64_t i = 0; i < m.version; ++i) impl->bump_version();
    }
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  return make_fake_tensor(mode, std::move(t), device);
}

// A symbolic output without replaying stock's SymNode arithmetic: storage of the
// recorded size (fresh) or the current view input's storage, the recorded sizes /
// strides / offset, and the derived values stock's output had computed.
PyObject* rebuild_symbolic(PyObject* mode, PyObject* args, const KeyCtx& ctx, const OutSpec& s) {
  const SymShape& m = *s.sym;
  c10::SymDimVector sizes(m.sizes.size()), strides(m.strides.size());
  c10::SymInt offset, nbytes;
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    if (!make_symint(ctx, m.sizes[i], sizes[i])) return nullptr;
  }
  for (size_t i = 0; i < m.strides.size(); ++i) {
    if (!make_symint(ctx, m.strides[i], strides[i])) return nullptr;
  }
  if (!make_symint(ctx, m.offset, offset)) return nullptr;
  c10::Storage storage;
  const c10::TensorImpl* version_of = nullptr;
  if (s.kind == OutSpec::View) {
    if (s.idx < 0 || s.idx >= PyTuple_GET_SIZE(args) ||
        !is_fake_exact(PyTuple_GET_ITEM(args, s.idx))) {
      PyErr_SetString(PyExc_RuntimeError, "fastfake cache: view argument is not a FakeTensor");
      return nullptr;
    }
    const at::Tensor& base = THPVariable_Unpack(PyTuple_GET_ITEM(args, s.idx));
    storage = base.storage();
    if (s.share_version) version_of = base.unsafeGetTensorImpl();
  } else {
    if (!make_symint(ctx, m.nbytes, nbytes)) return nullptr;
    storage = meta_storage(std::move(nbytes));
  }
  return build_symbolic(ctx, mode, std::move(storage), s.dtype, s.device, sizes, strides, offset,
                        m, s.conj, s.neg, version_of);
}

// Mirrors FakeTensorMode._get_output_tensor_from_cache_entry.
PyObject* rebuild_one(PyObject* mode, PyObject* args, const KeyCtx& ctx, const OutSpec& s) {
  switch (s.kind) {
    case OutSpec::None:
      Py_RETURN_NONE;
    case OutSpec::Inplace: {
      if (s.idx < 0 || s.idx >= PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_RuntimeError, "fastfake cache: in-place index out of range");
        return nullptr;
      }
      PyObject* a = PyTuple_GET_ITEM(args, s.idx);
      Py_INCREF(a);
      return a;
    }
    case OutSpec::Fresh:
    case OutSpec::View:
      break;
  }
  if (s.sym) {
    return rebuild_symbolic(mode, args, ctx, s);
  }
  at::Tensor empty = at::detail::empty_strided_meta(s.sizes, s.strides, s.dtype);
  if (s.conj) empty._set_conj(true);
  if (s.neg) empty._set_neg(true);
  if (s.kind == OutSpec::View) {
    if (s.idx < 0 || s.idx >= PyTuple_GET_SIZE(args) ||
        !is_fake_exact(PyTuple_GET_ITEM(args, s.idx))) {
      PyErr_SetString(PyExc_RuntimeError, "fastfake cache: view argument is not a FakeTensor");
      return nullptr;
    }
    const at::Tensor& base = THPVariable_Unpack(PyTuple_GET_ITEM(args, s.idx));
    // stock: empty.set_(view_arg.untyped_storage(), offset, shape, stride) under
    // in_kernel_invocation_manager (Python dispatch off, Meta included).
    c10::impl::ExcludeDispatchKeyGuard no_python(c10::DispatchKeySet(
        {c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    empty.set_(base.storage(), s.offset, s.sizes, s.strides);
    if (s.fresh_version) {
      empty.unsafeGetTensorImpl()->set_version_counter(c10::VariableVersion(0));
    }
  }
  return make_fake_tensor(mode, std::move(empty), s.device);
}

PyObject* rebuild(PyObject* mode, PyObject* args, const KeyCtx& ctx, const Entry& e) {
  if (!e.tuple) {
    return e.outs.empty() ? nullptr : rebuild_one(mode, args, ctx, e.outs[0]);
  }
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(e.outs.size()));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < e.outs.size(); ++i) {
    PyObject* o = rebuild_one(mode, args, ctx, e.outs[i]);
    if (o == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), o);
  }
  return t;
}

} // namespace cache_detail
} // namespace fastfake
