// Calls handed to stock, per overload: what fastfake.stock_report() shows, so the
// ops a trace still pays stock for can be read without a spy on stock's method.
#include "stock/calls.h"
#include "common/fastfake.h"

namespace fastfake {

PyObject* call_stock_dispatch(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs) {
  PyObject* argv[5] = {mode, func, types, args, kwargs ? kwargs : Py_None};
  bump(DispatchStock);
  stock_call_begin(func);
  PyObject* r = PyObject_Vectorcall(g_py.stock_torch_dispatch, argv, kwargs ? 5 : 4, nullptr);
  stock_call_end();
  return r;
}

namespace {

std::map<std::string, std::pair<uint64_t, uint64_t>> g_calls;
size_t g_max_names = 4096;
thread_local int g_depth = 0;

std::string name_of(PyObject* func) {
  if (PyErr_Occurred()) return "other";
  PyObject* s = PyObject_Str(func);
  if (s == nullptr) {
    PyErr_Clear();
    return "other";
  }
  Py_ssize_t n = 0;
  const char* c = PyUnicode_AsUTF8AndSize(s, &n);
  std::string out = c != nullptr ? std::string(c, static_cast<size_t>(n)) : "other";
  if (c == nullptr) PyErr_Clear();
  Py_DECREF(s);
  return out;
}

} // namespace

void stock_call_begin(PyObject* func) {
  std::string name = name_of(func);
  auto it = g_calls.find(name);
  if (it == g_calls.end()) {
    if (g_calls.size() >= g_max_names) name = "other";
    it = g_calls.try_emplace(name, 0, 0).first;
  }
  (g_depth == 0 ? it->second.first : it->second.second) += 1;
  ++g_depth;
}

void stock_call_end() {
  --g_depth;
}

std::map<std::string, std::pair<uint64_t, uint64_t>> stock_calls() {
  return g_calls;
}

void stock_calls_set(const std::map<std::string, std::pair<uint64_t, uint64_t>>& calls) {
  g_calls = calls;
}

size_t stock_calls_set_max(size_t n) {
  size_t old = g_max_names;
  g_max_names = n;
  return old;
}

} // namespace fastfake
