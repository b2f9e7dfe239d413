// The proxy mode's record of a traced SymNode operation, in C.
//
// Under make_fx (AOTAutograd's trace, export) every SymNode operation on traced
// SymInts -- a size's arithmetic in a decomposition, a view's computed shape, the
// storage size of each FunctionalTensor wrapper up to torch 2.14 -- reaches the
// proxy mode's `__sym_dispatch__`, which computes the result with tracing off and
// hands it to `_sym_register(tracer, func, args, out)`
// (torch/fx/experimental/proxy_tensor.py). Outside `_enable_thunkify` (where
// those operations run) `thunkify` computes `_compute_proxy` at once: each
// symbolic argument's proxy slot looked up (`get_proxy_slot`) and forced, the
// tracer's `create_node("call_function", func, args' nodes, {})`, an `fx.Proxy`
// of it, `set_meta` (the node's `val` is the result; `tensor_meta` is not set for
// a SymInt, inside an `_enable_thunkify` it enters and leaves), and
// `set_proxy_slot(out, tracer, Thunk(lambda: r))`. Five Python functions, two
// context-manager frames and a generator per operation: 7,996 operations in a
// dynamic=True GPT-2 compile.
//
// This is `_sym_register` while fastfake is installed. The plain call -- an
// exact SymInt / SymFloat / SymBool result, thunkification off, an exact tuple
// of arguments that is not torch.sym_sum's one list, every symbolic argument an
// exact sym type whose node the tracer's `_SymNodeDict` holds as a Thunk, no sym
// type registered as an opaque type, and the proxy_tensor names the path stands
// for still stock's -- is done here in stock's order: the slots looked up, then
// forced in order (Thunk.force: `r = f(); f = None`), the tracer's own
// `create_node` (every node meta stock's), `fx.Proxy`, the node's `val`, the
// tracer's `enable_thunkify` set and put back as `set_meta`'s context does,
// stock's already-computed thunk, and `set_proxy_slot`'s SymInt branch (the
// tracker's entry by the SymNode unless it has one, the `sympy_expr_tracker` entry
// of a Symbol; stock's function where its debug log is on). Anything else is
// stock's function, counted by reason; a result that is no sym type is nothing,
// as in stock. Which releases: fastfake/tracing/sym_register.py.
#include "tracing/sym_register.h"

#include "common/counts.h"
#include "common/logger.h"
#include "common/bindings.h"
#include "common/refs.h"
#include "tracing/leaves.h"

#include <utility>
#include <vector>

namespace fastfake {

namespace {

struct State {
  PyObject* stock = nullptr;
  PyObject* module_dict = nullptr;
  NameBindings module_names;
  PyObject* fx_dict = nullptr;
  PyObject* sym_types = nullptr; // tuple
  PyObject* symnode_dict_type = nullptr;
  PyObject* thunk_type = nullptr;
  PyObject* proxy_type = nullptr;
  PyObject* set_proxy_slot = nullptr;
  PyObject* computed_thunk = nullptr;
  PyObject* opaque_types = nullptr; // the opaque-type registry's dict (None: no registry)
  PyObject* opaque_keys = nullptr; // a tuple: its keys for SymInt, SymFloat, SymBool, object
  PyObject* check = nullptr;
  // set_proxy_slot's SymInt branch in C (nullptr: stock's function is called)
  PyObject* symbol_type = nullptr; // sympy.Symbol
  PyObject* tracker_value_type = nullptr; // proxy_tensor._SympyExprTrackerValue
  PyObject* logger_type = nullptr; // logging.Logger
  bool on = false;
  int fault = 0;
};
State g;

struct Names {
  PyObject* enable_thunkify;
  PyObject* symnode_tracker;
  PyObject* sym_node_dict;
  PyObject* node;
  PyObject* f;
  PyObject* r;
  PyObject* create_node;
  PyObject* call_function;
  PyObject* meta;
  PyObject* val;
  PyObject* proxy;
  PyObject* log;
  PyObject* expr;
  PyObject* sympy_expr_tracker;
};
Names s{};

enum Count : size_t { Served, NotSym, Lazy, Arguments, Untracked, Opaque, State_, Off, NumCounts };
const char* const kCountNames[NumCounts] = {
    "served", "not_sym", "stock.lazy", "stock.arguments", "stock.untracked", "stock.opaque", "stock.state",
    "stock.off"};
uint64_t g_counts[NumCounts] = {};

bool exact_sym(PyObject* o) {
  return fastfake::exact_sym(o, g.sym_types);
}

// The names the plain path stands for are still stock's, and fx.Proxy the class
// bound at setup.
bool names_unchanged() {
  if (!g.module_names.hold(g.module_dict)) return false;
  PyObject* p = PyDict_GetItemWithError(g.fx_dict, s.proxy);
  if (p != g.proxy_type) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// No sym type (nor object, their one base) is registered as an opaque type:
// get_proxy_slot / set_proxy_slot take a SymInt to the symnode tracker then. The
// registry's dict and the keys it would hold for those types are bound at setup
// (a WeakKeyDictionary's `data`, keyed by weak references to the classes).
bool no_opaque_sym() {
  if (g.opaque_types == nullptr) return true;
  if (PyDict_GET_SIZE(g.opaque_types) == 0) return true;
  const Py_ssize_t n = PyTuple_GET_SIZE(g.opaque_keys);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const int c = PyDict_Contains(g.opaque_types, PyTuple_GET_ITEM(g.opaque_keys, i));
    if (c != 0) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

PyObject* call_stock(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, Count why) {
  g_counts[why]++;
  return PyObject_Vectorcall(g.stock, args, static_cast<size_t>(nargs), kwnames);
}

// Thunk.force: `if self.f is None: return self.r; self.r = self.f(); self.f = None;
// return self.r`. New reference.
PyObject* force(PyObject* thunk) {
  OwnedRef f(PyObject_GetAttr(thunk, s.f));
  if (!f) return nullptr;
  if (f.get() == Py_None) return PyObject_GetAttr(thunk, s.r);
  OwnedRef r(PyObject_CallNoArgs(f.get()));
  if (!r) return nullptr;
  if (PyObject_SetAttr(thunk, s.r, r.get()) < 0 || PyObject_SetAttr(thunk, s.f, Py_None) < 0) return nullptr;
  return PyObject_GetAttr(thunk, s.r);
}

// set_proxy_slot(out, tracer, thunk) for an exact sym type that is no opaque value
// (the caller checked both): the debug log (1 where it would log: stock's function
// then, nothing done), then `if obj not in tracer.symnode_tracker`: the tracker's
// entry by the SymNode, and for a result whose expression is a sympy Symbol the
// tracer's `sympy_expr_tracker` entry. 1 done, 0 not done (nothing changed), -1 an
// error.
int set_sym_slot(PyObject* tracer, PyObject* out, PyObject* thunk) {
  if (g.symbol_type == nullptr) return 0;
  PyObject* log = PyDict_GetItemWithError(g.module_dict, s.log);
  if (log == nullptr) {
    PyErr_Clear();
    return 0;
  }
  if (!logger_debug_off(log, g.logger_type)) return 0;
  OwnedRef tracker(PyObject_GetAttr(tracer, s.symnode_tracker));
  if (!tracker) return -1;
  if (reinterpret_cast<PyObject*>(Py_TYPE(tracker.get())) != g.symnode_dict_type) return 0;
  OwnedRef d(PyObject_GetAttr(tracker.get(), s.sym_node_dict));
  if (!d) return -1;
  if (!PyDict_CheckExact(d.get())) return 0;
  OwnedRef node(PyObject_GetAttr(out, s.node));
  if (!node) return -1;
  const int has = PyDict_Contains(d.get(), node.get());
  if (has < 0) return -1;
  if (has) return 1;
  if (PyDict_SetItem(d.get(), node.get(), thunk) < 0) return -1;
  OwnedRef expr(PyObject_GetAttr(node.get(), s.expr));
  if (!expr) return -1;
  const int is_symbol = PyObject_IsInstance(expr.get(), g.symbol_type);
  if (is_symbol < 0) return -1;
  if (is_symbol) {
    OwnedRef node2(PyObject_GetAttr(out, s.node));
    if (!node2) return -1;
    OwnedRef key(PyObject_GetAttr(node2.get(), s.expr));
    if (!key) return -1;
    OwnedRef value(PyObject_CallFunctionObjArgs(g.tracker_value_type, thunk, out, nullptr));
    if (!value) return -1;
    OwnedRef exprs(PyObject_GetAttr(tracer, s.sympy_expr_tracker));
    if (!exprs || PyObject_SetItem(exprs.get(), key.get(), value.get()) < 0) return -1;
  }
  return 1;
}

// The plain path from the slots' lookups on (nothing done before): 1 done, 0 not
// plain (nothing done; *why says what), -1 an error.
int serve(PyObject* tracer, PyObject* func, PyObject* fargs, PyObject* out, Count* why) {
  *why = Arguments;
  OwnedRef tracker(PyObject_GetAttr(tracer, s.symnode_tracker));
  if (!tracker || reinterpret_cast<PyObject*>(Py_TYPE(tracker.get())) != g.symnode_dict_type) {
    PyErr_Clear();
    return 0;
  }
  OwnedRef d(PyObject_GetAttr(tracker.get(), s.sym_node_dict));
  if (!d || !PyDict_CheckExact(d.get())) {
    PyErr_Clear();
    return 0;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(fargs);
  // (strong: forcing one runs Python code)
  struct Thunks {
    std::vector<PyObject*> v;
    ~Thunks() {
      for (PyObject* o : v) Py_XDECREF(o);
    }
  } held;
  held.v.assign(static_cast<size_t>(n), nullptr);
  std::vector<PyObject*>& thunks = held.v;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(fargs, i);
    const int is = PyObject_IsInstance(a, g.sym_types);
    if (is < 0) {
      PyErr_Clear();
      return 0;
    }
    if (!is) continue;
    if (!exact_sym(a)) return 0;
    OwnedRef node(PyObject_GetAttr(a, s.node));
    if (!node) {
      PyErr_Clear();
      return 0;
    }
    PyObject* v = PyDict_GetItemWithError(d.get(), node.get());
    if (v == nullptr) {
      PyErr_Clear();
      *why = Untracked;
      return 0;
    }
    if (reinterpret_cast<PyObject*>(Py_TYPE(v)) != g.thunk_type) return 0;
    Py_INCREF(v);
    thunks[static_cast<size_t>(i)] = v;
  }
  // _compute_proxy: the arguments' nodes, in order
  OwnedRef n_args(PyTuple_New(n));
  if (!n_args) return -1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item;
    if (thunks[static_cast<size_t>(i)] != nullptr) {
      OwnedRef p(force(thunks[static_cast<size_t>(i)]));
      if (!p) return -1;
      item = PyObject_GetAttr(p.get(), s.node);
      if (item == nullptr) return -1;
    } else {
      item = PyTuple_GET_ITEM(fargs, i);
      Py_INCREF(item);
    }
    PyTuple_SET_ITEM(n_args.get(), i, item);
  }
  OwnedRef kwargs(PyDict_New());
  if (!kwargs) return -1;
  OwnedRef n_out(PyObject_CallMethodObjArgs(tracer, s.create_node, s.call_function, func, n_args.get(), kwargs.get(),
                                            nullptr));
  if (!n_out) return -1;
  OwnedRef p_out(PyObject_CallFunctionObjArgs(g.proxy_type, n_out.get(), tracer, nullptr));
  if (!p_out) return -1;
  // set_meta(p_out, out): val is the result itself (extract_val of a sym type);
  // then `with _enable_thunkify(proxy.tracer)` around tests a sym type fails
  {
    OwnedRef node(PyObject_GetAttr(p_out.get(), s.node));
    if (!node) return -1;
    OwnedRef meta(PyObject_GetAttr(node.get(), s.meta));
    if (!meta || PyObject_SetItem(meta.get(), s.val, out) < 0) return -1;
    OwnedRef old(PyObject_GetAttr(tracer, s.enable_thunkify));
    if (!old || PyObject_SetAttr(tracer, s.enable_thunkify, Py_True) < 0) return -1;
    if (PyObject_SetAttr(tracer, s.enable_thunkify, old.get()) < 0) return -1;
  }
  // thunkify's `Thunk(lambda: r)`, then set_proxy_slot(out, tracer, thunk)
  OwnedRef thunk(PyObject_CallOneArg(g.computed_thunk, p_out.get()));
  if (!thunk) return -1;
  if (g.fault > 0) {
    g.fault--; // (testing: the result left without its proxy slot)
  } else {
    const int set = set_sym_slot(tracer, out, thunk.get());
    if (set < 0) return -1;
    if (set == 0) {
      OwnedRef done(PyObject_CallFunctionObjArgs(g.set_proxy_slot, out, tracer, thunk.get(), nullptr));
      if (!done) return -1;
    }
  }
  if (g.check != nullptr) {
    OwnedRef ok(PyObject_CallFunctionObjArgs(g.check, tracer, func, fargs, out, n_out.get(), nullptr));
    if (!ok) return -1;
  }
  return 1;
}

PyObject* sym_register(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!g.on || g.stock == nullptr) return call_stock(args, nargs, kwnames, Off);
  if (kwnames != nullptr || nargs != 4) return call_stock(args, nargs, kwnames, Arguments);
  PyObject* tracer = args[0];
  PyObject* func = args[1];
  PyObject* fargs = args[2];
  PyObject* out = args[3];
  if (!names_unchanged()) return call_stock(args, nargs, kwnames, State_);
  // `if isinstance(out, py_sym_types)`: nothing otherwise
  const int is = PyObject_IsInstance(out, g.sym_types);
  if (is < 0) return nullptr;
  if (!is) {
    g_counts[NotSym]++;
    Py_RETURN_NONE;
  }
  if (!exact_sym(out) || !PyTuple_CheckExact(fargs)) return call_stock(args, nargs, kwnames, Arguments);
  // thunkify: `if tracer.enable_thunkify` (a lazy thunk: stock's)
  {
    OwnedRef en(PyObject_GetAttr(tracer, s.enable_thunkify));
    if (!en) {
      PyErr_Clear();
      return call_stock(args, nargs, kwnames, State_);
    }
    const int t = PyObject_IsTrue(en.get());
    if (t != 0) {
      if (t < 0) PyErr_Clear();
      return call_stock(args, nargs, kwnames, Lazy);
    }
  }
  // _compute_proxy's torch.sym_sum form: one list or tuple
  if (PyTuple_GET_SIZE(fargs) == 1 &&
      (PyList_Check(PyTuple_GET_ITEM(fargs, 0)) || PyTuple_Check(PyTuple_GET_ITEM(fargs, 0)))) {
    return call_stock(args, nargs, kwnames, Arguments);
  }
  if (!no_opaque_sym()) return call_stock(args, nargs, kwnames, Opaque);
  Count why = Arguments;
  const int r = serve(tracer, func, fargs, out, &why);
  if (r < 0) return nullptr;
  if (r == 0) return call_stock(args, nargs, kwnames, why);
  g_counts[Served]++;
  Py_RETURN_NONE;
}

PyMethodDef g_def = {
    "_sym_register", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(sym_register)),
    METH_FASTCALL | METH_KEYWORDS,
    "torch.fx.experimental.proxy_tensor._sym_register in C (fastfake; the plain call)."};

PyObject* intern(const char* name) {
  return PyUnicode_InternFromString(name);
}

} // namespace

void sym_register_setup(PyObject* stock, PyObject* module_dict, PyObject* module_names, PyObject* fx_dict,
                        PyObject* sym_types, PyObject* symnode_dict_type, PyObject* thunk_type,
                        PyObject* proxy_type, PyObject* set_proxy_slot, PyObject* computed_thunk,
                        PyObject* opaque_types, PyObject* opaque_keys) {
  if (s.enable_thunkify == nullptr) {
    s.enable_thunkify = intern("enable_thunkify");
    s.symnode_tracker = intern("symnode_tracker");
    s.sym_node_dict = intern("sym_node_dict");
    s.node = intern("node");
    s.f = intern("f");
    s.r = intern("r");
    s.create_node = intern("create_node");
    s.call_function = intern("call_function");
    s.meta = intern("meta");
    s.val = intern("val");
    s.proxy = intern("Proxy");
    s.log = intern("log");
    s.expr = intern("expr");
    s.sympy_expr_tracker = intern("sympy_expr_tracker");
  }
  hold_ref(g.stock, stock);
  hold_ref(g.module_dict, module_dict);
  if (!g.module_names.bind(module_names)) Py_CLEAR(g.stock); // (sym_register_function() refuses then)
  hold_ref(g.fx_dict, fx_dict);
  hold_ref(g.sym_types, sym_types);
  hold_ref(g.symnode_dict_type, symnode_dict_type);
  hold_ref(g.thunk_type, thunk_type);
  hold_ref(g.proxy_type, proxy_type);
  hold_ref(g.set_proxy_slot, set_proxy_slot);
  hold_ref(g.computed_thunk, computed_thunk);
  hold_ref(g.opaque_types, opaque_types);
  hold_ref(g.opaque_keys, opaque_keys);
  if (g.opaque_types != nullptr && (!PyDict_Check(g.opaque_types) || g.opaque_keys == nullptr ||
                                    !PyTuple_Check(g.opaque_keys))) {
    Py_CLEAR(g.opaque_types); // (sym_register_function() refuses then)
    Py_CLEAR(g.stock);
  }
}

PyObject* sym_register_function() {
  if (g.stock == nullptr || g.sym_types == nullptr || !PyTuple_Check(g.sym_types)) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: sym_register_function() before sym_register_setup()");
    return nullptr;
  }
  return PyCFunction_New(&g_def, nullptr);
}

void sym_register_setup_slot(PyObject* symbol_type, PyObject* tracker_value_type, PyObject* logger_type) {
  hold_ref(g.symbol_type, symbol_type);
  hold_ref(g.tracker_value_type, tracker_value_type);
  hold_ref(g.logger_type, logger_type);
  if (g.tracker_value_type == nullptr || g.logger_type == nullptr) Py_CLEAR(g.symbol_type);
}

void sym_register_enable(bool on) {
  g.on = on;
}

void sym_register_set_check(PyObject* check) {
  hold_ref(g.check, check);
}

std::map<std::string, uint64_t> sym_register_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void sym_register_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void sym_register_inject_fault(int n) {
  g.fault = n;
}

} // namespace fastfake
