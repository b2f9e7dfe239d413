// Code objects read for the self-test store's key (fastfake/core/selftest_store.py:
// module_digest, _stable) and for the proven-source digests' code spans
// (fastfake/common/compat.py). tests/test_selftest_store.py keeps the same stream
// written in Python as the reference. install() reads the code of 16 torch
// modules and fastfake's own at every start: one stream hashed once per module,
// no Python object per function, constant or code object.
#include "common/code_digest.h"
#include "common/compat.h"
#include "common/refs.h"

#include <algorithm>
#include <string>
#include <vector>

namespace fastfake {

namespace {

// <tag><length>:<bytes>
void put(std::string& out, char tag, const char* data, size_t n) {
  out += tag;
  out += std::to_string(n);
  out += ':';
  out.append(data, n);
}

// a str's UTF-8 (strict, as str.encode() is)
bool put_str(std::string& out, char tag, PyObject* s) {
  Py_ssize_t n = 0;
  const char* c = PyUnicode_AsUTF8AndSize(s, &n);
  if (c == nullptr) return false;
  put(out, tag, c, static_cast<size_t>(n));
  return true;
}

// f"{o}" (format(o, ""))
bool put_format(std::string& out, PyObject* o) {
  OwnedRef s(PyObject_Format(o, nullptr));
  return s && put_str(out, 's', s.p);
}

// repr(o)
bool put_repr(std::string& out, PyObject* o) {
  OwnedRef s(PyObject_Repr(o));
  return s && put_str(out, 'r', s.p);
}

// getattr(o, name, None): a new reference (None when o has no such attribute),
// nullptr with the error set for any other error.
PyObject* getattr_or_none(PyObject* o, const char* name) {
  PyObject* v = PyObject_GetAttrString(o, name);
  if (v == nullptr && PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return v;
}

// f"{type(o).__module__}", f"{type(o).__qualname__}"
bool put_type_name(std::string& out, PyObject* o, bool with_module) {
  PyObject* t = reinterpret_cast<PyObject*>(Py_TYPE(o));
  if (with_module) {
    OwnedRef m(PyObject_GetAttrString(t, "__module__"));
    if (!m || !put_format(out, m.p)) return false;
  }
  OwnedRef q(PyObject_GetAttrString(t, "__qualname__"));
  return q && put_format(out, q.p);
}

bool is_scalar(PyObject* v) {
  return v == Py_None || PyLong_Check(v) || PyFloat_Check(v) || PyUnicode_Check(v);
}

// selftest_store._stable, as a stream: None "N"; True / False "T" / "F"; a str
// "s" and its UTF-8; bytes "b" and themselves; any other int, float, complex
// (and subclasses of str or bytes) "r" and their repr; a code object "c(" ... ")";
// a tuple or list "(" items ")"; a set "{" items, sorted, "}"; deeper than four
// levels "t" and the type's name; anything else "o", its type's module and name.
bool stable(std::string& out, PyObject* v, int depth);

// a code object's tuple of names: "(" its strs ")", at any depth
bool names(std::string& out, PyObject* t) {
  if (!PyTuple_Check(t)) {
    PyErr_SetString(PyExc_TypeError, "a code object's names are not a tuple");
    return false;
  }
  out += '(';
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); ++i) {
    if (!stable(out, PyTuple_GET_ITEM(t, i), 0)) return false;
  }
  out += ')';
  return true;
}

// code objects: "c(", the bytecode ("b"), co_filename, co_firstlineno ("i" and
// its digits, ";"), co_names, co_varnames, co_consts (its items one level
// deeper), ")"
bool code(std::string& out, PyObject* c, int depth) {
  auto* co = reinterpret_cast<PyCodeObject*>(c);
  OwnedRef bytecode(compat::code_bytes(c));
  if (!bytecode) return false;
  if (!PyBytes_Check(bytecode.p)) {
    PyErr_SetString(PyExc_TypeError, "co_code is not bytes");
    return false;
  }
  out += "c(";
  put(out, 'b', PyBytes_AS_STRING(bytecode.p), static_cast<size_t>(PyBytes_GET_SIZE(bytecode.p)));
  if (!stable(out, co->co_filename, depth)) return false;
  out += 'i';
  out += std::to_string(co->co_firstlineno);
  out += ';';
  if (!names(out, co->co_names)) return false;
  OwnedRef varnames(compat::code_varnames(c));
  if (!varnames || !names(out, varnames.p)) return false;
  if (!stable(out, co->co_consts, depth)) return false;
  out += ')';
  return true;
}

bool stable_body(std::string& out, PyObject* v, int depth);

// (Python's recursion limit, not the C stack, bounds what a cycle could make of
// the walk: a property that is its own getter, say)
struct RecursionGuard {
  bool entered;
  RecursionGuard() : entered(Py_EnterRecursiveCall(" in fastfake's code digest") == 0) {}
  ~RecursionGuard() {
    if (entered) Py_LeaveRecursiveCall();
  }
};

bool stable(std::string& out, PyObject* v, int depth) {
  RecursionGuard guard;
  return guard.entered && stable_body(out, v, depth);
}

bool stable_body(std::string& out, PyObject* v, int depth) {
  if (v == Py_None) {
    out += 'N';
    return true;
  }
  if (v == Py_True || v == Py_False) {
    out += v == Py_True ? 'T' : 'F';
    return true;
  }
  if (PyUnicode_CheckExact(v)) return put_str(out, 's', v);
  if (PyBytes_CheckExact(v)) {
    put(out, 'b', PyBytes_AS_STRING(v), static_cast<size_t>(PyBytes_GET_SIZE(v)));
    return true;
  }
  if (PyLong_Check(v) || PyFloat_Check(v) || PyUnicode_Check(v) || PyBytes_Check(v) || PyComplex_Check(v)) {
    return put_repr(out, v);
  }
  if (depth > 4) {
    out += 't';
    return put_type_name(out, v, false);
  }
  if (PyCode_Check(v)) return code(out, v, depth + 1);
  if (PyTuple_Check(v) || PyList_Check(v)) {
    OwnedRef seq(PySequence_Fast(v, "not a sequence"));
    if (!seq) return false;
    out += '(';
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.p);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!stable(out, PySequence_Fast_GET_ITEM(seq.p, i), depth + 1)) return false;
    }
    out += ')';
    return true;
  }
  if (PyAnySet_Check(v)) {
    std::vector<std::string> parts;
    OwnedRef it(PyObject_GetIter(v));
    if (!it) return false;
    while (PyObject* x = PyIter_Next(it.p)) {
      OwnedRef item(x);
      std::string s;
      if (!stable(s, item.p, depth + 1)) return false;
      parts.push_back(std::move(s));
    }
    if (PyErr_Occurred()) return false;
    std::sort(parts.begin(), parts.end());  // bytewise
    out += '{';
    for (const auto& p : parts) out += p;
    out += '}';
    return true;
  }
  out += 'o';
  return put_type_name(out, v, true);
}

// selftest_store's callable record: "F" name module qualname code defaults for a
// function (anything with a __code__ that is a code object), "B" name module
// qualname type-module type-name for other callables; staticmethod and
// classmethod by their __func__, a property by its fget / fset / fdel as
// "<name>.get" / ".set" / ".del".
bool callable_body(std::string& out, const std::string& name, PyObject* f_in);

bool callable(std::string& out, const std::string& name, PyObject* f_in) {
  RecursionGuard guard;
  return guard.entered && callable_body(out, name, f_in);
}

bool callable_body(std::string& out, const std::string& name, PyObject* f_in) {
  OwnedRef held;
  PyObject* f = f_in;
  if (PyObject_TypeCheck(f, &PyStaticMethod_Type) || PyObject_TypeCheck(f, &PyClassMethod_Type)) {
    held.p = PyObject_GetAttrString(f, "__func__");
    if (!held) return false;
    f = held.p;
  }
  if (PyObject_TypeCheck(f, &PyProperty_Type)) {
    static const char* const parts[3][2] = {{"get", "fget"}, {"set", "fset"}, {"del", "fdel"}};
    PyObject* got[3] = {nullptr, nullptr, nullptr};
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
      got[i] = PyObject_GetAttrString(f, parts[i][1]);
      ok = got[i] != nullptr;
    }
    for (int i = 0; i < 3 && ok; ++i) {
      if (got[i] != Py_None) ok = callable(out, name + "." + parts[i][0], got[i]);
    }
    for (auto* g : got) Py_XDECREF(g);
    return ok;
  }
  OwnedRef code_obj(getattr_or_none(f, "__code__"));
  if (!code_obj) return false;
  OwnedRef module(getattr_or_none(f, "__module__"));
  if (!module) return false;
  OwnedRef qualname(getattr_or_none(f, "__qualname__"));
  if (!qualname) return false;
  bool is_code = PyCode_Check(code_obj.p);
  out += is_code ? 'F' : 'B';
  put(out, 's', name.data(), name.size());
  if (!put_format(out, module.p) || !put_format(out, qualname.p)) return false;
  if (is_code) {
    if (!code(out, code_obj.p, 0)) return false;
    OwnedRef defaults(getattr_or_none(f, "__defaults__"));
    return defaults && stable(out, defaults.p, 0);
  }
  return put_type_name(out, f, true);
}

// sorted(mapping.items())
PyObject* sorted_items(PyObject* mapping) {
  PyObject* items = PyMapping_Items(mapping);
  if (items == nullptr) return nullptr;
  if (!PyList_Check(items)) {
    OwnedRef seq(items);
    items = PySequence_List(seq.p);
    if (items == nullptr) return nullptr;
  }
  if (PyList_Sort(items) != 0) {
    Py_DECREF(items);
    return nullptr;
  }
  return items;
}

bool in_volatile(PyObject* volatile_, const std::string& key, bool& found) {
  OwnedRef s(PyUnicode_FromStringAndSize(key.data(), static_cast<Py_ssize_t>(key.size())));
  if (!s) return false;
  int r = PySequence_Contains(volatile_, s.p);
  if (r < 0) return false;
  found = r == 1;
  return true;
}

// f"{key}" as UTF-8
bool key_text(PyObject* key, std::string& out) {
  OwnedRef s(PyObject_Format(key, nullptr));
  if (!s) return false;
  Py_ssize_t n = 0;
  const char* c = PyUnicode_AsUTF8AndSize(s.p, &n);
  if (c == nullptr) return false;
  out.append(c, static_cast<size_t>(n));
  return true;
}

// "V" name repr, unless the name is volatile
bool scalar(std::string& out, const std::string& name, PyObject* v, PyObject* volatile_) {
  bool found = false;
  if (!in_volatile(volatile_, name, found)) return false;
  if (found) return true;
  out += 'V';
  put(out, 's', name.data(), name.size());
  return put_repr(out, v);
}

bool walk_module(std::string& out, PyObject* module, PyObject* volatile_) {
  OwnedRef modname(PyObject_GetAttrString(module, "__name__"));
  if (!modname) return false;
  OwnedRef md(PyObject_GetAttrString(module, "__dict__"));  // vars(module)
  if (!md) return false;
  OwnedRef items(sorted_items(md.p));
  if (!items) return false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.p); ++i) {
    PyObject* pair = PyList_GET_ITEM(items.p, i);
    PyObject* v = PyTuple_GET_ITEM(pair, 1);
    std::string name;
    if (!key_text(PyTuple_GET_ITEM(pair, 0), name)) return false;
    if (PyType_Check(v)) {
      OwnedRef vmod(PyObject_GetAttrString(v, "__module__"));
      if (!vmod) return false;
      int differs = PyObject_RichCompareBool(vmod.p, modname.p, Py_NE);
      if (differs < 0) return false;
      if (differs) {  // "C" name module qualname: a class from elsewhere
        out += 'C';
        put(out, 's', name.data(), name.size());
        OwnedRef q(PyObject_GetAttrString(v, "__qualname__"));
        if (!q || !put_format(out, vmod.p) || !put_format(out, q.p)) return false;
        continue;
      }
      // "K" name [its mro's qualnames], then its callables and scalars
      OwnedRef mro(PyObject_GetAttrString(v, "__mro__"));
      OwnedRef mro_seq(mro ? PySequence_Fast(mro.p, "__mro__ is not a sequence") : nullptr);
      if (!mro_seq) return false;
      out += 'K';
      put(out, 's', name.data(), name.size());
      out += '(';
      for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(mro_seq.p); ++j) {
        OwnedRef q(PyObject_GetAttrString(PySequence_Fast_GET_ITEM(mro_seq.p, j), "__qualname__"));
        if (!q || !put_format(out, q.p)) return false;
      }
      out += ')';
      OwnedRef cd(PyObject_GetAttrString(v, "__dict__"));  // vars(cls)
      OwnedRef attrs(cd ? sorted_items(cd.p) : nullptr);
      if (!attrs) return false;
      for (Py_ssize_t j = 0; j < PyList_GET_SIZE(attrs.p); ++j) {
        PyObject* apair = PyList_GET_ITEM(attrs.p, j);
        PyObject* a = PyTuple_GET_ITEM(apair, 1);
        std::string full = name + ".";
        if (!key_text(PyTuple_GET_ITEM(apair, 0), full)) return false;
        if (PyCallable_Check(a) || PyObject_TypeCheck(a, &PyStaticMethod_Type) ||
            PyObject_TypeCheck(a, &PyClassMethod_Type) || PyObject_TypeCheck(a, &PyProperty_Type)) {
          if (!callable(out, full, a)) return false;
        } else if (is_scalar(a)) {
          if (!scalar(out, full, a, volatile_)) return false;
        }
      }
    } else if (PyModule_Check(v)) {
      continue;
    } else if (PyCallable_Check(v)) {
      if (!callable(out, name, v)) return false;
    } else if (is_scalar(v) && name.rfind("__", 0) != 0) {
      if (!scalar(out, name, v, volatile_)) return false;
    }
  }
  return true;
}

PyObject* to_bytes(const std::string& s) {
  return PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

} // namespace

PyObject* module_code_stream(PyObject* module, PyObject* volatile_) {
  std::string out;
  if (!walk_module(out, module, volatile_)) return nullptr;
  return to_bytes(out);
}

PyObject* stable_stream(PyObject* v) {
  std::string out;
  if (!stable(out, v, 0)) return nullptr;
  return to_bytes(out);
}

PyObject* last_code_line(PyObject* code_obj) {
  if (!PyCode_Check(code_obj)) {
    PyErr_SetString(PyExc_TypeError, "last_code_line takes a code object");
    return nullptr;
  }
  auto* co = reinterpret_cast<PyCodeObject*>(code_obj);
  long last = co->co_firstlineno;
  OwnedRef positions(PyObject_CallMethod(code_obj, "co_positions", nullptr));
  OwnedRef it(positions ? PyObject_GetIter(positions.p) : nullptr);
  if (!it) return nullptr;
  while (PyObject* x = PyIter_Next(it.p)) {
    OwnedRef item(x);
    if (!PyTuple_Check(item.p) || PyTuple_GET_SIZE(item.p) < 2) {
      PyErr_SetString(PyExc_TypeError, "co_positions() gave no (start, end, ...) tuple");
      return nullptr;
    }
    PyObject* end = PyTuple_GET_ITEM(item.p, 1);
    if (end == Py_None) continue;
    long e = PyLong_AsLong(end);
    if (e == -1 && PyErr_Occurred()) return nullptr;
    if (e > last) last = e;
  }
  if (PyErr_Occurred()) return nullptr;
  PyObject* consts = co->co_consts;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i) {
    PyObject* c = PyTuple_GET_ITEM(consts, i);
    if (!PyCode_Check(c)) continue;
    OwnedRef inner(last_code_line(c));
    if (!inner) return nullptr;
    long e = PyLong_AsLong(inner.p);
    if (e > last) last = e;
  }
  return PyLong_FromLong(last);
}

} // namespace fastfake
