// Repeats of `.item()` on a FakeTensor that holds its item memo.
//
// Stock never caches `aten._local_scalar_dense` (its result is data-dependent:
// "data dependent output"), so every `.item()` on a fake tensor runs stock's whole
// dispatch: its cache key, the negative entry's lookup and one bypass counted,
// then `_dispatch_impl` down to the op's fake implementation, whose first line
// answers a repeat from the argument's `item_memo` (the unbacked SymInt / SymFloat /
// SymBool the first call created; FakeTensor's memo descriptor drops it after an
// in-place update of the tensor or in a new epoch of its mode). Dynamo and
// AOTAutograd ask `.item()` of the same tensorified Python scalars again and again:
// 140 such calls in a `dynamic=True` BERT compile, each ~0.2 ms of stock's Python.
//
// Served here, as a branch of the result cache's negative static entries:
//   * learning (kCandidate): a negative entry learned from stock's bypass with
//     that reason for that op. While the argument's memo (read through the
//     descriptor, as stock reads it) is set, stock runs the call; the entry is
//     proven (kProven) when stock returned that very memo object, counted exactly
//     its one bypass (no hit, no miss) and dispatched nothing else;
//   * serving (kProven): the argument is this mode's own FakeTensor without a
//     constant, no keyword arguments, the memo descriptor returns a value, and
//     fastfake.cache.item_memo.eligible(mode) finds none of what stock's dispatch
//     consults before the op's fake implementation (real-tensor propagation, a
//     custom-op profile, a Python decomposition or a registered fake kernel for
//     the op). The memo object is returned and stock's bypass counted
//     (FakeTensorMode.cache_bypasses[reason] += 1; not under crosscheck, whose
//     verifying stock call counts it, nor inside the self-test).
// Anything else goes to stock. State: two flags in entries of the result cache
// (bounded with it); references only to the op, the reason string and the hook.
#include "cache/item_memo.h"

#include "common/counts.h"

namespace fastfake {
namespace cache_detail {
namespace {

PyObject* g_op = nullptr; // owned
PyObject* g_reason = nullptr; // owned str: stock's bypass reason
PyObject* g_learned_desc = nullptr; // owned str: "stock: " + reason (fastfake.cache.learn.learn)
PyObject* g_eligible = nullptr; // owned callable
PyObject* g_s_item_memo = nullptr; // "item_memo"
PyObject* g_s_raw_memo = nullptr; // "_item_memo"
PyObject* g_s_bypasses = nullptr; // "cache_bypasses"
PyObject* g_s_hits = nullptr;
PyObject* g_s_misses = nullptr;
bool g_on = false;
int g_inject_fault = 0;

enum Count : size_t { Served, Learned, NoMemo, ModeState, Arguments, NumCounts };
const char* const kCountNames[NumCounts] = {
    "served", "learned", "declined.no_memo", "declined.mode_state", "declined.arguments"};
uint64_t g_counts[NumCounts] = {};

// FakeTensorMode.cache_bypasses[reason] (0 if absent; the defaultdict is not grown).
long long bypass_count() {
  PyObject* d = PyObject_GetAttr(g_py.fake_mode_type, g_s_bypasses);
  if (d == nullptr) {
    PyErr_Clear();
    return -1;
  }
  long long n = -1;
  if (PyDict_Check(d)) {
    PyObject* v = PyDict_GetItemWithError(d, g_reason); // borrowed
    if (v == nullptr) {
      n = PyErr_Occurred() ? -1 : 0;
    } else {
      n = PyLong_AsLongLong(v);
    }
    if (n == -1) PyErr_Clear();
  }
  Py_DECREF(d);
  return n;
}

// Stock's own bookkeeping of the bypass it would have counted.
bool count_bypass() {
  PyObject* d = PyObject_GetAttr(g_py.fake_mode_type, g_s_bypasses);
  if (d == nullptr) return false;
  PyObject* cur = PyObject_GetItem(d, g_reason); // defaultdict: 0 when absent
  PyObject* next = nullptr;
  if (cur != nullptr) {
    static PyObject* one = PyLong_FromLong(1);
    next = PyNumber_Add(cur, one);
    Py_DECREF(cur);
  }
  const int rc = next != nullptr ? PyObject_SetItem(d, g_reason, next) : -1;
  Py_XDECREF(next);
  Py_DECREF(d);
  return rc == 0;
}

// The argument's memo as stock's fake implementation reads it (new reference), or
// nullptr (no error set) when the call is not one to serve here.
PyObject* memo_of(PyObject* mode, PyObject* args, PyObject* kwargs, bool raw) {
  if ((kwargs != nullptr && kwargs != Py_None &&
       (!PyDict_Check(kwargs) || PyDict_GET_SIZE(kwargs) != 0)) ||
      !PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 1) {
    ++g_counts[Arguments];
    return nullptr;
  }
  PyObject* a = PyTuple_GET_ITEM(args, 0);
  if (!is_fake_exact(a) || instance_attr(a, g_py.s_fake_mode) != mode ||
      instance_attr(a, g_py.s_constant) != Py_None) {
    ++g_counts[Arguments];
    return nullptr;
  }
  // The descriptor, exactly as stock's `arg.item_memo` (it drops a stale memo).
  PyObject* memo = raw ? PyObject_GetAttr(a, g_s_raw_memo) : PyObject_GetAttr(a, g_s_item_memo);
  if (memo == nullptr) {
    PyErr_Clear(); // stock reads it again and raises the same
    ++g_counts[Arguments];
    return nullptr;
  }
  if (memo == Py_None) {
    Py_DECREF(memo);
    ++g_counts[NoMemo];
    return nullptr;
  }
  PyObject* ok = PyObject_CallOneArg(g_eligible, mode);
  const bool eligible = ok == Py_True;
  if (ok == nullptr) PyErr_Clear();
  Py_XDECREF(ok);
  if (!eligible) {
    Py_DECREF(memo);
    ++g_counts[ModeState];
    return nullptr;
  }
  return memo;
}

} // namespace

uint8_t item_memo_candidate(PyObject* func, PyObject* desc) {
  if (g_op == nullptr || func != g_op || !PyUnicode_Check(desc)) return kNotItem;
  const int eq = PyUnicode_Compare(desc, g_learned_desc);
  if (eq == -1 && PyErr_Occurred()) PyErr_Clear();
  return eq == 0 ? kCandidate : kNotItem;
}

PyObject* item_memo_call(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    const Key& key,
    uint8_t state,
    bool* handled,
    bool* served) {
  *handled = false;
  *served = false;
  if (!g_on || state == kNotItem || g_eligible == nullptr) return nullptr;
  const bool fault = state == kProven && g_inject_fault > 0;
  PyObject* memo = memo_of(mode, args, kwargs, fault);
  if (memo == nullptr) return nullptr;
  if (state == kProven) {
    if (fault) --g_inject_fault;
    if (g_stock_counts.enabled && !g_config.crosscheck && !count_bypass()) {
      Py_DECREF(memo);
      return nullptr; // (error set) nothing was served
    }
    ++g_counts[Served];
    *handled = true;
    *served = true;
    return memo;
  }
  // kCandidate: stock runs; prove the entry from what it did.
  const long long hits0 = class_counter(g_s_hits);
  const long long misses0 = class_counter(g_s_misses);
  const long long bypasses0 = bypass_count();
  const uint64_t dispatches0 = g_stats[DispatchTotal];
  *handled = true;
  bump(CacheBypassStock);
  PyObject* r = call_stock_dispatch(mode, func, types, args, kwargs);
  if (r != nullptr && r == memo && hits0 >= 0 && bypasses0 >= 0 &&
      g_stats[DispatchTotal] == dispatches0 && class_counter(g_s_hits) == hits0 &&
      class_counter(g_s_misses) == misses0 && bypass_count() == bypasses0 + 1) {
    auto it = g_index.find(key);
    if (it != g_index.end() && it->second->second.negative &&
        it->second->second.item_memo == kCandidate) {
      it->second->second.item_memo = kProven;
      ++g_counts[Learned];
    }
  }
  Py_DECREF(memo);
  return r;
}

} // namespace cache_detail

void item_memo_setup(PyObject* op, PyObject* reason, PyObject* eligible) {
  using namespace cache_detail;
  Py_XINCREF(op);
  Py_XSETREF(g_op, op);
  Py_XINCREF(reason);
  Py_XSETREF(g_reason, reason);
  Py_XSETREF(g_learned_desc, PyUnicode_FromFormat("stock: %U", reason));
  if (g_learned_desc == nullptr) PyErr_Clear();
  Py_XINCREF(eligible);
  Py_XSETREF(g_eligible, eligible);
  if (g_s_item_memo == nullptr) {
    g_s_item_memo = PyUnicode_InternFromString("item_memo");
    g_s_raw_memo = PyUnicode_InternFromString("_item_memo");
    g_s_bypasses = PyUnicode_InternFromString("cache_bypasses");
    g_s_hits = PyUnicode_InternFromString("cache_hits");
    g_s_misses = PyUnicode_InternFromString("cache_misses");
  }
}

bool item_memo_set(bool on) {
  const bool was = cache_detail::g_on;
  cache_detail::g_on = on && cache_detail::g_learned_desc != nullptr;
  return was;
}

std::map<std::string, uint64_t> item_memo_counts() {
  return counts_as_map(cache_detail::kCountNames, cache_detail::g_counts);
}

void item_memo_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(cache_detail::kCountNames, cache_detail::g_counts, counts);
}

void item_memo_inject_fault(int n) {
  cache_detail::g_inject_fault = n;
}

} // namespace fastfake
