// SymNode.expr as a C-level descriptor.
//
// Every SymInt operation, guard, cache key and proxy-tracer registration reads
// `SymNode.expr` (the node's expression with the ShapeEnv's replacements applied),
// several times per operation: hundreds of thousands of reads in a dynamic=True
// training compile. Stock's property (sym_node.py) is
//
//   if isinstance(self._expr, int) or self._expr.<constant test>:
//       return self._expr
//   if self.shape_env is None:
//       raise AssertionError("shape_env is required to access expr")
//   ver = self.shape_env._replacements_version_counter
//   if ver == 0:
//       return self._expr
//   if self._expr_cache is not None and ver == self._expr_ver:
//       return self._expr_cache
//   result = self.shape_env.replace(self._expr)
//   self._expr_ver = ver
//   self._expr_cache = result
//   return result
//
// where the constant test is `is_number` on 2.13 (a sympy property that walks the
// expression's arguments in Python, uncached: ~7 % of a dynamic=True T5 training
// compile), `is_Number` on 2.14 and `is_Number or (is_Boolean and is_Atom)` on
// 2.15 (class attributes). This descriptor computes exactly that, in C, with the
// same reads, the same writes and the same calls; on 2.13 `is_number` is memoised
// on the identity of the expression (sympy expressions are immutable, and the
// property depends on nothing but the expression's arguments; each entry owns its
// key, so an identity is never reused while its entry lives; bounded, emptied when
// full). Served only for exact SymNode instances; class access hands out the stock
// property, and setting or deleting goes to it. Which releases: fastfake/symbolic/symnode_memo.py.
#include "common/fastfake.h"

#include "common/counts.h"
#include "symbolic/symnode_expr.h"

#include <unordered_map>

namespace fastfake {


namespace {

PyObject* g_symnode = nullptr;
PyObject* g_check = nullptr;
int g_fault = 0;
size_t g_max_entries = 1 << 16;
std::unordered_map<PyObject*, bool>& g_is_number = *new std::unordered_map<PyObject*, bool>;

struct Strings {
  PyObject* expr_attr; // _expr
  PyObject* shape_env;
  PyObject* version; // _replacements_version_counter
  PyObject* cache; // _expr_cache
  PyObject* ver; // _expr_ver
  PyObject* replace;
  PyObject* is_number;
  PyObject* is_Number;
  PyObject* is_Boolean;
  PyObject* is_Atom;
  PyObject* no_env; // the AssertionError's message
};
Strings s{};

enum Count : size_t { Served, StockType, Learned, Full, NumCounts };
const char* const kCountNames[NumCounts] = {"served", "stock.type", "learned", "full"};
uint64_t g_counts[NumCounts] = {};

void clear_memo() {
  for (auto& kv : g_is_number) Py_DECREF(kv.first);
  g_is_number.clear();
}

// 1 / 0 for `attr` of `o` being true / false, -1 with the exception set.
int attr_true(PyObject* o, PyObject* attr) {
  PyObject* v = PyObject_GetAttr(o, attr);
  if (v == nullptr) return -1;
  const int r = PyObject_IsTrue(v);
  Py_DECREF(v);
  return r;
}

// The constant test of `rule` on `expr` (not an int): 1 / 0, -1 on error.
int is_constant(PyObject* expr, ExprRule rule) {
  switch (rule) {
    case ExprRule::IsNumber: {
      auto it = g_is_number.find(expr);
      if (it != g_is_number.end()) return it->second ? 1 : 0;
      const int r = attr_true(expr, s.is_number);
      if (r < 0) return -1;
      if (g_is_number.size() >= g_max_entries) {
        clear_memo();
        g_counts[Full]++;
      }
      Py_INCREF(expr);
      g_is_number.emplace(expr, r == 1);
      g_counts[Learned]++;
      return r;
    }
    case ExprRule::IsNumberClass:
      return attr_true(expr, s.is_Number);
    case ExprRule::IsNumberOrBoolAtom: {
      const int r = attr_true(expr, s.is_Number);
      if (r != 0) return r;
      const int b = attr_true(expr, s.is_Boolean);
      if (b != 1) return b;
      return attr_true(expr, s.is_Atom);
    }
  }
  return 0;
}

// The attribute as stock's `self.<name>` reads it on an exact SymNode, whose class
// defines none of these names: the instance dict, else the generic lookup (which
// raises stock's AttributeError). New reference.
PyObject* node_attr(PyObject* node, PyObject* name) {
  PyObject* v = instance_attr(node, name);
  if (v != nullptr) {
    Py_INCREF(v);
    return v;
  }
  return PyObject_GetAttr(node, name);
}

// Stock's property body on an exact SymNode. New reference.
PyObject* compute(PyObject* node, ExprRule rule) {
  PyObject* expr = node_attr(node, s.expr_attr);
  if (expr == nullptr) return nullptr;
  if (PyLong_Check(expr)) return expr;
  const int c = is_constant(expr, rule);
  if (c != 0) {
    if (c < 0) Py_CLEAR(expr);
    return expr;
  }
  PyObject* env = node_attr(node, s.shape_env);
  if (env == nullptr) {
    Py_DECREF(expr);
    return nullptr;
  }
  if (env == Py_None) {
    Py_DECREF(env);
    Py_DECREF(expr);
    PyErr_SetObject(PyExc_AssertionError, s.no_env);
    return nullptr;
  }
  PyObject* ver = PyObject_GetAttr(env, s.version);
  if (ver == nullptr) {
    Py_DECREF(env);
    Py_DECREF(expr);
    return nullptr;
  }
  PyObject* result = nullptr;
  int zero;
  if (PyLong_CheckExact(ver)) {
    zero = PyLong_AsLongLong(ver) == 0 && !PyErr_Occurred();
    PyErr_Clear(); // (a counter past 64 bits is simply not zero)
  } else {
    PyObject* z = PyLong_FromLong(0);
    zero = z == nullptr ? -1 : PyObject_RichCompareBool(ver, z, Py_EQ);
    Py_XDECREF(z);
  }
  if (zero < 0) goto done;
  if (zero || g_fault > 0) {
    if (!zero) g_fault--;
    Py_INCREF(expr);
    result = expr;
    goto done;
  }
  {
    PyObject* cache = node_attr(node, s.cache);
    if (cache == nullptr) goto done;
    if (cache != Py_None) {
      PyObject* cached_ver = node_attr(node, s.ver);
      if (cached_ver == nullptr) {
        Py_DECREF(cache);
        goto done;
      }
      const int same = PyObject_RichCompareBool(ver, cached_ver, Py_EQ);
      Py_DECREF(cached_ver);
      if (same != 0) {
        if (same > 0) {
          result = cache;
        } else {
          Py_DECREF(cache);
        }
        goto done;
      }
    }
    Py_DECREF(cache);
  }
  result = PyObject_CallMethodOneArg(env, s.replace, expr);
  if (result != nullptr &&
      (PyObject_SetAttr(node, s.ver, ver) < 0 || PyObject_SetAttr(node, s.cache, result) < 0)) {
    Py_CLEAR(result);
  }
done:
  Py_DECREF(ver);
  Py_DECREF(env);
  Py_DECREF(expr);
  return result;
}

struct ExprDescr {
  PyObject_HEAD
  PyObject* stock; // the original property
  ExprRule rule;
};

void expr_descr_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<ExprDescr*>(self)->stock);
  Py_TYPE(self)->tp_free(self);
}

PyObject* expr_descr_get(PyObject* self, PyObject* obj, PyObject* type) {
  auto* d = reinterpret_cast<ExprDescr*>(self);
  if (obj == nullptr || obj == Py_None) {
    // class access: hand out the stock property itself
    Py_INCREF(d->stock);
    return d->stock;
  }
  if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) != g_symnode) {
    g_counts[StockType]++;
    return Py_TYPE(d->stock)->tp_descr_get(d->stock, obj, type);
  }
  PyObject* out = compute(obj, d->rule);
  if (out == nullptr) return nullptr;
  g_counts[Served]++;
  if (g_check != nullptr) {
    PyObject* r = PyObject_CallFunctionObjArgs(g_check, obj, out, nullptr);
    if (r == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(r);
  }
  return out;
}

int expr_descr_set(PyObject* self, PyObject* obj, PyObject* value) {
  PyObject* stock = reinterpret_cast<ExprDescr*>(self)->stock;
  return Py_TYPE(stock)->tp_descr_set(stock, obj, value);
}

PyTypeObject ExprDescrType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool ready() {
  if (ExprDescrType.tp_name != nullptr) return true;
  ExprDescrType.tp_name = "fastfake._C.SymNodeExprDescriptor";
  ExprDescrType.tp_basicsize = sizeof(ExprDescr);
  ExprDescrType.tp_flags = Py_TPFLAGS_DEFAULT;
  ExprDescrType.tp_dealloc = expr_descr_dealloc;
  ExprDescrType.tp_descr_get = expr_descr_get;
  ExprDescrType.tp_descr_set = expr_descr_set;
  ExprDescrType.tp_doc = "C-level SymNode.expr installed by fastfake.";
  if (PyType_Ready(&ExprDescrType) < 0) {
    ExprDescrType.tp_name = nullptr;
    return false;
  }
  return true;
}

} // namespace

int symnode_is_number(PyObject* expr) {
  if (s.is_number == nullptr) s.is_number = PyUnicode_InternFromString("is_number");
  if (s.is_number == nullptr) return -1;
  return is_constant(expr, ExprRule::IsNumber);
}

void symnode_expr_setup(PyObject* symnode_type) {
  if (s.expr_attr == nullptr) {
    s.expr_attr = PyUnicode_InternFromString("_expr");
    s.shape_env = PyUnicode_InternFromString("shape_env");
    s.version = PyUnicode_InternFromString("_replacements_version_counter");
    s.cache = PyUnicode_InternFromString("_expr_cache");
    s.ver = PyUnicode_InternFromString("_expr_ver");
    s.replace = PyUnicode_InternFromString("replace");
    if (s.is_number == nullptr) s.is_number = PyUnicode_InternFromString("is_number");
    s.is_Number = PyUnicode_InternFromString("is_Number");
    s.is_Boolean = PyUnicode_InternFromString("is_Boolean");
    s.is_Atom = PyUnicode_InternFromString("is_Atom");
    s.no_env = PyUnicode_FromString("shape_env is required to access expr");
  }
  Py_INCREF(symnode_type);
  Py_XSETREF(g_symnode, symnode_type);
}

PyObject* symnode_expr_descriptor(PyObject* stock, int rule) {
  if (rule < 1 || rule > 3) {
    PyErr_SetString(PyExc_ValueError, "unknown SymNode.expr rule");
    return nullptr;
  }
  if (!ready()) return nullptr;
  auto* self = PyObject_New(ExprDescr, &ExprDescrType);
  if (self == nullptr) return nullptr;
  Py_INCREF(stock);
  self->stock = stock;
  self->rule = static_cast<ExprRule>(rule);
  return reinterpret_cast<PyObject*>(self);
}

void symnode_expr_set_check(PyObject* check) {
  PyObject* c = check == Py_None ? nullptr : check;
  Py_XINCREF(c);
  Py_XSETREF(g_check, c);
}

size_t symnode_expr_memo_size() {
  return g_is_number.size();
}

size_t symnode_expr_set_max(size_t n) {
  const size_t old = g_max_entries;
  g_max_entries = n == 0 ? 1 : n;
  return old;
}

void symnode_expr_clear() {
  clear_memo();
}

std::map<std::string, uint64_t> symnode_expr_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void symnode_expr_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void symnode_expr_inject_fault(int n) {
  g_fault = n;
}

} // namespace fastfake
