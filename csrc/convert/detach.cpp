// fast_detach: the FakeTensor snapshot make_fx and FakeTensorProp take of every
// traced value (torch.fx.experimental.proxy_tensor.snapshot_fake ->
// torch._subclasses.fake_impls.fast_detach), built in C++.
//
// Stock (every supported release):
//     with no_python_dispatcher(), in_kernel_invocation_manager(fake_mode):
//         out = torch.ops.aten.detach.default(x)
//     return FakeTensor(fake_mode, out, x.device[, real_tensor=..., dispatch_keys=...])
// and FakeTensor.__new__ is Tensor._make_subclass(cls, out, out.requires_grad,
// dispatch_device=True, device_for_backend_keys=device) plus the instance
// attributes. Here the same two dispatcher calls run under the same thread-local
// state (the detach under in_kernel_invocation_manager's guards, then
// _make_subclass's own detach with the mode stack stashed), so storage, sizes,
// strides and offset (the same SymInts), version counter, key set and inference
// state are stock's by construction; the object is then finished as
// make_fake_tensor finishes every FakeTensor built here. About 2 us against
// ~45 us.
//
// Whatever is not the plain case goes to stock's function, unchanged: other
// argument shapes, a FakeTensorMode subclass or a FakeTensor subclass, a real
// tensor snapshot (include_real with a real_tensor), a FakeTensor carrying its
// own dispatch_keys (copied by 2.14+, dropped before), a mode in kernel
// invocation, meta already in the thread-local include set, any other key in
// that set (functorch transforms, ...), a torch-function mode (make_fx's
// TorchFunctionMetadataMode sees stock's detach and the tensor property reads in
// FakeTensor.__new__, and records them on the tracer), export's fake
// tensor leak tracker, non-strided layouts, devices stock would normalise.
#include "common/compat.h"
#include "common/fastfake.h"
#include "convert/convert.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/PythonDispatcherTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/disable_torch_function.h>
#include <torch/csrc/utils/torch_dispatch_mode.h>

namespace fastfake {

namespace {

PyObject* call_stock(PyObject* const* args, size_t nargsf, PyObject* kwnames, Stat why) {
  bump(why);
  if (g_py.stock_fast_detach == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "fastfake: fast_detach used before setup_detach()");
    return nullptr;
  }
  return PyObject_Vectorcall(g_py.stock_fast_detach, args, nargsf, kwnames);
}

bool in_kernel(PyObject* mode) {
  PyObject* v = instance_attr(mode, g_py.s_in_kernel_invocation);
  return v != Py_False; // missing or anything but False: not the plain case
}

// The thread-local include set holds nothing but its default (BackendSelect,
// ADInplaceOrView), what torch dispatch modes add (which stock's guards exclude /
// stash, as the guards here do), the Python dispatcher's key (which stock's
// no_python_dispatcher() and _make_subclass remove for their calls, as the
// DisablePythonDispatcher guards here do) and Functionalize (AOTAutograd's
// functionalization: its detach kernel hands a tensor that is no
// FunctionalTensorWrapper, as a FakeTensor is not, straight to the next key; it
// stays in the set for both calls here as it does in stock). These are the sets
// make_fx and AOTAutograd snapshot under.
bool plain_tls() {
  const auto local = c10::impl::tls_local_dispatch_key_set();
  const c10::DispatchKeySet allowed{
      c10::DispatchKey::Python,
      c10::DispatchKey::PythonTLSSnapshot,
      c10::DispatchKey::PreDispatch,
      c10::DispatchKey::PythonDispatcher,
      c10::DispatchKey::Functionalize};
  return (local.included_ - allowed - c10::default_included_set).empty();
}

} // namespace

PyObject* fast_detach(PyObject* /*self*/, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr || nargs < 2 || nargs > 3) {
    return call_stock(args, nargsf, kwnames, DetachStockArgs);
  }
  PyObject* mode = args[0];
  PyObject* x = args[1];
  if (reinterpret_cast<PyObject*>(Py_TYPE(mode)) != g_py.fake_mode_type || !is_fake_exact(x)) {
    return call_stock(args, nargsf, kwnames, DetachStockArgs);
  }
  if (nargs == 3) {
    const int real = PyObject_IsTrue(args[2]);
    if (real < 0) return nullptr;
    if (real && instance_attr(x, g_py.s_real_tensor) != Py_None) {
      return call_stock(args, nargsf, kwnames, DetachStockTensor);
    }
  }
  PyObject* own_mode = instance_attr(x, g_py.s_fake_mode);
  PyObject* device = instance_attr(x, g_py.s_fake_device);
  if (instance_attr(x, g_py.s_dispatch_keys) != Py_None || own_mode == nullptr ||
      device == nullptr || !THPDevice_Check(device)) {
    return call_stock(args, nargsf, kwnames, DetachStockTensor);
  }
  const c10::Device dev = reinterpret_cast<THPDevice*>(device)->device;
  if (dev.is_meta() || (!dev.is_cpu() && !dev.has_index())) {
    return call_stock(args, nargsf, kwnames, DetachStockTensor);
  }
  const at::Tensor& xt = THPVariable_Unpack(x);
  if (xt.layout() != at::kStrided || xt.is_nested()) {
    return call_stock(args, nargsf, kwnames, DetachStockTensor);
  }
  if (in_kernel(mode) || (own_mode != mode && in_kernel(own_mode)) ||
      c10::impl::tls_local_dispatch_key_set().included_.has_backend(c10::BackendComponent::MetaBit) ||
      !plain_tls() || at::impl::torch_function_mode_enabled() || export_leak_tracking()) {
    return call_stock(args, nargsf, kwnames, DetachStockState);
  }

  at::Tensor data;
  try {
    at::Tensor out;
    {
      // no_python_dispatcher(), in_kernel_invocation_manager(fake_mode):
      // _DisableTorchDispatch, then _PreserveDispatchKeyGuard (the whole
      // thread-local set is put back afterwards: removing Meta again by key would
      // leave its backend bit set on some releases) and
      // _set_meta_in_tls_dispatch_include(True).
      c10::impl::DisablePythonDispatcher no_python_dispatcher;
      torch::DisableTorchDispatch no_torch_dispatch;
      auto local = c10::impl::tls_local_dispatch_key_set();
      local.included_ = local.included_ | c10::DispatchKeySet(c10::DispatchKey::Meta);
      c10::impl::ForceDispatchKeyGuard meta_in_tls(local);
      out = at::_ops::detach::call(xt);
    }
    {
      // Tensor._make_subclass(cls, out, ...)
      torch::torch_dispatch_mode::StashTorchDispatchStackGuard stash_modes;
      c10::impl::DisablePythonDispatcher no_python_dispatcher;
      data = out.detach();
    }
    data.unsafeGetTensorImpl()->set_allow_tensor_metadata_change(true);
    data.set_requires_grad(false);
  } catch (const std::exception&) {
    PyErr_Clear();
    return call_stock(args, nargsf, kwnames, DetachStockState);
  }
  PyObject* r = make_fake_tensor(mode, std::move(data), device);
  if (r != nullptr) bump(DetachFast);
  return r;
}

} // namespace fastfake
