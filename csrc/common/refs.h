// Strong references held from C++: one kept in a slot (a setup call's arguments),
// one owned for a scope.
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

// An owned reference released at scope exit: OwnedRef(o) takes over a new
// reference, OwnedRef(o, true) takes one of its own to a borrowed object.
struct OwnedRef {
  PyObject* p = nullptr;
  OwnedRef() = default;
  explicit OwnedRef(PyObject* o, bool borrowed = false) : p(o) {
    if (borrowed) Py_XINCREF(p);
  }
  OwnedRef(const OwnedRef&) = delete;
  OwnedRef& operator=(const OwnedRef&) = delete;
  ~OwnedRef() {
    Py_XDECREF(p);
  }
  PyObject* get() const {
    return p;
  }
  // Take over the new reference `o`, releasing the one held.
  void reset(PyObject* o) {
    Py_XSETREF(p, o);
  }
  explicit operator bool() const {
    return p != nullptr;
  }
};

} // namespace fastfake
