// A strong reference kept in a C++ slot (a setup call's arguments).
#pragma once

#include <Python.h>

namespace fastfake {

// Keep a new reference to `o` in `slot` (None keeps nothing), releasing what the
// slot held.
inline void hold_ref(PyObject*& slot, PyObject* o) {
  if (o == Py_None) o = nullptr;
  Py_XINCREF(o);
  Py_XSETREF(slot, o);
}

} // namespace fastfake
