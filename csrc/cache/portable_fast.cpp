// A portable record's admission and commit in C++.
//
// fastfake/cache/portable.py decides whether an entry recorded in one ShapeEnv may
// serve a first call in another (admit) and then does what stock's miss would
// have done to stock's cache (commit). Here the same decision and effects are
// made without Python for the records whose fast form fastfake.cache.portable gave
// (_fast_form), which is every record without a pending floor-division
// resimplification:
//
// * the signature: for each symbol of the recorded replacement closure, the
//   ShapeEnv's hint, value range, size-likeness and replacement must be the
//   recorded ones (the closure is then the same), and the axioms and
//   divisibility facts over the closure the recorded sets (kept filtered per
//   ShapeEnv and closure, their facts interned: fastfake/cache/facts.py);
// * stock's cache: the call's own key and its nested calls' stored keys are
//   built for this ShapeEnv from the keys stock stored where the record was
//   learned -- the same items, each SymInt stub holding the serving call's
//   argument SymNode where stock's held an argument's (as stock's key here
//   would: it stubs the argument's own SymNode), or a new SymNode with the
//   recorded value where stock's held one its kernel made -- and none may be in
//   the ShapeEnv's cache; the nested lookups' ShapeEnv-free keys must find
//   entries of the recorded kinds. Equal fastfake keys mean equal stock keys:
//   stock's key is a function of what fastfake's key holds (the SymNodes' value
//   ids are stock's `_value_eq`), so the built key equals, and hashes as, the
//   key stock builds; tests/test_portable_fast.py checks every decision and key
//   against fastfake.cache.portable and stock's own key builder.
//
// Commit stores the nested entries and the call's own under those keys (stock's
// `_set_cache_key_for_shape_env` strips nothing from them: their stubs already
// hold a `_DeconstructedSymType`), adds the nested calls' cache counts and
// `torch.utils._stats` counts, as fastfake.cache.portable.commit does.
#include "cache/portable_fast_internal.h"

#include <Python.h>

#include <unordered_map>

namespace fastfake {
namespace cache_detail {

Refs g_pf;

namespace {

enum Count { kServed, kServedNested, kShapeEnv, kHasEntry, kLacksEntry, kPython, kCounts };
const char* const kCountNames[kCounts] = {"served", "served_nested", "declined.shape_env",
                                          "declined.stock_has_entry", "declined.stock_lacks_entry",
                                          "python"};
uint64_t g_counts[kCounts] = {};
int g_admit_fault = 0; // testing: admissions that skip the signature comparison
int g_commit_fault = 0; // testing: commits that skip the nested calls' entries and counts

bool same(PyObject* a, PyObject* b, bool* error) {
  if (a == b) return true;
  const int r = PyObject_RichCompareBool(a, b, Py_EQ);
  if (r < 0) *error = true;
  return r == 1;
}

// The ShapeEnv's axioms and divisibility facts over the signature's closure equal
// the recorded ones: 1, 0, or -1 with an error. fastfake.cache.facts.match keeps
// them filtered per ShapeEnv and closure as the ShapeEnv grows, with every fact
// interned, so this is a dict comparison and two frozenset comparisons at C level
// (a fresh filter here cost a sympy comparison per axiom on every admission).
int facts_match(PyObject* env, const FastRecord& r) {
  if (!PyTuple_Check(r.validity) || PyTuple_GET_SIZE(r.validity) < 1) return -1;
  PyObject* argv[4] = {env, PyTuple_GET_ITEM(r.validity, 0), r.axioms, r.divisible};
  PyObject* res = PyObject_Vectorcall(g_pf.facts_match, argv, 4, nullptr);
  if (res == nullptr) return -1;
  const int m = PyObject_IsTrue(res);
  Py_DECREF(res);
  return m;
}

// A dict's entry for a key whose hash is known (borrowed), or nullptr.
PyObject* lookup(PyObject* dict, PyObject* key, Py_hash_t hash) {
  return _PyDict_GetItem_KnownHash(dict, key, hash);
}

bool parse_sig(PyObject* per_symbol, std::vector<SigSym>& out) {
  if (!PyTuple_Check(per_symbol)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(per_symbol); ++i) {
    PyObject* e = PyTuple_GET_ITEM(per_symbol, i);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 6) return false;
    SigSym s;
    s.sym = Py_NewRef(PyTuple_GET_ITEM(e, 0));
    out.push_back(s); // (owned from here: released with the record)
    SigSym& b = out.back();
    b.hint = Py_NewRef(PyTuple_GET_ITEM(e, 1));
    b.lower = Py_NewRef(PyTuple_GET_ITEM(e, 2));
    b.upper = Py_NewRef(PyTuple_GET_ITEM(e, 3));
    b.size_like = PyTuple_GET_ITEM(e, 4) == Py_True;
    PyObject* rep = PyTuple_GET_ITEM(e, 5);
    b.rep = rep == Py_None ? nullptr : Py_NewRef(rep);
    b.hash = PyObject_Hash(b.sym);
    if (b.hash == -1) return false;
  }
  return true;
}

} // namespace

FastRecord::~FastRecord() {
  for (auto& s : sig) {
    for (PyObject** p : {&s.sym, &s.hint, &s.lower, &s.upper, &s.rep}) Py_CLEAR(*p);
  }
  for (PyObject** p : {&axioms, &divisible, &validity, &bypasses, &calls, &entry}) Py_CLEAR(*p);
  own.release();
  for (auto& [t, e] : stored) {
    t.release();
    Py_CLEAR(e);
  }
  for (auto& f : found) {
    Py_CLEAR(f.key);
    Py_CLEAR(f.reason);
  }
}

FastAdmit fast_left_to_python() {
  ++g_counts[kPython];
  return FastAdmit::Python;
}

bool fast_enabled() {
  return g_pf.ready && g_pf.on;
}

std::unique_ptr<FastRecord> fast_parse(const KeyCtx& ctx, PyObject* fast) {
  if (!fast_enabled() || !PyTuple_Check(fast) || PyTuple_GET_SIZE(fast) != 15) return nullptr;
  auto r = std::make_unique<FastRecord>();
  auto item = [&](int i) { return PyTuple_GET_ITEM(fast, i); };
  bool ok = parse_sig(item(0), r->sig) && PyFrozenSet_CheckExact(item(1)) &&
      PyFrozenSet_CheckExact(item(2)) && parse_template(ctx, item(4), r->own, true) &&
      PyTuple_Check(item(5)) && PyTuple_Check(item(6)) && PyTuple_Check(item(9)) &&
      PyTuple_Check(item(10));
  if (ok) {
    r->axioms = Py_NewRef(item(1));
    r->divisible = Py_NewRef(item(2));
    r->validity = Py_NewRef(item(3));
    r->misses = PyLong_AsLongLong(item(7));
    r->hits = PyLong_AsLongLong(item(8));
    r->bypasses = Py_NewRef(item(9));
    r->calls = Py_NewRef(item(10));
    r->entry = Py_NewRef(item(11));
    r->counted_nested = item(12) == Py_True;
    r->pending = item(13) == Py_True;
    r->flips = item(14) == Py_True;
    ok = !PyErr_Occurred();
  }
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(item(5)); ++i) {
    PyObject* p = PyTuple_GET_ITEM(item(5), i);
    if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2) {
      ok = false;
      break;
    }
    r->stored.emplace_back(KeyTemplate{}, Py_NewRef(PyTuple_GET_ITEM(p, 1)));
    ok = parse_template(ctx, PyTuple_GET_ITEM(p, 0), r->stored.back().first, false);
  }
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(item(6)); ++i) {
    PyObject* p = PyTuple_GET_ITEM(item(6), i);
    if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 3 || Py_TYPE(PyTuple_GET_ITEM(p, 0)) != g_pf.key) {
      ok = false;
      break;
    }
    FastRecord::Found f;
    f.key = Py_NewRef(PyTuple_GET_ITEM(p, 0));
    f.reason = Py_NewRef(PyTuple_GET_ITEM(p, 1));
    f.on_env = PyTuple_GET_ITEM(p, 2) == Py_True;
    r->found.push_back(f);
  }
  if (!ok) {
    PyErr_Clear();
    return nullptr;
  }
  return r;
}

FastAdmit fast_admit(const KeyCtx& ctx, const FastRecord& r, std::vector<PyObject*>& keys) {
  PyObject* env = ctx.shape_env;
  auto python = [&]() {
    PyErr_Clear();
    for (PyObject* k : keys) Py_DECREF(k);
    keys.clear();
    ++g_counts[kPython];
    return FastAdmit::Python;
  };
  auto decline = [&](Count c) {
    for (PyObject* k : keys) Py_DECREF(k);
    keys.clear();
    ++g_counts[c];
    return FastAdmit::Decline;
  };
  PyObject* floor_div = instance_attr(env, g_pf.s_floor_div);
  if (floor_div != Py_False && floor_div != Py_True) return python();
  PyObject* hints = instance_attr(env, g_pf.s_hints);
  PyObject* ranges = instance_attr(env, g_pf.s_ranges);
  PyObject* size_like = instance_attr(env, g_pf.s_size_like);
  PyObject* reps = instance_attr(env, g_pf.s_replacements);
  PyObject* axioms = instance_attr(env, g_pf.s_axioms);
  PyObject* divisible = instance_attr(env, g_pf.s_divisible);
  PyObject* cache = instance_attr(env, g_pf.s_env_cache);
  if (hints == nullptr || !PyDict_CheckExact(hints) || ranges == nullptr || !PyDict_CheckExact(ranges) ||
      size_like == nullptr || !PySet_CheckExact(size_like) || reps == nullptr ||
      !PyDict_CheckExact(reps) || axioms == nullptr || !PyDict_CheckExact(axioms) ||
      divisible == nullptr || !PySet_CheckExact(divisible) || cache == nullptr ||
      !PyDict_CheckExact(cache)) {
    return python();
  }
  // the floor-division resimplification: pending as where learned, and with
  // nothing to resimplify (no axiom; else fastfake.cache.portable looks for FloorDiv)
  if ((floor_div == Py_True) != r.pending) return decline(kShapeEnv);
  if (r.pending && PyDict_GET_SIZE(axioms) != 0) return python();
  // the signature
  bool error = false;
  const bool fault = g_admit_fault > 0;
  if (fault) --g_admit_fault;
  for (const SigSym& s : r.sig) {
    if (fault) break;
    PyObject* h = lookup(hints, s.sym, s.hash);
    PyObject* range = h != nullptr ? lookup(ranges, s.sym, s.hash) : nullptr;
    if (range == nullptr) {
      if (PyErr_Occurred()) return python();
      return decline(kShapeEnv); // unbacked here, or no range
    }
    if (!same(h, s.hint, &error)) return error ? python() : decline(kShapeEnv);
    PyObject* lower = PyObject_GetAttr(range, g_pf.s_lower);
    PyObject* upper = lower != nullptr ? PyObject_GetAttr(range, g_pf.s_upper) : nullptr;
    if (upper == nullptr) {
      Py_XDECREF(lower);
      return python();
    }
    const bool bounds = same(lower, s.lower, &error) && same(upper, s.upper, &error);
    Py_DECREF(lower);
    Py_DECREF(upper);
    if (error) return python();
    if (!bounds) return decline(kShapeEnv);
    const int sl = PySet_GET_SIZE(size_like) == 0 ? 0 : PySet_Contains(size_like, s.sym);
    if (sl < 0) return python();
    if ((sl == 1) != s.size_like) return decline(kShapeEnv);
    PyObject* rep = lookup(reps, s.sym, s.hash);
    if (rep == nullptr && PyErr_Occurred()) return python();
    if ((rep == nullptr) != (s.rep == nullptr)) return decline(kShapeEnv);
    if (rep != nullptr && !same(rep, s.rep, &error)) return error ? python() : decline(kShapeEnv);
  }
  int m = fault ? 1 : facts_match(env, r);
  if (m < 0) return python();
  if (m == 0) return decline(kShapeEnv);
  // stock's cache: the nested lookups find what they found
  PyObject* global = nullptr;
  for (const auto& f : r.found) {
    PyObject* where = cache;
    if (!f.on_env) {
      if (global == nullptr) {
        global = PyObject_GetAttr(g_pf.mode_class, g_pf.s_cache); // (a class attribute)
        if (global == nullptr) return python();
        Py_DECREF(global); // (kept alive by the class)
        if (!PyDict_CheckExact(global)) return python();
      }
      where = global;
    }
    PyObject* e = PyDict_GetItemWithError(where, f.key);
    if (e == nullptr) return PyErr_Occurred() ? python() : decline(kLacksEntry);
    const int bypass = PyObject_IsInstance(e, g_pf.bypass_entry);
    if (bypass < 0) return python();
    if (f.reason == Py_None) {
      if (bypass) return decline(kLacksEntry);
    } else {
      if (!bypass) return decline(kLacksEntry);
      PyObject* reason = PyObject_GetAttr(e, g_pf.s_reason);
      if (reason == nullptr) return python();
      const bool eq = same(reason, f.reason, &error);
      Py_DECREF(reason);
      if (error) return python();
      if (!eq) return decline(kLacksEntry);
    }
  }
  // ... and miss on the keys stock stored (its own last)
  keys.reserve(r.stored.size() + 1);
  for (const auto& [t, e] : r.stored) {
    PyObject* k = instantiate(ctx, t);
    if (k == nullptr) return python();
    keys.push_back(k);
    if (lookup(cache, k, t.hash_value) != nullptr) return decline(kHasEntry);
    if (PyErr_Occurred()) return python();
  }
  PyObject* own = instantiate(ctx, r.own);
  if (own == nullptr) return python();
  keys.push_back(own);
  if (lookup(cache, own, r.own.hash_value) != nullptr) return decline(kHasEntry);
  if (PyErr_Occurred()) return python();
  return FastAdmit::Admit;
}

namespace {
// `counts[label] += n` for each `(label, n)` of `adds` (a label not there yet
// starts at 0, as `defaultdict` / `dict.get(label, 0)` read it); false with a
// Python error set.
bool add_counts(PyObject* counts, PyObject* adds) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(adds); ++i) {
    PyObject* p = PyTuple_GET_ITEM(adds, i);
    PyObject* label = PyTuple_GET_ITEM(p, 0);
    PyObject* old = PyObject_GetItem(counts, label);
    if (old == nullptr) {
      if (!PyErr_ExceptionMatches(PyExc_KeyError)) return false;
      PyErr_Clear();
    }
    PyObject* now = old != nullptr ? PyNumber_Add(old, PyTuple_GET_ITEM(p, 1))
                                   : Py_NewRef(PyTuple_GET_ITEM(p, 1));
    Py_XDECREF(old);
    const bool ok = now != nullptr && PyObject_SetItem(counts, label, now) == 0;
    Py_XDECREF(now);
    if (!ok) return false;
  }
  return true;
}
} // namespace

bool fast_commit(const KeyCtx& ctx, const FastRecord& r, const std::vector<PyObject*>& keys,
                 bool store, bool count) {
  ++g_counts[kServed];
  if (r.counted_nested) ++g_counts[kServedNested];
  if (!store) return true;
  PyObject* cache = instance_attr(ctx.shape_env, g_pf.s_env_cache);
  if (cache == nullptr || !PyDict_CheckExact(cache) || keys.size() != r.stored.size() + 1) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: the ShapeEnv's cache changed under a served call");
    return false;
  }
  const bool fault = g_commit_fault > 0;
  if (fault) --g_commit_fault;
  for (size_t i = 0; i < r.stored.size() && !fault; ++i) {
    if (_PyDict_SetItem_KnownHash(cache, keys[i], r.stored[i].second, r.stored[i].first.hash_value) < 0) {
      return false;
    }
  }
  if (count && !fault) {
    g_stock_counts.misses += static_cast<uint64_t>(r.misses);
    g_stock_counts.hits += static_cast<uint64_t>(r.hits);
    if (PyTuple_GET_SIZE(r.bypasses) > 0) {
      PyObject* bypasses = PyObject_GetAttr(g_pf.mode_class, g_pf.s_bypasses); // (a defaultdict)
      const bool ok = bypasses != nullptr && add_counts(bypasses, r.bypasses);
      Py_XDECREF(bypasses);
      if (!ok) return false;
    }
  }
  // Inside the kernel of a miss being recorded (fastfake.cache.portable's frames are
  // open): what this replay found, as stock's nested calls would have looked it
  // up, goes to the key log.
  const int open = PyList_GET_SIZE(g_pf.open) > 0 ? PyObject_IsTrue(PyList_GET_ITEM(g_pf.open, 0)) : 0;
  if (open < 0) return false;
  if (open) {
    for (const auto& f : r.found) {
      PyObject* logged = PyTuple_Pack(3, f.key, Py_None, f.on_env ? Py_True : Py_False);
      const bool ok = logged != nullptr && PyList_Append(g_pf.key_log, logged) == 0;
      Py_XDECREF(logged);
      if (!ok) return false;
    }
  }
  if (PyTuple_GET_SIZE(r.calls) > 0) {
    if (g_py.simple_call_counter == nullptr) {
      PyErr_SetString(PyExc_RuntimeError, "fastfake: no simple_call_counter");
      return false;
    }
    if (!add_counts(g_py.simple_call_counter, r.calls)) return false;
  }
  if (_PyDict_SetItem_KnownHash(cache, keys.back(), r.entry, r.own.hash_value) < 0) return false;
  // stock's first static evaluation here clears the pending resimplification,
  // which has nothing to resimplify (admitted so)
  return !r.flips || PyObject_SetAttr(ctx.shape_env, g_pf.s_floor_div, Py_False) == 0;
}


bool fast_verify(PyObject* mode, PyObject* func, PyObject* args, PyObject* kwargs,
                 PyObject* record, bool admitted, const std::vector<PyObject*>& keys) {
  if (g_pf.verifier == nullptr) return true;
  PyObject* tup = PyTuple_New(static_cast<Py_ssize_t>(keys.size()));
  if (tup == nullptr) return false;
  for (size_t i = 0; i < keys.size(); ++i) PyTuple_SET_ITEM(tup, i, Py_NewRef(keys[i]));
  PyObject* argv[7] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None, record,
                       admitted ? Py_True : Py_False, tup};
  PyObject* r = PyObject_Vectorcall(g_pf.verifier, argv, 7, nullptr);
  Py_DECREF(tup);
  if (r == nullptr) {
    // (a test's verifier failed: reported where the test reads it, not raised
    // into the traced program)
    PyErr_Print();
    return false;
  }
  Py_DECREF(r);
  return true;
}

} // namespace cache_detail

void portable_fast_setup(PyObject* refs, PyObject* hints_attr) {
  using namespace cache_detail;
  g_pf.ready = false;
  if (!PyTuple_Check(refs) || PyTuple_GET_SIZE(refs) != 9 || !PyUnicode_Check(hints_attr)) return;
  for (int i = 0; i < 3; ++i) {
    if (!PyType_Check(PyTuple_GET_ITEM(refs, i))) return;
  }
  // (a second setup replaces the references)
  PyObject** dst[9] = {reinterpret_cast<PyObject**>(&g_pf.stub), reinterpret_cast<PyObject**>(&g_pf.dst),
                       reinterpret_cast<PyObject**>(&g_pf.key), &g_pf.bypass_entry, &g_pf.from_node,
                       &g_pf.facts_match, &g_pf.mode_class, &g_pf.key_log, &g_pf.open};
  for (int i = 0; i < 9; ++i) Py_XSETREF(*dst[i], Py_NewRef(PyTuple_GET_ITEM(refs, i)));
  Py_XSETREF(g_pf.s_hints, Py_NewRef(hints_attr));
  PyUnicode_InternInPlace(&g_pf.s_hints);
  if (!PyList_CheckExact(g_pf.key_log) || !PyList_CheckExact(g_pf.open)) return;
  g_pf.stub_value = slot_offset(g_pf.stub, "value");
  g_pf.dst_ty = slot_offset(g_pf.dst, "ty");
  g_pf.dst_node = slot_offset(g_pf.dst, "node");
  g_pf.key_key = slot_offset(g_pf.key, "key");
  g_pf.key_hash = slot_offset(g_pf.key, "hashvalue");
  if (g_pf.s_ranges == nullptr) {
    g_pf.s_ranges = PyUnicode_InternFromString("var_to_range");
    g_pf.s_size_like = PyUnicode_InternFromString("size_like");
    g_pf.s_replacements = PyUnicode_InternFromString("replacements");
    g_pf.s_axioms = PyUnicode_InternFromString("axioms");
    g_pf.s_divisible = PyUnicode_InternFromString("divisible");
    g_pf.s_floor_div = PyUnicode_InternFromString("_resimplify_floor_div_axioms");
    g_pf.s_env_cache = PyUnicode_InternFromString("fake_tensor_cache");
    g_pf.s_lower = PyUnicode_InternFromString("lower");
    g_pf.s_upper = PyUnicode_InternFromString("upper");
    g_pf.s_extract = PyUnicode_InternFromString("extract");
    g_pf.s_reason = PyUnicode_InternFromString("reason");
    g_pf.s_cache = PyUnicode_InternFromString("cache");
    g_pf.s_bypasses = PyUnicode_InternFromString("cache_bypasses");
  }
  PyErr_Clear();
  // (slots the layout of these classes must have; otherwise records are admitted
  // in Python)
  g_pf.ready = g_pf.stub_value >= 0 && g_pf.dst_ty >= 0 && g_pf.dst_node >= 0 && g_pf.key_key >= 0 &&
      g_pf.key_hash >= 0 && g_pf.s_bypasses != nullptr && g_py.symnode_type != nullptr &&
      g_py.symint_type != nullptr;
}

bool portable_fast_set(bool on) {
  const bool was = cache_detail::g_pf.on;
  cache_detail::g_pf.on = on;
  return was;
}

void portable_fast_set_verifier(PyObject* fn) {
  PyObject* v = fn == Py_None ? nullptr : Py_NewRef(fn);
  Py_XSETREF(cache_detail::g_pf.verifier, v);
}

std::vector<std::pair<std::string, uint64_t>> portable_fast_counts() {
  using namespace cache_detail;
  std::vector<std::pair<std::string, uint64_t>> out;
  for (int i = 0; i < kCounts; ++i) out.emplace_back(kCountNames[i], g_counts[i]);
  return out;
}

void portable_fast_set_counts(const std::vector<std::pair<std::string, uint64_t>>& counts) {
  using namespace cache_detail;
  for (auto& c : g_counts) c = 0;
  for (const auto& [name, n] : counts) {
    for (int i = 0; i < kCounts; ++i) {
      if (name == kCountNames[i]) g_counts[i] = n;
    }
  }
}

void portable_fast_inject_fault(int n, bool commit) {
  (commit ? cache_detail::g_commit_fault : cache_detail::g_admit_fault) = n;
}

} // namespace fastfake
