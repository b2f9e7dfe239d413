// The pointwise fast path (csrc/elementwise/): registration, serving, reports.
#pragma once

#include "common/fastfake.h"

namespace fastfake {

enum class ArgKind : uint8_t {
  Tensor = 0,
  OptTensor,
  Scalar,
  OptScalar,
  Bool,
  OptBool,
  Int,
  OptInt,
  Float,
  OptFloat,
  Str,
  OptStr,
};

// Register a pointwise overload by its name (``str(op)``); bound to the overload
// object when one with that name is first dispatched.
void register_elementwise(
    const std::string& name,
    bool inplace,
    const std::vector<std::tuple<std::string, int, bool, PyObject*>>& args);
void clear_elementwise();
// Forget learned signatures, keep the registrations.
void forget_signatures();
bool is_elementwise_registered(PyObject* op);
// Testing: sizes of the registration tables; the bound on remembered non-pointwise
// overload objects.
PyObject* elementwise_sizes();
size_t set_not_pointwise_max(size_t n);

// Try the fast path. *handled: the call was dealt with here (the return value is
// the result, or nullptr with stock's error set); otherwise the caller passes it
// on. *served: the result was built here rather than by stock (admission).
PyObject* try_elementwise(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    bool* handled,
    bool* served);

// Per-op view of the learned signature tables (for reports and tests).
PyObject* elementwise_report();

} // namespace fastfake
