// What the C `__torch_dispatch__` methods of the tracing modes share
// (csrc/tracing/functional_dispatch.cpp, csrc/tracing/proxy_dispatch.cpp): the
// argument leaves they take, an op's facts kept by the op and its dispatcher
// handle from the names they give, stock's method called with the mode in front,
// and a `finally` that keeps the body's error.
#pragma once

#include <Python.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include "tracing/leaves.h"

#include <optional>
#include <unordered_map>
#include <utility>

namespace fastfake {

// The dispatcher's handle of the op the facts helper named (the tuple's items
// `name_at` and `name_at + 1`: schema name, overload name); nullopt where they are
// no strings or name no op. Never leaves a Python error set.
inline std::optional<c10::OperatorHandle> op_handle(PyObject* facts, Py_ssize_t name_at) {
  PyObject* name = PyTuple_GET_ITEM(facts, name_at);
  PyObject* overload = PyTuple_GET_ITEM(facts, name_at + 1);
  const char* n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : nullptr;
  const char* o = n && PyUnicode_Check(overload) ? PyUnicode_AsUTF8(overload) : nullptr;
  std::optional<c10::OperatorHandle> h;
  if (o != nullptr) {
    try {
      h = c10::Dispatcher::singleton().findOp(c10::OperatorName(n, o));
    } catch (const std::exception&) {
      h.reset();
    }
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return h;
}

// Each op's facts, read through the project's Python helper on the op's first call
// and kept by the op (a strong reference) in a table of at most 8,192 ops (a full
// table starts again). `Facts` is default-constructed as "not plain" and has
// `release()`, dropping the references it holds; `parse(tuple, facts)` fills it from
// the helper's tuple. A helper that raises or answers no tuple leaves the op not
// plain, so its calls are stock's, which meets the same error itself. Never nullptr.
template <typename Facts>
class FactsTable {
 public:
  template <typename Parse>
  const Facts* get(PyObject* func, PyObject* helper, Parse&& parse) {
    auto it = map_.find(func);
    if (it != map_.end()) return &it->second;
    if (map_.size() >= kMax) clear();
    Facts f;
    PyObject* r = PyObject_CallOneArg(helper, func);
    if (r == nullptr) {
      PyErr_Clear();
    } else if (PyTuple_CheckExact(r)) {
      parse(r, f);
    }
    Py_XDECREF(r);
    Py_INCREF(func);
    return &map_.emplace(func, std::move(f)).first->second;
  }
  void clear() {
    for (auto& kv : map_) {
      kv.second.release();
      Py_DECREF(kv.first);
    }
    map_.clear();
  }

 private:
  static constexpr size_t kMax = 8192;
  std::unordered_map<PyObject*, Facts> map_;
};

// stock(mode, *args) for a METH_FASTCALL | METH_KEYWORDS method's arguments.
inline PyObject* call_with_mode(PyObject* stock, PyObject* mode, PyObject* const* args, Py_ssize_t nargs,
                                PyObject* kwnames) {
  c10::SmallVector<PyObject*, 8> argv(static_cast<size_t>(nargs + 1 + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0)));
  argv[0] = mode;
  for (size_t i = 1; i < argv.size(); ++i) argv[i] = args[i - 1];
  return PyObject_Vectorcall(stock, argv.data(), static_cast<size_t>(nargs + 1), kwnames);
}

// A Python `finally:` after a body that succeeded (`ok`) or left an error set:
// `cleanup()` (true on success, else an error set) runs with the body's error put
// aside, which is restored unless the cleanup raised (its error wins, as in
// Python). Returns whether no error is set.
template <typename F>
bool run_finally(bool ok, F&& cleanup) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (!cleanup()) {
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return false;
  }
  PyErr_Restore(type, value, tb);
  return ok;
}

} // namespace fastfake
