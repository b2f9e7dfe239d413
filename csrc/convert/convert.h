// Real tensors into FakeTensors, and FakeTensor snapshots (csrc/convert/).
#pragma once

#include "common/fastfake.h"

namespace fastfake {

// csrc/convert/detach.cpp: the C-level stand-in for torch._subclasses.fake_impls.fast_detach
// (vectorcall signature; stock's function, g_py.stock_fast_detach, serves every
// call it does not).
PyObject* fast_detach(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);

// csrc/convert/convert.cpp: FakeTensorConverter.from_real_tensor(mode, t) for a plain real
// tensor (no shape env, source, symbolic context or make_constant: the caller
// checks those). New reference: the FakeTensor; NotImplemented where stock must
// convert (counted convert.stock.<why>); nullptr with an error set.
PyObject* convert_real(PyObject* converter, PyObject* mode, PyObject* t);

// csrc/convert/real_inputs.cpp: non-fake tensor arguments converted by the
// mode's own converter.
enum class RealInputs {
  None, // no non-fake tensor argument
  Converted, // *new_args / *new_kwargs (new references; kwargs may stay nullptr)
  Stock, // the call is stock's (counted)
};
RealInputs convert_real_inputs(
    PyObject* mode,
    PyObject* func,
    PyObject* args,
    PyObject* kwargs,
    PyObject** new_args,
    PyObject** new_kwargs);

} // namespace fastfake
