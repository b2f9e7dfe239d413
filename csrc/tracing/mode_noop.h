// What the tracing modes' C dispatch (csrc/tracing/functional_dispatch.cpp,
// csrc/tracing/proxy_dispatch.cpp) proves before leaving out a step stock's Python
// takes: that OpOverload.decompose answers NotImplemented, and that the mode
// enter / exit stock makes around that call changes nothing but the
// compile-internals flag (which its exit sets; resync_compile_internals_flag does
// the same).
#pragma once

#include <Python.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <optional>

namespace fastfake {

// The backend key stock's autograd_would_have_decomposed asks about for a device
// type (_parse_dispatch_key(_dispatch_key_for_device(type))); nullopt where that
// does not parse back.
std::optional<c10::DispatchKey> backend_key(c10::DeviceType type);

// 1 where `func.decompose(...)` answers NotImplemented: no
// CompositeImplicitAutograd kernel in its py_kernels (`cia_key`, the Python
// DispatchKey) or in the dispatcher (`handle`); 0 where it would decompose or
// that cannot be read. Never leaves a Python error set.
int decompose_not_implemented(PyObject* func, const c10::OperatorHandle& handle, PyObject* cia_key);

// 1 where stock's `with mode:` (TorchDispatchMode.__enter__ / __exit__ of an infra
// mode kept at `key`, not pre-dispatch) around such a decompose changes nothing
// but the compile-internals flag: no dispatch key of its own (None or none), its enter stack and
// flag deques there, no mode of its kind set, another mode set (so the Python keys
// stay), the flag's setter in `dispatch_dict` (torch.utils._python_dispatch's)
// still `set_flag`; 0 otherwise (stock's). `set_flag` None: the release's enter /
// exit set no flag in C (2.9: they only save and restore the Python globals), and
// `dispatch_dict` must have no setter. Never sets a Python error.
int enter_exit_is_noop(PyObject* mode, c10::impl::TorchDispatchModeKey key, PyObject* dispatch_dict,
                       PyObject* set_flag);

// The setter to hand the two functions above: `set_flag`, or None where the
// release's enter / exit set no flag in C (2.9). (A bound None is held as nullptr,
// which those functions read as "not bound".)
inline PyObject* flag_setter(bool release_sets_none, PyObject* set_flag) {
  return release_sets_none ? Py_None : set_flag;
}

// The compile-internals flag set as that exit sets it (from the Python global
// beside it; nothing where `set_flag` is None): 0, or -1 with an error set.
int resync_compile_internals_flag(PyObject* dispatch_dict, PyObject* set_flag);

} // namespace fastfake
