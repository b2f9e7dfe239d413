// The C-level FakeTensorMode.__torch_dispatch__ and FakeTensor.device (csrc/dispatch/).
#pragma once

#include "common/fastfake.h"

namespace fastfake {

PyObject* new_fast_dispatch();
PyObject* new_device_descriptor(PyObject* stock_property);
bool init_types();

} // namespace fastfake
