// The proxy mode's record of a traced SymNode operation in C
// (csrc/tracing/sym_register.cpp, fastfake/tracing/sym_register.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the C function reads and calls: stock's _sym_register (every call
// that is not the plain one), proxy_tensor's module dict and the (name, value)
// pairs of it the plain path stands for (checked per call), torch.fx's module dict
// (fx.Proxy), the sym types (SymInt, SymFloat, SymBool), _SymNodeDict, Thunk,
// fx.Proxy, stock's set_proxy_slot and a function making stock's already-computed
// thunk of a value (`Thunk(lambda: r)`), the opaque-type registry's dict
// (torch._library.opaque_object._OPAQUE_TYPES.data; None where the release has
// none) and the keys it would hold for SymInt, SymFloat, SymBool and object (weak
// references to them). Needs the GIL.
void sym_register_setup(PyObject* stock, PyObject* module_dict, PyObject* module_names, PyObject* fx_dict,
                        PyObject* sym_types, PyObject* symnode_dict_type, PyObject* thunk_type,
                        PyObject* proxy_type, PyObject* set_proxy_slot, PyObject* computed_thunk,
                        PyObject* opaque_types, PyObject* opaque_keys);
// Binds what set_proxy_slot's SymInt branch done in C reads: sympy.Symbol,
// proxy_tensor._SympyExprTrackerValue and logging.Logger (None: stock's
// set_proxy_slot is called).
void sym_register_setup_slot(PyObject* symbol_type, PyObject* tracker_value_type, PyObject* logger_type);
// What proxy_tensor._sym_register becomes. New reference.
PyObject* sym_register_function();
void sym_register_enable(bool on);
// crosscheck: check(tracer, func, args, out, node) after every served call (None: off).
void sym_register_set_check(PyObject* check);
std::map<std::string, uint64_t> sym_register_counts();
void sym_register_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls leave the result's proxy slot unset.
void sym_register_inject_fault(int n);

} // namespace fastfake
