// Non-fake tensor arguments under FakeTensorMode(allow_non_fake_inputs=True).
//
// Stock converts every real tensor argument with the mode's own converter
// (`mode.fake_tensor_converter.from_real_tensor(mode, t)`, memoised per mode, so
// the same real tensor always gives the same FakeTensor) and runs the call as one
// with fake tensors only -- bypassing its cache ("non-fake tensor"). Here the same
// conversion runs first, in stock's order (positional arguments, then the items of
// list / tuple arguments, then keyword arguments), and the converted call is then
// served by the elementwise path or the result cache like any other. Which ops
// qualify is decided once per op by fastfake.convert.real_inputs.policy (Python): where
// stock does something else before converting (errors for inplace_view ops,
// constant propagation for number-like ops on real tensors only, lift functions,
// mutating ops) the call stays stock's.
#include "common/fastfake.h"
#include "convert/convert.h"

#include <torch/csrc/autograd/python_variable.h>

#include <unordered_map>

namespace fastfake {

namespace {

enum Policy : int { kStock = 0, kWithFake = 1, kAlways = 2 };

std::unordered_map<PyObject*, int> g_policy; // op -> policy (ops are immortal)

int policy_of(PyObject* func) {
  auto it = g_policy.find(func);
  if (it != g_policy.end()) return it->second;
  int p = kStock;
  if (g_py.real_policy_hook != nullptr) {
    PyObject* r = PyObject_CallOneArg(g_py.real_policy_hook, func);
    if (r == nullptr) {
      PyErr_Clear();
    } else {
      p = static_cast<int>(PyLong_AsLong(r));
      if (p == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        p = kStock;
      }
      Py_DECREF(r);
    }
  }
  Py_INCREF(func);
  g_policy.emplace(func, p);
  return p;
}

// allow_non_fake_inputs as stock reads it: the thread-local override, else the mode's.
bool allowed(PyObject* mode) {
  if (g_py.fake_tensor_tls != nullptr) {
    PyObject* o = PyObject_GetAttr(g_py.fake_tensor_tls, g_py.s_allow_override);
    if (o == nullptr) {
      PyErr_Clear();
      return false;
    }
    const bool has = o != Py_None;
    const bool v = o == Py_True;
    Py_DECREF(o);
    if (has) return v;
  }
  return instance_attr(mode, g_py.s_allow_non_fake_inputs) == Py_True;
}

enum class Kind { Other, OurFake, Real, Foreign };

Kind kind_of(PyObject* v, PyObject* mode) {
  // (a FakeTensor first: an exact type check, where THPVariable_Check is a full
  // isinstance that looks up the metaclass's __instancecheck__)
  if (is_fake_exact(v)) {
    return instance_attr(v, g_py.s_fake_mode) == mode ? Kind::OurFake : Kind::Foreign;
  }
  if (!THPVariable_Check(v)) return Kind::Other;
  PyTypeObject* t = Py_TYPE(v);
  if (reinterpret_cast<PyObject*>(t) == g_py.tensor_type ||
      reinterpret_cast<PyObject*>(t) == g_py.parameter_type) {
    return Kind::Real;
  }
  return Kind::Foreign; // other subclasses (and other modes' fakes): stock decides
}

struct Scan {
  bool real = false;
  bool fake = false;
  bool foreign = false;
};

// Stock flattens the arguments with pytree: lists and tuples at any depth (dicts
// inside the arguments, rare, are left to stock).
void scan(PyObject* v, PyObject* mode, Scan& s, int depth) {
  if (PyList_Check(v) || PyTuple_Check(v)) {
    if (depth > 8) {
      s.foreign = true;
      return;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; ++i) {
      scan(PySequence_Fast_GET_ITEM(v, i), mode, s, depth + 1);
    }
    return;
  }
  if (PyDict_Check(v)) {
    s.foreign = true;
    return;
  }
  switch (kind_of(v, mode)) {
    case Kind::Real: s.real = true; break;
    case Kind::OurFake: s.fake = true; break;
    case Kind::Foreign: s.foreign = true; break;
    case Kind::Other: break;
  }
}

// New reference: `v` with real tensors converted (same container type).
PyObject* convert(PyObject* v, PyObject* mode, PyObject* converter) {
  if (PyList_Check(v) || PyTuple_Check(v)) {
    const bool is_list = PyList_Check(v);
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    PyObject* out = is_list ? PyList_New(n) : PyTuple_New(n);
    if (out == nullptr) return nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* c = convert(PySequence_Fast_GET_ITEM(v, i), mode, converter);
      if (c == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
      if (is_list) {
        PyList_SET_ITEM(out, i, c);
      } else {
        PyTuple_SET_ITEM(out, i, c);
      }
    }
    return out;
  }
  if (kind_of(v, mode) == Kind::Real) {
    PyObject* argv[3] = {converter, mode, v};
    return PyObject_VectorcallMethod(
        g_py.s_from_real_tensor, argv, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  }
  Py_INCREF(v);
  return v;
}

} // namespace

RealInputs convert_real_inputs(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    PyObject** new_args,
    PyObject** new_kwargs) {
  *new_args = nullptr;
  *new_kwargs = nullptr;
  if (!PyTuple_Check(args) || (kwargs != nullptr && kwargs != Py_None && !PyDict_Check(kwargs))) {
    return RealInputs::None;
  }
  Scan s;
  scan(args, mode, s, 0);
  const bool has_kwargs = kwargs != nullptr && kwargs != Py_None && PyDict_GET_SIZE(kwargs) > 0;
  if (has_kwargs) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      scan(v, mode, s, 0);
    }
  }
  if (!s.real) return RealInputs::None;
  if (!g_config.real_inputs) {
    bump(RealStockDisabled);
    return RealInputs::Stock;
  }
  if (s.foreign) {
    bump(RealStockForeign);
    return RealInputs::Stock;
  }
  if (!allowed(mode)) {
    bump(RealStockNotAllowed); // stock raises its own error
    return RealInputs::Stock;
  }
  const int p = policy_of(func);
  if (p == kStock || (p == kWithFake && !s.fake)) {
    bump(RealStockOp);
    return RealInputs::Stock;
  }
  PyObject* converter = instance_attr(mode, g_py.s_fake_tensor_converter);
  if (converter == nullptr) {
    bump(RealStockForeign);
    return RealInputs::Stock;
  }
  PyObject* a = convert(args, mode, converter);
  if (a == nullptr) {
    PyErr_Clear(); // stock converts again and raises its own error
    bump(RealStockError);
    return RealInputs::Stock;
  }
  PyObject* kw = nullptr;
  if (has_kwargs) {
    kw = PyDict_New();
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (kw != nullptr && PyDict_Next(kwargs, &pos, &k, &v)) {
      PyObject* c = convert(v, mode, converter);
      if (c == nullptr || PyDict_SetItem(kw, k, c) < 0) {
        Py_XDECREF(c);
        Py_CLEAR(kw);
        break;
      }
      Py_DECREF(c);
    }
    if (kw == nullptr) {
      Py_DECREF(a);
      PyErr_Clear();
      bump(RealStockError);
      return RealInputs::Stock;
    }
  }
  bump(RealConverted);
  *new_args = a;
  *new_kwargs = kw;
  return RealInputs::Converted;
}

} // namespace fastfake
