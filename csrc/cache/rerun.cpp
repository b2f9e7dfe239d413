// Symbolic calls stock never caches ("rerun" entries).
//
// Stock reruns the kernel of some calls every time (on 2.13 / 2.14
// `aten._unsafe_view`: "unsafe view"), so fastfake's result cache holds a negative
// entry for them. It also never caches a call with a SymFloat argument ("symbolic
// shape"), such as `add(x, eps)` where Dynamo made a float attribute a SymFloat:
// for fastfake.cache.rerun.SCALAR_OPS such a key (with the SymFloat's value id in it)
// comes here directly, never entering the result cache. For the ops
// fastfake.cache.rerun.OPS and SCALAR_OPS name, a repeat of such a call is served from
// what stock's kernel returned for an earlier call with the same key, when
// fastfake.cache.rerun proved that call pure (why it is stock's answer:
// fastfake/cache/rerun.py):
//   * learning: stock runs the call; before and after, fastfake.cache.rerun snapshots
//     the ShapeEnv and stock's cache and counters, and this file the derived
//     values (numel, contiguity) each input tensor had memoised. The entry holds
//     the output's recipe (cache_learn.cpp: each int-like an int, the call's
//     SymNode at a slot, or a new SymNode with the recorded value), what the
//     kernel memoised on the inputs, and the number of stock hits its nested
//     calls counted. It is keyed by the call's key without the ShapeEnv and the
//     inputs' memoised-value masks before the call;
//   * serving: fastfake.cache.rerun.admit (the ShapeEnv signature of the involved
//     symbols: its cheap stamp in the ShapeEnv last checked, in full in another
//     one, where only a scalar op's record without nested stock hits serves); the output
//     rebuilt (for `_unsafe_view` a view over the input's storage with a version
//     counter of its own; for a scalar op a new tensor), the kernel's memoised
//     values seeded into the inputs, and stock's counters moved as its rerun
//     moves them (one bypass of the op's reason, the nested hits).
// Bounded; entries hold sympy values and op references, never a mode, ShapeEnv,
// SymNode or tensor. The ShapeEnv ids they hold are never reused.
#include "cache/rerun.h"
#include "runtime/untrack.h"

#include <torch/csrc/autograd/python_variable.h>

#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace fastfake {
namespace cache_detail {

namespace {

struct REntry {
  Entry out;
  std::vector<Seed> seeds; // what the kernel memoised on its inputs
  uint64_t hits = 0; // stock hits of the kernel's nested calls
  bool scalar = false; // a scalar op's call ("symbolic shape" bypass, a new tensor)
  int64_t env = 0; // the ShapeEnv (env_uid) the record's stamp was last checked in
  int64_t learned_env = 0; // the ShapeEnv it was learned in
  PyObject* record = nullptr; // owned, opaque (fastfake.cache.rerun)
  void release() {
    out.release();
    Py_CLEAR(record);
  }
};

std::unordered_map<Key, REntry, KeyHash>& g_rerun = *new std::unordered_map<Key, REntry, KeyHash>;
std::unordered_set<PyObject*>& g_ops = *new std::unordered_set<PyObject*>; // owned references
std::unordered_set<PyObject*>& g_scalar_ops = *new std::unordered_set<PyObject*>; // owned references
constexpr size_t kMaxRerun = 4096;
bool g_on = false;
bool g_scalar_on = false;
int g_inject_fault = 0, g_inject_fault_scalar = 0; // testing: per kind of entry
uint64_t g_served = 0, g_declined_inputs = 0, g_served_scalar = 0, g_served_other_env = 0;
PyObject* g_before = nullptr;
PyObject* g_learn = nullptr;
PyObject* g_admit = nullptr;

// A scalar op's call: (FakeTensor, SymFloat), no keyword arguments.
bool scalar_call(PyObject* args, PyObject* kwargs, const KeyCtx& ctx) {
  return ctx.sym_scalars == 1 && PyTuple_GET_SIZE(args) == 2 &&
      (kwargs == nullptr || kwargs == Py_None || (PyDict_Check(kwargs) && PyDict_GET_SIZE(kwargs) == 0)) &&
      is_fake_exact(PyTuple_GET_ITEM(args, 0)) &&
      Py_TYPE(PyTuple_GET_ITEM(args, 1)) == reinterpret_cast<PyTypeObject*>(g_py.symfloat_type);
}

bool applies(PyObject* func, PyObject* args, PyObject* kwargs, const KeyCtx& ctx) {
  if (g_before == nullptr || !ctx.symbolic || ctx.shape_env == nullptr || g_stock_counts.non_fake_call) {
    return false;
  }
  const bool ok = ctx.sym_scalars != 0
      ? g_scalar_on && g_scalar_ops.count(func) != 0 && scalar_call(args, kwargs, ctx)
      : g_on && g_ops.count(func) != 0;
  return ok && !proxy_tracing();
}

PyObject* serve(PyObject* mode, PyObject* args, const KeyCtx& ctx, REntry& re) {
  // Symbolic keys end with the ShapeEnv's id (symbolic_key). In another ShapeEnv
  // only a scalar op's record whose kernel dispatched nothing stock's cache saw:
  // stock stores nothing for such a call (its key raises the bypass), while an
  // `_unsafe_view` call stores its negative entry in the ShapeEnv's cache (which
  // the new one may lack), and a nested call that hit in the learning ShapeEnv
  // could miss (and store) in this one.
  const int64_t env = ctx.key.back();
  if (env != re.env && (!re.scalar || re.hits != 0)) return nullptr;
  PyObject* argv[3] = {mode, re.record, env == re.env ? Py_True : Py_False};
  PyObject* ok = PyObject_Vectorcall(g_admit, argv, 3, nullptr);
  if (ok == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const bool admitted = ok == Py_True;
  Py_DECREF(ok);
  if (!admitted) return nullptr;
  re.env = env; // (admit() recorded this ShapeEnv's stamp)
  PyObject* out = rebuild(mode, args, ctx, re.out);
  if (out == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  int& faults = re.scalar ? g_inject_fault_scalar : g_inject_fault;
  const bool fault = faults > 0;
  if (fault) --faults;
  for (const Seed& s : re.seeds) {
    if (fault) break;
    c10::TensorImpl* impl = THPVariable_Unpack(PyTuple_GET_ITEM(args, s.arg)).unsafeGetTensorImpl();
    if (!seed_derived(ctx, impl, *s.values)) {
      // (the key holds the masks: the input is symbolic and had none of these memoised)
      PyErr_Clear();
      Py_DECREF(out);
      return nullptr;
    }
  }
  ++(re.scalar ? g_served_scalar : g_served);
  if (re.learned_env != env) ++g_served_other_env;
  if (g_stock_counts.enabled && !g_stock_counts.non_fake_call) {
    ++(re.scalar ? g_stock_counts.sym_scalar_bypasses : g_stock_counts.unsafe_view_bypasses);
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
    Key&& rkey,
    const std::vector<uint32_t>& masks) {
  PyObject* argv[6] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None, out, before};
  PyObject* r = PyObject_Vectorcall(g_learn, argv, 6, nullptr);
  if (r == nullptr) {
    PyErr_Clear();
    return;
  }
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(r, 0)) ||
      PyTuple_GET_SIZE(PyTuple_GET_ITEM(r, 0)) != 6) {
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
  re.scalar = ctx.sym_scalars != 0;
  re.env = re.learned_env = ctx.key.back();
  // `_unsafe_view`: a view; a scalar op: a new tensor
  const OutSpec::Kind kind = re.scalar ? OutSpec::Fresh : OutSpec::View;
  if (!parse_entry(ctx, PyTuple_GET_ITEM(r, 1), re.out) || re.out.outs.size() != 1 ||
      re.out.outs[0].kind != kind || !seeds_of(ctx, args, masks, re.seeds)) {
    PyErr_Clear();
    re.release();
    Py_DECREF(r);
    return;
  }
  // a version counter of its own (not shared with the input a view aliases)
  re.out.outs[0].share_version = false;
  re.record = PyTuple_GET_ITEM(r, 0);
  Py_INCREF(re.record);
  untrack_inert(re.record);
  Py_DECREF(r);
  if (g_rerun.size() >= kMaxRerun) rerun_clear();
  auto old = g_rerun.find(rkey);
  if (old != g_rerun.end()) {
    old->second.release();
    g_rerun.erase(old);
  }
  g_rerun.emplace(std::move(rkey), std::move(re));
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
  if (!applies(func, args, kwargs, ctx)) return nullptr;
  // Entries are per key apart from the ShapeEnv (a restarted trace or another
  // compile meets the same calls in a new ShapeEnv whose symbols have the same
  // names) and per memo state of the inputs (a pass over a graph meets the same
  // call on inputs that memoised different derived values: a tensor stock's miss
  // returned, another its hit rebuilt), each a record of its own.
  std::vector<uint32_t> masks;
  const bool masks_ok = masks_of(ctx, args, masks);
  if (!masks_ok) {
    PyErr_Clear();
    ++g_declined_inputs;
  }
  Key rkey;
  if (masks_ok) {
    rkey = ctx.key;
    rkey.back() = 0; // the ShapeEnv's id: the record's stamp holds it
    rkey.push_back(static_cast<int64_t>(masks.size()));
    for (uint32_t m : masks) rkey.push_back(m);
    auto it = g_rerun.find(rkey);
    if (it != g_rerun.end()) {
      if (PyObject* r = serve(mode, args, ctx, it->second)) {
        *handled = true;
        *served = true;
        return r;
      }
    }
  }
  // Stock reruns the kernel; learn from it.
  PyObject* before = nullptr;
  if (masks_ok) {
    PyObject* argv[4] = {mode, func, args, kwargs != nullptr ? kwargs : Py_None};
    before = PyObject_Vectorcall(g_before, argv, 4, nullptr);
    if (before == nullptr) PyErr_Clear();
  }
  *handled = true;
  PyObject* out = call_stock_dispatch(mode, func, types, args, kwargs);
  if (out != nullptr && before != nullptr && before != Py_None) {
    learn(mode, func, args, kwargs, out, before, ctx, std::move(rkey), masks);
  }
  Py_XDECREF(before);
  return out;
}

} // namespace cache_detail

namespace {
void set_ops(std::unordered_set<PyObject*>& dst, PyObject* ops) {
  for (PyObject* o : dst) Py_DECREF(o);
  dst.clear();
  PyObject* it = PyObject_GetIter(ops);
  if (it == nullptr) {
    PyErr_Clear();
    return;
  }
  while (PyObject* o = PyIter_Next(it)) {
    if (!dst.insert(o).second) Py_DECREF(o); // keeps the new reference otherwise
  }
  Py_DECREF(it);
  PyErr_Clear();
}
} // namespace

void rerun_setup(PyObject* before, PyObject* learn, PyObject* admit, PyObject* ops, PyObject* scalar_ops) {
  using namespace cache_detail;
  for (auto [dst, src] : {std::pair{&g_before, before}, {&g_learn, learn}, {&g_admit, admit}}) {
    Py_XINCREF(src);
    Py_XSETREF(*dst, src);
  }
  set_ops(g_ops, ops);
  set_ops(g_scalar_ops, scalar_ops);
}

bool rerun_set(bool on) {
  const bool was = cache_detail::g_on;
  cache_detail::g_on = on;
  return was;
}

bool rerun_scalar_set(bool on) {
  const bool was = cache_detail::g_scalar_on;
  cache_detail::g_scalar_on = on;
  return was;
}

namespace cache_detail {
bool rerun_scalar_op(PyObject* func) {
  return g_scalar_on && g_py.symfloat_type != nullptr && g_scalar_ops.count(func) != 0;
}
} // namespace cache_detail

size_t rerun_size() {
  return cache_detail::g_rerun.size();
}

void rerun_clear() {
  for (auto& [k, re] : cache_detail::g_rerun) re.release();
  cache_detail::g_rerun.clear();
}

std::tuple<uint64_t, uint64_t, uint64_t, uint64_t> rerun_counts() {
  using namespace cache_detail;
  return {g_served, g_declined_inputs, g_served_scalar, g_served_other_env};
}

void rerun_reset_counts() {
  using namespace cache_detail;
  g_served = g_declined_inputs = g_served_scalar = g_served_other_env = 0;
}

void rerun_set_counts(uint64_t served, uint64_t declined_inputs, uint64_t served_scalar, uint64_t other_env) {
  using namespace cache_detail;
  g_served = served;
  g_declined_inputs = declined_inputs;
  g_served_scalar = served_scalar;
  g_served_other_env = other_env;
}

void rerun_inject_fault(int n, bool scalar) {
  (scalar ? cache_detail::g_inject_fault_scalar : cache_detail::g_inject_fault) = n;
}

} // namespace fastfake
