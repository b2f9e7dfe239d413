// Converting a real tensor into a FakeTensor: FakeTensorConverter.from_real_tensor
// for the plain case, in C++.
//
// Stock (every supported release), for a real tensor `t` with no shape env, no
// source, no symbolic context and make_constant=False:
//
//     memo = converter._get_memo(t)                     # describer id -> live fake
//     if memo is not None: return memo
//     meta_converter.hit += 1
//     desc = describer.describe_tensor(t)               # storage id, then tensor id
//     meta_converter.arg_cnt += 1
//     with inference_mode(t.is_inference()):
//         r = FakeTensor(mode, torch.empty_strided(size, stride, dtype=t.dtype,
//                        device="meta"), t.device)      # under no_dispatch()
//         if t.requires_grad: r.requires_grad = True    # a leaf
//         storage_memo[storage id] = r.untyped_storage()  # the storage is new to it
//         if t.is_parameter: r._is_param = True
//         tensor_memo[tensor id] = r
//     return r
//
// plus, per tensor, a describer pass of ~45 fields, view, subclass, functorch,
// sparse, nested and grad handling, and metadata assertions (~85 us a tensor).
// Here the same steps run on the same Python objects -- the converter's own memo
// and describer methods are called, so ids, memo entries and their weak
// references are stock's -- and the FakeTensor is built as every FakeTensor built
// by fastfake is (make_fake_tensor): about 6 us. A `FakeTensorMode.from_tensor` of
// every parameter (FakeTensorProp, real-weight models under
// allow_non_fake_inputs=True) pays this once per tensor and mode.
//
// Only the plain case is served, decided before anything is changed: a
// torch.Tensor or nn.Parameter (exact types) on the CPU, dense and strided, with a
// plain TensorImpl (no functional / functorch / sparse / nested / quantized /
// mkldnn tensor), not a view, a leaf without a .grad, not an inference tensor, no
// conj / neg bit, storage offset 0, a storage of nonzero size that no live fake of
// this converter holds yet and exactly as large as its sizes and strides need, not
// a 0-d integer / float64 tensor (both differ between releases: 2.15 resizes the
// fake's storage and memoises item()), grad_dtype equal to its dtype, none of the attributes
// stock reads off the tensor (_dynamo_dynamic_indices, _dynamo_hint_overrides,
// _is_buffer), no nested-int registrations in the process, a plain
// FakeTensorConverter / MetaConverter / MetaTensorDescriber without copy_data,
// Python dispatch not excluded (stock raises there), export's fake-tensor leak
// tracker off. Everything else is stock's (counted convert.stock.<why>).
#include "common/fastfake.h"
#include "convert/convert.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include <ATen/EmptyTensor.h>

#include <typeinfo>

namespace fastfake {

namespace {

PyObject* not_served(Stat why) {
  bump(why);
  Py_RETURN_NOTIMPLEMENTED;
}

// obj.name(arg) as a new reference (nullptr on error).
PyObject* call1(PyObject* obj, PyObject* name, PyObject* arg) {
  PyObject* argv[2] = {obj, arg};
  return PyObject_VectorcallMethod(name, argv, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
}

PyObject* call0(PyObject* obj, PyObject* name) {
  PyObject* argv[1] = {obj};
  return PyObject_VectorcallMethod(name, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
}

// obj.name += 1 (a Python int attribute)
bool increment(PyObject* obj, PyObject* name) {
  PyObject* v = PyObject_GetAttr(obj, name);
  if (v == nullptr) return false;
  PyObject* one = PyLong_FromLong(1);
  PyObject* n = one ? PyNumber_Add(v, one) : nullptr;
  Py_DECREF(v);
  Py_XDECREF(one);
  if (n == nullptr) return false;
  const int rc = PyObject_SetAttr(obj, name, n);
  Py_DECREF(n);
  return rc == 0;
}

bool attr_is_false(PyObject* obj, PyObject* name) {
  PyObject* v = instance_attr(obj, name);
  return v == Py_False;
}

// The tensor itself is of the plain form (see the file comment).
bool plain_tensor(PyObject* t, const at::Tensor& x) {
  c10::TensorImpl* impl = x.unsafeGetTensorImpl();
  if (typeid(*impl) != typeid(c10::TensorImpl)) return false;
  if (x.layout() != at::kStrided || !x.device().is_cpu() || x.is_quantized()) return false;
  const c10::DispatchKeySet ks = impl->key_set();
  if (ks.has(c10::DispatchKey::Python) || ks.has(c10::DispatchKey::Functionalize) ||
      ks.has(c10::DispatchKey::Conjugate) || ks.has(c10::DispatchKey::Negative) ||
      ks.has(c10::DispatchKey::ZeroTensor)) {
    return false;
  }
  if (x.is_view() || x.is_inference() || x.storage_offset() != 0) return false;
  if (!x.has_storage() || x.storage().nbytes() == 0) return false;
  // A storage larger than its sizes and strides need: torch 2.15 resizes the
  // fake's storage to it, earlier releases do not.
  if (x.storage().nbytes() !=
      at::detail::computeStorageNbytes(x.sizes(), x.strides(), x.dtype().itemsize())) {
    return false;
  }
  // 0-d integer / float64 CPU tensors: torch 2.15 memoises their item() value on
  // the fake (plain modes), earlier releases only with a source and a shape env.
  if (x.dim() == 0) {
    switch (x.scalar_type()) {
      case at::kLong:
      case at::kInt:
      case at::kShort:
      case at::kChar:
      case at::kDouble:
        return false;
      default:
        break;
    }
  }
  if (x.grad_fn() != nullptr || x.grad().defined()) return false;
  for (PyObject* name : {g_py.s_dynamo_dynamic_indices, g_py.s_dynamo_hint_overrides, g_py.s_is_buffer}) {
    if (instance_attr(t, name) != nullptr) return false;
  }
  if (x.requires_grad() && g_py.check_grad_dtype) {
    // stock copies grad_dtype onto the fake when it differs from the dtype
    // (releases whose tensors have one)
    PyObject* gd = PyObject_GetAttr(t, g_py.s_grad_dtype);
    if (gd == nullptr) {
      PyErr_Clear();
      return false;
    }
    const bool same = gd == reinterpret_cast<PyObject*>(torch::getTHPDtype(x.scalar_type()));
    Py_DECREF(gd);
    if (!same) return false;
  }
  return true;
}

bool plain_state() {
  if (c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Python)) {
    return false; // stock raises (no_dispatch() around a conversion)
  }
  if (g_py.nested_int_registry != nullptr) {
    const Py_ssize_t n = PyObject_Size(g_py.nested_int_registry);
    if (n != 0) {
      PyErr_Clear();
      return false;
    }
  }
  return !export_leak_tracking();
}

} // namespace

PyObject* convert_real(PyObject* converter, PyObject* mode, PyObject* t) {
  if (!g_config.convert) {
    return not_served(ConvertStockDisabled);
  }
  if (g_py.converter_type == nullptr ||
      reinterpret_cast<PyObject*>(Py_TYPE(converter)) != g_py.converter_type ||
      reinterpret_cast<PyObject*>(Py_TYPE(mode)) != g_py.fake_mode_type || !THPVariable_Check(t)) {
    return not_served(ConvertStockArgs);
  }
  PyObject* mc = instance_attr(converter, g_py.s_meta_converter);
  if (mc == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(mc)) != g_py.meta_converter_type) {
    return not_served(ConvertStockState);
  }
  PyObject* describer = instance_attr(mc, g_py.s_describer);
  if (describer == nullptr ||
      reinterpret_cast<PyObject*>(Py_TYPE(describer)) != g_py.describer_type ||
      !attr_is_false(mc, g_py.s_copy_data) || !attr_is_false(describer, g_py.s_copy_data)) {
    return not_served(ConvertStockState);
  }

  // As stock: the memo first (a live FakeTensor of this real tensor).
  PyObject* memo = call1(converter, g_py.s_get_memo, t);
  if (memo == nullptr) return nullptr;
  if (memo != Py_None) {
    bump(ConvertMemo);
    return memo;
  }
  Py_DECREF(memo);

  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(t));
  if (type != g_py.tensor_type && type != g_py.parameter_type) {
    return not_served(ConvertStockTensor);
  }
  const at::Tensor& x = THPVariable_Unpack(t);
  if (!plain_tensor(t, x)) {
    return not_served(ConvertStockTensor);
  }
  if (!plain_state()) {
    return not_served(ConvertStockState);
  }
  PyObject* tensor_memo = instance_attr(mc, g_py.s_tensor_memo);
  PyObject* storage_memo = instance_attr(mc, g_py.s_storage_memo);
  PyObject* lookup_storage = instance_attr(describer, g_py.s_lookup_storage);
  if (tensor_memo == nullptr || storage_memo == nullptr || lookup_storage == nullptr) {
    return not_served(ConvertStockState);
  }

  PyObject* storage = call0(t, g_py.s_untyped_storage);
  if (storage == nullptr) return nullptr;
  // A storage some live fake of this converter already holds: stock re-points the
  // new fake at it with set_ (not served).
  {
    PyObject* sid = call1(lookup_storage, g_py.s_get, storage);
    if (sid == nullptr) {
      Py_DECREF(storage);
      return nullptr;
    }
    bool shared = false;
    if (sid != Py_None) {
      PyObject* held = call1(storage_memo, g_py.s_get, sid);
      if (held == nullptr) {
        Py_DECREF(sid);
        Py_DECREF(storage);
        return nullptr;
      }
      shared = held != Py_None;
      Py_DECREF(held);
    }
    Py_DECREF(sid);
    if (shared) {
      Py_DECREF(storage);
      return not_served(ConvertStockSharedStorage);
    }
  }

  // From here on, stock's steps in stock's order.
  if (!increment(mc, g_py.s_hit)) {
    Py_DECREF(storage);
    return nullptr;
  }
  PyObject* sid = call1(describer, g_py.s_get_storage_id, storage);
  Py_DECREF(storage);
  if (sid == nullptr) return nullptr;
  PyObject* tid = call1(describer, g_py.s_get_tensor_id, t);
  if (tid == nullptr || !increment(mc, g_py.s_arg_cnt)) {
    Py_XDECREF(tid);
    Py_DECREF(sid);
    return nullptr;
  }

  PyObject* r = nullptr;
  {
    c10::InferenceMode not_inference(false); // stock: inference_mode(t.is_inference())
    at::Tensor meta;
    try {
      meta = at::detail::empty_strided_meta(x.sizes(), x.strides(), x.scalar_type());
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    if (meta.defined()) {
      r = make_fake_tensor(mode, std::move(meta), g_py.cpu_device);
    }
    bool skip_requires_grad = false;
    if (r != nullptr && g_config.inject_convert_fault > 0) {
      --g_config.inject_convert_fault;
      skip_requires_grad = true;
    }
    if (r != nullptr && x.requires_grad() && !skip_requires_grad &&
        PyObject_SetAttr(r, g_py.s_requires_grad, Py_True) < 0) {
      Py_CLEAR(r);
    }
    if (r != nullptr) {
      PyObject* rs = call0(r, g_py.s_untyped_storage);
      if (rs == nullptr || PyObject_SetItem(storage_memo, sid, rs) < 0) {
        Py_CLEAR(r);
      }
      Py_XDECREF(rs);
    }
    if (r != nullptr && type == g_py.parameter_type &&
        PyObject_SetAttr(r, g_py.s_is_param, Py_True) < 0) {
      Py_CLEAR(r);
    }
    if (r != nullptr && PyObject_SetItem(tensor_memo, tid, r) < 0) {
      Py_CLEAR(r);
    }
  }
  Py_DECREF(sid);
  Py_DECREF(tid);
  if (r != nullptr) bump(ConvertFast);
  return r;
}

} // namespace fastfake
