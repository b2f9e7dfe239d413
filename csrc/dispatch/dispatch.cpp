// The C-level replacement of FakeTensorMode.__torch_dispatch__ and the cached
// FakeTensor.device descriptor.
#include "common/fastfake.h"
#include "cache/portable.h"
#include "stock/calls.h"
#include "dispatch/dispatch.h"
#include "elementwise/elementwise.h"
#include "cache/cache.h"
#include "convert/convert.h"
#include "stock/counts.h"

#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>

namespace fastfake {

namespace {

// Same bookkeeping as torch.utils._stats.count on the stock method, so that
// "STATS: FakeTensorMode.__torch_dispatch__:N" lines keep counting every call.
bool count_dispatch() {
  PyObject* counter = g_py.simple_call_counter;
  PyObject* key = g_py.s_dispatch_counter_key;
  PyObject* cur = PyDict_GetItemWithError(counter, key); // borrowed
  PyObject* next = nullptr;
  if (cur == nullptr) {
    if (PyErr_Occurred()) return false;
    next = PyLong_FromLong(1);
  } else {
    static PyObject* one = PyLong_FromLong(1);
    next = PyNumber_Add(cur, one);
  }
  if (next == nullptr) return false;
  const int rc = PyObject_SetItem(counter, key, next); // OrderedDict-aware
  Py_DECREF(next);
  return rc == 0;
}

struct FastDispatch {
  PyObject_HEAD
  vectorcallfunc vectorcall;
};

PyObject* fast_dispatch_call(
    PyObject* /*self*/,
    PyObject* const* argv,
    size_t nargsf,
    PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  bump(DispatchTotal);
  if (kwnames != nullptr || nargs < 4 || nargs > 5 ||
      c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::FAKE)
          .has_value()) {
    bump(DispatchStock);
    stock_call_begin(nargs >= 2 ? argv[1] : Py_None);
    PyObject* r = PyObject_Vectorcall(g_py.stock_torch_dispatch, argv, nargsf, kwnames);
    stock_call_end();
    return r;
  }
  PyObject* mode = argv[0];
  if (reinterpret_cast<PyObject*>(Py_TYPE(mode)) != g_py.fake_mode_type ||
      export_leak_tracking()) {
    // subclasses may override dispatch(); export's leak tracker hooks __init__
    return call_stock_dispatch(mode, argv[1], argv[2], argv[3], nargs == 5 ? argv[4] : nullptr);
  }
  PyObject* func = argv[1];
  PyObject* types = argv[2];
  PyObject* args = argv[3];
  PyObject* kwargs = nargs == 5 ? argv[4] : nullptr;

  // A result built here (not by stock): keep stock's call counter, then verify
  // it against stock when crosscheck is on. Stock's verifying call counts itself
  // in stock's cache statistics exactly as stock alone would have, so what this
  // call added to them here is taken back first.
  const StockCounts counts_before = g_stock_counts;
  auto finish = [&](PyObject* r) -> PyObject* {
    if (!count_dispatch()) {
      Py_DECREF(r);
      return nullptr;
    }
    if (g_config.inject_device_fault > 0 && is_fake_exact(r) &&
        instance_attr(r, g_py.s_fake_device) != nullptr) {
      // Testing only: a served result whose device attribute holds a wrong device.
      --g_config.inject_device_fault;
      if (PyObject_SetAttr(r, g_py.s_fake_device, g_py.meta_device) < 0) {
        Py_DECREF(r);
        return nullptr;
      }
    }
    // fastfake's crosscheck, or stock's own (torch._dynamo.config.
    // fake_tensor_cache_crosscheck_enabled, read by the mode at construction).
    PyObject* stock_xcheck = instance_attr(mode, g_py.s_cache_crosscheck_enabled);
    if ((g_config.crosscheck || (stock_xcheck != nullptr && stock_xcheck != Py_False)) &&
        g_py.crosscheck_hook != nullptr) {
      bump(CrossChecked);
      stock_counts_restore(counts_before);
      PyObject* cargv[6] = {mode, func, types, args, kwargs ? kwargs : Py_None, r};
      PyObject* ok = PyObject_Vectorcall(g_py.crosscheck_hook, cargv, 6, nullptr);
      if (ok == nullptr) {
        bump(CrossMismatch);
        Py_DECREF(r);
        return nullptr;
      }
      Py_DECREF(ok);
    }
    return r;
  };

  // prim.device: stock answers it before its cache (_device_handler), from the
  // argument's own mode and fake device.
  if (func == g_py.prim_device_op && PyTuple_Check(args) && PyTuple_GET_SIZE(args) == 1 &&
      (kwargs == nullptr || kwargs == Py_None ||
       (PyDict_Check(kwargs) && PyDict_GET_SIZE(kwargs) == 0))) {
    PyObject* t = PyTuple_GET_ITEM(args, 0);
    PyObject* tmode = is_fake_exact(t) ? instance_attr(t, g_py.s_fake_mode) : nullptr;
    PyObject* in_kernel = tmode ? instance_attr(tmode, g_py.s_in_kernel_invocation) : nullptr;
    PyObject* dev = in_kernel == Py_True ? g_py.meta_device
        : in_kernel == Py_False          ? instance_attr(t, g_py.s_fake_device)
                                         : nullptr;
    if (dev != nullptr) {
      bump(DispatchPrimDevice);
      Py_INCREF(dev);
      return count_dispatch() ? dev : (Py_DECREF(dev), nullptr);
    }
  }

  // The elementwise path, then the result cache, then stock. *served: built here.
  auto serve = [&](PyObject* a, PyObject* kw, bool* served) -> PyObject* {
    bool handled = false;
    PyObject* r = nullptr;
    // (not inside the kernel of a miss being recorded: portable.h)
    if (!portable_recording()) {
      r = try_elementwise(mode, func, types, a, kw, &handled, served);
      if (handled || PyErr_Occurred()) return handled ? r : nullptr;
    }
    r = try_cache(mode, func, types, a, kw, &handled, served);
    if (handled || PyErr_Occurred()) return handled ? r : nullptr;
    return call_stock_dispatch(mode, func, types, a, kw);
  };

  // Non-fake tensor arguments (allow_non_fake_inputs): converted as stock converts
  // them, then the converted call is served like any other (real_inputs.cpp).
  PyObject* conv_args = nullptr;
  PyObject* conv_kwargs = nullptr;
  bool served = false;
  switch (convert_real_inputs(mode, func, args, kwargs, &conv_args, &conv_kwargs)) {
    case RealInputs::Stock:
      return call_stock_dispatch(mode, func, types, args, kwargs);
    case RealInputs::Converted: {
      PyObject* kw = conv_kwargs ? conv_kwargs : kwargs;
      const bool was = g_stock_counts.non_fake_call;
      g_stock_counts.non_fake_call = true;
      PyObject* r = serve(conv_args, kw, &served);
      g_stock_counts.non_fake_call = was;
      if (r != nullptr && served) {
        // crosscheck recomputes with the converted arguments (what stock runs too)
        args = conv_args;
        kwargs = kw;
        r = finish(r);
      }
      Py_DECREF(conv_args);
      Py_XDECREF(conv_kwargs);
      return r;
    }
    case RealInputs::None:
      break;
  }
  PyObject* r = serve(args, kwargs, &served);
  return (r != nullptr && served) ? finish(r) : r;
}

PyObject* fast_dispatch_descr_get(PyObject* self, PyObject* obj, PyObject* /*type*/) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* fast_dispatch_tp_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  return PyVectorcall_Call(self, args, kwargs);
}

PyObject* fast_dispatch_repr(PyObject* /*self*/) {
  return PyUnicode_FromString("<fastfake FakeTensorMode.__torch_dispatch__>");
}

PyTypeObject FastDispatchType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---- FakeTensor.device ----
struct DeviceDescr {
  PyObject_HEAD
  PyObject* stock; // the original property
};

void device_descr_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<DeviceDescr*>(self)->stock);
  Py_TYPE(self)->tp_free(self);
}

PyObject* device_descr_get(PyObject* self, PyObject* obj, PyObject* type) {
  PyObject* stock = reinterpret_cast<DeviceDescr*>(self)->stock;
  if (obj == nullptr || obj == Py_None) {
    // class access: hand out the stock property itself
    Py_INCREF(stock);
    return stock;
  }
  // Exactly FakeTensor only: a subclass may override fake_device.
  PyObject* mode = is_fake_exact(obj) ? instance_attr(obj, g_py.s_fake_mode) : nullptr;
  if (mode != nullptr) {
    PyObject* in_kernel = instance_attr(mode, g_py.s_in_kernel_invocation);
    if (in_kernel == Py_True) {
      bump(DeviceFast);
      Py_INCREF(g_py.meta_device);
      return g_py.meta_device;
    }
    if (in_kernel == Py_False) {
      PyObject* dev = instance_attr(obj, g_py.s_fake_device);
      if (dev != nullptr) {
        bump(DeviceFast);
        Py_INCREF(dev);
        return dev;
      }
    }
  }
  bump(DeviceStock);
  return Py_TYPE(stock)->tp_descr_get(stock, obj, type);
}

int device_descr_set(PyObject* self, PyObject* obj, PyObject* value) {
  PyObject* stock = reinterpret_cast<DeviceDescr*>(self)->stock;
  return Py_TYPE(stock)->tp_descr_set(stock, obj, value);
}

PyTypeObject DeviceDescrType = {PyVarObject_HEAD_INIT(nullptr, 0)};

} // namespace

bool init_types() {
  FastDispatchType.tp_name = "fastfake._C.FastDispatch";
  FastDispatchType.tp_basicsize = sizeof(FastDispatch);
  FastDispatchType.tp_flags =
      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  FastDispatchType.tp_vectorcall_offset = offsetof(FastDispatch, vectorcall);
  FastDispatchType.tp_call = fast_dispatch_tp_call;
  FastDispatchType.tp_descr_get = fast_dispatch_descr_get;
  FastDispatchType.tp_repr = fast_dispatch_repr;
  FastDispatchType.tp_new = nullptr;
  FastDispatchType.tp_doc = "C-level FakeTensorMode.__torch_dispatch__ installed by fastfake.";
  if (PyType_Ready(&FastDispatchType) < 0) return false;

  DeviceDescrType.tp_name = "fastfake._C.DeviceDescriptor";
  DeviceDescrType.tp_basicsize = sizeof(DeviceDescr);
  DeviceDescrType.tp_flags = Py_TPFLAGS_DEFAULT;
  DeviceDescrType.tp_dealloc = device_descr_dealloc;
  DeviceDescrType.tp_descr_get = device_descr_get;
  DeviceDescrType.tp_descr_set = device_descr_set;
  DeviceDescrType.tp_doc = "C-level FakeTensor.device installed by fastfake.";
  if (PyType_Ready(&DeviceDescrType) < 0) return false;
  return true;
}

PyObject* new_fast_dispatch() {
  auto* self = PyObject_New(FastDispatch, &FastDispatchType);
  if (self == nullptr) return nullptr;
  self->vectorcall = fast_dispatch_call;
  return reinterpret_cast<PyObject*>(self);
}

PyObject* new_device_descriptor(PyObject* stock_property) {
  auto* self = PyObject_New(DeviceDescr, &DeviceDescrType);
  if (self == nullptr) return nullptr;
  Py_INCREF(stock_property);
  self->stock = stock_property;
  return reinterpret_cast<PyObject*>(self);
}

} // namespace fastfake
