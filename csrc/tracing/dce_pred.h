// make_fx's dead-code-elimination predicate in C (csrc/tracing/dce_pred.cpp,
// fastfake/tracing/dce_pred.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the predicate reads and calls, from a dict (fastfake/tracing/
// dce_pred.py, `_objects`): fx.Node, the sym types (proxy_tensor.py_sym_types),
// HigherOrderOperator, stock's is_accessor_node. False if a key is missing.
bool dce_pred_setup(PyObject* objects);
// A predicate standing for `stock` (one dispatch_trace's impure_pred) for one
// dead-code elimination: its own memo of each call_function target's
// (Node.is_impure(), is_accessor_node) answers. New reference.
PyObject* dce_pred_new(PyObject* stock);
void dce_pred_enable(bool on);
std::map<std::string, uint64_t> dce_pred_counts();
void dce_pred_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n nodes answered in C get the opposite answer.
void dce_pred_inject_fault(int n);

} // namespace fastfake
