// `logger.debug(...)` would do nothing: what `logging.Logger.isEnabledFor(DEBUG)`
// answers from the logger's own fields, read without calling it (an exact
// logging.Logger that is disabled, or whose level cache holds False for DEBUG).
// False where that cannot be told so (then the caller calls `debug` itself). The
// stdlib functions it stands for are in the digests of the C paths using it
// (fastfake/common/stock_sources.py). Never leaves a Python error set.
#pragma once

#include <Python.h>

namespace fastfake {

inline bool logger_debug_off(PyObject* logger, PyObject* logger_type) {
  static PyObject* disabled_name = PyUnicode_InternFromString("disabled");
  static PyObject* cache_name = PyUnicode_InternFromString("_cache");
  static PyObject* debug_level = PyLong_FromLong(10);
  if (logger_type == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(logger)) != logger_type) return false;
  PyObject** dictp = _PyObject_GetDictPtr(logger);
  PyObject* d = dictp ? *dictp : nullptr;
  if (d == nullptr || !PyDict_CheckExact(d)) return false;
  PyObject* disabled = PyDict_GetItemWithError(d, disabled_name);
  if (disabled == Py_True) return true;
  bool off = false;
  if (disabled == Py_False) {
    PyObject* cache = PyDict_GetItemWithError(d, cache_name);
    if (cache != nullptr && PyDict_CheckExact(cache)) off = PyDict_GetItemWithError(cache, debug_level) == Py_False;
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return off;
}

} // namespace fastfake
