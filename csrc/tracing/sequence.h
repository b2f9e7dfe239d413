// A new tuple or list of n items made one after the other: what the tracing
// layers' C paths build wherever stock's pytree code would rebuild a tuple or a
// list (csrc/tracing/pytree.cpp, csrc/tracing/functional_dispatch.cpp).
#pragma once

#include <Python.h>

namespace fastfake {

// A new tuple (tuple) or list of `n` items, item(i) giving the new reference of
// the i-th, in order; nullptr where item gives nullptr (whatever error it set
// stays set) or the container cannot be made.
template <typename F>
PyObject* new_sequence(bool tuple, Py_ssize_t n, F&& item) {
  PyObject* out = tuple ? PyTuple_New(n) : PyList_New(n);
  if (out == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = item(i);
    if (v == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    if (tuple) {
      PyTuple_SET_ITEM(out, i, v);
    } else {
      PyList_SET_ITEM(out, i, v);
    }
  }
  return out;
}

} // namespace fastfake
