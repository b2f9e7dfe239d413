"""The model-free benchmark workloads (bench/synthetic.py): listed, selected once
whatever the models, and tracing to the same graphs under stock and fastfake."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench import harness, synthetic  # noqa: E402
from bench.__main__ import main, parse_args  # noqa: E402
from bench.workloads import WORKLOADS, diff_graphs  # noqa: E402


@pytest.fixture(autouse=True)
def _restore(compile_state_restored):
    yield


def test_list_shows_the_new_workloads(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "workload export_data_dependent" in out and "workload symint_arith" in out
    for name in ("export_data_dependent", "symint_arith"):
        assert WORKLOADS[name].model_free


def test_model_free_workloads_run_once():
    args = parse_args(["--models", "bert,gpt2", "--workloads", "compile_dynamic,symint_arith"])
    assert args.cells == [("bert", "compile_dynamic"), ("gpt2", "compile_dynamic"), (None, "symint_arith")]


def test_data_dependent_inputs_are_valid_split_sizes():
    sizes, data = synthetic.data_dependent_inputs(4)
    assert sizes.dtype == torch.int64 and sizes.shape == (4, synthetic.SPLITS)
    assert bool((sizes >= 0).all())
    assert sizes.sum(1).tolist() == [data.shape[1]] * 4
    # and the module runs eagerly on them: each row's pieces flipped in place
    out = synthetic.DataDependentSplit(4)(sizes, data)
    assert out.shape == data.shape
    row = torch.cat([p.flip(0) for p in torch.split(data[1], sizes[1].tolist())])
    assert torch.equal(out[1], row)


def test_symint_arith_graphs_identical_in_process():
    """The model-free path of harness.capture_graphs (no zoo model)."""
    stock = harness.capture_graphs(None, "symint_arith", "stock", size="small")
    fast = harness.capture_graphs(None, "symint_arith", "fastfake", size="small")
    assert stock and any(val is not None for g in stock for (_, _, _, val) in g.meta)
    assert diff_graphs(stock, fast) == ""
    # the program really does SymInt arithmetic: Max, floor division and Mod in the metadata
    text = "\n".join(g.code + "\n".join(g.meta_lines()) for g in stock)
    assert "Max(" in text and "//" in text and "Mod(" in text
