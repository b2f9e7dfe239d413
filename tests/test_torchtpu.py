"""TorchTPU's ``tpu`` backend with and without fastfake (bench/torchtpu.py): the
FX graphs Dynamo hands to TorchTPU, the graphs TorchTPU's passes hand to its
StableHLO step, and the StableHLO text itself are identical; fastfake served
fake-tensor calls on the ``tpu`` device; the self-test proves fake tensors on that
device; the placeholder step refuses TorchTPU code it was not written against.

The TorchTPU cases run only where torch-tpu 0.2.0 and libtpu are installed (the
matrix's TorchTPU lane, ``scripts/matrix 2.13.0-tpu``), each in fresh processes:
importing torch_tpu renames PrivateUse1 and registers a backend for the whole
process. The cases that need no TorchTPU (the workload's registration, the trace
time) run everywhere.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from bench import fresh, harness, workloads  # noqa: E402
from bench import torchtpu as tpu  # noqa: E402

_ok, _why = tpu.have_torch_tpu()
needs_tpu = pytest.mark.skipif(not _ok, reason=f"TorchTPU unavailable: {_why}")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- #
# Everywhere
# --------------------------------------------------------------------------- #


def test_registered_only_where_torch_tpu_runs():
    if _ok:
        assert "compile_tpu" in workloads.WORKLOADS
        assert workloads.get("compile_tpu").fresh
    else:
        assert workloads.UNAVAILABLE_WORKLOADS["compile_tpu"] == _why
        with pytest.raises(KeyError, match="unavailable"):
            workloads.get("compile_tpu")


def test_trace_time_leaves_the_stablehlo_out():
    timing = {"entire_frame_compile": 2.0, "tpu_stablehlo": 0.3, "tpu_stablehlo_in_compile": 0.3}
    assert harness.trace_seconds(9.0, timing) == pytest.approx(1.7)
    assert harness.trace_seconds(9.0, {"entire_frame_compile": 2.0}) == 2.0


def test_privateuse1_device_is_empty_without_a_backend():
    from fastfake.common import compat

    name = torch._C._get_privateuse1_backend_name()
    assert compat.privateuse1_device() == ("" if name == "privateuseone" else name)


# --------------------------------------------------------------------------- #
# Where TorchTPU is installed
# --------------------------------------------------------------------------- #


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TPU_SKIP_MDS_QUERY", "1")
    return env


def _python(code: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_tpu
@pytest.mark.parametrize("model", ["bert", "gpt2", "t5", "llama"])
def test_graphs_and_stablehlo_identical(model):
    store = fresh.make_store()
    try:
        reps = {impl: fresh.run_child(model, "compile_tpu", impl, size="small", store=store, capture=True,
                                      second=False) for impl in ("stock", "fastfake")}
    finally:
        import shutil

        shutil.rmtree(store, ignore_errors=True)
    graphs = {impl: fresh.graph_records(r["first"]["graphs"]) for impl, r in reps.items()}
    labels = [g.label for g in graphs["stock"]]
    assert labels[0] == "dynamo[0]" and "tpu_compile[0]" in labels and "stablehlo[0]" in labels
    hlo = next(g for g in graphs["stock"] if g.label == "stablehlo[0]").code
    assert hlo.startswith("module @") and "stablehlo." in hlo
    assert [g.label for g in graphs["fastfake"]] == labels
    assert workloads.diff_graphs(graphs["stock"], graphs["fastfake"]) == ""
    st = reps["fastfake"]["first"]["stats"]
    assert st.get("cache.hit", 0) + st.get("elementwise.hit", 0) > 100, st
    timing = reps["fastfake"]["first"]["timing"]
    assert timing["tpu_graphs"] >= 1
    # inference: the StableHLO step runs inside Dynamo's compile, and the trace time leaves it out
    assert timing["tpu_stablehlo_in_compile"] == timing["tpu_stablehlo"] > 0
    assert "cache.hit" not in reps["stock"]["first"]["stats"]


@needs_tpu
def test_selftest_proves_the_tpu_device():
    out = _python(
        "import json, warnings; warnings.filterwarnings('ignore')\n"
        "from bench import torchtpu; torchtpu.setup_torch_tpu()\n"
        "import fastfake\n"
        "from fastfake.common import compat\n"
        "from fastfake.core import selftest, selftest_store\n"
        "fastfake.install()\n"
        "r = fastfake.selftest_report()\n"
        "print(json.dumps({'device': compat.privateuse1_device(), 'passed': r['passed'],\n"
        "                  'skipped': r['skipped'], 'devices': [g[3] for g in selftest._groups()],\n"
        "                  'key': selftest_store.components([])['privateuse1']}))\n"
    )
    assert out["device"] == "tpu"
    assert all(out["passed"].values()), out["passed"]
    assert out["skipped"] == []
    assert all("tpu" in d for d in out["devices"][:2])  # elementwise, cache
    assert out["key"].startswith("tpu ")


@needs_tpu
def test_refuses_torchtpu_code_it_was_not_written_for():
    out = _python(
        "import json, warnings; warnings.filterwarnings('ignore')\n"
        "from bench import torchtpu\n"
        "torchtpu.KNOWN_SOURCES['compiler.StaticCompiler._compile'] = '0' * 16\n"
        "try:\n"
        "    torchtpu.setup_torch_tpu()\n"
        "    print(json.dumps({'raised': ''}))\n"
        "except RuntimeError as e:\n"
        "    from torch_tpu._internal.compile import compiler\n"
        "    print(json.dumps({'raised': str(e), 'patched': compiler.StaticCompiler._compile.__module__}))\n"
    )
    assert "StaticCompiler._compile" in out["raised"] and "not what the placeholder step" in out["raised"]
    assert out["patched"] != "bench.torchtpu"  # TorchTPU left as it was
