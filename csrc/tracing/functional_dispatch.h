// FunctionalTensorMode.__torch_dispatch__ in C for the plain path
// (csrc/tracing/functional_dispatch.cpp, fastfake/tracing/functional_dispatch.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the fast path uses: the FunctionalTensorMode and FunctionalTensor
// classes, stock's __torch_dispatch__ (every call not served), the Python helper
// that reads an op's facts (`facts(func) -> tuple | None`), the helper that wraps
// outputs of an unusual structure as stock does, stock's
// return_and_correct_aliasing, the simple registry's data dict, the module
// dict of torch.utils._python_dispatch and the setter of the compile-internals
// flag its mode enter / exit keep, DispatchKey.Functionalize and
// DispatchKey.CompositeImplicitAutograd (Python objects), ((Tensor, FakeTensor,
// FunctionalTensor), (SymInt, SymFloat, SymBool), OpOverload), and the raw
// representation of FunctionalTensor._extra_dispatch_keys. Returns the C++ text of that key set
// (for the Python side to compare with str() of stock's). Needs the GIL.
std::string functional_dispatch_setup(PyObject* mode_type, PyObject* tensor_type, PyObject* stock, PyObject* facts,
                                      PyObject* wrap_outputs, PyObject* alias_fix, PyObject* registry_data,
                                      PyObject* dispatch_module_dict, PyObject* set_flag, PyObject* functionalize_key,
                                      PyObject* cia_key, PyObject* type_tuples, PyObject* extra_keys_raw);
// Binds Dynamo's frame-callback getter (torch._C._dynamo.eval_frame.
// get_eval_frame_callback) and torch._dynamo.eval_frame's dict (its `_stance`):
// a call is served only where stock's torch._disable_dynamo wrapper would change
// nothing (no callback set, the default stance). Until bound, nothing is served.
void functional_dispatch_setup_dynamo(PyObject* get_callback, PyObject* eval_frame_dict);
// What a release adds to the plain path: the alias / detach dispatch-key step
// (a callable, or None where the release has none), has_effects' order, and 2.9's
// layout: its effect table (torch._higher_order_ops.effects.SIDE_EFFECTS; None where
// effects live in the simple registry), no torch._disable_dynamo wrapper around
// stock's method, no compile-internals flag set by the mode's enter / exit, bare
// assertions.
void functional_dispatch_setup_variant(PyObject* preserve_keys, PyObject* alias_op, PyObject* detach_op,
                                       bool effect_first, PyObject* side_effects, bool layout_2_9);
// What FunctionalTensorMode.__torch_dispatch__ becomes (a method descriptor).
// New reference.
PyObject* functional_dispatch_function();
void functional_dispatch_enable(bool on);
// crosscheck: check(mode, func, args, kwargs) before a served call: stock's own
// predicates must say the call takes the plain path (None: off).
void functional_dispatch_set_check(PyObject* check);
// Forget every op's facts (they are read again on the next call).
void functional_dispatch_clear();
std::map<std::string, uint64_t> functional_dispatch_counts();
void functional_dispatch_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls return the inner (unwrapped) outputs.
void functional_dispatch_inject_fault(int n);

} // namespace fastfake
