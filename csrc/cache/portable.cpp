// Symbolic result-cache entries reused in another ShapeEnv ("portable" entries).
//
// A symbolic entry is keyed with its ShapeEnv's id (cache_keys.cpp). When stock
// *missed* on a call that left its ShapeEnv unchanged (and whose nested calls,
// if its kernel dispatched any, can be replayed), the entry is also recorded
// here under the same key with the ShapeEnv id replaced by 0, together with the
// outputs stock's miss returned (its kernel's output, whose SymNode identities
// differ from those of stock's hit) and fastfake.cache.portable's record (the symbols,
// the signature of the ShapeEnv state static evaluation reads about them, and
// stock's own entry). A first call in another ShapeEnv with that key is served
// from the miss recipe when fastfake.cache.portable.admit() finds the same signature
// there and no entry in stock's cache; then stock's entry is stored into that
// ShapeEnv's cache as stock's miss stores it, one stock miss is counted, and the
// hit recipe becomes a local entry for the later calls. Why this is stock's
// answer: fastfake/cache/portable.py. Bounded; cleared with the result cache.
#include "cache/internal.h"
#include "cache/portable.h"
#include "cache/portable_fast.h"
#include "runtime/untrack.h"

#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstring>

namespace fastfake {
namespace cache_detail {

namespace {

struct PEntry {
  Entry hit; // what stock's hit builds: becomes the local entry after serving
  Entry miss; // what stock's miss returned
  std::vector<uint32_t> masks; // the derived values each argument had memoised
  std::vector<Seed> seeds; // what stock's kernel memoised on its arguments
  PyObject* record = nullptr; // owned, opaque (fastfake.cache.portable)
  // admitted and committed in C++ (cache_portable_fast.cpp), or by fastfake.cache.portable
  std::shared_ptr<FastRecord> fast;
  // For the store (fastfake/store/symbolic.py): where the key holds SymNode value
  // ids; whether it may be kept (no SymFloat argument's id in it); whether it
  // was read from disk or handed to the store already.
  std::vector<uint32_t> vid_pos;
  bool exportable = false;
  bool kept = false;
  bool from_disk = false;
  void release() {
    hit.release();
    miss.release();
    Py_CLEAR(record);
    fast.reset();
  }
};

std::unordered_map<Key, PEntry, KeyHash>& g_portable =
    *new std::unordered_map<Key, PEntry, KeyHash>;
constexpr size_t kMaxPortable = 8192;
bool g_on = false;
int g_inject_fault = 0;
uint64_t g_memo_refused = 0; // not recorded: an output holds an argument's derived value
uint64_t g_memo_declined = 0; // not served: the arguments had memoised other derived values
uint64_t g_disk_served = 0; // first calls served from a record read from the store
PyObject* g_before = nullptr;
PyObject* g_learn = nullptr;
PyObject* g_admit = nullptr;
PyObject* g_commit = nullptr;
PyObject* g_log_hit = nullptr;
PyObject* g_replay = nullptr;
PyObject* g_loader = nullptr; // called once, at the first symbolic miss (the store's records)
// A record read from disk, admitted in Python and committed: its C++ fast form
// (fastfake/store/symbolic.py's fast_for), so that later ShapeEnvs admit it in C++.
PyObject* g_fast_for = nullptr;

Key portable_key(const Key& key) {
  Key p = key;
  p.back() = 0; // symbolic keys end with the ShapeEnv id (symbolic_key)
  return p;
}

// A copy holding its own references.
Entry clone(const Entry& e) {
  Entry c = e;
  Py_XINCREF(c.func);
  Py_XINCREF(c.validity);
  for (auto& o : c.outs) {
    Py_XINCREF(o.device);
    Py_XINCREF(o.constant);
  }
  c.bytes = 0;
  return c;
}

bool usable(const KeyCtx& ctx) {
  // (not for a call whose real tensor arguments were converted: stock bypasses
  // its cache for it)
  return g_on && g_before != nullptr && ctx.symbolic && ctx.shape_env != nullptr &&
      !ctx.key.empty() && !g_stock_counts.non_fake_call && !proxy_tracing();
}

// The SymNodes the argument tensors hold as memoised derived values.
void derived_nodes(PyObject* args, std::vector<PyObject*>& out) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    if (!is_fake_exact(a)) continue;
    const c10::TensorImpl* impl = THPVariable_Unpack(a).unsafeGetTensorImpl();
    if (!impl->has_symbolic_sizes_strides()) continue;
    const c10::SymbolicShapeMeta* m = shape_meta(impl);
    if (m == nullptr) continue;
    if (m->has_numel() && m->numel().is_heap_allocated()) {
      out.push_back(py_sym_node(m->numel().toSymNodeImplUnowned()));
    }
    for (const auto& [d, flag] : memoised_flags(*m)) {
      if (flag->is_heap_allocated()) out.push_back(py_sym_node(flag->toSymNodeImplUnowned()));
    }
  }
}

// Whether an output holds one of `nodes` (sizes, strides, offset, storage size):
// stock's kernel returned an argument's memoised value itself (`view(-1)`'s size
// is its input's numel), which a recipe would rebuild as a new SymNode.
bool reuses(PyObject* out, const std::vector<PyObject*>& nodes) {
  if (nodes.empty()) return false;
  auto hit = [&](const c10::SymInt& x) {
    if (!x.is_heap_allocated()) return false;
    PyObject* n = py_sym_node(x.toSymNodeImplUnowned());
    return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
  };
  auto one = [&](PyObject* o) {
    if (!is_fake_exact(o)) return false;
    const c10::TensorImpl* impl = THPVariable_Unpack(o).unsafeGetTensorImpl();
    if (!impl->has_symbolic_sizes_strides()) return false;
    for (const auto& x : impl->sym_sizes()) if (hit(x)) return true;
    for (const auto& x : impl->sym_strides()) if (hit(x)) return true;
    return hit(impl->sym_storage_offset()) ||
        (impl->has_storage() && hit(impl->storage().sym_nbytes()));
  };
  if (PyTuple_Check(out)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(out); ++i) {
      if (one(PyTuple_GET_ITEM(out, i))) return true;
    }
    return false;
  }
  return one(out);
}

} // namespace

PyObject* portable_before(PyObject* mode, PyObject* args, PyObject* kwargs, const KeyCtx& ctx) {
  if (!usable(ctx)) return nullptr;
  // (the derived values each argument has memoised ride along, as bytes)
  std::vector<uint32_t> masks;
  if (!masks_of(ctx, args, masks)) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* argv[3] = {mode, args, kwargs != nullptr ? kwargs : Py_None};
  PyObject* r = PyObject_Vectorcall(g_before, argv, 3, nullptr);
  if (r == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (r == Py_None) {
    Py_DECREF(r); // (a call that is never recorded: nothing to learn)
    return nullptr;
  }
  PyObject* bytes = PyBytes_FromStringAndSize(
      reinterpret_cast<const char*>(masks.data()),
      static_cast<Py_ssize_t>(masks.size() * sizeof(uint32_t)));
  PyObject* packed = bytes != nullptr ? PyTuple_Pack(2, r, bytes) : nullptr;
  Py_DECREF(r);
  Py_XDECREF(bytes);
  if (packed == nullptr) PyErr_Clear();
  return packed;
}

void portable_learn(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    PyObject* out,
    PyObject* before,
    const KeyCtx& ctx,
    const Entry& e) {
  if (before == nullptr || e.negative || g_learn == nullptr) return;
  std::vector<uint32_t> masks(
      static_cast<size_t>(PyBytes_GET_SIZE(PyTuple_GET_ITEM(before, 1))) / sizeof(uint32_t));
  std::memcpy(masks.data(), PyBytes_AS_STRING(PyTuple_GET_ITEM(before, 1)),
              masks.size() * sizeof(uint32_t));
  // Stock's miss in another ShapeEnv memoises on the arguments what the kernel
  // memoised here (recorded, seeded where served), and returns what they had
  // memoised if it did here: that a recipe cannot rebuild.
  std::vector<PyObject*> nodes;
  derived_nodes(args, nodes);
  std::vector<Seed> seeds;
  if (reuses(out, nodes) || !seeds_of(ctx, args, masks, seeds)) {
    PyErr_Clear();
    ++g_memo_refused;
    return;
  }
  PyObject* argv[6] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None, out,
                       PyTuple_GET_ITEM(before, 0)};
  PyObject* r = PyObject_Vectorcall(g_learn, argv, 6, nullptr);
  if (r == nullptr) {
    PyErr_Clear();
    return;
  }
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3) {
    Py_DECREF(r);
    return;
  }
  PEntry pe;
  pe.miss.func = func;
  Py_INCREF(func);
  if (!parse_entry(ctx, PyTuple_GET_ITEM(r, 1), pe.miss)) {
    PyErr_Clear();
    pe.release();
    Py_DECREF(r);
    return;
  }
  for (auto& o : pe.miss.outs) {
    // a view stock's kernel returned shares its input's version counter
    if (o.kind == OutSpec::View) o.share_version = true;
  }
  pe.hit = clone(e);
  pe.vid_pos = ctx.node_pos;
  pe.exportable = ctx.sym_scalars == 0 && ctx.node_pos.size() == ctx.nodes.size();
  pe.masks = std::move(masks);
  pe.seeds = std::move(seeds);
  pe.record = PyTuple_GET_ITEM(r, 0);
  Py_INCREF(pe.record);
  untrack_inert(pe.record);
  if (PyTuple_GET_ITEM(r, 2) != Py_None) {
    untrack_inert(PyTuple_GET_ITEM(r, 2));
    pe.fast = fast_parse(ctx, PyTuple_GET_ITEM(r, 2));
  }
  Py_DECREF(r); // (drops the fast form's keys, which hold this ShapeEnv's SymNodes)
  if (g_portable.size() >= kMaxPortable) {
    portable_clear();
  }
  Key pk = portable_key(ctx.key);
  auto old = g_portable.find(pk);
  if (old != g_portable.end()) {
    old->second.release();
    g_portable.erase(old);
  }
  g_portable.emplace(std::move(pk), std::move(pe));
}

namespace {

// The outputs stock's miss returned, rebuilt from the recipe (or, under the
// testing fault, from the hit's), with what its kernel memoised on the arguments
// memoised on them; nullptr (no error set) when stock must compute the call.
PyObject* rebuild_miss(PyObject* mode, PyObject* args, const KeyCtx& ctx, const PEntry& pe) {
  const bool fault = g_inject_fault > 0;
  if (fault) --g_inject_fault;
  PyObject* out = rebuild(mode, args, ctx, fault ? pe.hit : pe.miss);
  if (out == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  for (const Seed& sd : pe.seeds) {
    // (the masks matched: the argument is symbolic and had none of these)
    c10::TensorImpl* impl = THPVariable_Unpack(PyTuple_GET_ITEM(args, sd.arg)).unsafeGetTensorImpl();
    if (!seed_derived(ctx, impl, *sd.values)) {
      PyErr_Clear();
      Py_DECREF(out);
      return nullptr;
    }
  }
  return out;
}

// The ShapeEnv evaluations stock's kernel made where the record was learned,
// made in this ShapeEnv before it serves (fastfake.cache.portable.replay,
// fastfake.parity.evals): false when the call must go to stock. Called for every
// record, also one whose kernel made no evaluation: the guard suppression is
// compared there, and the crosscheck learns that the call was served.
bool replayed(PyObject* mode, PyObject* record) {
  if (g_replay == nullptr) return false;
  PyObject* argv[2] = {mode, record};
  PyObject* ok = PyObject_Vectorcall(g_replay, argv, 2, nullptr);
  if (ok == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool r = ok == Py_True;
  Py_DECREF(ok);
  return r;
}

// A first call admitted (or declined) in C++: the miss recipe's outputs, the
// arguments' derived values seeded, stock's entries stored.
PyObject* serve_fast(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    const KeyCtx& ctx,
    PEntry& pe,
    bool admitted,
    const std::vector<PyObject*>& keys) {
  if (!fast_verify(mode, func, args, kwargs, pe.record, admitted, keys)) {
    return nullptr; // (a test's check failed: stock computes the call)
  }
  if (!admitted) return nullptr;
  if (!replayed(mode, pe.record)) return nullptr; // stock computes it
  PyObject* out = rebuild_miss(mode, args, ctx, pe);
  if (out == nullptr) return nullptr; // stock computes it
  // (as fastfake.cache.portable.commit: nothing stored under fastfake's crosscheck,
  // whose verifying stock call is that miss)
  if (!fast_commit(ctx, *pe.fast, keys, !g_config.crosscheck, g_stock_counts.enabled)) {
    PyErr_Clear();
    Py_DECREF(out);
    return nullptr;
  }
  Entry local = clone(pe.hit);
  Py_XSETREF(local.validity, Py_NewRef(pe.fast->validity));
  local.env_version = replacements_version(ctx.shape_env);
  if (!g_config.crosscheck && g_stock_counts.enabled && !g_stock_counts.non_fake_call) {
    ++g_stock_counts.misses; // stock's miss; its entry went to the ShapeEnv's cache
  }
  if (pe.from_disk) ++g_disk_served;
  store(Key(ctx.key), std::move(local));
  return out;
}

} // namespace

PyObject* portable_serve(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    const KeyCtx& ctx) {
  if (!usable(ctx)) return nullptr;
  if (g_loader != nullptr) {
    PyObject* loader = g_loader; // (once: the store reads its file and imports)
    g_loader = nullptr;
    PyObject* r = PyObject_CallNoArgs(loader);
    Py_DECREF(loader);
    if (r == nullptr) {
      PyErr_Clear();
    } else {
      Py_DECREF(r);
    }
  }
  if (g_portable.empty()) return nullptr;
  auto it = g_portable.find(portable_key(ctx.key));
  if (it == g_portable.end()) return nullptr;
  PEntry& pe = it->second;
  std::vector<uint32_t> masks;
  if (!masks_of(ctx, args, masks) || masks != pe.masks) {
    PyErr_Clear();
    ++g_memo_declined;
    return nullptr;
  }
  if (fast_enabled()) {
    std::vector<PyObject*> keys;
    // (a record without a fast form -- its keys could not be templated -- is
    // admitted in Python, and counted so)
    const FastAdmit a = pe.fast ? fast_admit(ctx, *pe.fast, keys) : fast_left_to_python();
    if (a != FastAdmit::Python) {
      PyObject* r = serve_fast(mode, func, args, kwargs, ctx, pe, a == FastAdmit::Admit, keys);
      for (PyObject* k : keys) Py_DECREF(k);
      return r;
    }
  }
  PyObject* argv[5] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None, pe.record};
  PyObject* adm = PyObject_Vectorcall(g_admit, argv, 5, nullptr);
  if (adm == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (!PyTuple_Check(adm) || PyTuple_GET_SIZE(adm) != 2) {
    Py_DECREF(adm);
    return nullptr;
  }
  PyObject* out = rebuild_miss(mode, args, ctx, pe);
  if (out == nullptr) {
    Py_DECREF(adm);
    return nullptr; // stock computes it
  }
  // Under fastfake's crosscheck, stock's verifying call of this very call is the
  // miss that stores stock's entry (and counts itself): comparing with it compares
  // with stock's miss, which is what was served.
  PyObject* cargv[5] = {mode, PyTuple_GET_ITEM(adm, 1), pe.record,
                        g_config.crosscheck ? Py_False : Py_True,
                        g_stock_counts.enabled ? Py_True : Py_False};
  PyObject* ok = PyObject_Vectorcall(g_commit, cargv, 5, nullptr);
  if (ok == nullptr) {
    PyErr_Clear();
    Py_DECREF(adm);
    Py_DECREF(out);
    return nullptr;
  }
  Py_DECREF(ok);
  if (pe.from_disk && !pe.fast && !g_config.crosscheck && g_fast_for != nullptr && fast_enabled()) {
    // (the keys the commit stored, stripped as stock strips them, are what
    // learning templates in the learning process)
    PyObject* fargv[2] = {pe.record, PyTuple_GET_ITEM(adm, 1)};
    PyObject* f = PyObject_Vectorcall(g_fast_for, fargv, 2, nullptr);
    if (f != nullptr && f != Py_None) {
      untrack_inert(f);
      pe.fast = fast_parse(ctx, f);
    }
    Py_XDECREF(f);
    PyErr_Clear();
  }
  Entry local = clone(pe.hit);
  Py_XSETREF(local.validity, PyTuple_GET_ITEM(adm, 0));
  Py_INCREF(local.validity);
  local.env_version = replacements_version(ctx.shape_env);
  Py_DECREF(adm);
  if (!g_config.crosscheck && g_stock_counts.enabled && !g_stock_counts.non_fake_call) {
    ++g_stock_counts.misses; // stock's miss; its entry went to the ShapeEnv's cache
  }
  if (pe.from_disk) ++g_disk_served;
  store(Key(ctx.key), std::move(local));
  return out;
}

} // namespace cache_detail

void portable_setup(
    PyObject* before,
    PyObject* learn,
    PyObject* admit,
    PyObject* commit,
    PyObject* log_hit,
    PyObject* replay) {
  using namespace cache_detail;
  for (auto [dst, src] : {std::pair{&g_before, before}, {&g_learn, learn}, {&g_admit, admit},
                          {&g_commit, commit}, {&g_log_hit, log_hit}, {&g_replay, replay}}) {
    Py_XINCREF(src);
    Py_XSETREF(*dst, src);
  }
}

uint64_t portable_disk_served() {
  return cache_detail::g_disk_served;
}

void portable_set_disk_served(uint64_t n) {
  cache_detail::g_disk_served = n;
}

void portable_set_fast_for(PyObject* fn) {
  using namespace cache_detail;
  Py_XSETREF(g_fast_for, fn == nullptr || fn == Py_None ? nullptr : Py_NewRef(fn));
}

void portable_set_loader(PyObject* loader) {
  using namespace cache_detail;
  Py_XSETREF(g_loader, loader == nullptr || loader == Py_None ? nullptr : Py_NewRef(loader));
}

PyObject* portable_export() {
  using namespace cache_detail;
  PyObject* out = PyList_New(0);
  if (out == nullptr) return nullptr;
  for (auto& [key, pe] : g_portable) {
    if (pe.kept || !pe.exportable) continue;
    pe.kept = true;
    PyObject* k = PyTuple_New(static_cast<Py_ssize_t>(key.size()));
    if (k == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    for (size_t i = 0; i < key.size(); ++i) {
      PyTuple_SET_ITEM(k, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(key[i]));
    }
    PyObject* pos = PyTuple_New(static_cast<Py_ssize_t>(pe.vid_pos.size()));
    PyObject* masks = PyTuple_New(static_cast<Py_ssize_t>(pe.masks.size()));
    if (pos == nullptr || masks == nullptr) {
      Py_XDECREF(pos);
      Py_XDECREF(masks);
      Py_DECREF(k);
      Py_DECREF(out);
      return nullptr;
    }
    for (size_t i = 0; i < pe.vid_pos.size(); ++i) {
      PyTuple_SET_ITEM(pos, static_cast<Py_ssize_t>(i), PyLong_FromUnsignedLong(pe.vid_pos[i]));
    }
    for (size_t i = 0; i < pe.masks.size(); ++i) {
      PyTuple_SET_ITEM(masks, static_cast<Py_ssize_t>(i), PyLong_FromUnsignedLong(pe.masks[i]));
    }
    PyObject* hit = entry_to_py(pe.hit);
    PyObject* miss = hit != nullptr ? entry_to_py(pe.miss) : nullptr;
    PyObject* seeds = miss != nullptr ? seeds_to_py(pe.seeds) : nullptr;
    if (seeds == nullptr) {
      // (an entry that cannot be described: not kept)
      PyErr_Clear();
      Py_XDECREF(hit);
      Py_XDECREF(miss);
      Py_DECREF(k);
      Py_DECREF(pos);
      Py_DECREF(masks);
      continue;
    }
    PyObject* item = Py_BuildValue("(NNNNNNO)", k, pos, hit, miss, masks, seeds, pe.record);
    if (item == nullptr || PyList_Append(out, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return out;
}

int portable_import(PyObject* items) {
  using namespace cache_detail;
  if (!PyList_Check(items)) return 0;
  int n = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); ++i) {
    if (g_portable.size() >= kMaxPortable) break;
    PyObject* it = PyList_GET_ITEM(items, i);
    // (key, hit, miss, masks, seeds, record): the key with this process's op id and
    // SymNode value ids in it (fastfake/store/symbolic.py)
    if (!PyTuple_CheckExact(it) || PyTuple_GET_SIZE(it) != 6) continue;
    Key key;
    PyObject* k = PyTuple_GET_ITEM(it, 0);
    bool ok = PyTuple_CheckExact(k) && PyTuple_GET_SIZE(k) > 0;
    for (Py_ssize_t j = 0; ok && j < PyTuple_GET_SIZE(k); ++j) {
      PyObject* x = PyTuple_GET_ITEM(k, j);
      int overflow = 0;
      const long long v = PyLong_CheckExact(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : 0;
      ok = PyLong_CheckExact(x) && overflow == 0 && !(v == -1 && PyErr_Occurred());
      key.push_back(v);
    }
    PyErr_Clear();
    if (!ok || key.back() != 0 || g_portable.count(key) != 0) continue;
    PEntry pe;
    PyObject* masks = PyTuple_GET_ITEM(it, 3);
    ok = PyTuple_CheckExact(masks);
    for (Py_ssize_t j = 0; ok && j < PyTuple_GET_SIZE(masks); ++j) {
      PyObject* x = PyTuple_GET_ITEM(masks, j);
      const unsigned long v = PyLong_CheckExact(x) ? PyLong_AsUnsignedLong(x) : 0;
      ok = PyLong_CheckExact(x) && !PyErr_Occurred() && v <= 0xffffffffUL;
      pe.masks.push_back(static_cast<uint32_t>(v));
    }
    PyErr_Clear();
    ok = ok && entry_from_py(PyTuple_GET_ITEM(it, 1), pe.hit) && entry_from_py(PyTuple_GET_ITEM(it, 2), pe.miss) &&
        pe.hit.func == pe.miss.func && reinterpret_cast<intptr_t>(pe.hit.func) == key.front() &&
        seeds_from_py(PyTuple_GET_ITEM(it, 4), pe.seeds);
    for (const Seed& sd : pe.seeds) {
      // (a seed goes to an argument that was a symbolic tensor where learned; the
      // masks, compared before serving, say the serving call's is one too)
      ok = ok && static_cast<size_t>(sd.arg) < pe.masks.size() && (pe.masks[sd.arg] & (1u << 31)) != 0;
    }
    PyErr_Clear();
    if (!ok) {
      pe.release();
      continue;
    }
    pe.record = Py_NewRef(PyTuple_GET_ITEM(it, 5));
    untrack_inert(pe.record);
    pe.kept = true;
    pe.from_disk = true;
    g_portable.emplace(std::move(key), std::move(pe));
    ++n;
  }
  return n;
}

bool portable_set(bool on) {
  const bool was = cache_detail::g_on;
  cache_detail::g_on = on; // records are kept, like the result cache's entries
  return was;
}

void portable_inject_fault(int n) {
  cache_detail::g_inject_fault = n;
}

namespace {
int g_recording = 0;
} // namespace

void portable_recording_begin() {
  ++g_recording;
}

void portable_recording_end() {
  --g_recording;
}

bool portable_recording() {
  return g_recording > 0;
}

void portable_log_hit(PyObject* mode, PyObject* func, PyObject* args, PyObject* kwargs) {
  if (cache_detail::g_log_hit == nullptr) return;
  PyObject* argv[4] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None};
  PyObject* r = PyObject_Vectorcall(cache_detail::g_log_hit, argv, 4, nullptr);
  if (r == nullptr) PyErr_Clear(); // (the log then lacks the key: the miss is not recorded)
  Py_XDECREF(r);
}

std::pair<uint64_t, uint64_t> portable_memo_counts() {
  return {cache_detail::g_memo_refused, cache_detail::g_memo_declined};
}

void portable_set_memo_counts(uint64_t refused, uint64_t declined) {
  cache_detail::g_memo_refused = refused;
  cache_detail::g_memo_declined = declined;
}

size_t portable_size() {
  return cache_detail::g_portable.size();
}

void portable_clear() {
  for (auto& [k, pe] : cache_detail::g_portable) {
    pe.release();
  }
  cache_detail::g_portable.clear();
}

} // namespace fastfake
