// Result-cache keys: the op, the global state stock keys on and every argument,
// SymNodes by value id and identity pattern, ShapeEnv identities.
#include "cache/internal.h"

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

#include <array>
#include <cstring>
#include <list>
#include <unordered_map>

namespace fastfake {
namespace cache_detail {

// ---------------------------------------------------------------------------
// ShapeEnv identities: a process-unique id per live ShapeEnv (dropped by a weakref
// callback when it dies, so a new ShapeEnv at the same address gets a new id).
// ---------------------------------------------------------------------------
struct EnvRec {
  int64_t uid;
  PyObject* weakref; // owned
};
std::unordered_map<PyObject*, EnvRec> g_envs;
int64_t g_next_env_uid = 1;
PyObject* g_last_env = nullptr;
int64_t g_last_env_uid = 0;

PyObject* env_gone(PyObject* /*self*/, PyObject* wr) {
  for (auto it = g_envs.begin(); it != g_envs.end(); ++it) {
    if (it->second.weakref == wr) {
      if (g_last_env == it->first) {
        g_last_env = nullptr;
      }
      PyObject* w = it->second.weakref;
      g_envs.erase(it);
      Py_DECREF(w);
      break;
    }
  }
  Py_RETURN_NONE;
}

PyMethodDef g_env_gone_def = {"_fastfake_shape_env_gone", env_gone, METH_O, nullptr};
PyObject* g_env_gone_cb = nullptr;

// 0 if the ShapeEnv cannot be tracked (no weakref support).
int64_t env_uid(PyObject* env) {
  if (env == g_last_env) {
    return g_last_env_uid;
  }
  auto it = g_envs.find(env);
  if (it == g_envs.end()) {
    if (g_env_gone_cb == nullptr) {
      g_env_gone_cb = PyCFunction_New(&g_env_gone_def, nullptr);
      if (g_env_gone_cb == nullptr) {
        PyErr_Clear();
        return 0;
      }
    }
    PyObject* wr = PyWeakref_NewRef(env, g_env_gone_cb);
    if (wr == nullptr) {
      PyErr_Clear();
      return 0;
    }
    it = g_envs.emplace(env, EnvRec{g_next_env_uid++, wr}).first;
  }
  g_last_env = env;
  g_last_env_uid = it->second.uid;
  return it->second.uid;
}

c10::SymInt symint_from_node(PyObject* node) {
  return c10::SymInt(c10::SymNode(c10::make_intrusive<torch::impl::PythonSymNodeImpl>(
      py::reinterpret_borrow<py::object>(node))));
}

uint64_t g_vid_generation = 0;

namespace {
// The fields fastfake.cache.learn.sym_vid interns a value by, in its order.
std::array<PyObject*, 5> vid_fields() {
  return {g_py.s_expr, g_py.s_pytype, g_py.s_hint, g_py.s_constant, g_py.s_fx_node};
}
} // namespace

namespace {
// The interned value id of a SymNode value's five fields (borrowed), or -1.
long long interned_fields_vid(PyObject* const (&f)[5]) {
  PyObject* value = PyTuple_Pack(5, f[0], f[1], f[2], f[3], f[4]);
  if (value == nullptr) return -1;
  PyObject* found = PyDict_GetItemWithError(g_py.sym_vids, value); // borrowed
  Py_DECREF(value);
  if (found == nullptr || !PyLong_CheckExact(found)) return -1;
  return PyLong_AsLongLong(found);
}
} // namespace

long long interned_value_vid(PyObject* dict) {
  if (g_py.sym_vids == nullptr) return -1;
  const auto names = vid_fields();
  PyObject* f[5];
  for (int i = 0; i < 5; ++i) {
    f[i] = PyDict_GetItemWithError(dict, names[i]); // borrowed
    if (f[i] == nullptr) return -1;
  }
  return interned_fields_vid(f);
}

void vids_cleared() {
  ++g_vid_generation;
}

uint64_t vid_generation() {
  return g_vid_generation;
}

namespace {

// The id `fastfake.cache.learn.sym_vid` would give a SymNode whose value it has already
// interned, read without calling it: the same five fields, taken from the instance
// dict (`node._expr` is that entry unless the class has a data descriptor of the
// name; SymNode defines none of them on any supported release), looked up in the
// same interning dict, memoised on the node the same way. -1 where the hook must decide: a
// value not interned yet (the hook interns it, and clears the dict when full), a
// missing field, a descriptor, an error (the hook raises it again).
long long interned_vid(PyObject* node) {
  if (g_py.sym_vids == nullptr) return -1;
  const auto names = vid_fields();
  PyObject* f[5];
  for (int i = 0; i < 5; ++i) {
    PyObject* descr = _PyType_Lookup(Py_TYPE(node), names[i]);
    if (descr != nullptr && Py_TYPE(descr)->tp_descr_set != nullptr) return -1;
    // (read in the object where it keeps its attributes there: no dict made)
    f[i] = instance_attr(node, names[i]);
    if (f[i] == nullptr) return -1;
  }
  const long long vid = interned_fields_vid(f);
  if (vid < 0) return -1;
  PyObject* v = PyLong_FromLongLong(vid);
  if (v == nullptr) return -1;
  const int rc = PyObject_SetAttr(node, g_py.s_fastfake_vid, v);
  Py_DECREF(v);
  return rc < 0 ? -1 : vid;
}

} // namespace

// A SymNode's value id (fastfake.cache.learn.sym_vid, memoised on the node), or -1
// (no error set).
long long node_vid(PyObject* node) {
  long long vid = -1;
  PyObject* memo = instance_attr(node, g_py.s_fastfake_vid);
  if (memo != nullptr) {
    vid = PyLong_AsLongLong(memo);
  } else if ((vid = interned_vid(node)) < 0) {
    PyErr_Clear();
    if (PyObject* r = PyObject_CallOneArg(g_py.sym_vid_hook, node)) {
      vid = PyLong_AsLongLong(r);
      Py_DECREF(r);
    }
  }
  if (vid < 0) PyErr_Clear();
  return vid;
}

// Appends a SymNode: a back-reference if this key has seen the object before,
// otherwise its interned value id (memoised on the node by fastfake.cache.learn.sym_vid).
bool push_node(KeyCtx& ctx, PyObject* node, const c10::SymInt* s) {
  for (size_t i = 0; i < ctx.nodes.size(); ++i) {
    if (ctx.nodes[i] == node) {
      ctx.key.push_back(kSymRef);
      ctx.key.push_back(static_cast<int64_t>(i));
      return true;
    }
  }
  if (!g_config.cache_symbolic || g_py.sym_vid_hook == nullptr) {
    ctx.why = CacheBypassSymbolic;
    return false;
  }
  if (ctx.shape_env == nullptr || instance_attr(node, g_py.s_shape_env) != ctx.shape_env) {
    ctx.why = CacheBypassSymOther; // no ShapeEnv on the mode, or a foreign one
    return false;
  }
  const long long vid = node_vid(node);
  if (vid < 0) {
    ctx.why = CacheBypassSymOther;
    return false;
  }
  ctx.key.push_back(kSym);
  ctx.key.push_back(vid);
  ctx.nodes.push_back(node);
  ctx.node_pos.push_back(static_cast<uint32_t>(ctx.key.size() - 1));
  try {
    ctx.syms.push_back(s != nullptr ? *s : symint_from_node(node));
  } catch (...) {
    PyErr_Clear();
    ctx.why = CacheBypassSymOther;
    return false;
  }
  ctx.symbolic = true;
  return true;
}

// A SymFloat argument of a scalar op (KeyCtx::scalar_ok): its node's value id.
// Not among `ctx.nodes`: stock's key raises its bypass at a SymFloat without
// reading its `expr`, and no output is built from it.
bool push_sym_scalar(KeyCtx& ctx, PyObject* v) {
  PyObject* node = instance_attr(v, g_py.s_node);
  if (node == nullptr || g_py.symnode_type == nullptr || g_py.sym_vid_hook == nullptr ||
      Py_TYPE(node) != reinterpret_cast<PyTypeObject*>(g_py.symnode_type) || ctx.shape_env == nullptr ||
      instance_attr(node, g_py.s_shape_env) != ctx.shape_env) {
    ctx.why = CacheBypassSymScalar;
    return false;
  }
  const long long vid = node_vid(node);
  if (vid < 0) {
    ctx.why = CacheBypassSymScalar;
    return false;
  }
  ctx.key.push_back(kSymScalar);
  ctx.key.push_back(vid);
  ++ctx.sym_scalars;
  return true;
}

bool push_symint(KeyCtx& ctx, const c10::SymInt& s) {
  if (!s.is_heap_allocated()) {
    ctx.key.push_back(kKeyInt);
    ctx.key.push_back(s.as_int_unchecked());
    return true;
  }
  PyObject* node = py_sym_node(s.toSymNodeImplUnowned());
  if (node == nullptr) {
    ctx.why = CacheBypassSymOther;
    return false;
  }
  return push_node(ctx, node, &s);
}

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
    if (has_own_dispatch_keys(v)) {
      ctx.why = CacheBypassLayout; // e.g. a fake mkldnn tensor (2.14+)
      return false;
    }
    const at::Tensor& t = THPVariable_Unpack(v);
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->layout() != at::kStrided || impl->is_quantized() || impl->is_nested() ||
        !impl->has_storage()) {
      ctx.why = CacheBypassLayout;
      return false;
    }
    const bool symbolic = impl->has_symbolic_sizes_strides();
    const c10::Device& d = reinterpret_cast<THPDevice*>(dev)->device;
    key.push_back(symbolic ? kSymTensor : kTensor);
    key.push_back(static_cast<int64_t>(impl->dtype().toScalarType()));
    key.push_back(device_code(d));
    if (!symbolic) {
      const auto sizes = impl->sizes();
      const auto strides = impl->strides();
      key.push_back(static_cast<int64_t>(sizes.size()));
      key.insert(key.end(), sizes.begin(), sizes.end());
      key.insert(key.end(), strides.begin(), strides.end());
      key.push_back(impl->storage_offset());
    } else {
      const auto sizes = impl->sym_sizes();
      const auto strides = impl->sym_strides();
      key.push_back(static_cast<int64_t>(sizes.size()));
      for (const auto& x : sizes) {
        if (!push_symint(ctx, x)) return false;
      }
      for (const auto& x : strides) {
        if (!push_symint(ctx, x)) return false;
      }
      if (!push_symint(ctx, impl->sym_storage_offset())) return false;
    }
    const c10::StorageImpl* st = impl->storage().unsafeGetStorageImpl();
    if (!push_symint(ctx, st->sym_nbytes())) return false;
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
  if (g_py.symint_type != nullptr && Py_TYPE(v) == reinterpret_cast<PyTypeObject*>(g_py.symint_type)) {
    PyObject* node = instance_attr(v, g_py.s_node);
    if (node == nullptr || g_py.symnode_type == nullptr ||
        Py_TYPE(node) != reinterpret_cast<PyTypeObject*>(g_py.symnode_type)) {
      ctx.why = CacheBypassSymOther;
      return false;
    }
    return push_node(ctx, node, nullptr);
  }
  if (ctx.scalar_ok && depth == 0 && g_py.symfloat_type != nullptr &&
      Py_TYPE(v) == reinterpret_cast<PyTypeObject*>(g_py.symfloat_type)) {
    return push_sym_scalar(ctx, v);
  }
  switch (push_number(v, key)) {
    case NumberKey::Ok:
      return true;
    case NumberKey::Symbolic:
      ctx.why = CacheBypassSymScalar; // SymFloat / SymBool: stock bypasses too
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
    if (!d.has_index() && !d.is_cpu() && !d.is_meta()) {
      // "The current accelerator": which one depends on ambient state (stock
      // 2.14+ pins it in its key, earlier releases do not); left to stock.
      ctx.why = CacheBypassDeviceIndex;
      return false;
    }
    key.push_back(kDevice);
    key.push_back(device_code(d));
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

namespace {
// ShapeEnvSettings and where each of its fields is read: a slot's offset, or -1
// for the instance dict (fastfake.common.compat.settings_fields proves the class).
struct SettingsFields {
  PyTypeObject* type = nullptr; // owned
  PyObject* eq = nullptr; // the proven __eq__ / __hash__ (owned)
  PyObject* hash = nullptr;
  std::vector<std::pair<PyObject*, Py_ssize_t>> fields; // (name owned, offset)
} g_settings;
} // namespace

void set_settings_fields(PyObject* type, const std::vector<PyObject*>& names, PyObject* eq, PyObject* hash) {
  for (auto& [n, off] : g_settings.fields) Py_DECREF(n);
  g_settings.fields.clear();
  Py_CLEAR(g_settings.type);
  Py_CLEAR(g_settings.eq);
  Py_CLEAR(g_settings.hash);
  if (type == nullptr || !PyType_Check(type) || names.empty() || names.size() > 62 || eq == nullptr ||
      hash == nullptr) {
    return;
  }
  auto* tp = reinterpret_cast<PyTypeObject*>(type);
  std::vector<std::pair<PyObject*, Py_ssize_t>> fields;
  for (PyObject* name : names) {
    Py_ssize_t off = -1;
    PyObject* d = PyUnicode_Check(name) ? _PyType_Lookup(tp, name) : nullptr; // borrowed
    if (!PyUnicode_Check(name)) {
      off = -2;
    } else if (d != nullptr && Py_TYPE(d) == &PyMemberDescr_Type) {
      off = reinterpret_cast<PyMemberDescrObject*>(d)->d_common.d_type == tp ? member_slot_offset(d, false) : -1;
      if (off < 0) off = -2;
    } else if (d != nullptr && Py_TYPE(d)->tp_descr_set != nullptr) {
      off = -2; // a data descriptor: not the instance dict's value
    } else if (tp->tp_dictoffset == 0) {
      off = -2;
    }
    if (off == -2) {
      for (auto& [n, o] : fields) Py_DECREF(n);
      return;
    }
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    fields.emplace_back(name, off);
  }
  Py_INCREF(type);
  g_settings.type = tp;
  g_settings.eq = Py_NewRef(eq);
  g_settings.hash = Py_NewRef(hash);
  g_settings.fields = std::move(fields);
}

int64_t settings_bits(PyObject* settings) {
  static PyObject* s_eq = PyUnicode_InternFromString("__eq__");
  static PyObject* s_hash = PyUnicode_InternFromString("__hash__");
  PyTypeObject* tp = g_settings.type;
  if (tp == nullptr || Py_TYPE(settings) != tp || s_eq == nullptr || s_hash == nullptr) return -1;
  // (still the proven methods: the class is not patched since; the lookups
  // that attribute access makes, served by the type attribute cache)
  if (_PyType_Lookup(tp, s_eq) != g_settings.eq || _PyType_Lookup(tp, s_hash) != g_settings.hash) {
    return -1;
  }
  int64_t bits = 0;
  int i = 0;
  for (const auto& [name, off] : g_settings.fields) {
    PyObject* v = off >= 0 ? *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(settings) + off)
                           : instance_attr(settings, name);
    if (v == Py_True) {
      bits |= int64_t{1} << i;
    } else if (v != Py_False) {
      return -1; // unset, or not a bool: the hash
    }
    ++i;
  }
  return bits;
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
  // (`shape_env.settings` as stock reads it: the instance's own unless the class
  // has a data descriptor of the name)
  PyObject* descr = _PyType_Lookup(Py_TYPE(shape_env), g_py.s_settings);
  PyObject* settings =
      descr != nullptr && Py_TYPE(descr)->tp_descr_set != nullptr ? nullptr : instance_attr(shape_env, g_py.s_settings);
  if (settings != nullptr) {
    Py_INCREF(settings);
  } else if ((settings = PyObject_GetAttr(shape_env, g_py.s_settings)) == nullptr) {
    PyErr_Clear();
    return false;
  }
  // Stock keys on the settings' value (a frozen dataclass compared field by
  // field). Where the class is one whose equality is proven to be its fields'
  // (fastfake.common.compat.settings_fields) and every field is a bool, the key holds
  // the fields themselves: equal keys are equal settings.
  const int64_t bits = settings_bits(settings);
  if (bits >= 0) {
    Py_DECREF(settings);
    key.push_back(2);
    key.push_back(bits);
    return true;
  }
  // Otherwise their hash. The last one hashed is kept with its hash (one
  // reference: its address cannot be reused meanwhile).
  static PyObject* last_settings = nullptr;
  static Py_hash_t last_hash = -1;
  Py_hash_t h = last_hash;
  if (settings != last_settings) {
    h = PyObject_Hash(settings);
    if (h == -1) {
      PyErr_Clear();
      Py_DECREF(settings);
      return false;
    }
    Py_XSETREF(last_settings, settings);
    last_hash = h;
  } else {
    Py_DECREF(settings);
  }
  key.push_back(1);
  key.push_back(static_cast<int64_t>(h));
  return true;
}

// Appended to keys that contain SymNodes.
bool symbolic_key(KeyCtx& ctx) {
  PyObject* env = ctx.shape_env;
  PyObject* tv = instance_attr(env, g_py.s_translation_validation);
  if (tv != nullptr && tv != Py_False) {
    ctx.why = CacheBypassSymOther; // SymNodes carry FX nodes then
    return false;
  }
  // Not the mode's epoch: stock appends it only when its key state already knows
  // symbols, which it never does at that point, so stock's key ignores it too
  // (AOTAutograd bumps the epoch between its passes).
  const int64_t uid = env_uid(env);
  if (uid == 0) {
    ctx.why = CacheBypassSymOther;
    return false;
  }
  ctx.key.push_back(kSymGlobal);
  ctx.key.push_back(uid);
  return true;
}

// Stock's cache key reads `SymNode.expr` of every SymNode among the arguments
// (`_CacheKeyState.convert_sym_int`, for the symbols it knows). That applies the
// ShapeEnv's replacements and, on the way, path-compresses replacement chains
// (`ShapeEnv._find`: `s98 -> s31 -> s16` becomes `s98 -> s16`, a replacement
// change that also moves the ShapeEnv's version counters). A call answered here
// leaves the ShapeEnv as stock's key computation does: each SymNode whose `expr`
// memo is not current for the ShapeEnv's replacements is asked for it.
bool touch_exprs(const KeyCtx& ctx) {
  if (ctx.nodes.empty()) return true;
  const long long ver = replacements_version(ctx.shape_env);
  if (ver == 0) return true; // `expr` is `_expr` then, with no side effect
  static PyObject* s_ver = PyUnicode_InternFromString("_expr_ver");
  static PyObject* s_cache = PyUnicode_InternFromString("_expr_cache");
  static PyObject* s_prop = PyUnicode_InternFromString("expr");
  if (s_ver == nullptr || s_cache == nullptr || s_prop == nullptr) return false;
  for (PyObject* node : ctx.nodes) {
    PyObject* nver = instance_attr(node, s_ver);
    PyObject* memo = instance_attr(node, s_cache);
    if (ver > 0 && nver != nullptr && memo != nullptr && memo != Py_None &&
        PyLong_CheckExact(nver) && PyLong_AsLongLong(nver) == ver) {
      continue; // stock's read returns the memo
    }
    PyObject* e = PyObject_GetAttr(node, s_prop);
    if (e == nullptr) return false;
    Py_DECREF(e);
  }
  return true;
}

long long replacements_version(PyObject* env) {
  PyObject* v = instance_attr(env, g_py.s_replacements_version);
  if (v == nullptr) return -1;
  const long long r = PyLong_AsLongLong(v);
  if (r == -1) PyErr_Clear();
  return r;
}

} // namespace cache_detail
} // namespace fastfake
