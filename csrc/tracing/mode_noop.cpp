#include "tracing/mode_noop.h"

#include "common/fastfake.h"

#include <c10/core/TensorOptions.h>

namespace fastfake {

namespace {

struct Names {
  PyObject* dispatch_key;
  PyObject* enter_stack;
  PyObject* flags[3];
  PyObject* flag_global;
  PyObject* set_flag;
  PyObject* py_kernels;
};

const Names& names() {
  static const Names n = {
      PyUnicode_InternFromString("_dispatch_key"),
      PyUnicode_InternFromString("enter_stack"),
      {PyUnicode_InternFromString("old_dispatch_mode_flags"),
       PyUnicode_InternFromString("old_non_infra_dispatch_mode_flags"),
       PyUnicode_InternFromString("old_without_ignore_compile_internals_dispatch_mode_flags")},
      PyUnicode_InternFromString("_is_in_any_mode_without_ignore_compile_internals"),
      PyUnicode_InternFromString("set_is_in_mode_without_ignore_compile_internals"),
      PyUnicode_InternFromString("py_kernels"),
  };
  return n;
}

} // namespace

std::optional<c10::DispatchKey> backend_key(c10::DeviceType type) {
  constexpr auto kTypes = static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
  static std::optional<c10::DispatchKey> known[kTypes];
  static bool read[kTypes] = {};
  const auto i = static_cast<size_t>(type);
  if (i >= kTypes) return std::nullopt;
  if (!read[i]) {
    try {
      const auto k = c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(type));
      known[i] = c10::parseDispatchKey(c10::toString(k));
    } catch (const std::exception&) {
      known[i].reset();
    }
    read[i] = true;
  }
  return known[i];
}

int decompose_not_implemented(PyObject* func, const c10::OperatorHandle& handle, PyObject* cia_key) {
  PyObject* pyk = instance_attr(func, names().py_kernels);
  if (pyk == nullptr || !PyDict_CheckExact(pyk)) return 0;
  const int has = PyDict_Contains(pyk, cia_key);
  if (has != 0) {
    if (has < 0) PyErr_Clear();
    return 0;
  }
  try {
    return handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ? 0 : 1;
  } catch (const std::exception&) {
    return 0;
  }
}

int enter_exit_is_noop(PyObject* mode, c10::impl::TorchDispatchModeKey key, PyObject* dispatch_dict,
                       PyObject* set_flag) {
  const Names& n = names();
  // (TorchDispatchMode.__init__ keeps a key only where one is given; _push_mode
  // asks hasattr, so none on the class either)
  PyObject* own = instance_attr(mode, n.dispatch_key);
  if (own == nullptr ? _PyType_Lookup(Py_TYPE(mode), n.dispatch_key) != nullptr : own != Py_None) return 0;
  PyObject* stack = instance_attr(mode, n.enter_stack);
  if (stack == nullptr || !PyList_CheckExact(stack)) return 0;
  for (PyObject* name : n.flags) {
    if (instance_attr(mode, name) == nullptr) return 0;
  }
  if (c10::impl::TorchDispatchModeTLS::get_mode(key).has_value()) return 0;
  // another mode set: pushing and popping this one leaves the Python keys alone
  if (!c10::impl::TorchDispatchModeTLS::any_modes_set()) return 0;
  PyObject* flag = PyDict_GetItemWithError(dispatch_dict, n.flag_global);
  PyObject* setter = flag ? PyDict_GetItemWithError(dispatch_dict, n.set_flag) : nullptr;
  if (set_flag == Py_None) {
    // (a release whose enter / exit set no flag in C: the global is there, no setter)
    const bool ok = flag != nullptr && setter == nullptr && !PyErr_Occurred();
    PyErr_Clear();
    return ok ? 1 : 0;
  }
  if (setter != set_flag || setter == nullptr) {
    PyErr_Clear();
    return 0;
  }
  return 1;
}

int resync_compile_internals_flag(PyObject* dispatch_dict, PyObject* set_flag) {
  if (set_flag == Py_None) return 0;
  PyObject* flag = PyDict_GetItemWithError(dispatch_dict, names().flag_global); // borrowed
  PyObject* r = flag ? PyObject_CallOneArg(set_flag, flag) : nullptr;
  if (r == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "fastfake: the compile-internals flag is gone");
    return -1;
  }
  Py_DECREF(r);
  return 0;
}

} // namespace fastfake
