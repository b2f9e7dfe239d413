// Inspecting and building FakeTensor Python objects from C++.
#include "common/compat.h"
#include "common/fastfake.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/python_symnode.h>

#include <sstream>

namespace fastfake {

// Proxy tracing is active: make_fx's PROXY mode is on the dispatch-mode stack, or
// the pre-dispatch [PROXY, FUNCTIONAL] modes are set (part of stock's cache key).
bool proxy_tracing() {
  if (c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::PROXY)
          .has_value()) {
    return true;
  }
  PyObject* pre = g_py.pre_dispatch_infra_modes;
  return pre != nullptr && PyList_Check(pre) && PyList_GET_SIZE(pre) > 0 &&
      PyList_GET_ITEM(pre, 0) != Py_None;
}

// torch.export's non-strict leak detector registers every FakeTensor from
// FakeTensor.__init__; while it is on, stock builds all outputs.
bool export_leak_tracking() {
  PyObject* flag = g_py.compiler_dict
      ? PyDict_GetItemWithError(g_py.compiler_dict, g_py.s_is_exporting_flag)
      : nullptr;
  if (flag != Py_True) {
    PyErr_Clear();
    return false;
  }
  PyObject* r = g_py.export_leak_check ? PyObject_CallNoArgs(g_py.export_leak_check) : nullptr;
  if (r == nullptr) {
    PyErr_Clear();
    return true;
  }
  const bool on = r != Py_False;
  Py_DECREF(r);
  return on;
}

PyObject* instance_attr(PyObject* obj, PyObject* name) {
  PyObject* v = nullptr;
  const int managed = compat::managed_instance_attr(obj, name, &v);
  if (managed >= 0) return managed ? v : nullptr;
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  if (dictptr == nullptr || *dictptr == nullptr) {
    return nullptr;
  }
  return PyDict_GetItemWithError(*dictptr, name); // borrowed; name is a str so no error
}

PyObject* plain_attr(PyObject* obj, PyObject* name) {
  PyObject* v = nullptr;
  const int managed = compat::managed_instance_attr(obj, name, &v, true);
  if (managed >= 0) return managed ? v : nullptr;
  if ((v = instance_attr(obj, name)) != nullptr) return v;
  PyObject* c = _PyType_Lookup(Py_TYPE(obj), name);
  return c != nullptr && Py_TYPE(c)->tp_descr_get == nullptr ? c : nullptr;
}

PyObject* class_attr(PyObject* obj, PyObject* name) {
  PyObject* c = _PyType_Lookup(Py_TYPE(obj), name); // borrowed (the type's attribute cache)
  const int unshadowed = compat::managed_method_unshadowed(obj, name, c);
  if (unshadowed >= 0) return unshadowed ? c : nullptr;
  if (instance_attr(obj, name) != nullptr) return nullptr;
  return c;
}

PyObject* make_fake_tensor(PyObject* mode, at::Tensor elem, PyObject* device) {
  // Mirrors FakeTensor.__new__ -> Tensor._make_subclass(cls, elem, requires_grad,
  // dispatch_device=True, device_for_backend_keys=device) on a fresh meta tensor.
  // The Python object is made first, while the tensor is still a plain meta
  // tensor (on 2.9 it is made as a torch.Tensor and re-typed, and a custom-device
  // tensor without its PyObject cannot be wrapped there); the keys it ends up
  // with do not depend on the order.
  PyObject* obj = compat::wrap_as(elem, g_py.fake_tensor_type);
  if (obj == nullptr) {
    return nullptr;
  }
  c10::TensorImpl* impl = elem.unsafeGetTensorImpl();
  impl->set_allow_tensor_metadata_change(true);
  impl->set_python_custom_device(true);
  impl->_change_backend_component_keys(reinterpret_cast<THPDevice*>(device)->device);
  // THPVariable_NewWithVar does this for classes defining __torch_dispatch__.
  impl->set_python_dispatch(true);

  PyObject* allow_unsafe = instance_attr(mode, g_py.s_allow_unsafe_data_ptr_access);
  const bool allow = allow_unsafe != nullptr && PyObject_IsTrue(allow_unsafe) == 1;
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  if (!allow) {
    storage->set_throw_on_mutable_data_ptr();
  } else {
    storage->set_warn_deprecated_on_mutable_data_ptr();
  }

  PyObject* d = PyDict_Copy(g_py.fake_dict_template);
  if (d == nullptr || PyDict_SetItem(d, g_py.s_fake_device, device) < 0 ||
      PyDict_SetItem(d, g_py.s_fake_mode, mode) < 0 ||
      PyObject_GenericSetDict(obj, d, nullptr) < 0) {
    Py_XDECREF(d);
    Py_DECREF(obj);
    return nullptr;
  }
  Py_DECREF(d);
  return obj;
}

namespace {

template <typename T>
std::string fmt(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string device_str(PyObject* t) {
  PyObject* d = instance_attr(t, g_py.s_fake_device);
  if (d == nullptr || !THPDevice_Check(d)) {
    return "<none>";
  }
  return reinterpret_cast<THPDevice*>(d)->device.str();
}

// SymInts compared without guarding (operator== on symbolic values would
// evaluate, and possibly guard on, their equality): the same int, or SymNodes
// that are the same object or have the same raw expression and hint.
bool same_symint(const c10::SymInt& x, const c10::SymInt& y) {
  if (x.is_heap_allocated() != y.is_heap_allocated()) return false;
  if (!x.is_heap_allocated()) return x.as_int_unchecked() == y.as_int_unchecked();
  PyObject* a = py_sym_node(x.toSymNodeImplUnowned());
  PyObject* b = py_sym_node(y.toSymNodeImplUnowned());
  if (a == nullptr || b == nullptr) return false;
  if (a == b) return true;
  for (PyObject* field : {g_py.s_expr, g_py.s_hint}) {
    PyObject* fa = PyObject_GetAttr(a, field);
    PyObject* fb = PyObject_GetAttr(b, field);
    const int eq = (fa && fb) ? PyObject_RichCompareBool(fa, fb, Py_EQ) : -1;
    Py_XDECREF(fa);
    Py_XDECREF(fb);
    if (eq != 1) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

bool same_symints(c10::SymIntArrayRef x, c10::SymIntArrayRef y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!same_symint(x[i], y[i])) return false;
  }
  return true;
}

} // namespace

PyObject* py_sym_node(c10::SymNodeImpl* node) {
  auto* p = dynamic_cast<torch::impl::PythonSymNodeImpl*>(node);
  return p == nullptr ? nullptr : p->getPyObj().ptr();
}

std::string compare_fake(PyObject* a, PyObject* b) {
  if (a == b) {
    return "";
  }
  const bool ta = THPVariable_Check(a);
  const bool tb = THPVariable_Check(b);
  if (ta != tb) {
    return "kind: tensor vs non-tensor";
  }
  if (!ta) {
    if (a == Py_None || b == Py_None) {
      return a == b ? "" : "value: None vs non-None";
    }
    const int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0) {
      PyErr_Clear();
      return "value: not comparable";
    }
    return eq ? "" : "value";
  }
  if (Py_TYPE(a) != Py_TYPE(b)) {
    return std::string("type: ") + Py_TYPE(a)->tp_name + " vs " + Py_TYPE(b)->tp_name;
  }
  const at::Tensor& x = THPVariable_Unpack(a);
  const at::Tensor& y = THPVariable_Unpack(b);
  if (x.layout() != y.layout()) {
    return "layout: " + fmt(x.layout()) + " vs " + fmt(y.layout());
  }
  if (x.scalar_type() != y.scalar_type()) {
    return "dtype: " + fmt(x.scalar_type()) + " vs " + fmt(y.scalar_type());
  }
  if (!same_symints(x.sym_sizes(), y.sym_sizes())) {
    return "sizes: " + fmt(x.sym_sizes()) + " vs " + fmt(y.sym_sizes());
  }
  if (x.layout() == at::kStrided) {
    if (!same_symints(x.sym_strides(), y.sym_strides())) {
      return "strides: " + fmt(x.sym_strides()) + " vs " + fmt(y.sym_strides());
    }
    if (!same_symint(x.sym_storage_offset(), y.sym_storage_offset())) {
      return "storage_offset: " + fmt(x.sym_storage_offset()) + " vs " +
          fmt(y.sym_storage_offset());
    }
    const auto& sa = x.unsafeGetTensorImpl()->storage();
    const auto& sb = y.unsafeGetTensorImpl()->storage();
    if (!same_symint(sa.sym_nbytes(), sb.sym_nbytes())) {
      return "storage_nbytes: " + fmt(sa.sym_nbytes()) + " vs " + fmt(sb.sym_nbytes());
    }
  }
  if (is_fake_exact(a)) {
    const std::string da = device_str(a), db = device_str(b);
    if (da != db) {
      return "device: " + da + " vs " + db;
    }
    if (instance_attr(a, g_py.s_fake_mode) != instance_attr(b, g_py.s_fake_mode)) {
      return "fake_mode: different modes";
    }
  }
  // Not x.device(): for FakeTensors that dispatches prim.device to Python (and
  // shows up in FakeTensor.__torch_dispatch__ counts). The storage's device is the
  // real (meta) device; the fake device was compared above.
  const auto* xi = x.unsafeGetTensorImpl();
  const auto* yi = y.unsafeGetTensorImpl();
  if (xi->has_storage() && yi->has_storage() &&
      xi->storage().device() != yi->storage().device()) {
    return "storage device: " + xi->storage().device().str() + " vs " +
        yi->storage().device().str();
  }
  if (x.requires_grad() != y.requires_grad()) {
    return "requires_grad: " + fmt(x.requires_grad()) + " vs " + fmt(y.requires_grad());
  }
  if (x.is_conj() != y.is_conj()) {
    return "is_conj";
  }
  if (x.is_neg() != y.is_neg()) {
    return "is_neg";
  }
  if (x.is_inference() != y.is_inference()) {
    return "is_inference";
  }
  if (x.key_set() != y.key_set()) {
    return "dispatch keys: " + fmt(x.key_set()) + " vs " + fmt(y.key_set());
  }
  return "";
}

} // namespace fastfake
