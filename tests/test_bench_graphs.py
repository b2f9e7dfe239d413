"""Graph identity: the benchmark workloads produce the same FX graphs (GraphModule
code and per-node ``val`` metadata: shape/stride/dtype/device) with and without
fastfake, on the ``small`` zoo models (one convnet, one transformer)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import fastfake  # noqa: E402
from bench import harness  # noqa: E402
from bench.models import MODELS  # noqa: E402

MODELS_UNDER_TEST = ("resnet", "bert", "gpt2")
WORKLOADS_UNDER_TEST = ("make_fx_fake", "make_fx_symbolic", "compile_static", "compile_dynamic")

_cache: dict[str, tuple] = {}


def _model(name):
    if name not in _cache:
        _cache[name] = MODELS[name].create("small")
    return _cache[name]


@pytest.fixture(autouse=True)
def _restore():
    yield
    fastfake.uninstall()
    torch._dynamo.reset()


@pytest.mark.parametrize("workload", WORKLOADS_UNDER_TEST)
@pytest.mark.parametrize("model", MODELS_UNDER_TEST)
def test_graphs_identical(model, workload):
    mi = _model(model)
    stock = harness.capture_graphs(model, workload, "stock", size="small", model_and_inputs=mi)
    fast = harness.capture_graphs(model, workload, "fastfake", size="small", model_and_inputs=mi)
    assert stock, "workload produced no graphs"
    assert [g.label for g in stock] == [g.label for g in fast]
    from bench.workloads import diff_graphs

    diff = diff_graphs(stock, fast)
    assert diff == "", diff
    # the metadata really is there (guards against an empty comparison)
    assert any(val is not None for g in stock for (_, _, _, val) in g.meta)
