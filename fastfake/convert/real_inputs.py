"""Which ops may have their non-fake tensor arguments converted before dispatch.

With ``FakeTensorMode(allow_non_fake_inputs=True)`` (how shape-inference tools and
quick experiments run a real ``nn.Module`` on fake inputs) stock converts every
real tensor argument with the mode's own converter (memoised per mode:
``converter.from_real_tensor(mode, t)``) and then runs the call as it runs one with
fake tensors only, except that its cache is bypassed ("non-fake tensor"). The C++
dispatch (csrc/convert/real_inputs.cpp) does the same conversion, in the same order, and
then serves the converted call like any other. Where stock does something else
first, the call stays stock's:

* ``inplace_view`` ops raise on real inputs;
* ops that allow numbers as tensors (add, mul, div, ...) called with real tensors
  only are computed on the real values (constant propagation);
* ``lift_fresh`` / ``lift_fresh_copy`` (torch.tensor) are answered specially;
* ops that mutate an argument: stock's result for them may depend on whether its
  cache answered (an in-place resize happens on a miss only), and stock never
  caches a call with a real argument.
"""
from __future__ import annotations

import torch
from torch._subclasses import fake_tensor as ft

# Policy codes read by C++.
STOCK = 0  # never convert: the call is stock's
WITH_FAKE = 1  # convert only if some argument already is a FakeTensor of the mode
ALWAYS = 2


def policy(func) -> int:
    if not isinstance(func, torch._ops.OpOverload):
        return STOCK
    if torch.Tag.inplace_view in func.tags or func in ft.FakeTensorMode.lift_fns:
        return STOCK
    if func._schema.is_mutable:
        return STOCK
    if ft.should_allow_numbers_as_tensors(func):
        return WITH_FAKE
    return ALWAYS

