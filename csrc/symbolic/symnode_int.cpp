// SymNode.maybe_as_int in C.
//
// The C++ side of every SymInt argument asks its Python SymNode `maybe_as_int()`
// (c10's PythonSymNodeImpl), so proxy tracing, FunctionalTensor wrappers and every
// op taking sizes call it many thousands of times in a dynamic=True compile
// (~3 % of a BERT aot_eager compile). Stock's method (sym_node.py, every supported
// release) is
//
//   def maybe_as_int(self):
//       if self.expr.is_number:
//           return int(self.expr)
//       else:
//           return None
//
// where `is_number` is sympy's property that walks the expression's arguments in
// Python, uncached. This function does the same reads in the same order
// (`self.expr` through whatever `SymNode.expr` is: stock's property or
// csrc/symbolic/symnode_expr.cpp; `is_number`; `self.expr` again and `int()` of it) with
// `is_number` memoised on the expression's identity (the memo csrc/symbolic/symnode_expr.cpp
// keeps for 2.13's `expr`: sympy expressions are immutable; entries own their
// keys; bounded). Exact SymNode instances only; anything else calls stock's
// function. Which releases: fastfake/symbolic/symnode_int.py.
#include "symbolic/symnode_int.h"

#include "common/counts.h"

#include "common/fastfake.h"

#include "symbolic/symnode_expr.h"

namespace fastfake {

namespace {

PyObject* g_symnode = nullptr;
PyObject* g_stock = nullptr;
PyObject* g_check = nullptr;
PyObject* g_expr = nullptr; // "expr"
PyObject* g_name = nullptr; // "maybe_as_int"
int g_fault = 0;

enum Count : size_t { Served, StockType, NumCounts };
const char* const kCountNames[NumCounts] = {"served", "stock.type"};
uint64_t g_counts[NumCounts] = {};

PyObject* compute(PyObject* node) {
  PyObject* expr = PyObject_GetAttr(node, g_expr);
  if (expr == nullptr) return nullptr;
  const int number = symnode_is_number(expr);
  Py_DECREF(expr);
  if (number < 0) return nullptr;
  if (number == 0) Py_RETURN_NONE;
  if (g_fault > 0) {
    g_fault--;
    Py_RETURN_NONE;
  }
  PyObject* again = PyObject_GetAttr(node, g_expr);
  if (again == nullptr) return nullptr;
  PyObject* out = PyNumber_Long(again);
  Py_DECREF(again);
  return out;
}

PyObject* maybe_as_int(PyObject* /*self*/, PyObject* node) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(node)) != g_symnode || g_stock == nullptr) {
    g_counts[StockType]++;
    if (g_stock == nullptr) {
      PyErr_SetString(PyExc_RuntimeError, "fastfake: maybe_as_int used before setup_symnode_int()");
      return nullptr;
    }
    return PyObject_CallOneArg(g_stock, node);
  }
  PyObject* out = compute(node);
  if (out == nullptr) return nullptr;
  g_counts[Served]++;
  if (g_check != nullptr) {
    PyObject* r = PyObject_CallFunctionObjArgs(g_check, node, out, nullptr);
    if (r == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(r);
  }
  return out;
}

PyMethodDef g_def = {
    "maybe_as_int",
    maybe_as_int,
    METH_O,
    "SymNode.maybe_as_int computed in C by fastfake (stock's body; is_number memoised)."};

} // namespace

void symnode_int_setup(PyObject* symnode_type, PyObject* stock) {
  if (g_expr == nullptr) g_expr = PyUnicode_InternFromString("expr");
  if (g_name == nullptr) g_name = PyUnicode_InternFromString("maybe_as_int");
  Py_INCREF(symnode_type);
  Py_XSETREF(g_symnode, symnode_type);
  Py_INCREF(stock);
  Py_XSETREF(g_stock, stock);
}

PyObject* symnode_int_method() {
  PyObject* fn = PyCFunction_New(&g_def, nullptr);
  if (fn == nullptr) return nullptr;
  PyObject* method = PyInstanceMethod_New(fn);
  Py_DECREF(fn);
  return method;
}

PyObject* symnode_int_direct(PyObject* node) {
  // (what PythonSymNodeImpl::maybe_as_int calls: `node.maybe_as_int`, found on
  // the class unless the instance has its own)
  if (g_symnode == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(node)) != g_symnode) return nullptr;
  PyObject* m = class_attr(node, g_name);
  if (m == nullptr || !PyInstanceMethod_Check(m)) return nullptr;
  PyObject* f = PyInstanceMethod_GET_FUNCTION(m);
  if (!PyCFunction_Check(f) || reinterpret_cast<PyCFunctionObject*>(f)->m_ml != &g_def) return nullptr;
  return maybe_as_int(nullptr, node);
}

void symnode_int_set_check(PyObject* check) {
  PyObject* c = check == Py_None ? nullptr : check;
  Py_XINCREF(c);
  Py_XSETREF(g_check, c);
}

std::map<std::string, uint64_t> symnode_int_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void symnode_int_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void symnode_int_inject_fault(int n) {
  g_fault = n;
}

} // namespace fastfake
