// The proxy mode's SymNode dispatch in C (csrc/tracing/sym_dispatch.cpp,
// fastfake/tracing/sym_dispatch.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the C function reads and calls, from a dict (fastfake/tracing/
// sym_dispatch.py, `_objects`): stock's handle_sym_dispatch, the module dicts
// and (name, value) pairs the plain path stands for (checked per call), the PROXY
// mode key, ProxyTorchDispatchMode and its stock __sym_dispatch__, the pre-dispatch
// mode-stack state's class and its stock `get`, operator.mul, stock's _push_mode.
// False (nothing served) if a key is missing. Needs the GIL.
bool sym_dispatch_setup(PyObject* objects);
// What proxy_tensor.handle_sym_dispatch becomes. New reference.
PyObject* sym_dispatch_function();
void sym_dispatch_enable(bool on);
// crosscheck: check(mode, func, args, out, stack_length_before) after every served
// call (None: off).
void sym_dispatch_set_check(PyObject* check);
std::map<std::string, uint64_t> sym_dispatch_counts();
void sym_dispatch_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls that record a result leave it unrecorded
// (no _sym_register call).
void sym_dispatch_inject_fault(int n);

} // namespace fastfake
