// Names of a module bound to the objects they had at setup, and the objects a
// setup call's dict hands over. A C path that stands
// for stock code calling module-level names serves a call only while each of them
// is still bound to the object it was proven with (a patched function sends the
// calls to stock, which calls the patch).
#pragma once

#include <Python.h>

#include "common/refs.h"

#include <utility>
#include <vector>

namespace fastfake {

struct NameBindings {
  std::vector<std::pair<PyObject*, PyObject*>> pairs; // (name, value), strong

  // Keep every (name, value) of `names` (a dict), dropping what was kept before;
  // false (nothing kept) if it is not a dict.
  bool bind(PyObject* names) {
    for (auto& [k, v] : pairs) {
      Py_DECREF(k);
      Py_DECREF(v);
    }
    pairs.clear();
    if (names == nullptr || !PyDict_Check(names)) return false;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(names, &pos, &k, &v)) {
      Py_INCREF(k);
      Py_INCREF(v);
      pairs.emplace_back(k, v);
    }
    return true;
  }

  // Each name is still bound to its object in `dict` (a module's dict).
  bool hold(PyObject* dict) const {
    for (const auto& [name, value] : pairs) {
      if (PyDict_GetItemWithError(dict, name) != value) {
        PyErr_Clear();
        return false;
      }
    }
    return true;
  }
};

// Keep a new reference to `objects[key]` (a setup call's dict) in `slot`; false
// where the key is missing or None.
inline bool take_object(PyObject* objects, const char* key, PyObject*& slot) {
  PyObject* v = PyDict_GetItemString(objects, key);
  if (v == nullptr) return false;
  hold_ref(slot, v);
  return slot != nullptr;
}

} // namespace fastfake
