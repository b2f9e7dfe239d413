// Reads of torch's configuration modules in C.
//
// `torch._dynamo.config.x` (and the functorch, inductor, fx ... configs) is a
// module whose class (ConfigModule, torch/utils/_config_module.py) defines
// `__getattr__`: a read first runs module.__getattribute__, which formats and
// raises an AttributeError, and then stock's Python `__getattr__`, which looks
// the name up in the module's `_config` table and answers from the entry
// (~1.1 us a read). Dynamo reads its config at every bytecode instruction it
// traces: 29,000-47,000 reads in a first compile of a zoo model.
//
// This is ConfigModule.__getattribute__ while fastfake is installed. A name the
// class or the module's dict has, or a module with a PEP 562 `__getattr__`, goes
// to module.__getattribute__ exactly as before. Otherwise, for an entry of
// `_config` (an exact _ConfigEntry) that is not hidden, not deprecated and not an
// alias, it answers what stock's `__getattr__` returns, reading the same fields
// in the same order: `env_value_force`, the `user_override` ContextVar of the
// current context, `env_value_default`, and `default` when that is of an immutable
// type (int, float, bool, None, str, tuple: isinstance, as stock) and no
// justknob is set. Anything else (a justknob, a mutable default stock copies, a
// missing or hidden entry, an alias, a deprecation warning due, a subclass that
// replaced one of the functions stock's read goes through) goes to
// module.__getattribute__ and then stock's `__getattr__`, as without fastfake.
// Which releases: fastfake/tracing/config_attr.py.
#include "tracing/config_attr.h"

#include "common/counts.h"
#include "common/refs.h"

namespace fastfake {

namespace {

struct State {
  PyObject* module_type = nullptr;
  PyObject* entry_type = nullptr;
  PyObject* sentinel = nullptr;
  PyObject* stock_getattr = nullptr;
  PyObject* warn = nullptr;
  PyObject* alias_val = nullptr;
  PyObject* check = nullptr;
  bool on = false;
  int fault = 0;
};
State g;

PyObject* s_config = nullptr;
PyObject* s_module_getattr = nullptr; // "__getattr__" (the class's, and a module's own)
PyObject* s_warn = nullptr;
PyObject* s_alias_val = nullptr;
PyObject* s_hide = nullptr;
PyObject* s_deprecated = nullptr;
PyObject* s_alias = nullptr;
PyObject* s_env_force = nullptr;
PyObject* s_user_override = nullptr;
PyObject* s_env_default = nullptr;
PyObject* s_justknob = nullptr;
PyObject* s_default = nullptr;

enum Count : size_t { Served, Stock, NumCounts };
const char* const kCountNames[NumCounts] = {"served", "stock"};
uint64_t g_counts[NumCounts] = {};

// An attribute of the entry that must be a bool: 1 / 0, -1 with an error.
int truth_of(PyObject* entry, PyObject* name) {
  PyObject* v = PyObject_GetAttr(entry, name);
  if (v == nullptr) return -1;
  const int t = PyObject_IsTrue(v);
  Py_DECREF(v);
  return t;
}

// 1: *out is the entry's value (new reference); 0: stock decides (no error
// set); -1: an error.
int from_entry(PyObject* entry, PyObject** out) {
  int t = truth_of(entry, s_hide);
  if (t != 0) return t < 0 ? -1 : 0;
  t = truth_of(entry, s_deprecated);
  if (t != 0) return t < 0 ? -1 : 0;
  PyObject* v = PyObject_GetAttr(entry, s_alias);
  if (v == nullptr) return -1;
  const bool alias = v != Py_None;
  Py_DECREF(v);
  if (alias) return 0;
  v = PyObject_GetAttr(entry, s_env_force);
  if (v == nullptr) return -1;
  if (v != g.sentinel) {
    *out = v;
    return 1;
  }
  Py_DECREF(v);
  PyObject* var = PyObject_GetAttr(entry, s_user_override);
  if (var == nullptr) return -1;
  if (!PyContextVar_CheckExact(var)) {
    Py_DECREF(var);
    return 0;
  }
  PyObject* got = nullptr;
  const int r = PyContextVar_Get(var, nullptr, &got);
  Py_DECREF(var);
  if (r < 0) return -1;
  if (got == nullptr) return 0; // (no value and no default: stock's .get() raises)
  if (got != g.sentinel) {
    *out = got;
    return 1;
  }
  Py_DECREF(got);
  v = PyObject_GetAttr(entry, s_env_default);
  if (v == nullptr) return -1;
  if (v != g.sentinel) {
    *out = v;
    return 1;
  }
  Py_DECREF(v);
  v = PyObject_GetAttr(entry, s_justknob);
  if (v == nullptr) return -1;
  const bool justknob = v != Py_None;
  Py_DECREF(v);
  if (justknob) return 0;
  v = PyObject_GetAttr(entry, s_default);
  if (v == nullptr) return -1;
  // stock: isinstance(default, (int, float, bool, type(None), str, tuple))
  if (PyLong_Check(v) || PyFloat_Check(v) || v == Py_None || PyUnicode_Check(v) || PyTuple_Check(v)) {
    *out = v;
    return 1;
  }
  Py_DECREF(v);
  return 0;
}

// The served value (new reference), or nullptr: with an error set if reading
// raised, without one if the read is stock's.
PyObject* serve(PyObject* self, PyObject* name) {
  if (!PyUnicode_CheckExact(name)) return nullptr;
  PyTypeObject* tp = Py_TYPE(self);
  if (_PyType_Lookup(tp, name) != nullptr) return nullptr; // the class has it
  if (_PyType_Lookup(tp, s_module_getattr) != g.stock_getattr || _PyType_Lookup(tp, s_warn) != g.warn ||
      _PyType_Lookup(tp, s_alias_val) != g.alias_val || _PyType_Lookup(tp, s_config) != nullptr) {
    return nullptr;
  }
  PyObject* dict = PyModule_GetDict(self); // borrowed
  if (dict == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (PyDict_GetItemWithError(dict, name) != nullptr || PyErr_Occurred()) return nullptr;
  if (PyDict_GetItemWithError(dict, s_module_getattr) != nullptr || PyErr_Occurred()) return nullptr;
  PyObject* config = PyDict_GetItemWithError(dict, s_config);
  if (config == nullptr || !PyDict_CheckExact(config)) return nullptr;
  PyObject* entry = PyDict_GetItemWithError(config, name);
  if (entry == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(entry)) != g.entry_type) return nullptr;
  Py_INCREF(entry);
  PyObject* out = nullptr;
  const int r = from_entry(entry, &out);
  Py_DECREF(entry);
  if (r <= 0) return nullptr;
  return out;
}

PyObject* getattribute(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError, "expected 1 argument, got %zd", nargs);
    return nullptr;
  }
  PyObject* name = args[0];
  if (g.on) {
    PyObject* v = serve(self, name);
    if (v != nullptr) {
      g_counts[Served]++;
      if (g.fault > 0 && PyBool_Check(v)) {
        g.fault--;
        PyObject* flipped = PyBool_FromLong(v == Py_False);
        Py_DECREF(v);
        v = flipped;
      }
      if (g.check != nullptr) {
        PyObject* ok = PyObject_CallFunctionObjArgs(g.check, self, name, v, nullptr);
        if (ok == nullptr) {
          Py_DECREF(v);
          return nullptr;
        }
        Py_DECREF(ok);
      }
      return v;
    }
    if (PyErr_Occurred()) return nullptr;
    g_counts[Stock]++;
  }
  // module.__getattribute__ (an AttributeError from it sends the read on to
  // stock's __getattr__, as without fastfake)
  return PyModule_Type.tp_getattro(self, name);
}

PyMethodDef g_def = {
    "__getattribute__",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(getattribute)),
    METH_FASTCALL,
    "ConfigModule attribute reads in C by fastfake (stock's __getattr__ answers for plain entries)."};

} // namespace

void config_attr_setup(PyObject* module_type, PyObject* entry_type, PyObject* sentinel, PyObject* stock_getattr,
                       PyObject* warn, PyObject* alias_val) {
  if (s_config == nullptr) {
    s_config = PyUnicode_InternFromString("_config");
    s_module_getattr = PyUnicode_InternFromString("__getattr__");
    s_warn = PyUnicode_InternFromString("_warn_if_deprecated");
    s_alias_val = PyUnicode_InternFromString("_get_alias_val");
    s_hide = PyUnicode_InternFromString("hide");
    s_deprecated = PyUnicode_InternFromString("deprecated");
    s_alias = PyUnicode_InternFromString("alias");
    s_env_force = PyUnicode_InternFromString("env_value_force");
    s_user_override = PyUnicode_InternFromString("user_override");
    s_env_default = PyUnicode_InternFromString("env_value_default");
    s_justknob = PyUnicode_InternFromString("justknob");
    s_default = PyUnicode_InternFromString("default");
  }
  hold_ref(g.module_type, module_type);
  hold_ref(g.entry_type, entry_type);
  hold_ref(g.sentinel, sentinel);
  hold_ref(g.stock_getattr, stock_getattr);
  hold_ref(g.warn, warn);
  hold_ref(g.alias_val, alias_val);
}

PyObject* config_attr_descriptor() {
  if (g.module_type == nullptr || !PyType_Check(g.module_type)) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: config_attr_descriptor() before config_attr_setup()");
    return nullptr;
  }
  return PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(g.module_type), &g_def);
}

void config_attr_enable(bool on) {
  g.on = on;
}

void config_attr_set_check(PyObject* check) {
  hold_ref(g.check, check);
}

std::map<std::string, uint64_t> config_attr_counts() {
  return counts_as_map(kCountNames, g_counts);
}

void config_attr_set_counts(const std::map<std::string, uint64_t>& counts) {
  counts_from_map(kCountNames, g_counts, counts);
}

void config_attr_inject_fault(int n) {
  g.fault = n;
}

} // namespace fastfake
