"""Bad inputs: fastfake raises exactly stock's error (type and message), on the
first call (admission) and on repeated calls (rejected signature / fallback).

Each case runs once under stock and three times under fastfake (fresh modes and
inputs each time); all outcomes must be identical and must be errors.
"""
from __future__ import annotations

import pytest
import torch

import parity
from fastfake.common import compat as _compat


def E(*shape, dtype=torch.float32, device="cpu"):
    return lambda: torch.empty(shape, dtype=dtype, device=device)


def _expanded(*shape, dtype=torch.float32):
    def make():
        small = [1] * len(shape)
        small[-1] = shape[-1]
        return torch.empty(small, dtype=dtype).expand(shape)

    return make


CASES = {
    # non-broadcastable shapes
    "add_nonbroadcastable": (lambda a, b: torch.add(a, b), [E(3, 4), E(5)]),
    "mul_nonbroadcastable_3d": (lambda a, b: a * b, [E(2, 3, 4), E(2, 5, 4)]),
    "where_nonbroadcastable": (lambda c, a, b: torch.where(c, a, b), [E(3, dtype=torch.bool), E(4), E(3)]),
    "addcmul_nonbroadcastable": (lambda a, b, c: torch.addcmul(a, b, c), [E(3, 4), E(4), E(2, 1, 3)]),
    "lerp_nonbroadcastable": (lambda a, b: torch.lerp(a, b, 0.5), [E(3, 4), E(3)]),
    "clamp_nonbroadcastable_bounds": (lambda a, lo, hi: torch.clamp(a, lo, hi), [E(3, 4), E(3), E(4)]),
    "eq_nonbroadcastable": (lambda a, b: a == b, [E(0), E(2)]),
    # in-place whose broadcast shape differs from self
    "add_inplace_bigger_other": (lambda a, b: a.add_(b), [E(4), E(3, 4)]),
    "mul_inplace_bigger_other": (lambda a, b: a.mul_(b), [E(1, 4), E(3, 4)]),
    "sub_inplace_size0_vs_1": (lambda a, b: a.sub_(b), [E(1), E(0)]),
    "div_inplace_0dim_self": (lambda a, b: a.div_(b), [E(), E(2)]),
    # in-place result dtype that cannot be cast to self
    "int_add_inplace_float": (lambda a, b: a.add_(b), [E(3, dtype=torch.int64), E(3)]),
    "int_add_inplace_float_scalar": (lambda a: a.add_(1.5), [E(3, dtype=torch.int32)]),
    "int_mul_inplace_complex": (lambda a, b: a.mul_(b), [E(3, dtype=torch.int32), E(3, dtype=torch.complex64)]),
    "float_mul_inplace_complex_scalar": (lambda a: a.mul_(1j), [E(3)]),
    "bool_add_inplace_int": (lambda a, b: a.add_(b), [E(3, dtype=torch.bool), E(3, dtype=torch.int64)]),
    "int_div_inplace": (lambda a, b: a.div_(b), [E(3, dtype=torch.int64), E(3, dtype=torch.int64)]),
    "int_sigmoid_inplace": (lambda a: a.sigmoid_(), [E(3, dtype=torch.int64)]),
    # bitwise ops on floating point
    "bitwise_and_float": (lambda a, b: torch.bitwise_and(a, b), [E(3), E(3)]),
    "bitwise_or_float_int": (lambda a, b: a | b, [E(3), E(3, dtype=torch.int64)]),
    "bitwise_xor_float_scalar": (lambda a: torch.bitwise_xor(a, 1), [E(3)]),
    "bitwise_not_float": (lambda a: torch.bitwise_not(a), [E(3)]),
    "bitwise_left_shift_float": (lambda a, b: torch.bitwise_left_shift(a, b), [E(3), E(3)]),
    "bitwise_and_inplace_float": (lambda a, b: a.bitwise_and_(b), [E(3, dtype=torch.int32), E(3)]),
    # device mismatch between two non-scalar fake tensors
    "add_cpu_cuda": (lambda a, b: a + b, [E(3), E(3, device="cuda")]),
    "add_cuda_cpu_1d": (lambda a, b: torch.add(a, b), [E(2, 3, device="cuda"), E(3)]),
    "where_cpu_cond_cuda_values": (lambda c, a, b: torch.where(c, a, b), [E(3, dtype=torch.bool), E(3, device="cuda"), E(3, device="cuda")]),
    "mul_inplace_cuda_self_cpu_other": (lambda a, b: a.mul_(b), [E(3, device="cuda"), E(3)]),
    "add_inplace_cpu0dim_self_cuda_other": (lambda a, b: a.add_(b), [E(), E(3, device="cuda")]),
    # alpha of the wrong type
    "add_int_float_alpha": (lambda a, b: torch.add(a, b, alpha=0.5), [E(3, dtype=torch.int64), E(3, dtype=torch.int64)]),
    "sub_bool_alpha_int": (lambda a, b: torch.sub(a, b, alpha=2), [E(3, dtype=torch.bool), E(3, dtype=torch.bool)]),
    "add_float_complex_alpha": (lambda a, b: torch.add(a, b, alpha=1j), [E(3), E(3)]),
    "add_inplace_int_float_alpha": (lambda a, b: a.add_(b, alpha=1.5), [E(3, dtype=torch.int32), E(3, dtype=torch.int32)]),
    "sub_bool_tensors": (lambda a, b: torch.sub(a, b), [E(3, dtype=torch.bool), E(3, dtype=torch.bool)]),
    # in-place into an expanded (internally overlapping) self
    "add_inplace_expanded_self": (lambda a, b: a.add_(b), [_expanded(3, 4), E(3, 4)]),
    "mul_inplace_expanded_self_scalar": (lambda a: a.mul_(2), [_expanded(3, 4)]),
    "clamp_inplace_expanded_self": (lambda a: a.clamp_(0, 1), [_expanded(2, 3)]),
    "sigmoid_inplace_expanded_self": (lambda a: a.sigmoid_(), [_expanded(4, 2)]),
    # misc
    "div_bad_rounding_mode": (lambda a, b: torch.div(a, b, rounding_mode="nearest"), [E(3), E(3)]),
    "clamp_no_bounds": (lambda a: torch.clamp(a), [E(3)]),
    "where_non_bool_cond": (lambda c, a, b: torch.where(c, a, b), [E(3), E(3), E(3)]),
    "inplace_leaf_requires_grad": (lambda a: a.add_(1), [lambda: torch.empty(3, requires_grad=True)]),
}


# Inputs eager torch rejects but stock FakeTensorMode (meta kernels) accepts in
# torch 2.13.0: bitwise ops on floating point, in-place into an expanded self,
# some in-place casts. Parity still holds: fastfake must accept them too, with
# identical results. (If a future torch starts raising here, the test says so.)
STOCK_FAKE_ACCEPTS = {
    "add_inplace_expanded_self",
    "add_inplace_int_float_alpha",
    "bitwise_and_float",
    "bitwise_left_shift_float",
    "bitwise_not_float",
    "bitwise_or_float_int",
    "bitwise_xor_float_scalar",
    "clamp_inplace_expanded_self",
    "float_mul_inplace_complex_scalar",
    "int_mul_inplace_complex",
    "mul_inplace_expanded_self_scalar",
    "sigmoid_inplace_expanded_self",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_error(name):
    fn, makers = CASES[name]
    both = parity.run_both(fn, lambda mode: tuple(m() for m in makers), fast_runs=3)
    parity.assert_parity(both, name)
    for i, f in enumerate(both.fast):
        assert f.error() == both.stock[0].error(), f"{name}: fastfake run {i}"
    if name in STOCK_FAKE_ACCEPTS:
        assert both.stock[0].ok, f"{name}: stock now raises {both.stock[0].error()}; move it to the error cases"
        assert all(f.ok for f in both.fast)
    else:
        if both.stock[0].ok and _compat.torch_release() != parity.PRIMARY_RELEASE:
            pytest.skip(f"stock torch {_compat.torch_release()} does not raise for {name}")
        assert not both.stock[0].ok, f"{name}: stock did not raise, the case is not an error case"
        assert all(not f.ok for f in both.fast)


def test_error_then_valid_call_same_op():
    """A rejected (erroring) signature does not poison other calls of the same op."""
    bad = parity.run_both(lambda a, b: a + b, lambda m: (torch.empty(3, 4), torch.empty(5)))
    parity.assert_parity(bad)
    good = parity.check(
        lambda a, b: a + b, lambda m: (torch.empty(3, 4), torch.empty(4)), expect_hit=True
    )
    assert good.stock[0].ok
