"""Hostile input through the public path: stock's error, never a crash.

Random overloads -- every registered pointwise overload and a set of ops the result
cache serves -- are called directly (``torch.ops.aten.<op>.<overload>(*args)``)
inside a FakeTensorMode with random arguments: wrong arity, None, bools, huge and
negative ints, floats, nested lists, strings, dtypes, devices, tensors of another
fake mode, real tensors, views of views (transposed, expanded, sliced, zero-size).
The same call runs under stock and with fastfake installed (learned state carried
over from call to call); the outcome -- the result's every field, or the exception's
type and message -- must be the same, and the process must survive. Hypothesis
shrinks a failing call.
"""
from __future__ import annotations


import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
import parity
from fastfake.elementwise.registry import pointwise_registry

aten = torch.ops.aten

CACHE_OPS = [
    aten.mm.default, aten.bmm.default, aten.addmm.default, aten.view.default, aten._unsafe_view.default,
    aten.t.default, aten.transpose.int, aten.permute.default, aten.expand.default, aten.sum.dim_IntList,
    aten.mean.dim, aten.amax.default, aten._softmax.default, aten.native_layer_norm.default,
    aten.cat.default, aten.stack.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default,
    aten.squeeze.dim, aten.clone.default, aten._to_copy.default, aten.embedding.default,
    aten.index_select.default, aten.split.Tensor, aten.reshape.default, aten.empty_strided.default,
    aten.new_empty.default, aten.full.default, aten.as_strided.default, aten.convolution.default,
]
POINTWISE = sorted((e.op for e in pointwise_registry().entries), key=str)
OPS = POINTWISE + CACHE_OPS

# Tensor makers: (description, fn(mode, other_mode) -> tensor); called inside no mode.
TENSORS = [
    ("f32[4,3]", lambda m, o: m.from_tensor(torch.empty(4, 3))),
    ("f32[4,3].t()", lambda m, o: m.from_tensor(torch.empty(3, 4)).t()),
    ("f32[1,3] expanded to [4,3]", lambda m, o: m.from_tensor(torch.empty(1, 3)).expand(4, 3)),
    ("f64[8,6][::2, 1::3]", lambda m, o: m.from_tensor(torch.empty(8, 6, dtype=torch.float64))[::2, 1::3]),
    ("i64[5]", lambda m, o: m.from_tensor(torch.empty(5, dtype=torch.int64))),
    ("bool[4,1]", lambda m, o: m.from_tensor(torch.empty(4, 1, dtype=torch.bool))),
    ("bf16[0,3]", lambda m, o: m.from_tensor(torch.empty(0, 3, dtype=torch.bfloat16))),
    ("f32[] (0-dim)", lambda m, o: m.from_tensor(torch.empty(()))),
    ("c64[2,2]", lambda m, o: m.from_tensor(torch.empty(2, 2, dtype=torch.complex64))),
    ("f32[2,3,4] view of view", lambda m, o: m.from_tensor(torch.empty(4, 6, 2)).view(2, 2, 6, 2)[1].permute(2, 0, 1)),
    ("f32[4,3] of another mode", lambda m, o: o.from_tensor(torch.empty(4, 3))),
    ("real f32[4,3]", lambda m, o: torch.zeros(4, 3)),  # zeros: messages print values
    ("f32[4,3] requires_grad", lambda m, o: m.from_tensor(torch.empty(4, 3)).requires_grad_()),
]

SCALARS = [None, True, False, 0, 1, -1, 2**62, -(2**62), 2**70, 0.5, float("nan"), float("inf"), -0.0,
           1 + 1j, "mean", "", torch.float16, torch.int32, torch.device("cpu"), torch.device("meta"),
           torch.strided, torch.contiguous_format, [], [0], [-1], [2, 3], [[1, 2], [3]], (4, 3), [10**12],
           [-5, 2]]

arg = st.one_of(
    st.sampled_from(range(len(TENSORS))).map(lambda i: ("tensor", i)),
    st.sampled_from(range(len(SCALARS))).map(lambda i: ("scalar", i)),
    st.lists(st.sampled_from(range(len(TENSORS))), min_size=0, max_size=3).map(lambda ix: ("tensors", ix)),
)


def _materialise(spec, mode, other):
    kind, v = spec
    if kind == "tensor":
        return TENSORS[v][1](mode, other)
    if kind == "tensors":
        return [TENSORS[i][1](mode, other) for i in v]
    return SCALARS[v]


def _describe(ok: bool, value):
    if not ok:
        return parity.error_outcome(value)
    return ("ok", parity.describe_value(value, []))


def _run(op, specs, allow_non_fake: bool):
    mode = FakeTensorMode(allow_non_fake_inputs=allow_non_fake)
    other = FakeTensorMode()
    args = [_materialise(s, mode, other) for s in specs]
    try:
        with mode:
            return _describe(True, op(*args))
    except Exception as e:  # noqa: BLE001 - the error is part of the outcome
        return _describe(False, e)


@settings(max_examples=1500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    op_idx=st.integers(0, len(OPS) - 1),
    specs=st.lists(arg, min_size=0, max_size=5),
    allow=st.booleans(),
)
def _check_random_call(op_idx, specs, allow):
    op = OPS[op_idx]
    fastfake.uninstall()
    stock = _run(op, specs, allow)
    fastfake.install()
    try:
        fast = [_run(op, specs, allow) for _ in range(2)]  # learn, then reuse
    finally:
        fastfake.uninstall()
    for f in fast:
        assert f == stock, f"{op}({specs}, allow_non_fake_inputs={allow}): fastfake {f} vs stock {stock}"


def test_random_calls_give_stock_outcomes():
    _check_random_call()
    s = fastfake.stats()
    # not only errors: valid calls were served from learned state too
    assert s["elementwise.hit"] + s["cache.hit"] > 50, s


@pytest.mark.parametrize("op", [aten.add.Tensor, aten.mm.default, aten.view.default])
def test_wrong_arity_and_types(op):
    cases = [(), (None,), (1, 2, 3, 4, 5, 6), ("x", "y"), ([1, [2, [3]]],)]
    for specs in cases:
        def run():
            mode = FakeTensorMode()
            try:
                with mode:
                    return _describe(True, op(*specs))
            except Exception as e:  # noqa: BLE001
                return _describe(False, e)

        fastfake.uninstall()
        stock = run()
        fastfake.install()
        assert run() == stock and run() == stock
