// Per-op result cache (static shapes), in front of stock's dispatch cache.
//
// Key: computed here from the op, the global state stock keys on (default dtype,
// default device, inference mode, shape-env settings, proxy tracing) and every
// argument: FakeTensors by their full metadata plus the aliasing pattern among
// the arguments, lists / tuples / kwargs structurally, numbers, strings, dtypes,
// devices, layouts and memory formats by type and value. Our key is at least as
// discriminating as stock's `_cache_key`.
//
// Entries are never invented here: after a miss has run the stock path, the
// Python helper fastfake._cache.learn() reads *stock's own* validated cache entry
// for the call (so every stock bypass rule applies unchanged) and hands us its
// output description. A hit rebuilds the outputs exactly as stock's
// `_get_output_tensor_from_cache_entry` does, in C++: fresh meta tensors,
// views re-pointed at the current input's storage with `set_`, in-place
// arguments returned as themselves, `None` outputs.
//
// Bounded (LRU); entries hold strong references only to op overloads and
// torch.device objects, never to modes, shape envs or tensors.
#include "fastfake.h"
#include "keys.h"

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

#include <cstring>
#include <list>
#include <unordered_map>

namespace fastfake {

namespace {

struct OutSpec {
  enum Kind : uint8_t { Inplace, None, Fresh, View } kind = None;
  int64_t idx = -1; // in-place / view argument index
  at::ScalarType dtype = at::ScalarType::Undefined;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  PyObject* device = nullptr; // owned torch.device
  bool conj = false, neg = false;
};

struct Entry {
  bool negative = false;
  bool tuple = false;
  PyObject* func = nullptr; // owned: keeps the op id in the key valid
  std::vector<OutSpec> outs;

  void release() {
    Py_CLEAR(func);
    for (auto& o : outs) Py_CLEAR(o.device);
  }
};

using Lru = std::list<std::pair<Key, Entry>>;
Lru g_lru;
std::unordered_map<Key, Lru::iterator, KeyHash> g_index;

// Key tags (numbers and strings use keys.h's).
enum : int64_t {
  kTensor = 101,
  kTuple,
  kList,
  kDict,
  kDtype,
  kDevice,
  kLayout,
  kMemFormat,
};

struct KeyCtx {
  PyObject* mode;
  Key key;
  std::vector<const c10::StorageImpl*> storages; // for the aliasing pattern
  Stat why = CacheBypassArgType;
};

bool encode(KeyCtx& ctx, PyObject* v, int depth) {
  Key& key = ctx.key;
  if (depth > 8) return false;
  if (is_fake_exact(v)) {
    if (instance_attr(v, g_py.s_fake_mode) != ctx.mode) {
      ctx.why = CacheBypassOtherMode;
      return false;
    }
    PyObject* constant = instance_attr(v, g_py.s_constant);
    if (constant != nullptr && constant != Py_None) {
      ctx.why = CacheBypassConstant;
      return false;
    }
    PyObject* dev = instance_attr(v, g_py.s_fake_device);
    if (dev == nullptr || !THPDevice_Check(dev)) return false;
    const at::Tensor& t = THPVariable_Unpack(v);
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->has_symbolic_sizes_strides()) {
      ctx.why = CacheBypassSymbolic;
      return false;
    }
    if (impl->layout() != at::kStrided || impl->is_quantized() || impl->is_nested() ||
        !impl->has_storage()) {
      ctx.why = CacheBypassLayout;
      return false;
    }
    const c10::Device& d = reinterpret_cast<THPDevice*>(dev)->device;
    key.push_back(kTensor);
    key.push_back(static_cast<int64_t>(impl->dtype().toScalarType()));
    key.push_back((static_cast<int64_t>(d.type()) << 8) | (d.index() + 1));
    const auto sizes = impl->sizes();
    const auto strides = impl->strides();
    key.push_back(static_cast<int64_t>(sizes.size()));
    key.insert(key.end(), sizes.begin(), sizes.end());
    key.insert(key.end(), strides.begin(), strides.end());
    key.push_back(impl->storage_offset());
    const c10::StorageImpl* st = impl->storage().unsafeGetStorageImpl();
    const auto nbytes = st->sym_nbytes().maybe_as_int();
    if (!nbytes.has_value()) {
      // static sizes viewing a storage of symbolic size
      ctx.why = CacheBypassSymbolic;
      return false;
    }
    key.push_back(*nbytes);
    key.push_back(
        (t.requires_grad() ? 1 : 0) | (impl->is_conj() ? 2 : 0) | (impl->is_neg() ? 4 : 0) |
        (t.is_inference() ? 8 : 0));
    int64_t alias = -1;
    for (size_t i = 0; i < ctx.storages.size(); ++i) {
      if (ctx.storages[i] == st) {
        alias = static_cast<int64_t>(i);
        break;
      }
    }
    key.push_back(alias);
    ctx.storages.push_back(st);
    return true;
  }
  if (THPVariable_Check(v)) {
    ctx.why = CacheBypassNonFake;
    return false;
  }
  if (v == Py_None) {
    key.push_back(kKeyNone);
    return true;
  }
  switch (push_number(v, key)) {
    case NumberKey::Ok:
      return true;
    case NumberKey::Symbolic:
      ctx.why = CacheBypassSymbolic;
      return false;
    case NumberKey::NotANumber:
      break;
  }
  if (PyUnicode_CheckExact(v)) {
    return push_str(v, key);
  }
  if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
    const bool is_tuple = PyTuple_CheckExact(v);
    const Py_ssize_t n = is_tuple ? PyTuple_GET_SIZE(v) : PyList_GET_SIZE(v);
    key.push_back(is_tuple ? kTuple : kList);
    key.push_back(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!encode(ctx, is_tuple ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i), depth + 1)) {
        return false;
      }
    }
    return true;
  }
  if (THPDtype_Check(v)) {
    key.push_back(kDtype);
    key.push_back(static_cast<int64_t>(reinterpret_cast<THPDtype*>(v)->scalar_type));
    return true;
  }
  if (THPDevice_Check(v)) {
    const c10::Device& d = reinterpret_cast<THPDevice*>(v)->device;
    key.push_back(kDevice);
    key.push_back((static_cast<int64_t>(d.type()) << 8) | (d.index() + 1));
    return true;
  }
  if (THPLayout_Check(v)) {
    key.push_back(kLayout);
    key.push_back(static_cast<int64_t>(reinterpret_cast<THPLayout*>(v)->layout));
    return true;
  }
  if (THPMemoryFormat_Check(v)) {
    key.push_back(kMemFormat);
    key.push_back(static_cast<int64_t>(reinterpret_cast<THPMemoryFormat*>(v)->memory_format));
    return true;
  }
  ctx.why = CacheBypassArgType;
  return false;
}

bool proxy_tracing() {
  if (c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::PROXY)
          .has_value()) {
    return true;
  }
  PyObject* pre = g_py.pre_dispatch_infra_modes;
  return pre != nullptr && PyList_Check(pre) && PyList_GET_SIZE(pre) > 0 &&
      PyList_GET_ITEM(pre, 0) != Py_None;
}

bool global_key(PyObject* mode, PyObject* func, Key& key) {
  key.push_back(reinterpret_cast<intptr_t>(func));
  key.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  key.push_back(static_cast<int64_t>(torch::tensors::get_default_dispatch_key()));
  key.push_back(c10::InferenceMode::is_enabled());
  key.push_back(proxy_tracing());
  PyObject* shape_env = instance_attr(mode, g_py.s_shape_env);
  if (shape_env == nullptr || shape_env == Py_None) {
    key.push_back(0);
    return true;
  }
  PyObject* settings = PyObject_GetAttr(shape_env, g_py.s_settings);
  if (settings == nullptr) {
    PyErr_Clear();
    return false;
  }
  const Py_hash_t h = PyObject_Hash(settings);
  Py_DECREF(settings);
  if (h == -1) {
    PyErr_Clear();
    return false;
  }
  key.push_back(1);
  key.push_back(static_cast<int64_t>(h));
  return true;
}

void evict_if_full() {
  while (g_lru.size() > g_config.cache_max_entries && !g_lru.empty()) {
    auto& back = g_lru.back();
    g_index.erase(back.first);
    back.second.release();
    g_lru.pop_back();
    bump(CacheEvict);
  }
}

void store(Key&& key, Entry&& e) {
  g_lru.emplace_front(std::move(key), std::move(e));
  g_index[g_lru.front().first] = g_lru.begin();
  evict_if_full();
}

// Parse the description fastfake._cache.learn() returns:
//   str                                   -> negative entry (stock bypassed)
//   (is_tuple, [out, ...]) with out one of
//     ("inplace", idx) | ("none",) |
//     ("tensor", dtype, sizes, strides, offset, device, is_conj, is_neg, view_idx)
bool parse_entry(PyObject* desc, Entry& e) {
  if (PyUnicode_Check(desc)) {
    e.negative = true;
    return true;
  }
  if (!PyTuple_Check(desc) || PyTuple_GET_SIZE(desc) != 2) return false;
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
    } else if (std::strcmp(kind, "tensor") == 0 && PyTuple_GET_SIZE(o) == 9) {
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
    } else {
      return false;
    }
    if (PyErr_Occurred()) {
      PyErr_Clear();
      Py_CLEAR(s.device);
      return false;
    }
    e.outs.push_back(std::move(s));
  }
  return true;
}

// Mirrors FakeTensorMode._get_output_tensor_from_cache_entry.
PyObject* rebuild_one(PyObject* mode, PyObject* args, const OutSpec& s) {
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
  }
  return make_fake_tensor(mode, std::move(empty), s.device);
}

PyObject* rebuild(PyObject* mode, PyObject* args, const Entry& e) {
  if (!e.tuple) {
    return e.outs.empty() ? nullptr : rebuild_one(mode, args, e.outs[0]);
  }
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(e.outs.size()));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < e.outs.size(); ++i) {
    PyObject* o = rebuild_one(mode, args, e.outs[i]);
    if (o == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), o);
  }
  return t;
}

} // namespace

void cache_clear() {
  for (auto& [k, e] : g_lru) {
    e.release();
  }
  g_lru.clear();
  g_index.clear();
}

size_t cache_size() {
  return g_lru.size();
}

PyObject* try_cache(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    bool* handled,
    bool* served) {
  *handled = false;
  *served = false;
  auto bypass = [](Stat s) -> PyObject* {
    bump(s);
    return nullptr;
  };
  if (!g_config.cache || g_py.cache_learn_hook == nullptr) {
    return nullptr;
  }
  if (Py_TYPE(func) != reinterpret_cast<PyTypeObject*>(g_py.op_overload_type)) {
    return bypass(CacheBypassNotOp);
  }
  PyObject* enabled = instance_attr(mode, g_py.s_cache_enabled);
  PyObject* xcheck = instance_attr(mode, g_py.s_cache_crosscheck_enabled);
  PyObject* in_kernel = instance_attr(mode, g_py.s_in_kernel_invocation);
  if (enabled != Py_True || (xcheck != nullptr && xcheck != Py_False) || in_kernel != Py_False ||
      !PyTuple_Check(args)) {
    return bypass(CacheBypassModeState);
  }

  KeyCtx ctx{mode, {}, {}, CacheBypassArgType};
  ctx.key.reserve(64);
  if (!global_key(mode, func, ctx.key)) {
    return bypass(CacheBypassModeState);
  }
  ctx.key.push_back(PyTuple_GET_SIZE(args));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    if (!encode(ctx, PyTuple_GET_ITEM(args, i), 0)) {
      return bypass(ctx.why);
    }
  }
  if (kwargs != nullptr && kwargs != Py_None) {
    if (!PyDict_Check(kwargs)) {
      return bypass(CacheBypassArgType);
    }
    ctx.key.push_back(kDict);
    ctx.key.push_back(PyDict_GET_SIZE(kwargs));
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      if (!PyUnicode_CheckExact(k) || !push_str(k, ctx.key)) {
        return bypass(CacheBypassArgType);
      }
      if (!encode(ctx, v, 0)) {
        return bypass(ctx.why);
      }
    }
  }

  auto it = g_index.find(ctx.key);
  if (it != g_index.end()) {
    g_lru.splice(g_lru.begin(), g_lru, it->second);
    const Entry& e = it->second->second;
    if (e.negative) {
      return bypass(CacheBypassStock);
    }
    *handled = true;
    PyObject* r = rebuild(mode, args, e);
    if (r != nullptr) {
      *served = true;
      bump(CacheHit);
    }
    return r;
  }

  // Miss: stock computes (and fills its own cache); then learn stock's entry.
  *handled = true;
  bump(CacheMiss);
  PyObject* out = call_stock_dispatch(mode, func, types, args, kwargs);
  if (out == nullptr) {
    return nullptr;
  }
  PyObject* argv[4] = {mode, func, args, kwargs ? kwargs : Py_None};
  PyObject* desc = PyObject_Vectorcall(g_py.cache_learn_hook, argv, 4, nullptr);
  if (desc == nullptr) {
    PyErr_Clear();
    return out;
  }
  if (desc != Py_None) {
    Entry e;
    Py_INCREF(func);
    e.func = func;
    if (parse_entry(desc, e)) {
      store(std::move(ctx.key), std::move(e));
    } else {
      e.release();
    }
  }
  Py_DECREF(desc);
  return out;
}

} // namespace fastfake
