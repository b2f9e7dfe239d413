// SymNode binary arithmetic memoised on the operands' expressions.
//
// Fake propagation with symbolic shapes recomputes the same SymInt arithmetic
// again and again (numel, contiguity, storage sizes, broadcast checks): in a
// dynamic=True compile 96 % of the SymNode operations outside proxy tracing repeat
// an earlier one. Stock's SymNode.<op> (sym_node.py, _make_node_magic ->
// binary_magic_impl) computes
//
//   out_hint = op(self.hint, other.hint)
//   out      = func(self.expr, other.expr)      # sympy, a function of the two
//   pytype   = f(method, self.pytype, other.pytype)
//   SymNode(out, self.shape_env, pytype, pytype(out_hint), fx_node, optimized_summation)
//
// where func depends on nothing but its arguments (and, for `add`, the operands'
// optimized-summation flags). `mod` reads the ShapeEnv's value ranges and is not
// memoised. So a call whose operands' expressions are the *identical objects* of
// an earlier call, with the same pytypes and flags, has the same out, pytype and
// optimized_summation: those are served from the memo, and the hint is computed
// as stock computes it and the SymNode built by stock's own constructor. A new
// SymNode every call, as stock: two sites never share one (the proxy tracer tells
// SymNodes apart by identity).
//
// Served only when the call has no other effect in stock: no proxy tracing (stock
// records the op in the graph then), translation validation off, ShapeEnv event
// recording off, structured tracing off, the `sym_node` and shape-event loggers
// not at DEBUG, sympy's global evaluate/distribute on, both hints plain ints,
// floats or bools, both operands exactly SymNodes. `expr` is read on both
// operands as stock reads it (it may path-compress replacement chains), after the
// hint as in stock, so a hint that raises reaches stock before any read.
//
// Keys are object identities; each entry owns its key objects, so an identity is
// never reused while its entry lives. Entries hold sympy expressions and types,
// never a SymNode, ShapeEnv, mode or tensor. Bounded: the memo is emptied when it
// reaches its bound (32768 entries). Turning it off keeps the entries (they never go
// stale: they are functions of their keys); cache_clear() empties it. Which
// releases it is proven on: fastfake/symbolic/symnode_memo.py.
#include "common/fastfake.h"

#include "common/counts.h"
#include "common/refs.h"
#include "symbolic/symnode_memo.h"

#include <functional>
#include <unordered_map>
#include <vector>

namespace fastfake {


namespace {

struct Key {
  size_t method;
  PyObject* a; // the operands' expr objects
  PyObject* b;
  PyObject* ta; // their pytypes
  PyObject* tb;
  bool oa, ob; // their optimized-summation flags
  bool operator==(const Key& o) const {
    return method == o.method && a == o.a && b == o.b && ta == o.ta && tb == o.tb &&
        oa == o.oa && ob == o.ob;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<size_t>()(k.method);
    for (const void* p : {static_cast<const void*>(k.a), static_cast<const void*>(k.b),
                          static_cast<const void*>(k.ta), static_cast<const void*>(k.tb)}) {
      h = h * 1000003u ^ std::hash<const void*>()(p);
    }
    return h * 31u + (k.oa ? 2u : 0u) + (k.ob ? 1u : 0u);
  }
};

struct Entry {
  PyObject* out = nullptr; // owned: the result expression
  PyObject* pytype = nullptr; // owned
  bool osum = false;
};

struct Method {
  PyObject* name = nullptr; // key of METHOD_TO_OPERATOR ("mul", "and", ...)
  PyObject* stock = nullptr; // stock's SymNode._<attr>
};

size_t g_max_entries = 1 << 15;

std::unordered_map<Key, Entry, KeyHash>& g_memo = *new std::unordered_map<Key, Entry, KeyHash>;
std::vector<Method>& g_methods = *new std::vector<Method>;
bool g_on = false;
int g_fault = 0;
PyObject* g_symnode = nullptr;
PyObject* g_m2o = nullptr;
PyObject* g_sympy_params = nullptr;
PyObject* g_logging = nullptr;
PyObject* g_loggers = nullptr; // tuple
PyObject* g_check = nullptr;

struct Strings {
  PyObject* hint;
  PyObject* pytype;
  PyObject* osum;
  PyObject* shape_env;
  PyObject* expr;
  PyObject* expr_attr;
  PyObject* tv;
  PyObject* record;
  PyObject* evaluate;
  PyObject* distribute;
  PyObject* cache;
  PyObject* disabled;
  PyObject* is_enabled_for;
  PyObject* dtrace;
  PyObject* kwnames; // ("fx_node", "optimized_summation")
  PyObject* debug; // 10
};
Strings s{};

enum Count : size_t {
  kHit,
  kLearned,
  kStockProxy,
  kStockState,
  kStockHint,
  kStockType,
  kStockError,
  kFull,
  kCountN
};
const char* const kCountNames[kCountN] = {
    "hit",
    "learned",
    "stock.proxy_tracing",
    "stock.state",
    "stock.hint",
    "stock.type",
    "stock.error",
    "full",
};
uint64_t g_counts[kCountN] = {};

bool init_strings() {
  if (s.hint != nullptr) return true;
  s.hint = PyUnicode_InternFromString("_hint");
  s.pytype = PyUnicode_InternFromString("pytype");
  s.osum = PyUnicode_InternFromString("_optimized_summation");
  s.shape_env = PyUnicode_InternFromString("shape_env");
  s.expr = PyUnicode_InternFromString("expr");
  s.expr_attr = PyUnicode_InternFromString("_expr");
  s.tv = PyUnicode_InternFromString("_translation_validation_enabled");
  s.record = PyUnicode_InternFromString("should_record_events");
  s.evaluate = PyUnicode_InternFromString("evaluate");
  s.distribute = PyUnicode_InternFromString("distribute");
  s.cache = PyUnicode_InternFromString("_cache");
  s.disabled = PyUnicode_InternFromString("disabled");
  s.is_enabled_for = PyUnicode_InternFromString("isEnabledFor");
  s.dtrace = PyUnicode_InternFromString("GET_DTRACE_STRUCTURED");
  s.kwnames = Py_BuildValue("(ss)", "fx_node", "optimized_summation");
  s.debug = PyLong_FromLong(10);
  return s.kwnames != nullptr && s.debug != nullptr;
}

void release(Entry& e) {
  Py_CLEAR(e.out);
  Py_CLEAR(e.pytype);
}

void clear_all() {
  // Move out first: the DECREFs may run arbitrary code.
  std::unordered_map<Key, Entry, KeyHash> old;
  old.swap(g_memo);
  for (auto& [k, e] : old) {
    release(e);
    Py_DECREF(k.a);
    Py_DECREF(k.b);
    Py_DECREF(k.ta);
    Py_DECREF(k.tb);
  }
}

// logging.Logger.isEnabledFor(DEBUG), reading the logger's own cache first.
int debug_enabled(PyObject* logger) {
  PyObject* disabled = instance_attr(logger, s.disabled);
  if (disabled == Py_True) return 0;
  PyObject* cache = instance_attr(logger, s.cache);
  if (cache != nullptr && PyDict_CheckExact(cache)) {
    PyObject* v = PyDict_GetItemWithError(cache, s.debug);
    if (v == Py_False) return 0;
    if (v == Py_True) return 1;
    if (v == nullptr && PyErr_Occurred()) return -1;
  }
  PyObject* r = PyObject_CallMethodOneArg(logger, s.is_enabled_for, s.debug);
  if (r == nullptr) return -1;
  const int t = PyObject_IsTrue(r);
  Py_DECREF(r);
  return t;
}

// Nothing but the result in stock's call: see the file comment.
bool quiet_state(PyObject* env) {
  if (instance_attr(env, s.tv) != Py_False || instance_attr(env, s.record) != Py_False) {
    return false;
  }
  if (g_logging == nullptr || PyDict_GetItemWithError(g_logging, s.dtrace) != Py_False) {
    PyErr_Clear();
    return false;
  }
  for (PyObject* p : {s.evaluate, s.distribute}) {
    PyObject* v = PyObject_GetAttr(g_sympy_params, p);
    if (v == nullptr) {
      PyErr_Clear();
      return false;
    }
    Py_DECREF(v);
    if (v != Py_True) return false;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(g_loggers);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const int on = debug_enabled(PyTuple_GET_ITEM(g_loggers, i));
    if (on != 0) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

bool plain_hint(PyObject* h) {
  return h != nullptr && (PyLong_CheckExact(h) || PyBool_Check(h) || PyFloat_CheckExact(h));
}

PyObject* call_stock(const Method& m, PyObject* const* args, Py_ssize_t n) {
  return PyObject_Vectorcall(m.stock, args, n, nullptr);
}

// op(self.hint, other.hint) as stock computes it (before the pytype conversion);
// nullptr with the error cleared when it fails (stock then raises it).
PyObject* raw_hint(const Method& m, PyObject* ha, PyObject* hb) {
  PyObject* op = PyDict_GetItemWithError(g_m2o, m.name);
  if (op == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* h = PyObject_CallFunctionObjArgs(op, ha, hb, nullptr);
  if (h == nullptr) PyErr_Clear();
  return h;
}

PyObject* memo_call(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs) {
  const size_t idx = PyLong_AsSize_t(capsule);
  if (idx >= g_methods.size()) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: unknown SymNode memo method");
    return nullptr;
  }
  const Method m = g_methods[idx]; // a copy: the table may grow while Python code runs
  if (!g_on || nargs != 2) return call_stock(m, args, nargs);
  PyObject* self = args[0];
  PyObject* other = args[1];
  if (reinterpret_cast<PyObject*>(Py_TYPE(self)) != g_symnode ||
      reinterpret_cast<PyObject*>(Py_TYPE(other)) != g_symnode) {
    ++g_counts[kStockType];
    return call_stock(m, args, nargs);
  }
  if (proxy_tracing()) {
    ++g_counts[kStockProxy];
    return call_stock(m, args, nargs);
  }
  // Everything read from the operands is held: Python code runs below (the hint,
  // the expr property, SymNode's constructor).
  const OwnedRef env(instance_attr(self, s.shape_env), true);
  if (env.get() == nullptr || env.get() == Py_None || !quiet_state(env.get())) {
    ++g_counts[kStockState];
    return call_stock(m, args, nargs);
  }
  const OwnedRef ha(instance_attr(self, s.hint), true);
  const OwnedRef hb(instance_attr(other, s.hint), true);
  const OwnedRef ta(instance_attr(self, s.pytype), true);
  const OwnedRef tb(instance_attr(other, s.pytype), true);
  // (what stock's `self._optimized_summation` reads: the constructor sets it, the
  // class has its default; compared with Py_True / Py_False only)
  PyObject* oa = plain_attr(self, s.osum);
  PyObject* ob = plain_attr(other, s.osum);
  if (!plain_hint(ha.get()) || !plain_hint(hb.get()) || ta.get() == nullptr ||
      tb.get() == nullptr || oa == nullptr || ob == nullptr || !PyBool_Check(oa) ||
      !PyBool_Check(ob)) {
    ++g_counts[kStockHint];
    return call_stock(m, args, nargs);
  }
  const bool osum_a = oa == Py_True;
  const bool osum_b = ob == Py_True;
  // Stock computes the hint before reading any expr: a hint that raises (say a
  // division by zero) must reach stock with the exprs unread.
  OwnedRef probe(raw_hint(m, ha.get(), hb.get()), false);
  if (probe.get() == nullptr) {
    ++g_counts[kStockError];
    return call_stock(m, args, nargs);
  }
  const OwnedRef ea(PyObject_GetAttr(self, s.expr), false);
  if (ea.get() == nullptr) return nullptr;
  const OwnedRef eb(PyObject_GetAttr(other, s.expr), false);
  if (eb.get() == nullptr) return nullptr;
  const Key key{idx, ea.get(), eb.get(), ta.get(), tb.get(), osum_a, osum_b};
  auto it = g_memo.find(key);
  if (it == g_memo.end()) {
    PyObject* r = call_stock(m, args, nargs);
    if (r != nullptr && reinterpret_cast<PyObject*>(Py_TYPE(r)) == g_symnode &&
        instance_attr(r, s.shape_env) == env.get()) {
      PyObject* out = instance_attr(r, s.expr_attr);
      PyObject* pytype = instance_attr(r, s.pytype);
      PyObject* osum = plain_attr(r, s.osum);
      if (out != nullptr && pytype != nullptr && osum != nullptr && PyBool_Check(osum)) {
        Py_INCREF(out);
        Py_INCREF(pytype);
        const Entry entry{out, pytype, osum == Py_True};
        if (g_memo.size() >= g_max_entries) {
          clear_all();
          ++g_counts[kFull];
        }
        for (PyObject* o : {key.a, key.b, key.ta, key.tb}) Py_INCREF(o);
        g_memo.emplace(key, entry);
        ++g_counts[kLearned];
      }
    }
    return r;
  }
  // The entry's objects are held too: building the SymNode runs Python code.
  const OwnedRef out(it->second.out, true);
  const OwnedRef pytype(it->second.pytype, true);
  bool osum = it->second.osum;
  // The probe is op(hints) before the pytype conversion; convert it as stock does.
  if (pytype.get() != Py_None && probe.get() != Py_None &&
      reinterpret_cast<PyObject*>(Py_TYPE(probe.get())) != pytype.get()) {
    PyObject* converted =
        plain_hint(probe.get()) ? PyObject_CallOneArg(pytype.get(), probe.get()) : nullptr;
    if (converted == nullptr) {
      PyErr_Clear();
      ++g_counts[kStockError];
      return call_stock(m, args, nargs);
    }
    Py_SETREF(probe.p, converted);
  }
  if (g_fault > 0) {
    --g_fault;
    osum = !osum;
  }
  PyObject* call_args[] = {
      out.get(), env.get(), pytype.get(), probe.get(), Py_None, osum ? Py_True : Py_False};
  PyObject* r = PyObject_Vectorcall(g_symnode, call_args, 4, s.kwnames);
  if (r == nullptr) return nullptr;
  ++g_counts[kHit];
  if (g_check != nullptr) {
    PyObject* ok = PyObject_CallFunctionObjArgs(g_check, m.name, r, m.stock, self, other, nullptr);
    if (ok == nullptr) {
      Py_DECREF(r);
      return nullptr;
    }
    Py_DECREF(ok);
  }
  return r;
}

PyMethodDef g_def = {
    "symnode_memo",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(memo_call)),
    METH_FASTCALL,
    "fastfake: SymNode binary op served from the memo (csrc/symbolic/symnode_memo.cpp)."};

} // namespace

void symnode_memo_setup(
    PyObject* symnode_type,
    PyObject* method_to_operator,
    PyObject* sympy_parameters,
    PyObject* logging_internal_dict,
    PyObject* loggers) {
  init_strings();
  hold_ref(g_symnode, symnode_type);
  hold_ref(g_m2o, method_to_operator);
  hold_ref(g_sympy_params, sympy_parameters);
  hold_ref(g_logging, logging_internal_dict);
  hold_ref(g_loggers, loggers);
}

PyObject* symnode_memo_hook(PyObject* method, PyObject* stock) {
  if (!init_strings()) return nullptr;
  Py_INCREF(method);
  Py_INCREF(stock);
  g_methods.push_back(Method{method, stock});
  PyObject* idx = PyLong_FromSize_t(g_methods.size() - 1);
  if (idx == nullptr) return nullptr;
  PyObject* fn = PyCFunction_New(&g_def, idx);
  Py_DECREF(idx);
  if (fn == nullptr) return nullptr;
  PyObject* bound = PyInstanceMethod_New(fn);
  Py_DECREF(fn);
  return bound;
}

bool symnode_memo_set(bool on) {
  const bool was = g_on;
  g_on = on && g_symnode != nullptr && g_m2o != nullptr && g_sympy_params != nullptr &&
      g_loggers != nullptr && PyTuple_Check(g_loggers);
  return was;
}

void symnode_memo_set_check(PyObject* check) {
  hold_ref(g_check, check);
}

size_t symnode_memo_size() {
  return g_memo.size();
}

size_t symnode_memo_set_max(size_t n) {
  const size_t was = g_max_entries;
  g_max_entries = n < 1 ? 1 : n;
  return was;
}

void symnode_memo_clear() {
  clear_all();
}

std::map<std::string, uint64_t> symnode_memo_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void symnode_memo_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void symnode_memo_inject_fault(int n) {
  g_fault = n;
}

} // namespace fastfake
