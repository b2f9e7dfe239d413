"""Symbolic shapes: stock vs fastfake under a ShapeEnv.

Sizes / strides / storage offset / nbytes are compared as sympy expressions
(str of node.expr), and the ShapeEnv's guards (and its var-to-range table) must be
identical. fastfake currently sends calls with symbolic sizes to stock
(``elementwise.fallback.symbolic_shape``); the tests assert that this counter
moves, documenting the behaviour, and keep checking parity once a symbolic fast
path lands (then update the counter assertion).
"""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

import fastfake
import parity


def _mode_factory():
    return FakeTensorMode(shape_env=ShapeEnv())


def _sym(mode, real, dynamic=None):
    dyn = dynamic if dynamic is not None else [True] * real.dim()
    ctx = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dyn]
    )
    return mode.from_tensor(real, symbolic_context=ctx)


_shape_env_state = parity.shape_env_state


def _check_symbolic(fn, reals, dynamic=None, expect_symbolic_fallback=True):
    dynamic = dynamic or [None] * len(reals)

    def make_inputs(mode):
        return tuple(
            _sym(mode, r, d) if isinstance(r, torch.Tensor) else r for r, d in zip(reals, dynamic)
        )

    both = parity.run_both(fn, make_inputs, mode_factory=_mode_factory)
    parity.assert_parity(both, "symbolic")
    ref = _shape_env_state(both.stock[0])
    for i, f in enumerate(both.fast):
        assert _shape_env_state(f) == ref, f"fastfake run {i}: ShapeEnv state differs"
    if expect_symbolic_fallback:
        for i, f in enumerate(both.fast):
            assert f.stats["elementwise.fallback.symbolic_shape"] > 0, (
                f"fastfake run {i}: expected elementwise.fallback.symbolic_shape to move; "
                f"{parity.fast_path_counters(f.stats)}"
            )
    return both


X = torch.randn(3, 4)
Y = torch.randn(4)
Z = torch.randn(3, 1)
C = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
B = torch.rand(3, 4) > 0.5
I = torch.randint(0, 10, (3, 4))

CASES = {
    "add": (lambda a, b: torch.add(a, b), [X, Y]),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2), [X, Z]),
    "mul_scalar": (lambda a: a * 2.5, [X]),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), [X, Y]),
    "sub_bcast_both": (lambda a, b: a - b, [Z, Y]),
    "eq": (lambda a, b: a == b, [X, Y]),
    "where": (lambda c, a, b: torch.where(c, a, b), [B, X, Y]),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), [X, Y, Z]),
    "lerp": (lambda a, b: torch.lerp(a, b, 0.3), [X, Y]),
    "clamp_tensor": (lambda a, lo, hi: torch.clamp(a, lo, hi), [X, Y, Z]),
    "sigmoid": (torch.sigmoid, [X]),
    "exp_channels_last": (torch.exp, [C]),
    "abs_transposed": (lambda a: torch.abs(a.t()), [X]),
    "relu_int": (torch.relu, [I]),
    "bitwise_and_int": (lambda a, b: a & b, [I, I]),
    "add_inplace": (lambda a, b: a.add_(b), [X, Y]),
    "mul_inplace_scalar": (lambda a: a.mul_(3), [X]),
    "int_plus_float": (lambda a, b: a + b, [I, X]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_parity(name):
    fn, reals = CASES[name]
    _check_symbolic(fn, reals)


def test_symbolic_mixed_static_dynamic():
    # dim 1 static, dim 0 dynamic: broadcasting a static 4 against a dynamic dim
    _check_symbolic(lambda a, b: a * b, [X, torch.randn(1, 4)], dynamic=[[True, False], [False, True]])


def test_symbolic_broadcast_guard():
    # s0 vs s1 broadcasting adds guards / replacements to the ShapeEnv
    _check_symbolic(lambda a, b: a + b, [torch.randn(3, 4), torch.randn(3, 4)])


def test_symbolic_broadcast_error():
    # static shapes that cannot broadcast: same error on every run
    both = _check_symbolic(
        lambda a, b: a + b,
        [torch.randn(3, 4), torch.randn(5)],
        dynamic=[[False, False], [False]],
        expect_symbolic_fallback=False,
    )
    assert not both.stock[0].ok


def test_static_shapes_in_shape_env_are_served():
    """Under a ShapeEnv but with static sizes, the fast path serves the 2nd call."""
    both = _check_symbolic(
        lambda a, b: a + b, [X, Y], dynamic=[[False, False], [False]], expect_symbolic_fallback=False
    )
    assert both.fast[-1].stats["elementwise.hit"] == 1, both.fast[-1].stats


def _f(x, y, z):
    a = x + y
    b = torch.sigmoid(a) * 2
    c = torch.where(a > 0, b, z)
    d = torch.addcmul(c, x, y, value=0.5).clamp(min=-1.0)
    d.add_(1)
    return d.div(3, rounding_mode="floor"), (d == 0) | (x < y)


@pytest.mark.parametrize("tracing_mode", ["symbolic", "fake"])
def test_make_fx_same_graph(tracing_mode):
    inputs = (torch.randn(3, 4), torch.randn(4), torch.randn(3, 1))

    def trace():
        FakeTensorMode.cache_clear()
        gm = make_fx(_f, tracing_mode=tracing_mode)(*inputs)
        metas = [
            (str(n.meta["val"].shape), str(n.meta["val"].stride()), str(n.meta["val"].dtype))
            for n in gm.graph.nodes
            if isinstance(n.meta.get("val"), torch.Tensor)
        ]
        return gm.code, metas

    fastfake.uninstall()
    stock = trace()
    fastfake.install()
    fastfake.reset_stats()
    try:
        fast1 = trace()
        fast2 = trace()
        stats = fastfake.stats()
    finally:
        fastfake.uninstall()
    assert fast1 == stock
    assert fast2 == stock
    if tracing_mode == "symbolic":
        assert stats["elementwise.fallback.symbolic_shape"] > 0, parity.fast_path_counters(stats)
    else:
        assert stats["elementwise.hit"] > 0, parity.fast_path_counters(stats)
