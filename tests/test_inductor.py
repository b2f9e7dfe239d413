"""torch.compile with the default Inductor backend (bench/inductor.py), in fresh
processes on a small BERT: the output code Inductor generates is identical with
and without fastfake, and so are the Inductor / AOTAutograd cache counters -- on
a cold compile (empty caches: both miss alike) and a warm one (a cache directory
a stock process filled: both hit alike, so fastfake's cache keys are stock's)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench import harness  # noqa: E402
from bench.workloads import diff_graphs  # noqa: E402
from zoo import small_model  # noqa: E402


@pytest.fixture(autouse=True)
def _restore(compile_state_restored):
    yield


def _caches(records) -> dict:
    rec = [g for g in records if g.label == "inductor caches"]
    assert len(rec) == 1
    return {k: int(v[1]) for k, _, _, v in rec[0].meta}


@pytest.mark.parametrize("workload", ["inductor_cold_dynamic", "inductor_warm_dynamic"])
def test_output_code_and_cache_counters_identical(workload):
    mi = small_model("bert")
    stock = harness.capture_graphs("bert", workload, "stock", size="small", model_and_inputs=mi)
    fast = harness.capture_graphs("bert", workload, "fastfake", size="small", model_and_inputs=mi)
    from bench import inductor

    assert inductor._LAST.get("selftest") == "disk"  # the child read the kept self-test result
    codes = [g for g in stock if g.label.startswith("output_code")]
    assert codes and all("def call(" in g.code for g in codes), [g.label for g in stock]
    assert diff_graphs(stock, fast) == ""
    caches = _caches(stock)
    if workload.startswith("inductor_warm"):
        assert caches.get("inductor.fxgraph_cache_hit", 0) > 0, caches
        assert caches.get("inductor.fxgraph_cache_miss", 0) == 0, caches
    else:
        assert caches.get("inductor.fxgraph_cache_miss", 0) > 0, caches
        assert caches.get("inductor.fxgraph_cache_hit", 0) == 0, caches


def test_output_code_comparison_can_fail():
    """The comparison sees a change in the generated code."""
    from bench.records import GraphRecord

    a = [GraphRecord("output_code[0]", "def call(args):\n    return buf0\n", [])]
    b = [GraphRecord("output_code[0]", "def call(args):\n    return buf1\n", [])]
    assert diff_graphs(a, b) != ""
