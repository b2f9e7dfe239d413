// The elementwise path's two stride rules: TensorIterator's (C++ structured meta
// kernels) and torch._prims_common's (Python reference meta kernels), computed
// without building anything; which one reproduces stock is learned per signature
// (elementwise.cpp).
#include "elementwise/internal.h"


#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/Contiguity.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <memory>
#include <unordered_map>

namespace fastfake {
namespace elementwise_detail {

// Strides of `t` broadcast to `shape` (0 on missing and broadcast dims), as
// TensorIterator::compute_strides and torch's expand() produce them.
Shape broadcast_strides(const at::Tensor* t, at::IntArrayRef shape) {
  const size_t ndim = shape.size();
  Shape out(ndim, 0);
  if (t == nullptr) {
    return out;
  }
  const auto sizes = t->sizes();
  const auto strides = t->strides();
  const size_t offset = ndim - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[offset + i] = (sizes[i] == 1 && shape[offset + i] != 1) ? 0 : strides[i];
  }
  return out;
}

// TensorIterator's reorder_dimensions() comparator and insertion sort. Returns
// perm with perm[0] the fastest-moving dimension.
Shape sort_dims(const std::vector<Shape>& strides, at::IntArrayRef shape) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  Shape perm(ndim);
  for (int64_t i = 0; i < ndim; ++i) {
    perm[i] = ndim - 1 - i;
  }
  auto should_swap = [&](int64_t dim0, int64_t dim1) -> int {
    for (const auto& s : strides) {
      const int64_t s0 = s[dim0], s1 = s[dim1];
      if (s0 == 0 || s1 == 0) {
        continue;
      }
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (shape[dim0] > shape[dim1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < ndim; ++i) {
    int64_t dim1 = i;
    for (int64_t dim0 = i - 1; dim0 >= 0; --dim0) {
      const int c = should_swap(perm[dim0], perm[dim1]);
      if (c > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (c < 0) {
        break;
      }
    }
  }
  return perm;
}


// TensorIterator (functional op, output allocated by the iterator).
void ti_layout(const std::vector<Operand>& ops, at::IntArrayRef shape, OutLayout& out) {
  // compute_shape(): all_ops_same_shape_
  bool has_scalars = false, has_tensors = false, same = true;
  bool first = true;
  at::IntArrayRef shape0;
  for (const auto& op : ops) {
    at::IntArrayRef s = op.t ? op.t->sizes() : at::IntArrayRef();
    if (s.empty()) has_scalars = true; else has_tensors = true;
    if (has_scalars && has_tensors) same = false;
    if (first || shape0.empty()) {
      shape0 = s;
      first = false;
    } else if (!s.equals(shape0)) {
      same = false;
    }
  }
  if (same) {
    bool contig = true, cl = true, nod = true;
    for (const auto& op : ops) {
      if (op.t == nullptr) {
        cl = false; // a 0-dim wrapped number is contiguous, dense, not channels-last
        continue;
      }
      const auto* impl = op.t->unsafeGetTensorImpl();
      contig &= impl->is_contiguous(at::MemoryFormat::Contiguous);
      cl &= impl->is_contiguous(at::MemoryFormat::ChannelsLast);
      nod &= impl->is_non_overlapping_and_dense();
    }
    if (contig) {
      out.kind = OutLayout::Contiguous;
      return;
    }
    if (cl) {
      out.kind = OutLayout::ChannelsLast;
      return;
    }
    if (nod) {
      // NON_OVERLAPPING_DENSE: every operand has the same strides; the output takes them.
      const at::IntArrayRef ref = ops.back().t ? ops.back().t->strides() : at::IntArrayRef();
      bool equal = true;
      for (const auto& op : ops) {
        const at::IntArrayRef st = op.t ? op.t->strides() : at::IntArrayRef();
        if (!st.equals(ref)) {
          equal = false;
          break;
        }
      }
      if (equal) {
        out.kind = OutLayout::Strided;
        out.strides.assign(ref.begin(), ref.end());
        return;
      }
    }
  }
  const int64_t ndim = static_cast<int64_t>(shape.size());
  if (ndim <= 1) {
    out.kind = OutLayout::Contiguous;
    return;
  }
  std::vector<Shape> strides;
  strides.reserve(ops.size());
  for (const auto& op : ops) {
    strides.push_back(broadcast_strides(op.t, shape));
  }
  const Shape perm = sort_dims(strides, shape);
  bool inverted = true;
  for (int64_t j = 0; j < ndim; ++j) {
    if (perm[j] != ndim - j - 1) {
      inverted = false;
      break;
    }
  }
  if (inverted) {
    out.kind = OutLayout::Contiguous;
    return;
  }
  // compatible_stride() over the permuted shape (no max(size, 1)), then invert.
  out.kind = OutLayout::Strided;
  out.strides.assign(ndim, 0);
  int64_t next = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    out.strides[perm[d]] = next;
    next *= shape[perm[d]];
  }
}

// torch._prims_common.compute_elementwise_output_strides over the operands
// broadcast to `shape` (Python reference meta kernels).
void ref_layout(const std::vector<Operand>& ops, at::IntArrayRef shape, OutLayout& out) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  std::vector<Shape> strides;
  for (const auto& op : ops) {
    if (op.t != nullptr) {
      strides.push_back(broadcast_strides(op.t, shape));
    }
  }
  if (strides.empty() || ndim == 0) {
    out.kind = OutLayout::Contiguous;
    return;
  }
  if (ndim == 1) {
    out.kind = OutLayout::Strided;
    out.strides.assign(1, 1);
    return;
  }
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  if (strides.size() == 1) {
    const Shape& st = strides[0];
    if (c10::_compute_non_overlapping_and_dense<int64_t>(shape, st)) {
      out.kind = OutLayout::Strided;
      out.strides = st;
      return;
    }
    out.kind = OutLayout::Strided;
    const auto inferred = at::infer_dense_strides(shape, st);
    out.strides.assign(inferred.begin(), inferred.end());
    return;
  }
  bool contig = true, cl = true;
  for (const auto& st : strides) {
    contig &= c10::_compute_contiguous<int64_t>(shape, st, numel);
    cl &= ndim == 4 && c10::_compute_channels_last_contiguous_2d<int64_t>(shape, st);
  }
  Shape l2p; // logical to physical, outermost first
  if (contig && !cl) {
    out.kind = OutLayout::Contiguous;
    return;
  }
  if (cl && !contig) {
    l2p.push_back(0);
    for (int64_t d = 2; d < ndim; ++d) l2p.push_back(d);
    l2p.push_back(1);
  } else {
    const Shape perm = sort_dims(strides, shape); // innermost first
    for (int64_t d = ndim - 1; d >= 0; --d) l2p.push_back(perm[d]);
  }
  // make_contiguous_strides_for(permuted shape), with max(size, 1), back to logical.
  out.kind = OutLayout::Strided;
  out.strides.assign(ndim, 0);
  int64_t mult = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    out.strides[l2p[d]] = mult;
    mult *= std::max<int64_t>(shape[l2p[d]], 1);
  }
}

// The strides an OutLayout allocates, spelled out (for comparing two rules).
Shape explicit_strides(const OutLayout& l, at::IntArrayRef shape) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  Shape st(ndim, 0);
  switch (l.kind) {
    case OutLayout::Strided:
      return l.strides;
    case OutLayout::ChannelsLast: {
      const auto cl = c10::get_channels_last_strides_2d(shape);
      st.assign(cl.begin(), cl.end());
      return st;
    }
    case OutLayout::Contiguous:
    default: {
      int64_t mult = 1;
      for (int64_t d = ndim - 1; d >= 0; --d) {
        st[d] = mult;
        mult *= std::max<int64_t>(shape[d], 1);
      }
      return st;
    }
  }
}

} // namespace elementwise_detail
} // namespace fastfake
