// The elementwise path's stride rules and the operand type they read
// (elementwise_strides.cpp), shared with elementwise.cpp.
#pragma once

#include "common/fastfake.h"
#include "elementwise/elementwise.h"
#include "stock/calls.h"
#include "stock/counts.h"

#include <c10/util/SmallVector.h>

#include <vector>

namespace fastfake {
namespace elementwise_detail {

struct Operand {
  PyObject* obj = nullptr; // FakeTensor, or the Python number for a wrapped scalar
  const at::Tensor* t = nullptr; // null for wrapped scalars
  PyObject* device = nullptr; // borrowed torch.device (fake device)
};

using Shape = c10::SmallVector<int64_t, 6>;

// Where an output's strides come from: a memory format, or explicit strides.
struct OutLayout {
  enum Kind { Contiguous, ChannelsLast, Strided } kind = Contiguous;
  Shape strides;
};

// The strides of `t` broadcast to `shape` (0 for broadcast dims).
Shape broadcast_strides(const at::Tensor* t, at::IntArrayRef shape);
// TensorIterator's rule (C++ structured meta kernels; functional op, output
// allocated by the iterator).
void ti_layout(const std::vector<Operand>& ops, at::IntArrayRef shape, OutLayout& out);
// torch._prims_common's rule (Python reference meta kernels).
void ref_layout(const std::vector<Operand>& ops, at::IntArrayRef shape, OutLayout& out);
// The strides an OutLayout allocates, spelled out (for comparing two rules).
Shape explicit_strides(const OutLayout& l, at::IntArrayRef shape);

} // namespace elementwise_detail
} // namespace fastfake
