// Per-op result cache, in front of stock's dispatch cache (static and symbolic shapes).
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
// Symbolic shapes. A SymInt is keyed by its value -- (raw sympy expression,
// pytype, hint, constant, fx_node), the fields stock's `_PySymInputStub` compares --
// interned to a small id memoised on the SymNode, plus the identity pattern of the
// SymNodes among the arguments (stock's back-references). Such keys also carry the
// ShapeEnv's identity (a per-process id, never reused), so an entry is reused only
// in the ShapeEnv whose guards it was recorded under; an entry is also re-checked
// whenever that ShapeEnv's replacements changed (still_valid below).
// The output description comes from the tensor stock's own cache *hit* would
// build (the synthesised output): every output SymInt is either a plain int, "the
// current call's SymNode at slot k" (stock's key-path reuse, so FX graph building
// sees the same SymNode objects), or a fresh SymNode built from the recorded
// value -- which is what stock's hit does, minus the storage-size, size-check and
// contiguity arithmetic it replays through Python SymNode callbacks.
//
// Bounded (LRU); entries hold strong references only to op overloads, torch.device
// objects and (symbolic) sympy values, never to modes, shape envs or tensors.
#include "compat.h"
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
#include <torch/csrc/utils/python_symnode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/SymInt.h>

#include <cstring>
#include <list>
#include <unordered_map>

namespace py = pybind11;

namespace fastfake {

namespace {

// ---------------------------------------------------------------------------
// A symbolic tensor caches derived quantities (numel, contiguity flags) in its
// c10::SymbolicShapeMeta once something asks for them. Stock's cache hit computes
// some of them while building the output (`set_` asks for is_contiguous and numel)
// inside fake dispatch, where no proxy mode traces the SymNode arithmetic; a
// tensor that computes them later (say in `.contiguous()` under make_fx) traces it
// and adds guards there. So outputs carry exactly the derived values stock's
// output carries. Reading the meta and seeding numel need c10 internals that
// differ by release: compat::shape_meta / compat::seed_numel (csrc/compat.h).
// ---------------------------------------------------------------------------
using compat::shape_meta;

// An int-like of a symbolic output.
struct SymVal {
  enum Kind : uint8_t { Int, Input, New } kind = Int;
  int64_t v = 0; // Int: the value; Input: the argument SymNode slot
  // New: owned tuple (expr, pytype, hint, constant, fx_node, optimized_summation)
  PyObject* fields = nullptr;
};

// Derived quantities cached in a SymbolicShapeMeta.
enum Derived : uint8_t {
  kNumel,
  kContiguous,
  kChannelsLastContiguous,
  kChannelsLast3dContiguous,
  kChannelsLast,
  kChannelsLast3d,
  kNonOverlappingAndDense,
};

struct SymShape {
  std::vector<SymVal> sizes, strides;
  SymVal offset, nbytes;
  int64_t version = 0; // the output's version counter
  std::vector<std::pair<Derived, SymVal>> derived; // what stock's output had computed
  ~SymShape() {
    for (auto* v : {&offset, &nbytes}) Py_CLEAR(v->fields);
    for (auto* vec : {&sizes, &strides}) {
      for (auto& v : *vec) Py_CLEAR(v.fields);
    }
    for (auto& d : derived) Py_CLEAR(d.second.fields);
  }
};

struct OutSpec {
  enum Kind : uint8_t { Inplace, None, Fresh, View } kind = None;
  int64_t idx = -1; // in-place / view argument index
  at::ScalarType dtype = at::ScalarType::Undefined;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  PyObject* device = nullptr; // owned torch.device
  bool conj = false, neg = false;
  std::shared_ptr<SymShape> sym; // symbolic entries: how to build every int-like
};

struct Entry {
  bool negative = false;
  Stat reason = CacheBypassStock; // counted when a negative entry is hit
  bool tuple = false;
  PyObject* func = nullptr; // owned: keeps the op id in the key valid
  std::vector<OutSpec> outs;
  // Symbolic entries: the ShapeEnv replacements this entry was checked against
  // (its version, and the replacement of every symbol the entry involves).
  long long env_version = -1;
  PyObject* validity = nullptr; // owned, opaque to C++ (fastfake._cache)

  void release() {
    Py_CLEAR(func);
    Py_CLEAR(validity);
    for (auto& o : outs) Py_CLEAR(o.device);
  }
};

using Lru = std::list<std::pair<Key, Entry>>;
Lru& g_lru = *new Lru; // never destroyed: entries own Python objects
std::unordered_map<Key, Lru::iterator, KeyHash>& g_index = *new std::unordered_map<Key, Lru::iterator, KeyHash>;

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
  kSymTensor,
  kSym, // a SymNode seen first here: its value id
  kSymRef, // a SymNode seen before in this key: its slot
  kSymGlobal,
};

struct KeyCtx {
  PyObject* mode;
  Key key;
  std::vector<const c10::StorageImpl*> storages; // for the aliasing pattern
  Stat why = CacheBypassArgType;
  // symbolic arguments
  PyObject* shape_env = nullptr; // borrowed: the mode's
  bool symbolic = false;
  std::vector<PyObject*> nodes; // borrowed SymNodes, by first occurrence
  std::vector<c10::SymInt> syms; // the same, as c10::SymInt (reused by outputs)
};

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

// Appends a SymNode: a back-reference if this key has seen the object before,
// otherwise its interned value id (memoised on the node by fastfake._cache.sym_vid).
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
  long long vid = -1;
  PyObject* memo = instance_attr(node, g_py.s_fastfake_vid);
  if (memo != nullptr) {
    vid = PyLong_AsLongLong(memo);
  } else {
    PyObject* r = PyObject_CallOneArg(g_py.sym_vid_hook, node);
    if (r != nullptr) {
      vid = PyLong_AsLongLong(r);
      Py_DECREF(r);
    }
  }
  if (vid < 0) {
    PyErr_Clear();
    ctx.why = CacheBypassSymOther;
    return false;
  }
  ctx.key.push_back(kSym);
  ctx.key.push_back(vid);
  ctx.nodes.push_back(node);
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

long long replacements_version(PyObject* env) {
  PyObject* v = instance_attr(env, g_py.s_replacements_version);
  if (v == nullptr) return -1;
  const long long r = PyLong_AsLongLong(v);
  if (r == -1) PyErr_Clear();
  return r;
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
  auto old = g_index.find(key);
  if (old != g_index.end()) {
    old->second->second.release();
    g_lru.erase(old->second);
    g_index.erase(old);
  }
  g_lru.emplace_front(std::move(key), std::move(e));
  g_index[g_lru.front().first] = g_lru.begin();
  evict_if_full();
}

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
  using M = c10::SymbolicShapeMeta;
  using GetBool = const c10::SymBool& (M::*)() const;
  if (m->has_numel()) {
    out.emplace_back(kNumel, SymVal{});
    if (!learn_symval(ctx, m->numel(), out.back().second)) return false;
  }
  const std::tuple<Derived, bool, GetBool> flags[] = {
      {kContiguous, m->has_is_contiguous(), static_cast<GetBool>(&M::is_contiguous)},
      {kChannelsLastContiguous, m->has_is_channels_last_contiguous(), &M::is_channels_last_contiguous},
      {kChannelsLast3dContiguous, m->has_is_channels_last_3d_contiguous(),
       &M::is_channels_last_3d_contiguous},
      {kChannelsLast, m->has_is_channels_last(), &M::is_channels_last},
      {kChannelsLast3d, m->has_is_channels_last_3d(), &M::is_channels_last_3d},
      {kNonOverlappingAndDense, m->has_is_non_overlapping_and_dense(),
       &M::is_non_overlapping_and_dense},
  };
  for (const auto& [d, avail, get] : flags) {
    if (!avail) continue;
    out.emplace_back(d, SymVal{});
    if (!learn_symbool(ctx, (m->*get)(), out.back().second)) return false;
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

// Parse the description fastfake._cache.learn() returns:
//   str                                   -> negative entry (stock bypassed)
//   (is_tuple, [out, ...]) with out one of
//     ("inplace", idx) | ("none",) |
//     ("tensor", dtype, sizes, strides, offset, device, is_conj, is_neg, view_idx) |
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
    } else if (std::strcmp(kind, "tensor_sym") == 0 && ctx.symbolic) {
      if (!learn_symbolic_tensor(ctx, o, s)) {
        PyErr_Clear();
        Py_CLEAR(s.device);
        return false;
      }
    } else if (std::strcmp(kind, "tensor") == 0 && PyTuple_GET_SIZE(o) == 9 && !ctx.symbolic) {
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

// A new SymNode with a recorded value, as stock's _DeconstructedSymNode.extract
// builds it: SymNode(expr, shape_env, pytype, hint, constant, fx_node).
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
    bool neg) {
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
    for (int64_t i = 0; i < m.version; ++i) impl->bump_version();
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
  if (s.kind == OutSpec::View) {
    if (s.idx < 0 || s.idx >= PyTuple_GET_SIZE(args) ||
        !is_fake_exact(PyTuple_GET_ITEM(args, s.idx))) {
      PyErr_SetString(PyExc_RuntimeError, "fastfake cache: view argument is not a FakeTensor");
      return nullptr;
    }
    storage = THPVariable_Unpack(PyTuple_GET_ITEM(args, s.idx)).storage();
  } else {
    if (!make_symint(ctx, m.nbytes, nbytes)) return nullptr;
    storage = meta_storage(std::move(nbytes));
  }
  return build_symbolic(ctx, mode, std::move(storage), s.dtype, s.device, sizes, strides, offset,
                        m, s.conj, s.neg);
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

// A symbolic entry stays valid while the ShapeEnv's replacements of the symbols it
// involves are those it was recorded under (stock's hit computes storage sizes from
// replaced expressions, and a symbol replaced by a number changes stock's key).
bool still_valid(const KeyCtx& ctx, Entry& e) {
  const long long ver = replacements_version(ctx.shape_env);
  if (ver >= 0 && ver == e.env_version) {
    return true;
  }
  if (ver < 0 || e.validity == nullptr || g_py.sym_valid_hook == nullptr) {
    return false;
  }
  PyObject* argv[2] = {ctx.shape_env, e.validity};
  PyObject* r = PyObject_Vectorcall(g_py.sym_valid_hook, argv, 2, nullptr);
  if (r == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool ok = r == Py_True;
  Py_DECREF(r);
  if (ok) {
    e.env_version = ver;
  }
  bump(ok ? CacheSymRecheck : CacheSymStale);
  return ok;
}

long long class_counter(PyObject* name) {
  PyObject* v = PyObject_GetAttr(g_py.fake_mode_type, name);
  if (v == nullptr) {
    PyErr_Clear();
    return -1;
  }
  const long long r = PyLong_AsLongLong(v);
  Py_DECREF(v);
  if (r == -1) PyErr_Clear();
  return r;
}

// ---------------------------------------------------------------------------
// Stock's synthesised outputs on a miss (see fastfake/_cache.py, _SYNTH_MEMO).
// A recipe is what an output built from given sizes / strides / offset carries
// beyond them: its storage size (fresh outputs) and the derived values stock's
// construction computed, as ints or SymNode value tuples.
// ---------------------------------------------------------------------------
PyObject* symval_to_py(const SymVal& v) {
  if (v.kind == SymVal::Int) return PyLong_FromLongLong(v.v);
  if (v.kind == SymVal::New) {
    Py_INCREF(v.fields);
    return v.fields;
  }
  Py_RETURN_NONE;
}

bool symval_from_py(PyObject* o, SymVal& v) {
  if (PyLong_CheckExact(o)) {
    v.kind = SymVal::Int;
    v.v = PyLong_AsLongLong(o);
    return !(v.v == -1 && PyErr_Occurred());
  }
  if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 6) {
    v.kind = SymVal::New;
    Py_INCREF(o);
    v.fields = o;
    return true;
  }
  PyErr_SetString(PyExc_TypeError, "fastfake: bad SymNode recipe value");
  return false;
}

} // namespace

PyObject* synth_recipe(PyObject* synth, bool fresh) {
  if (!is_fake_exact(synth)) Py_RETURN_NONE;
  PyObject* mode = instance_attr(synth, g_py.s_fake_mode);
  PyObject* env = mode ? instance_attr(mode, g_py.s_shape_env) : nullptr;
  if (env == nullptr || env == Py_None) Py_RETURN_NONE;
  KeyCtx ctx{mode, {}, {}, CacheBypassArgType};
  ctx.shape_env = env;
  const at::Tensor& t = THPVariable_Unpack(synth);
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->layout() != at::kStrided || !impl->has_storage()) Py_RETURN_NONE;
  SymShape sym;
  SymVal nbytes;
  if (fresh && !learn_symval(ctx, impl->storage().sym_nbytes(), sym.nbytes)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  if (!learn_derived(ctx, impl, sym.derived)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  const int64_t version = t.is_inference() ? 0 : static_cast<int64_t>(impl->version_counter().current_version());
  PyObject* derived = PyTuple_New(static_cast<Py_ssize_t>(sym.derived.size()));
  if (derived == nullptr) return nullptr;
  for (size_t i = 0; i < sym.derived.size(); ++i) {
    PyObject* v = symval_to_py(sym.derived[i].second);
    PyObject* pair = v ? Py_BuildValue("(iN)", static_cast<int>(sym.derived[i].first), v) : nullptr;
    if (pair == nullptr) {
      Py_DECREF(derived);
      return nullptr;
    }
    PyTuple_SET_ITEM(derived, static_cast<Py_ssize_t>(i), pair);
  }
  PyObject* nb = fresh ? symval_to_py(sym.nbytes) : (Py_INCREF(Py_None), Py_None);
  if (nb == nullptr) {
    Py_DECREF(derived);
    return nullptr;
  }
  return Py_BuildValue("(NNL)", nb, derived, static_cast<long long>(version));
}

PyObject* synth_build(
    PyObject* mode,
    PyObject* dtype,
    PyObject* device,
    PyObject* sizes,
    PyObject* strides,
    PyObject* offset,
    PyObject* base,
    PyObject* recipe) {
  PyObject* env = instance_attr(mode, g_py.s_shape_env);
  if (env == nullptr || env == Py_None || !THPDtype_Check(dtype) || !THPDevice_Check(device) ||
      !PyTuple_Check(sizes) || !PyTuple_Check(strides) || !PyTuple_Check(recipe) ||
      PyTuple_GET_SIZE(recipe) != 3) {
    PyErr_SetString(PyExc_TypeError, "fastfake: bad synth_build arguments");
    return nullptr;
  }
  KeyCtx ctx{mode, {}, {}, CacheBypassArgType};
  ctx.shape_env = env;
  auto to_symint = [&](PyObject* o, c10::SymInt& out) -> bool {
    if (PyLong_CheckExact(o)) {
      out = c10::SymInt(PyLong_AsLongLong(o));
      return !PyErr_Occurred();
    }
    PyObject* node = (g_py.symint_type && Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(g_py.symint_type))
        ? instance_attr(o, g_py.s_node) : nullptr;
    if (node == nullptr) {
      PyErr_SetString(PyExc_TypeError, "fastfake: expected int or SymInt");
      return false;
    }
    try {
      out = symint_from_node(node);
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return false;
    }
    return true;
  };
  c10::SymDimVector sz(PyTuple_GET_SIZE(sizes)), st(PyTuple_GET_SIZE(strides));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes); ++i) {
    if (!to_symint(PyTuple_GET_ITEM(sizes, i), sz[i])) return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(strides); ++i) {
    if (!to_symint(PyTuple_GET_ITEM(strides, i), st[i])) return nullptr;
  }
  c10::SymInt off;
  if (!to_symint(offset, off)) return nullptr;
  SymShape m;
  PyObject* derived = PyTuple_GET_ITEM(recipe, 1);
  if (!PyTuple_Check(derived)) {
    PyErr_SetString(PyExc_TypeError, "fastfake: bad recipe");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(derived); ++i) {
    PyObject* pair = PyTuple_GET_ITEM(derived, i);
    m.derived.emplace_back(static_cast<Derived>(PyLong_AsLong(PyTuple_GET_ITEM(pair, 0))), SymVal{});
    if (!symval_from_py(PyTuple_GET_ITEM(pair, 1), m.derived.back().second)) return nullptr;
  }
  m.version = PyLong_AsLongLong(PyTuple_GET_ITEM(recipe, 2));
  c10::Storage storage;
  if (base != Py_None) {
    if (!THPVariable_Check(base)) {
      PyErr_SetString(PyExc_TypeError, "fastfake: view base is not a tensor");
      return nullptr;
    }
    storage = THPVariable_Unpack(base).storage();
  } else {
    SymVal nb;
    c10::SymInt nbytes;
    const bool ok = symval_from_py(PyTuple_GET_ITEM(recipe, 0), nb) && make_symint(ctx, nb, nbytes);
    Py_CLEAR(nb.fields);
    if (!ok) return nullptr;
    storage = meta_storage(std::move(nbytes));
  }
  PyObject* out = build_symbolic(ctx, mode, std::move(storage),
                                 reinterpret_cast<THPDtype*>(dtype)->scalar_type, device, sz, st,
                                 off, m, /*conj=*/false, /*neg=*/false);
  if (out != nullptr) {
    bump(CacheSymSynthReuse);
  } else if (!PyErr_Occurred()) {
    bump(CacheSymUnrebuildable); // not symbolic once rebuilt: the caller builds it as stock
    Py_RETURN_NONE;
  }
  return out;
}

namespace {
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
  PyObject* env = instance_attr(mode, g_py.s_shape_env);
  ctx.shape_env = env == Py_None ? nullptr : env;
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

  if (ctx.symbolic && !symbolic_key(ctx)) {
    return bypass(ctx.why);
  }

  auto it = g_index.find(ctx.key);
  if (it != g_index.end() && ctx.symbolic && !it->second->second.negative &&
      !still_valid(ctx, it->second->second)) {
    it = g_index.end(); // relearn (store() replaces the entry)
  }
  if (it != g_index.end()) {
    g_lru.splice(g_lru.begin(), g_lru, it->second);
    const Entry& e = it->second->second;
    if (e.negative) {
      return bypass(e.reason);
    }
    *handled = true;
    PyObject* r = rebuild(mode, args, ctx, e);
    if (r == nullptr && !PyErr_Occurred()) {
      bump(CacheSymUnrebuildable);
      return call_stock_dispatch(mode, func, types, args, kwargs);
    }
    if (r != nullptr) {
      *served = true;
      bump(CacheHit);
      stock_count_hit();
      if (ctx.symbolic) bump(CacheSymHit);
    }
    return r;
  }

  // Miss: stock computes (and fills its own cache); then learn stock's entry.
  *handled = true;
  bump(CacheMiss);
  long long hits0 = -1, misses0 = -1;
  if (ctx.symbolic) {
    bump(CacheSymMiss);
    hits0 = class_counter(g_py.s_cache_hits);
    misses0 = class_counter(g_py.s_cache_misses);
    if (g_py.sym_capture_hook != nullptr) {
      PyObject* cargv[3] = {mode, func, args};
      PyObject* r = PyObject_Vectorcall(g_py.sym_capture_hook, cargv, 3, nullptr);
      if (r == nullptr) {
        PyErr_Clear();
      }
      Py_XDECREF(r);
    }
  }
  PyObject* out = call_stock_dispatch(mode, func, types, args, kwargs);
  if (out == nullptr) {
    if (ctx.symbolic && g_py.sym_capture_hook != nullptr) {
      // close the capture frame opened above, keeping stock's error
      PyObject *et, *ev, *tb;
      PyErr_Fetch(&et, &ev, &tb);
      PyObject* cargv[3] = {Py_None, Py_None, Py_None};
      PyObject* r = PyObject_Vectorcall(g_py.sym_capture_hook, cargv, 3, nullptr);
      Py_XDECREF(r);
      PyErr_Clear();
      PyErr_Restore(et, ev, tb);
    }
    return nullptr;
  }
  // Did stock answer from its own cache (then `out` is exactly what a hit builds)?
  const bool stock_hit = ctx.symbolic && hits0 >= 0 &&
      class_counter(g_py.s_cache_hits) == hits0 + 1 &&
      class_counter(g_py.s_cache_misses) == misses0;
  PyObject* argv[6] = {mode, func, args, kwargs ? kwargs : Py_None, out,
                       stock_hit ? Py_True : Py_False};
  PyObject* desc = PyObject_Vectorcall(g_py.cache_learn_hook, argv, 6, nullptr);
  if (desc == nullptr) {
    PyErr_Clear();
    return out;
  }
  if (desc != Py_None) {
    Entry e;
    Py_INCREF(func);
    e.func = func;
    if (parse_entry(ctx, desc, e)) {
      store(std::move(ctx.key), std::move(e));
    } else if (ctx.symbolic) {
      // Deterministic for this key: do not pay for learning it again. The entry
      // keeps its op reference; only the half-parsed outputs go.
      bump(CacheSymReject);
      for (auto& o : e.outs) Py_CLEAR(o.device);
      e.outs.clear();
      Py_CLEAR(e.validity);
      e.negative = true;
      e.reason = CacheSymReject;
      store(std::move(ctx.key), std::move(e));
    } else {
      e.release();
    }
  }
  Py_DECREF(desc);
  return out;
}

} // namespace fastfake
