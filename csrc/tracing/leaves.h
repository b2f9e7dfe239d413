// The argument leaves the C tracing paths tell apart (csrc/tracing/*.cpp): a type
// among a tuple of types, a SymInt / SymFloat / SymBool, and the plain leaves no
// opaque object can be. Light on purpose: no dispatcher headers.
#pragma once

#include <Python.h>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>

namespace fastfake {

// `o` is one of the tuple's items (by identity).
inline bool one_of(PyObject* items, PyObject* o) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); ++i) {
    if (PyTuple_GET_ITEM(items, i) == o) return true;
  }
  return false;
}

// `x`'s exact type is one of `sym_types` (SymInt, SymFloat, SymBool).
inline bool exact_sym(PyObject* x, PyObject* sym_types) {
  return one_of(sym_types, reinterpret_cast<PyObject*>(Py_TYPE(x)));
}

// A pytree leaf that is no container and no tensor, of a type no opaque object
// can have: None, a bool, int, float, complex or str, an instance of one of
// `sym_types` (SymInt, SymFloat, SymBool), a dtype, device, layout or memory format.
inline bool plain_leaf(PyObject* x, PyObject* sym_types) {
  return x == Py_None || PyBool_Check(x) || PyLong_CheckExact(x) || PyFloat_CheckExact(x) ||
      PyComplex_CheckExact(x) || PyUnicode_CheckExact(x) || exact_sym(x, sym_types) || THPDtype_Check(x) ||
      THPDevice_Check(x) || THPLayout_Check(x) || THPMemoryFormat_Check(x);
}

} // namespace fastfake
