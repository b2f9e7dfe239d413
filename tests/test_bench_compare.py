"""The benchmark's graph and output check (bench.records.compare_runs), shared by
its in-process and fresh-process rows: each way it must fail, it does."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench.records import GraphRecord, compare_runs, is_values, record_values  # noqa: E402


def _graph(label: str, code: str = "def forward(x): return x", meta=None) -> GraphRecord:
    return GraphRecord(label, code, meta if meta is not None else [("x", "placeholder", "x", ("T", (2,)))])


def _as_json(r: GraphRecord) -> GraphRecord:
    """A record as it crosses from a fresh child: the tensors stay behind."""
    return GraphRecord(r.label, r.code, [tuple(m) for m in r.meta])


def test_identical_graphs_and_values_in_both_forms():
    vals = record_values("xla_outputs", (torch.arange(4.0), 3))
    assert is_values(vals) and is_values(_as_json(vals)) and not is_values(_graph("dynamo[0]"))
    for form in (lambda r: r, _as_json):
        stock = [[_graph("dynamo[0]"), form(vals)]]
        fast = [[_graph("dynamo[0]"), form(record_values("xla_outputs", (torch.arange(4.0), 3)))]] * 3
        out = compare_runs(stock, fast)
        assert out["graphs_identical"] is True and out["graph_labels"] == ["dynamo[0]"]
        assert out["outputs_identical"] is True and out["outputs_checked"] == 1  # the tensor, not the int
        assert "graph_diff" not in out and "outputs_diff" not in out


def test_a_graph_differing_in_one_repetition_fails():
    stock = [[_graph("dynamo[0]")]]
    other = _graph("dynamo[0]", meta=[("x", "placeholder", "x", ("T", (3,)))])
    out = compare_runs(stock, [[_graph("dynamo[0]")], [other]])
    assert out["graphs_identical"] is False and "meta differs" in out["graph_diff"]
    assert "outputs_identical" not in out


def test_values_differing_fail_apart_from_graphs():
    for form in (lambda r: r, _as_json):
        stock = [[_graph("dynamo[0]"), form(record_values("v", torch.zeros(3)))]]
        fast = [[_graph("dynamo[0]"), form(record_values("v", torch.ones(3)))]]
        out = compare_runs(stock, fast)
        assert out["graphs_identical"] is True
        assert out["outputs_identical"] is False and out["outputs_diff"]


def test_values_only_on_one_side_fail():
    out = compare_runs([[_graph("g")]], [[_graph("g"), record_values("v", torch.zeros(1))]])
    assert out["outputs_identical"] is False


def test_nothing_captured_is_not_identical():
    out = compare_runs([[GraphRecord("dynamo[0]", "", [])]], [[GraphRecord("dynamo[0]", "", [])]])
    assert out["graphs_identical"] is False and out["graph_diff"] == "no graph was captured"
