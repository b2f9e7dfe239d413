// make_fx's dead-code-elimination predicate, in C.
//
// `dispatch_trace` (torch/fx/experimental/proxy_tensor.py) ends every make_fx
// trace with `graph.eliminate_dead_code(impure_pred)`, and the graph's loop asks
// the predicate about every node, the ones with users too: `n.is_impure()` (for a
// call_function, torch._library.utils.is_impure of its target: the schema's
// mutability, the side-effectful set, the effect registry, the random ops),
// `is_accessor_node(n)`, then whether the node's `val` and those of its node
// arguments are all SymInt / SymFloat / SymBool. Two imports and four Python
// functions per node: 9,168 nodes in a dynamic=True GPT-2 compile.
//
// A predicate of this file stands for one `impure_pred` during one elimination.
// For an exact fx.Node it answers as stock: placeholder and output are impure; a
// call_function of a target that is no higher-order operator takes
// (`n.is_impure()`, `is_accessor_node(n)`) from a memo of the target, filled by
// calling those stock functions on the first node of the target (both read the
// target only -- not the arguments, which only a higher-order operator's answer
// reads -- and nothing between two nodes of one elimination changes what they
// read: the loop erases nodes and runs no user code); a get_attr or other op is
// neither; then the sym-value test in C (the node's meta an exact dict, its
// `_args` the tuple `args` returns). A call_module, call_method, higher-order
// operator or any node of another class is stock's predicate, counted.
#include "tracing/dce_pred.h"

#include "common/bindings.h"
#include "common/counts.h"
#include "common/refs.h"

namespace fastfake {

namespace {

struct State {
  PyObject* node_type = nullptr; // torch.fx.Node
  PyObject* sym_types = nullptr; // proxy_tensor.py_sym_types
  PyObject* hop_type = nullptr; // torch._ops.HigherOrderOperator
  PyObject* is_accessor = nullptr; // symbolic_shapes.is_accessor_node
  bool ready = false;
  bool on = false;
  int fault = 0;
};
State g;

struct Names {
  PyObject* op;
  PyObject* target;
  PyObject* meta;
  PyObject* args_;
  PyObject* val;
  PyObject* is_impure;
  PyObject* placeholder;
  PyObject* output;
  PyObject* call_function;
  PyObject* call_module;
  PyObject* call_method;
};
Names s{};

enum Count : size_t { Served, Learned, StockOff, StockNode, StockOp, StockHop, StockMeta, NumCounts };
const char* const kCountNames[NumCounts] = {"served", "learned", "stock.off", "stock.node", "stock.op",
                                            "stock.hop", "stock.meta"};
uint64_t g_counts[NumCounts] = {};

// `op == name` for the node's op string (interned names compare by identity first).
bool op_is(PyObject* op, PyObject* name) {
  if (op == name) return true;
  return PyUnicode_CheckExact(op) && PyUnicode_Compare(op, name) == 0;
}

// `isinstance(meta.get("val"), py_sym_types)` for a node's meta: 1 / 0, -1 error,
// -2 a meta that is no exact dict (stock's predicate decides).
int val_is_sym(PyObject* node) {
  OwnedRef meta(PyObject_GetAttr(node, s.meta));
  if (!meta) return -1;
  if (!PyDict_CheckExact(meta.get())) return -2;
  PyObject* val = PyDict_GetItemWithError(meta.get(), s.val);
  if (val == nullptr) {
    if (PyErr_Occurred()) return -1;
    val = Py_None;
  }
  return PyObject_IsInstance(val, g.sym_types);
}

// The answer in C: 1 impure, 0 not, -1 error, -2 stock's predicate decides
// (`why` says why).
int answer(PyObject* memo, PyObject* node, Count* why) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(node)) != g.node_type) {
    *why = StockNode;
    return -2;
  }
  OwnedRef op(PyObject_GetAttr(node, s.op));
  if (!op) return -1;
  if (op_is(op.get(), s.placeholder) || op_is(op.get(), s.output)) return 1; // (Node.is_impure)
  if (op_is(op.get(), s.call_module) || op_is(op.get(), s.call_method)) {
    *why = StockOp;
    return -2;
  }
  if (op_is(op.get(), s.call_function)) {
    OwnedRef target(PyObject_GetAttr(node, s.target));
    if (!target) return -1;
    const int hop = PyObject_IsInstance(target.get(), g.hop_type);
    if (hop < 0) return -1;
    if (hop) {
      *why = StockHop;
      return -2;
    }
    OwnedRef key(PyLong_FromVoidPtr(target.get()));
    if (!key) return -1;
    PyObject* facts = PyDict_GetItemWithError(memo, key.get()); // (target, impure, accessor)
    if (facts == nullptr) {
      if (PyErr_Occurred()) return -1;
      OwnedRef impure(PyObject_CallMethodNoArgs(node, s.is_impure));
      if (!impure) return -1;
      const int im = PyObject_IsTrue(impure.get());
      if (im < 0) return -1;
      int acc = 0;
      if (!im) { // (stock asks is_accessor_node only of a pure node)
        OwnedRef accessor(PyObject_CallOneArg(g.is_accessor, node));
        if (!accessor) return -1;
        acc = PyObject_IsTrue(accessor.get());
        if (acc < 0) return -1;
      }
      OwnedRef entry(Py_BuildValue("(OOO)", target.get(), im ? Py_True : Py_False, acc ? Py_True : Py_False));
      if (!entry || PyDict_SetItem(memo, key.get(), entry.get()) < 0) return -1;
      facts = entry.get();
      g_counts[Learned]++;
      if (im) return 1;
      if (acc) return 0;
    } else {
      if (PyTuple_GET_ITEM(facts, 1) == Py_True) return 1;
      if (PyTuple_GET_ITEM(facts, 2) == Py_True) return 0;
    }
  }
  // `isinstance(n.meta.get("val"), py_sym_types) and all(isinstance(a.meta.get("val"),
  // py_sym_types) for a in n.args if isinstance(a, fx.Node))`
  const int own = val_is_sym(node);
  if (own == -2) {
    *why = StockMeta;
    return -2;
  }
  if (own < 0) return -1;
  if (!own) return 1;
  OwnedRef args(PyObject_GetAttr(node, s.args_));
  if (!args) return -1;
  if (!PyTuple_CheckExact(args.get())) {
    *why = StockMeta;
    return -2;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args.get()); ++i) {
    PyObject* a = PyTuple_GET_ITEM(args.get(), i);
    const int is_node = PyObject_IsInstance(a, g.node_type);
    if (is_node < 0) return -1;
    if (!is_node) continue;
    const int v = val_is_sym(a);
    if (v == -2) {
      *why = StockMeta;
      return -2;
    }
    if (v < 0) return -1;
    if (!v) return 1;
  }
  return 0;
}

// self: (stock's impure_pred, the memo dict).
PyObject* predicate(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  PyObject* stock = PyTuple_GET_ITEM(self, 0);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!g.on || !g.ready || kwnames != nullptr || nargs != 1) {
    g_counts[StockOff]++;
    return PyObject_Vectorcall(stock, args, static_cast<size_t>(nargs), kwnames);
  }
  Count why = StockNode;
  const int r = answer(PyTuple_GET_ITEM(self, 1), args[0], &why);
  if (r == -1) return nullptr;
  if (r == -2) {
    g_counts[why]++;
    return PyObject_Vectorcall(stock, args, 1, nullptr);
  }
  g_counts[Served]++;
  bool impure = r == 1;
  if (g.fault > 0) {
    g.fault--;
    impure = !impure;
  }
  return PyBool_FromLong(impure ? 1 : 0);
}

PyMethodDef g_def = {
    "impure_pred", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(predicate)),
    METH_FASTCALL | METH_KEYWORDS,
    "dispatch_trace's impure_pred in C for one dead-code elimination (fastfake)."};

PyObject* intern(const char* name) {
  return PyUnicode_InternFromString(name);
}

} // namespace

bool dce_pred_setup(PyObject* objects) {
  g.ready = false;
  if (s.op == nullptr) {
    s.op = intern("op");
    s.target = intern("target");
    s.meta = intern("meta");
    s.args_ = intern("_args");
    s.val = intern("val");
    s.is_impure = intern("is_impure");
    s.placeholder = intern("placeholder");
    s.output = intern("output");
    s.call_function = intern("call_function");
    s.call_module = intern("call_module");
    s.call_method = intern("call_method");
  }
  if (!PyDict_Check(objects)) return false;
  const bool ok = take_object(objects, "node_type", g.node_type) &&
      take_object(objects, "sym_types", g.sym_types) && take_object(objects, "hop_type", g.hop_type) &&
      take_object(objects, "is_accessor", g.is_accessor);
  if (!ok || !PyType_Check(g.node_type) || !PyTuple_Check(g.sym_types) || !PyType_Check(g.hop_type)) return false;
  g.ready = true;
  return true;
}

PyObject* dce_pred_new(PyObject* stock) {
  if (!g.ready) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: dce_pred_new() before dce_pred_setup()");
    return nullptr;
  }
  OwnedRef memo(PyDict_New());
  if (!memo) return nullptr;
  OwnedRef self(PyTuple_Pack(2, stock, memo.get()));
  if (!self) return nullptr;
  return PyCFunction_New(&g_def, self.get());
}

void dce_pred_enable(bool on) {
  g.on = on;
}

std::map<std::string, uint64_t> dce_pred_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void dce_pred_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void dce_pred_inject_fault(int n) {
  g.fault = n;
}

} // namespace fastfake
