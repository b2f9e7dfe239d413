// Symbolic calls stock never caches ("rerun" entries).
//
// Stock reruns the kernel of some calls every time (on 2.13 / 2.14
// `aten._unsafe_view`: "unsafe view"), so fastfake's result cache holds a negative
// entry for them. For the ops fastfake._rerun.OPS names, a repeat of such a call
// in the same ShapeEnv is served from what stock's kernel returned for an earlier
// call with the same key, when fastfake._rerun proved that call pure (why it is
// stock's answer: fastfake/_rerun.py):
//   * learning: stock runs the call; before and after, fastfake._rerun snapshots
//     the ShapeEnv and stock's cache and counters, and this file the derived
//     values (numel, contiguity) each input tensor had memoised. The entry holds
//     the output's recipe (cache_learn.cpp: each int-like an int, the call's
//     SymNode at a slot, or a new SymNode with the recorded value), the inputs'
//     memoised-value masks before the call, what the kernel memoised on them, and
//     the number of stock hits its nested calls counted;
//   * serving: the same masks on the inputs, then fastfake._rerun.admit (the
//     ShapeEnv signature); the output rebuilt as a view over the input's storage
//     with a version counter of its own, the kernel's memoised values seeded into
//     the inputs, and stock's counters moved as its rerun moves them (one bypass
//     of the op's reason, the nested hits).
// Bounded; entries hold sympy values and op references, never a mode, ShapeEnv,
// SymNode or tensor. Keys carry the ShapeEnv's id, never reused.
#include "rerun.h"

#include <torch/csrc/autograd/python_variable.h>

#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace fastfake {
namespace cache_detail {

namespace {

struct REntry {
  Entry out;
  std::vector<uint32_t> masks; // per positional argument: memoised values before
  std::vector<Seed> seeds; // what the kernel memoised on its inputs
  uint64_t hits = 0; // stock hits of the kernel's nested calls
  PyObject* record = nullptr; // owned, opaque (fastfake._rerun)
  void release() {
    out.release();
    Py_CLEAR(record);
  }
};

std::unordered_map<Key, REntry, KeyHash>& g_rerun = *new std::unordered_map<Key, REntry, KeyHash>;
std::unordered_set<PyObject*>& g_ops = *new std::unordered_set<PyObject*>; // owned references
constexpr size_t kMaxRerun = 4096;
bool g_on = false;
int g_inject_fault = 0;
uint64_t g_served = 0, g_declined_inputs = 0;
PyObject* g_before = nullptr;
PyObject* g_learn = nullptr;
PyObject* g_admit = nullptr;

bool applies(PyObject* func, const KeyCtx& ctx) {
  return g_on && g_before != nullptr && ctx.symbolic && ctx.shape_env != nullptr &&
      g_ops.count(func) != 0 && !g_stock_counts.non_fake_call && !proxy_tracing();
}

PyObject* serve(PyObject* mode, PyObject* args, const KeyCtx& ctx, REntry& re) {
  std::vector<uint32_t> masks;
  if (!masks_of(ctx, args, masks) || masks != re.masks) {
    PyErr_Clear();
    ++g_declined_inputs;
    return nullptr;
  }
  PyObject* argv[2] = {mode, re.record};
  PyObject* ok = PyObject_Vectorcall(g_admit, argv, 2, nullptr);
  if (ok == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const bool admitted = ok == Py_True;
  Py_DECREF(ok);
  if (!admitted) return nullptr;
  PyObject* out = rebuild(mode, args, ctx, re.out);
  if (out == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const bool fault = g_inject_fault > 0;
  if (fault) --g_inject_fault;
  for (const Seed& s : re.seeds) {
    if (fault) break;
    c10::TensorImpl* impl = THPVariable_Unpack(PyTuple_GET_ITEM(args, s.arg)).unsafeGetTensorImpl();
    if (!seed_derived(ctx, impl, *s.values)) {
      // (masks matched, so the input is symbolic and had none of these memoised)
      PyErr_Clear();
      Py_DECREF(out);
      return nullptr;
    }
  }
  ++g_served;
  if (g_stock_counts.enabled && !g_stock_counts.non_fake_call) {
    ++g_stock_counts.unsafe_view_bypasses;
    g_stock_counts.hits += re.hits;
  }
  return out;
}

void learn(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    PyObject* out,
    PyObject* before,
    const KeyCtx& ctx,
    std::vector<uint32_t>&& masks) {
  PyObject* argv[6] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None, out, before};
  PyObject* r = PyObject_Vectorcall(g_learn, argv, 6, nullptr);
  if (r == nullptr) {
    PyErr_Clear();
    return;
  }
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(r, 0)) ||
      PyTuple_GET_SIZE(PyTuple_GET_ITEM(r, 0)) != 4) {
    Py_DECREF(r);
    return;
  }
  REntry re;
  re.hits = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(r, 0), 3));
  if (PyErr_Occurred()) {
    PyErr_Clear();
    Py_DECREF(r);
    return;
  }
  re.out.func = func;
  Py_INCREF(func);
  re.masks = std::move(masks);
  if (!parse_entry(ctx, PyTuple_GET_ITEM(r, 1), re.out) || re.out.outs.size() != 1 ||
      re.out.outs[0].kind != OutSpec::View || !seeds_of(ctx, args, re.masks, re.seeds)) {
    PyErr_Clear();
    re.release();
    Py_DECREF(r);
    return;
  }
  // a version counter of its own (not shared with the input it aliases)
  re.out.outs[0].share_version = false;
  re.record = PyTuple_GET_ITEM(r, 0);
  Py_INCREF(re.record);
  Py_DECREF(r);
  if (g_rerun.size() >= kMaxRerun) rerun_clear();
  auto old = g_rerun.find(ctx.key);
  if (old != g_rerun.end()) {
    old->second.release();
    g_rerun.erase(old);
  }
  g_rerun.emplace(ctx.key, std::move(re));
}

} // namespace

PyObject* rerun_call(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    KeyCtx& ctx,
    bool* handled,
    bool* served) {
  *handled = false;
  if (!applies(func, ctx)) return nullptr;
  auto it = g_rerun.find(ctx.key);
  if (it != g_rerun.end()) {
    if (PyObject* r = serve(mode, args, ctx, it->second)) {
      *handled = true;
      *served = true;
      return r;
    }
  }
  // Stock reruns the kernel; learn from it.
  std::vector<uint32_t> masks;
  const bool masks_ok = masks_of(ctx, args, masks);
  if (!masks_ok) PyErr_Clear();
  PyObject* before = nullptr;
  if (masks_ok) {
    PyObject* argv[4] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None};
    before = PyObject_Vectorcall(g_before, argv, 4, nullptr);
    if (before == nullptr) PyErr_Clear();
  }
  *handled = true;
  PyObject* out = call_stock_dispatch(mode, func, types, args, kwargs);
  if (out != nullptr && before != nullptr && before != Py_None) {
    learn(mode, func, args, kwargs, out, before, ctx, std::move(masks));
  }
  Py_XDECREF(before);
  return out;
}

} // namespace cache_detail

void rerun_setup(PyObject* before, PyObject* learn, PyObject* admit, PyObject* ops) {
  using namespace cache_detail;
  for (auto [dst, src] : {std::pair{&g_before, before}, {&g_learn, learn}, {&g_admit, admit}}) {
    Py_XINCREF(src);
    Py_XSETREF(*dst, src);
  }
  for (PyObject* o : g_ops) Py_DECREF(o);
  g_ops.clear();
  PyObject* it = PyObject_GetIter(ops);
  if (it == nullptr) {
    PyErr_Clear();
    return;
  }
  while (PyObject* o = PyIter_Next(it)) {
    if (!g_ops.insert(o).second) Py_DECREF(o); // keeps the new reference otherwise
  }
  Py_DECREF(it);
  PyErr_Clear();
}

bool rerun_set(bool on) {
  const bool was = cache_detail::g_on;
  cache_detail::g_on = on;
  return was;
}

size_t rerun_size() {
  return cache_detail::g_rerun.size();
}

void rerun_clear() {
  for (auto& [k, re] : cache_detail::g_rerun) re.release();
  cache_detail::g_rerun.clear();
}

std::pair<uint64_t, uint64_t> rerun_counts() {
  return {cache_detail::g_served, cache_detail::g_declined_inputs};
}

void rerun_reset_counts() {
  cache_detail::g_served = cache_detail::g_declined_inputs = 0;
}

void rerun_set_counts(uint64_t served, uint64_t declined_inputs) {
  cache_detail::g_served = served;
  cache_detail::g_declined_inputs = declined_inputs;
}

void rerun_inject_fault(int n) {
  cache_detail::g_inject_fault = n;
}

} // namespace fastfake
