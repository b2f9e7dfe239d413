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
// Python helper fastfake.cache.learn.learn() reads *stock's own* validated cache entry
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
#include "cache/internal.h"
#include "cache/item_memo.h"
#include "cache/portable.h"
#include "cache/rerun.h"

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

Lru& g_lru = *new Lru; // never destroyed: entries own Python objects
std::unordered_map<Key, Lru::iterator, KeyHash>& g_index =
    *new std::unordered_map<Key, Lru::iterator, KeyHash>;

size_t g_bytes = 0; // sum of the entries' bytes

// What an entry holds: its list node and key, the index node and its copy of the
// key, the output specs and their size vectors, the symbolic recipes, and the
// Python tuple of every new SymNode value (its sympy objects are counted once
// per tuple, though most are shared with the ShapeEnv).
size_t entry_bytes(const Key& key, const Entry& e) {
  constexpr size_t kNode = 2 * sizeof(void*);
  constexpr size_t kPyFields = 104 + 200; // 6-tuple + an expression of its own
  size_t n = kNode + sizeof(std::pair<Key, Entry>) + key.capacity() * sizeof(int64_t);
  n += kNode + sizeof(Key) + sizeof(Lru::iterator) + key.size() * sizeof(int64_t);
  for (const auto& o : e.outs) {
    n += sizeof(OutSpec) + (o.sizes.capacity() + o.strides.capacity()) * sizeof(int64_t);
    if (o.constant != nullptr) n += 32; // a Python int
    if (o.sym) {
      const SymShape& m = *o.sym;
      n += sizeof(SymShape) + (m.sizes.capacity() + m.strides.capacity()) * sizeof(SymVal) +
          m.derived.capacity() * sizeof(m.derived[0]);
      auto fields = [&](const SymVal& v) { n += v.fields != nullptr ? kPyFields : 0; };
      for (const auto& v : m.sizes) fields(v);
      for (const auto& v : m.strides) fields(v);
      fields(m.offset);
      fields(m.nbytes);
      for (const auto& d : m.derived) fields(d.second);
    }
  }
  return n;
}

void evict_if_full() {
  while (!g_lru.empty() &&
         (g_lru.size() > g_config.cache_max_entries || g_bytes > g_config.cache_max_bytes)) {
    auto& back = g_lru.back();
    g_bytes -= back.second.bytes;
    g_index.erase(back.first);
    back.second.release();
    g_lru.pop_back();
    bump(CacheEvict);
  }
}

void store(Key&& key, Entry&& e) {
  auto old = g_index.find(key);
  if (old != g_index.end()) {
    g_bytes -= old->second->second.bytes;
    old->second->second.release();
    g_lru.erase(old->second);
    g_index.erase(old);
  }
  e.bytes = entry_bytes(key, e);
  g_bytes += e.bytes;
  g_lru.emplace_front(std::move(key), std::move(e));
  g_index[g_lru.front().first] = g_lru.begin();
  evict_if_full();
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

} // namespace cache_detail

using namespace cache_detail;

void cache_clear() {
  for (auto& [k, e] : g_lru) {
    e.release();
  }
  g_lru.clear();
  g_index.clear();
  g_bytes = 0;
  portable_clear();
  rerun_clear();
}

size_t cache_size() {
  return g_lru.size();
}

size_t cache_bytes() {
  return g_bytes;
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
      !PyTuple_Check(args) || !allows_meta(mode)) {
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
  ctx.scalar_ok = rerun_scalar_op(func);
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
  if (ctx.symbolic && !touch_exprs(ctx)) {
    PyErr_Clear(); // stock's own key computation raises it again
    return bypass(CacheBypassSymOther);
  }

  if (ctx.sym_scalars != 0) {
    // A SymFloat argument: stock never caches the call ("symbolic shape"); such a
    // key never enters the result cache, only a rerun entry serves it.
    bool done = false;
    PyObject* r = rerun_call(mode, func, types, args, kwargs, ctx, &done, served);
    if (done) {
      *handled = true;
      if (!*served) bump(CacheBypassSymScalar);
      return r;
    }
    return bypass(CacheBypassSymScalar);
  }

  auto it = g_index.find(ctx.key);
  if (it != g_index.end() && ctx.symbolic && !it->second->second.negative &&
      !still_valid(ctx, it->second->second)) {
    it = g_index.end(); // relearn (store() replaces the entry)
  }
  if (it != g_index.end() && portable_recording()) {
    // Inside the kernel of a miss being recorded (portable.h): a hit logs stock's
    // key for the call; a negative entry's shortcuts leave the call to stock.
    if (it->second->second.negative) return bypass(it->second->second.reason);
    portable_log_hit(mode, func, args, kwargs);
  }
  if (it != g_index.end()) {
    g_lru.splice(g_lru.begin(), g_lru, it->second);
    const Entry& e = it->second->second;
    if (e.negative) {
      const Stat reason = e.reason;
      if (ctx.symbolic) {
        // A call stock reruns every time (cache_rerun.cpp).
        bool done = false;
        PyObject* r = rerun_call(mode, func, types, args, kwargs, ctx, &done, served);
        if (done) {
          *handled = true;
          if (!*served) bump(reason);
          return r;
        }
      } else if (e.item_memo != kNotItem) {
        // `.item()` on a tensor holding its memo (item_memo.cpp)
        bool done = false;
        PyObject* r = item_memo_call(mode, func, types, args, kwargs, ctx.key, e.item_memo, &done, served);
        if (done || PyErr_Occurred()) {
          *handled = done;
          return r;
        }
      }
      return bypass(reason);
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
      stock_count_hit(e.stock_bypasses);
      if (ctx.symbolic) bump(CacheSymHit);
    }
    return r;
  }

  // Miss: stock computes (and fills its own cache); then learn stock's entry.
  *handled = true;
  bump(CacheMiss);
  long long hits0 = -1, misses0 = -1;
  PyObject* before = nullptr; // owned: fastfake.cache.portable's snapshot
  if (ctx.symbolic) {
    bump(CacheSymMiss);
    // First call here of a call learned in another ShapeEnv (csrc/cache/portable.cpp).
    if (PyObject* r = portable_serve(mode, func, args, kwargs, ctx)) {
      *served = true;
      return r;
    }
    before = portable_before(mode, args, kwargs, ctx);
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
  if (before != nullptr) portable_recording_begin();
  PyObject* out = call_stock_dispatch(mode, func, types, args, kwargs);
  if (before != nullptr) portable_recording_end();
  if (out == nullptr) {
    Py_CLEAR(before);
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
    Py_CLEAR(before);
    return out;
  }
  if (desc != Py_None) {
    Entry e;
    Py_INCREF(func);
    e.func = func;
    if (parse_entry(ctx, desc, e)) {
      if (e.negative && !ctx.symbolic) e.item_memo = item_memo_candidate(func, desc);
      // Only a call stock missed; fastfake.cache.portable tells whether the calls its
      // kernel dispatched (decompositions) can be replayed where it serves.
      if (!stock_hit) {
        portable_learn(mode, func, args, kwargs, out, before, ctx, e);
      }
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
  Py_CLEAR(before);
  return out;
}

} // namespace fastfake
