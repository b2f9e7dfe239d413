"""pytest-benchmark micro-benchmarks: one op inside FakeTensorMode, static shapes.

    pytest bench/test_micro.py --benchmark-group-by=group
    pytest bench/test_micro.py --benchmark-disable -q      # just check they run

Each op has its own benchmark group with a ``stock`` and a ``fastfake`` entry.
"""
from __future__ import annotations

import pytest
import torch

import fastfake
from bench.harness import set_impl
from bench.micro import make_op

IMPLS = ("stock", "fastfake")


@pytest.fixture(params=IMPLS)
def impl(request):
    set_impl(request.param)
    try:
        yield request.param
    finally:
        fastfake.uninstall()


def _bench(benchmark, name: str):
    mode, fn = make_op(name)
    with mode:
        for _ in range(20):  # warm (fastfake admits the signature on the first call)
            fn()
        return benchmark(fn)


def _check_tensor(out, shape=(64, 128)):
    assert isinstance(out, torch.Tensor)
    assert tuple(out.shape) == shape and out.dtype == torch.float32


@pytest.mark.benchmark(group="add_broadcast")
def test_add_broadcast(benchmark, impl):
    _check_tensor(_bench(benchmark, "add_broadcast"))


@pytest.mark.benchmark(group="mul_scalar")
def test_mul_scalar(benchmark, impl):
    _check_tensor(_bench(benchmark, "mul_scalar"))


@pytest.mark.benchmark(group="relu")
def test_relu(benchmark, impl):
    _check_tensor(_bench(benchmark, "relu"))


@pytest.mark.benchmark(group="where")
def test_where(benchmark, impl):
    _check_tensor(_bench(benchmark, "where"))


@pytest.mark.benchmark(group="add_inplace")
def test_add_inplace(benchmark, impl):
    _check_tensor(_bench(benchmark, "add_inplace"))


@pytest.mark.benchmark(group="device")
def test_device(benchmark, impl):
    assert _bench(benchmark, "device") == torch.device("cpu")


@pytest.mark.benchmark(group="mm")
def test_mm(benchmark, impl):
    _check_tensor(_bench(benchmark, "mm"), (64, 256))


@pytest.mark.benchmark(group="layer_norm")
def test_layer_norm(benchmark, impl):
    _check_tensor(_bench(benchmark, "layer_norm"), (8, 128, 256))


@pytest.mark.benchmark(group="view")
def test_view(benchmark, impl):
    _check_tensor(_bench(benchmark, "view"), (128, 64))


@pytest.mark.benchmark(group="softmax")
def test_softmax(benchmark, impl):
    _check_tensor(_bench(benchmark, "softmax"), (8, 16, 128))


@pytest.mark.parametrize("name", ["mm_sym", "layer_norm_sym", "view_sym", "softmax_sym"])
def test_symbolic_cache_hit(benchmark, impl, name):
    benchmark.group = name
    out = _bench(benchmark, name)
    assert isinstance(out, torch.Tensor) and out.shape[0].node is not None
