// Stock's own dispatch-cache key (`FakeTensorMode._cache_key`), built in C++.
//
// fastfake stores entries into stock's cache (a served first call in a new
// ShapeEnv stores the entry stock's miss would, fastfake/cache/portable.py) and reads
// stock's entries when it learns (fastfake/cache/learn.py). Both need the key stock
// would build for the call: the same `_DispatchCacheKey` over the same items,
// with each SymInt converted by the caller's `_CacheKeyState` (stock's own
// `convert_sym_int`, so the stubs, back-references, known symbols and `expr`
// reads are stock's). Stock builds it in Python (`_prep_args_for_hash` and
// `extract_tensor_metadata` per argument: ~60 us for a binary op on two symbolic
// tensors); here the items are laid out as stock lays them out:
//
//   func, default dtype, default device (a string), inference mode,
//   ShapeEnv settings (None without a ShapeEnv), proxy tracing (not on 2.9),
//   [tuple, "length_n", <each argument>] if there are arguments,
//   [dict, "length_n", <each keyword: str, name>, <each value>] if keywords,
//
// a FakeTensor as its TensorMetadata flattened (dtype, [torch.Size, "length_n",
// sizes], [tuple, "length_n", strides], device, layout, memory format, storage
// offset, storage bytes, requires_grad, is_quantized, is_conj, is_neg,
// is_inference, is_sparse, is_coalesced, dense_dim, sparse_dim; an int of a size
// or stride as `int, value`, the offset and bytes as the bare value), a list /
// tuple / dict as its type, its length and its items, and any other value as its
// type and itself.
//
// Anything else -- a tensor that is not this mode's plain strided FakeTensor, a
// constant, a SymFloat / SymBool, a callable, a 4-d / 5-d static tensor (whose
// memory format needs stock's channels-last test), a value of a type not listed
// above, a kernel invocation in progress -- returns None and the caller asks
// stock (`mode._cache_key`), which builds the key or raises its bypass. The
// layout is the one of the releases fastfake knows; fastfake/stock/key.py proves
// it against stock's own keys at install and leaves it off if they differ.
#include "common/fastfake.h"
#include "stock/key.h"

#include <c10/core/DefaultDtype.h>
#include <c10/core/DeviceType.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/SymInt.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/tensor/python_tensor.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <string>
#include <vector>

namespace fastfake {

namespace {

struct Refs {
  PyObject* key_type = nullptr; // _DispatchCacheKey
  PyObject* stub_type = nullptr; // _PySymInputStub
  PyObject* backref_type = nullptr; // _InputBackref
  PyObject* s_expr_prop = nullptr; // "expr"
  PyObject* size_type = nullptr; // torch.Size
  PyObject* s_convert_sym_int = nullptr;
  std::vector<PyObject*> lengths; // "length_0", "length_1", ... (owned)
  bool tracing_item = true; // the head holds "proxy tracing" (2.13+; not 2.9)
  bool on = false;
} g;

uint64_t g_built = 0;
uint64_t g_fallback = 0;

PyObject* length_str(Py_ssize_t n) {
  if (n < 0) return nullptr;
  while (static_cast<Py_ssize_t>(g.lengths.size()) <= n && g.lengths.size() < 64) {
    g.lengths.push_back(
        PyUnicode_FromString(("length_" + std::to_string(g.lengths.size())).c_str()));
    if (g.lengths.back() == nullptr) {
      g.lengths.pop_back();
      return nullptr;
    }
  }
  if (n < static_cast<Py_ssize_t>(g.lengths.size())) {
    Py_INCREF(g.lengths[n]);
    return g.lengths[n];
  }
  return PyUnicode_FromString(("length_" + std::to_string(n)).c_str());
}

// Appends `v` (a new reference is taken); false on error.
bool push(PyObject* list, PyObject* v) {
  return v != nullptr && PyList_Append(list, v) == 0;
}

bool push_new(PyObject* list, PyObject* v) {
  if (v == nullptr) return false;
  const bool ok = PyList_Append(list, v) == 0;
  Py_DECREF(v);
  return ok;
}

enum class R { Ok, Fallback, Error };

struct Builder {
  PyObject* mode;
  PyObject* convert; // state.convert_sym_int (bound), or nullptr: converted here
  PyObject* result; // list
  // (converted here) the SymNodes seen and their positions in the key
  std::vector<std::pair<PyObject*, Py_ssize_t>> seen{};

  R sym(PyObject* symint) {
    if (convert != nullptr) {
      PyObject* argv[2] = {result, symint};
      PyObject* r = PyObject_Vectorcall(convert, argv, 2, nullptr);
      if (r == nullptr) return R::Error;
      Py_DECREF(r);
      return R::Ok;
    }
    // `_CacheKeyState.convert_sym_int` without the state: a back-reference to the
    // position of the SymNode's first stub, or a stub after reading the SymNode's
    // `expr` as stock does (it applies the ShapeEnv's replacements); the symbols
    // it collects are for stock's own entry validation, which a caller of this
    // does not run.
    PyObject* node = instance_attr(symint, g_py.s_node);
    if (node == nullptr) return R::Fallback;
    for (const auto& [n, pos] : seen) {
      if (n == node) {
        PyObject* idx = PyLong_FromSsize_t(pos);
        if (idx == nullptr) return R::Error;
        PyObject* ref = PyObject_CallOneArg(g.backref_type, idx);
        Py_DECREF(idx);
        return push_new(result, ref) ? R::Ok : R::Error;
      }
    }
    PyObject* e = PyObject_GetAttr(node, g.s_expr_prop);
    if (e == nullptr) {
      PyErr_Clear(); // (a node without one: stock's own conversion says what happens)
      return R::Fallback;
    }
    Py_DECREF(e);
    seen.emplace_back(node, PyList_GET_SIZE(result));
    return push_new(result, PyObject_CallOneArg(g.stub_type, symint)) ? R::Ok : R::Error;
  }

  // A c10 SymInt of a tensor's metadata: as `t.shape[i]` (a new torch.SymInt on
  // the same SymNode) or the int.
  R metadata_int(const c10::SymInt& v, bool typed) {
    if (v.is_heap_allocated()) {
      PyObject* node = py_sym_node(v.toSymNodeImplUnowned());
      if (node == nullptr) return R::Fallback;
      PyObject* s = PyObject_CallOneArg(g_py.symint_type, node);
      if (s == nullptr) return R::Error;
      const R r = sym(s);
      Py_DECREF(s);
      return r;
    }
    if (typed && !push(result, reinterpret_cast<PyObject*>(&PyLong_Type))) return R::Error;
    return push_new(result, PyLong_FromLongLong(v.as_int_unchecked())) ? R::Ok : R::Error;
  }

  R ints(c10::SymIntArrayRef xs, PyObject* type) {
    if (!push(result, type)) return R::Error;
    if (!push_new(result, length_str(static_cast<Py_ssize_t>(xs.size())))) return R::Error;
    for (const auto& x : xs) {
      const R r = metadata_int(x, true);
      if (r != R::Ok) return r;
    }
    return R::Ok;
  }

  R fake(PyObject* v) {
    if (instance_attr(v, g_py.s_fake_mode) != mode) return R::Fallback; // "not our fake"
    PyObject* constant = instance_attr(v, g_py.s_constant);
    if (constant == nullptr || constant != Py_None) return R::Fallback;
    PyObject* dev = instance_attr(v, g_py.s_fake_device);
    if (dev == nullptr || !THPDevice_Check(dev) || has_own_dispatch_keys(v)) return R::Fallback;
    const at::Tensor& t = THPVariable_Unpack(v);
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->layout() != at::kStrided || impl->is_quantized() || impl->is_nested() ||
        !impl->has_storage()) {
      return R::Fallback;
    }
    const bool symbolic = impl->has_symbolic_sizes_strides();
    PyObject* memory_format = Py_None;
    if (!symbolic) {
      const int64_t dim = impl->dim();
      if (dim == 4 || dim == 5) return R::Fallback; // stock's channels-last test
      if (impl->is_contiguous(at::MemoryFormat::Contiguous)) {
        memory_format = torch::utils::getTHPMemoryFormat(at::MemoryFormat::Contiguous);
      }
    }
    // dtype
    if (!push(result, reinterpret_cast<PyObject*>(torch::getTHPDtype(impl->dtype().toScalarType())))) {
      return R::Error;
    }
    R r = ints(impl->sym_sizes(), g.size_type);
    if (r != R::Ok) return r;
    r = ints(impl->sym_strides(), reinterpret_cast<PyObject*>(&PyTuple_Type));
    if (r != R::Ok) return r;
    if (!push(result, dev)) return R::Error;
    if (!push(result, reinterpret_cast<PyObject*>(torch::getTHPLayout(at::kStrided)))) return R::Error;
    if (!push(result, memory_format)) return R::Error;
    r = metadata_int(impl->sym_storage_offset(), false);
    if (r != R::Ok) return r;
    r = metadata_int(impl->storage().unsafeGetStorageImpl()->sym_nbytes(), false);
    if (r != R::Ok) return r;
    PyObject* flags[] = {
        t.requires_grad() ? Py_True : Py_False,
        Py_False, // is_quantized
        impl->is_conj() ? Py_True : Py_False,
        impl->is_neg() ? Py_True : Py_False,
        t.is_inference() ? Py_True : Py_False,
        Py_False, // is_sparse
        Py_None, // is_coalesced
        Py_None, // dense_dim
        Py_None, // sparse_dim
    };
    for (PyObject* f : flags) {
      if (!push(result, f)) return R::Error;
    }
    return R::Ok;
  }

  R seq(PyObject* v, int depth) {
    // a list / tuple (or subclass: torch.Size) / dict: its type, length, items
    if (depth > 16) return R::Fallback;
    if (!push(result, reinterpret_cast<PyObject*>(Py_TYPE(v)))) return R::Error;
    if (!push_new(result, length_str(PyObject_Length(v)))) return R::Error;
    if (PyDict_Check(v)) {
      if (!PyDict_CheckExact(v)) return R::Fallback;
      Py_ssize_t pos = 0;
      PyObject *k, *val;
      while (PyDict_Next(v, &pos, &k, &val)) {
        const R r = item(k, depth + 1);
        if (r != R::Ok) return r;
      }
      pos = 0;
      while (PyDict_Next(v, &pos, &k, &val)) {
        const R r = item(val, depth + 1);
        if (r != R::Ok) return r;
      }
      return R::Ok;
    }
    PyObject* fast = PySequence_Fast(v, "");
    if (fast == nullptr) return R::Error;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    for (Py_ssize_t i = 0; i < n; ++i) {
      const R r = item(PySequence_Fast_GET_ITEM(fast, i), depth + 1);
      if (r != R::Ok) {
        Py_DECREF(fast);
        return r;
      }
    }
    Py_DECREF(fast);
    return R::Ok;
  }

  R item(PyObject* v, int depth) {
    if (PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(g_py.fake_tensor_type))) {
      return is_fake_exact(v) ? fake(v) : R::Fallback;
    }
    if (THPVariable_Check(v)) return R::Fallback; // "non-fake tensor"
    PyTypeObject* tp = Py_TYPE(v);
    if (tp == reinterpret_cast<PyTypeObject*>(g_py.symint_type)) return sym(v);
    if (PyList_Check(v) || PyTuple_Check(v) || PyDict_Check(v)) {
      if (!PyList_CheckExact(v) && !PyTuple_CheckExact(v) &&
          tp != reinterpret_cast<PyTypeObject*>(g.size_type)) {
        return R::Fallback; // a named tuple, a list subclass: left to stock
      }
      return seq(v, depth);
    }
    const bool plain = v == Py_None || tp == &PyLong_Type || tp == &PyBool_Type ||
        tp == &PyFloat_Type || tp == &PyUnicode_Type || THPDtype_Check(v) || THPDevice_Check(v) ||
        THPLayout_Check(v) || THPMemoryFormat_Check(v);
    if (!plain) return R::Fallback; // SymInt subclasses, SymFloat, callables, ...
    if (!push(result, reinterpret_cast<PyObject*>(tp))) return R::Error;
    return push(result, v) ? R::Ok : R::Error;
  }
};

PyObject* default_device_str() {
  static PyObject* cached = nullptr;
  static c10::DeviceType cached_type = c10::DeviceType::CPU;
  const c10::DeviceType dt = c10::dispatchKeyToDeviceType(torch::tensors::get_default_dispatch_key());
  if (cached == nullptr || dt != cached_type) {
    PyObject* s = PyUnicode_FromString(c10::DeviceTypeName(dt, /*lower_case=*/true).c_str());
    if (s == nullptr) return nullptr;
    Py_XSETREF(cached, s);
    cached_type = dt;
  }
  Py_INCREF(cached);
  return cached;
}

} // namespace

void stock_key_setup(
    PyObject* key_type,
    PyObject* stub_type,
    PyObject* backref_type,
    PyObject* size_type,
    bool tracing_item,
    bool on) {
  g.tracing_item = tracing_item;
  for (auto [dst, src] : {std::pair{&g.key_type, key_type}, {&g.stub_type, stub_type},
                          {&g.backref_type, backref_type}, {&g.size_type, size_type}}) {
    Py_XINCREF(src);
    Py_XSETREF(*dst, src);
  }
  if (g.s_convert_sym_int == nullptr) {
    g.s_convert_sym_int = PyUnicode_InternFromString("convert_sym_int");
    g.s_expr_prop = PyUnicode_InternFromString("expr");
  }
  g.on = on && g.key_type != nullptr && g.stub_type != nullptr && g.backref_type != nullptr &&
      g.size_type != nullptr && g.s_convert_sym_int != nullptr && g.s_expr_prop != nullptr;
}

bool stock_key_on() {
  return g.on;
}

std::pair<uint64_t, uint64_t> stock_key_counts() {
  return {g_built, g_fallback};
}

void stock_key_set_counts(uint64_t built, uint64_t fallback) {
  g_built = built;
  g_fallback = fallback;
}

PyObject* stock_key_build(PyObject* mode, PyObject* state, PyObject* func, PyObject* args, PyObject* kwargs) {
  if (!g.on || g_py.symint_type == nullptr || g_py.fake_tensor_type == nullptr ||
      !PyTuple_Check(args) || (kwargs != Py_None && !PyDict_CheckExact(kwargs))) {
    ++g_fallback;
    Py_RETURN_NONE;
  }
  PyObject* in_kernel = instance_attr(mode, g_py.s_in_kernel_invocation);
  if (in_kernel != Py_False) {
    ++g_fallback; // devices read as meta then
    Py_RETURN_NONE;
  }
  PyObject* env = instance_attr(mode, g_py.s_shape_env);
  if (env == nullptr) {
    ++g_fallback;
    Py_RETURN_NONE;
  }
  PyObject* convert = nullptr;
  if (state != Py_None) {
    convert = PyObject_GetAttr(state, g.s_convert_sym_int);
    if (convert == nullptr) return nullptr;
  }
  PyObject* result = PyList_New(0);
  if (result == nullptr) {
    Py_DECREF(convert);
    return nullptr;
  }
  Builder b{mode, convert, result};
  R r = R::Ok;
  PyObject* settings = env == Py_None ? Py_NewRef(Py_None) : PyObject_GetAttr(env, g_py.s_settings);
  const bool head = settings != nullptr && push(result, func) &&
      push(result,
           reinterpret_cast<PyObject*>(
               torch::getTHPDtype(c10::typeMetaToScalarType(c10::get_default_dtype())))) &&
      push_new(result, default_device_str()) &&
      push(result, c10::InferenceMode::is_enabled() ? Py_True : Py_False) && push(result, settings) &&
      (!g.tracing_item || push(result, proxy_tracing() ? Py_True : Py_False));
  Py_XDECREF(settings);
  if (!head) r = R::Error;
  if (r == R::Ok && PyTuple_GET_SIZE(args) > 0) r = b.seq(args, 0);
  if (r == R::Ok && kwargs != Py_None && PyDict_GET_SIZE(kwargs) > 0) r = b.seq(kwargs, 0);
  Py_XDECREF(convert);
  if (r != R::Ok) {
    Py_DECREF(result);
    if (r == R::Error) return nullptr;
    ++g_fallback;
    Py_RETURN_NONE;
  }
  PyObject* tup = PyList_AsTuple(result);
  Py_DECREF(result);
  if (tup == nullptr) return nullptr;
  PyObject* key = PyObject_CallOneArg(g.key_type, tup);
  Py_DECREF(tup);
  if (key == nullptr) return nullptr;
  ++g_built;
  if (state != Py_None) return key;
  // (key, whether stock keeps it on the ShapeEnv: it holds a SymNode)
  PyObject* out = PyTuple_Pack(2, key, b.seen.empty() ? Py_False : Py_True);
  Py_DECREF(key);
  return out;
}

} // namespace fastfake
