// Stock's stored keys as templates for other ShapeEnvs (the portable records'
// keys, csrc/cache/portable_fast.cpp): parsed once where the record is learned,
// built again per serving call with that call's argument SymNodes, or new
// SymNodes with the recorded values -- made here as
// `_DeconstructedSymNode.extract` makes them where that is proven
// (fastfake.common.compat.stub_extract).
#include "cache/portable_fast_internal.h"

namespace fastfake {
namespace cache_detail {

namespace {
int g_stub_fault = 0; // testing: stub SymNodes made in C++ with the other optimized-summation flag

// Whether a key item is or holds a SymInt or SymNode (which would tie the record
// to its ShapeEnv).
bool holds_sym(PyObject* v, int depth) {
  if (PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(g_py.symint_type)) ||
      Py_TYPE(v) == reinterpret_cast<PyTypeObject*>(g_py.symnode_type)) {
    return true;
  }
  if (PyTuple_Check(v) || PyList_Check(v)) {
    if (depth > 8) return true;
    PyObject* fast = PySequence_Fast(v, "");
    if (fast == nullptr) {
      PyErr_Clear();
      return true;
    }
    bool found = false;
    for (Py_ssize_t i = 0; !found && i < PySequence_Fast_GET_SIZE(fast); ++i) {
      found = holds_sym(PySequence_Fast_GET_ITEM(fast, i), depth + 1);
    }
    Py_DECREF(fast);
    return found;
  }
  return false;
}

// A stub's deconstructed node as a recipe value: the arguments `extract` passes
// SymNode's constructor (optimized_summation left at its default, False). Left
// unset (no error) where `extract` is not proven.
bool stub_value(KeyTemplate::Stub& s) {
  if (g_pf.extract == nullptr) return true;
  static const char* const names[5] = {"_expr", "pytype", "_hint", "constant", "fx_node"};
  PyObject* f = PyTuple_New(6);
  if (f == nullptr) return false;
  for (int i = 0; i < 5; ++i) {
    PyObject* v = PyObject_GetAttrString(s.dnode, names[i]);
    if (v == nullptr) {
      Py_DECREF(f);
      return false;
    }
    PyTuple_SET_ITEM(f, i, v);
  }
  PyTuple_SET_ITEM(f, 5, Py_NewRef(Py_False));
  s.val.kind = SymVal::New;
  s.val.fields = f;
  return true;
}

// Whether a stub's SymNode may be made here as `extract` makes it: proven, and
// neither the method nor the module's `SymNode` replaced since.
bool extract_here(const KeyTemplate::Stub& s) {
  if (g_pf.extract == nullptr || s.val.fields == nullptr) return false;
  PyObject* m = PyDict_GetItemWithError(Py_TYPE(s.dnode)->tp_dict, g_pf.s_extract);
  PyObject* cls = m == g_pf.extract ? PyDict_GetItemWithError(g_pf.extract_globals, g_pf.s_symnode) : nullptr;
  if (cls != g_py.symnode_type) {
    PyErr_Clear();
    return false;
  }
  return true;
}

} // namespace

bool parse_template(const KeyCtx& ctx, PyObject* key, KeyTemplate& t, bool own) {
  if (Py_TYPE(key) != g_pf.key) return false;
  PyObject* items = get_slot(key, g_pf.key_key);
  PyObject* hash = get_slot(key, g_pf.key_hash);
  if (items == nullptr || !PyTuple_CheckExact(items) || hash == nullptr || !PyLong_CheckExact(hash)) {
    return false;
  }
  t.hash_value = PyLong_AsSsize_t(hash);
  if (t.hash_value == -1 && PyErr_Occurred()) return false;
  t.hash = Py_NewRef(hash);
  const Py_ssize_t n = PyTuple_GET_SIZE(items);
  t.items = PyTuple_New(n);
  if (t.items == nullptr) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = PyTuple_GET_ITEM(items, i);
    if (Py_TYPE(v) == g_pf.stub) {
      PyObject* val = get_slot(v, g_pf.stub_value);
      if (val == nullptr) return false;
      if (Py_TYPE(val) == g_pf.dst) {
        PyObject* ty = get_slot(val, g_pf.dst_ty);
        PyObject* node = get_slot(val, g_pf.dst_node);
        if (ty == nullptr || node == nullptr) return false;
        KeyTemplate::Stub s;
        s.pos = i;
        if (Py_TYPE(node) == reinterpret_cast<PyTypeObject*>(g_py.symnode_type)) {
          for (size_t j = 0; j < ctx.nodes.size(); ++j) {
            if (ctx.nodes[j] == node) {
              s.slot = static_cast<int>(j);
              break;
            }
          }
          if (s.slot < 0) {
            // a SymNode stock's kernel made: a new one with its value where served
            // (the call's own key stubs only argument SymNodes)
            if (own) return false;
            s.dnode = PyObject_CallOneArg(g_pf.from_node, node);
            if (s.dnode == nullptr) return false;
            if (!stub_value(s)) return false;
          }
        } else {
          return false;
        }
        s.ty = Py_NewRef(ty);
        t.stubs.push_back(s);
        PyTuple_SET_ITEM(t.items, i, Py_NewRef(Py_None));
        continue;
      }
      // (a back-reference inside a stub is kept; a stub of a SymInt not stripped,
      // or of anything else, leaves the record to Python)
      if (holds_sym(val, 0)) return false;
    }
    if (holds_sym(v, 0)) return false;
    PyTuple_SET_ITEM(t.items, i, Py_NewRef(v));
  }
  return true;
}

// The key built for this ShapeEnv (new reference), or nullptr with an error.
PyObject* instantiate(const KeyCtx& ctx, const KeyTemplate& t) {
  const Py_ssize_t n = PyTuple_GET_SIZE(t.items);
  PyObject* tup = PyTuple_New(n);
  if (tup == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyTuple_SET_ITEM(tup, i, Py_NewRef(PyTuple_GET_ITEM(t.items, i)));
  }
  for (const auto& s : t.stubs) {
    PyObject* node = nullptr;
    if (s.slot >= 0) {
      if (static_cast<size_t>(s.slot) >= ctx.nodes.size()) {
        PyErr_SetString(PyExc_RuntimeError, "fastfake: key template slot out of range");
        Py_DECREF(tup);
        return nullptr;
      }
      node = Py_NewRef(ctx.nodes[static_cast<size_t>(s.slot)]);
    } else if (extract_here(s)) {
      node = new_py_node(ctx, s.val); // (what extract builds, without its Python call)
      if (node != nullptr && g_stub_fault > 0) {
        --g_stub_fault;
        if (PyObject_SetAttrString(node, "_optimized_summation", Py_True) < 0) PyErr_Clear();
      }
    } else {
      node = PyObject_CallMethodOneArg(s.dnode, g_pf.s_extract, ctx.shape_env);
    }
    PyObject* dst = node != nullptr ? alloc(g_pf.dst) : nullptr;
    PyObject* stub = dst != nullptr ? alloc(g_pf.stub) : nullptr;
    if (stub == nullptr) {
      Py_XDECREF(dst);
      Py_XDECREF(node);
      Py_DECREF(tup);
      return nullptr;
    }
    set_slot(dst, g_pf.dst_ty, s.ty);
    set_slot(dst, g_pf.dst_node, node);
    Py_DECREF(node);
    set_slot(stub, g_pf.stub_value, dst);
    Py_DECREF(dst);
    Py_SETREF(PyTuple_GET_ITEM(tup, s.pos), stub);
  }
  PyObject* key = alloc(g_pf.key);
  if (key == nullptr) {
    Py_DECREF(tup);
    return nullptr;
  }
  set_slot(key, g_pf.key_key, tup);
  Py_DECREF(tup);
  set_slot(key, g_pf.key_hash, t.hash);
  return key;
}

void KeyTemplate::release() {
  Py_CLEAR(items);
  Py_CLEAR(hash);
  for (auto& s : stubs) {
    Py_CLEAR(s.ty);
    Py_CLEAR(s.dnode);
    Py_CLEAR(s.val.fields);
    Py_CLEAR(s.val.proto);
  }
  stubs.clear();
}

} // namespace cache_detail

void portable_fast_set_stub_extract(PyObject* fn) {
  using namespace cache_detail;
  if (g_pf.s_symnode == nullptr) g_pf.s_symnode = PyUnicode_InternFromString("SymNode");
  PyObject* globals = fn != nullptr && PyFunction_Check(fn) ? PyFunction_GET_GLOBALS(fn) : nullptr;
  Py_XINCREF(globals);
  Py_XSETREF(g_pf.extract_globals, globals);
  Py_XSETREF(g_pf.extract, globals != nullptr ? Py_NewRef(fn) : nullptr);
}

void portable_fast_inject_stub_fault(int n) {
  cache_detail::g_stub_fault = n;
}

} // namespace fastfake
