"""torch_xla's ``openxla`` dynamo backend with and without fastfake, on the ``small``
zoo models: the FX graphs Dynamo produces and AOTAutograd hands to torch_xla's
bridge are identical, the XLA outputs (and, for training, the parameter gradients)
are bitwise identical, and fastfake really served fake-tensor calls.

Skipped unless torch_xla is installed for this torch version (torch_xla 2.9.0 runs
only on torch 2.9.0); runs on PJRT's CPU client (``PJRT_DEVICE=CPU`` unless set).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from bench import workloads  # noqa: E402
from bench import openxla as xla  # noqa: E402

# Decided without importing torch_xla: its import sets torch config flags, which must
# not happen at collection time for the rest of the suite (the workloads import it
# when first used and keep those flags to the openxla runs).
_ok, _why = workloads.have_torch_xla()
pytestmark = pytest.mark.skipif(not _ok, reason=f"torch_xla unavailable: {_why}")

import fastfake  # noqa: E402
from bench import harness  # noqa: E402
from bench.models import MODELS  # noqa: E402
from zoo import small_model  # noqa: E402

@pytest.fixture(scope="module", autouse=True)
def _torch_xla():
    """Import torch_xla (PJRT_DEVICE=CPU unless set) and warm it up; skip the module
    if the import fails."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    try:
        workloads.setup_torch_xla()
    except ImportError as e:
        pytest.skip(f"torch_xla not importable: {e}")


@pytest.fixture(autouse=True)
def _restore(compile_state_restored):
    yield


def _xla_backward_fails() -> bool:
    """torch's autograd engine sizes its per-device ready queues once per process, at
    the first backward. A backward that ran before torch_xla registered its device
    (another test file in the same worker) leaves XLA without a queue, and every XLA
    backward in the process then fails an internal assert in ``engine.cpp``, stock or
    not. A tiny XLA backward tells."""
    import torch_xla

    y = torch.ones(2, device=torch_xla.device(), requires_grad=True)
    try:
        (y * 2).sum().backward()
    except RuntimeError as e:
        if "device_ready_queues_" in str(e):
            return True
        raise
    return False


def _in_fresh_process(nodeid: str) -> None:
    """Run one test of this file in a fresh interpreter: torch_xla is imported there
    before any backward."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{nodeid}"],
                       capture_output=True, text=True, timeout=1200, env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]


def _capture(model, workload, impl):
    """One openxla compile + call from a fresh state (torch_xla's computation cache
    emptied); returns its records and the XLA lowering counters of that run."""
    workloads.reset_backend_times()
    graphs = harness.capture_graphs(model, workload, impl, size="small", model_and_inputs=small_model(model))
    return graphs, workloads.backend_times()


@pytest.mark.parametrize(
    "model,workload",
    [("bert", "compile_openxla"), ("resnet", "compile_openxla"), ("bert", "compile_openxla_train")],
)
def test_openxla_graphs_and_outputs_identical(model, workload, request):
    if workload.endswith("_train") and _xla_backward_fails():
        return _in_fresh_process(request.node.name)
    stock, stock_times = _capture(model, workload, "stock")
    fastfake.reset_stats()
    fast, fast_times = _capture(model, workload, "fastfake")
    stats = fastfake.stats()

    labels = [g.label for g in stock]
    assert "dynamo[0]" in labels and "bridge[0]" in labels and labels[-1] == "xla_outputs", labels
    if workload == "compile_openxla_train":
        assert "bridge[1]" in labels, labels  # the backward graph went through the bridge too
    assert labels == [g.label for g in fast]

    # FX graphs: code and per-node metadata (shape, stride, dtype, device, ...)
    assert workloads.diff_graphs(stock, fast) == ""
    bridge = [g for g in stock if g.label.startswith("bridge")]
    assert all(any(val is not None for (_, _, _, val) in g.meta) for g in bridge)
    assert any("xla" in str(val) for g in bridge for (_, _, _, val) in g.meta), "graphs are not on the XLA device"

    # XLA outputs: copied to the CPU, bitwise identical
    vs, vf = stock[-1].values, fast[-1].values
    assert vs and len(vs) == len(vf)
    for a, b in zip(vs, vf):
        assert a.device.type == "cpu" and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
        assert a.reshape(-1).view(torch.uint8).equal(b.reshape(-1).view(torch.uint8))

    # both runs lowered and compiled from scratch (not torch_xla's cached executable)
    for t in (stock_times, fast_times):
        assert t["xla_lowering_calls"] >= 1 and t["xla_compiles"] >= 1, t

    # fastfake served fake-tensor calls on the XLA-device FakeTensors
    assert stats["elementwise.hit"] + stats["cache.hit"] > 0, stats


def test_openxla_timing_separates_lowering():
    """One timed repetition per implementation: the trace time (entire_frame_compile)
    and the XLA lowering are reported separately; the lowering runs outside the trace."""
    spec = MODELS["bert"]
    model, inputs = small_model("bert")
    harness.set_impl("stock")
    run = workloads.get("compile_openxla")(model, inputs, spec=spec, size="small")
    for impl in harness.IMPLS:
        harness.set_impl(impl)
        res = harness.timed_run(run, warm=False)
        t = res.timing
        assert t["xla_lowering"] > 0 and t["xla_compiles"] >= 1, t
        assert t.get("xla_lowering_in_compile", 0.0) == 0.0, t
        assert res.seconds == pytest.approx(t["entire_frame_compile"])
        assert res.seconds + t["xla_lowering"] <= res.wall
    harness.set_impl("stock")


def test_torch_xla_config_flags_stay_with_openxla_runs():
    """The torch config flags torch_xla's import sets (e.g. dynamo's
    automatic_dynamic_shapes=False) apply inside the openxla runs only."""
    import importlib

    for name, changed in xla._XlaState.config.items():
        mod = importlib.import_module(name)
        for k, v in changed.items():
            assert getattr(mod, k) != v, (name, k)
        with xla._xla_config():
            assert all(getattr(mod, k) == v for k, v in changed.items())


def test_the_cli_rows_are_fresh_processes_with_training(tmp_path):
    """``python -m bench`` runs the openxla rows in fresh processes (each repetition a
    new process, as users pay): torch_xla is brought up before install() and the
    warm-up (``bench.openxla.bring_up_torch_xla``), so the training row's XLA
    backward has its ready queue (it failed an engine assertion, stock and fastfake
    alike, when a CPU backward ran first), and the graphs and the XLA outputs, checked
    across the children, are identical."""
    import json

    out = tmp_path / "rows.json"
    r = subprocess.run(
        [sys.executable, "-m", "bench", "--models", "bert", "--workloads", "compile_openxla_train",
         "--size", "small", "--repeat", "1", "--check-graphs", "--no-dispatch-share", "--no-warm-store",
         "--no-second", "--json", str(out)],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), capture_output=True, text=True,
        timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [row for row in json.loads(out.read_text())["rows"] if row["workload"] == "compile_openxla_train"]
    assert len(rows) == 1 and rows[0]["mode"] == "fresh", rows
    row = rows[0]
    assert not row["errors"], row["errors"]
    assert row["graphs_identical"] and row["outputs_identical"] and row["outputs_checked"] > 0, row
