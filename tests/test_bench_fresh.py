"""The benchmark's fresh-process rows and the two model-free workloads
(bench/fresh.py, bench/synthetic.py)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from bench import harness, verdict  # noqa: E402
from bench.__main__ import main, parse_args  # noqa: E402
from bench.models import DEFAULT_MODELS  # noqa: E402
from bench.workloads import DEFAULT_PLAN, DEFAULT_WORKLOADS, WORKLOADS  # noqa: E402


@pytest.fixture(autouse=True)
def _restore(compile_state_restored):
    yield


# --------------------------------------------------------------------------- #
# CLI selection
# --------------------------------------------------------------------------- #


def test_selection_default_plan_and_cross_product():
    assert parse_args([]).cells == list(DEFAULT_PLAN)
    args = parse_args(["--models", "bert,gpt2"])
    assert args.cells == [(m, w) for m in ("bert", "gpt2") for w in DEFAULT_WORKLOADS]
    args = parse_args(["--workloads", "compile_dynamic"])
    assert args.cells == [(m, "compile_dynamic") for m in DEFAULT_MODELS]
    # the plan covers BERT-, GPT-2-, T5- and Llama-style dynamic inference and training
    for m in ("bert", "gpt2", "t5", "llama"):
        assert (m, "compile_dynamic") in DEFAULT_PLAN and (m, "compile_train_dynamic") in DEFAULT_PLAN
    assert sum(w == "compile_static" for _, w in DEFAULT_PLAN) >= 2
    assert parse_args(["--warm-process"]).in_process is True
    assert parse_args([]).in_process is False
    for name, wl in WORKLOADS.items():  # the first-trace workloads run in fresh processes
        assert wl.fresh == (name.startswith(("compile_", "make_fx_")) and "openxla" not in name
                            or name in ("aot_function", "export", "export_data_dependent", "symint_arith")), name


# --------------------------------------------------------------------------- #
# Fresh-process rows, end to end
# --------------------------------------------------------------------------- #


def _run(tmp_path, name, argv):
    out = tmp_path / f"{name}.json"
    rc = main(argv + ["--size", "small", "--repeat", "1", "--check-graphs", "--no-dispatch-share",
                      "--allow-slower", "--json", str(out)])
    data = json.loads(out.read_text())
    return rc, data, {(r["model"], r["workload"]): r for r in data["rows"]}


def test_fresh_process_rows_end_to_end(tmp_path):
    rc, data, rows = _run(tmp_path, "fresh", ["--models", "bert", "--workloads", "compile_dynamic"])
    assert rc == 0
    assert data["meta"]["mode"] == "fresh" and data["meta"]["second"] is True
    assert set(rows) == {("bert", "compile_dynamic"), ("bert", "compile_dynamic (2nd in process)"),
                         ("bert", "compile_dynamic (warm store)")}
    first, second = rows["bert", "compile_dynamic"], rows["bert", "compile_dynamic (2nd in process)"]
    warm = rows["bert", "compile_dynamic (warm store)"]
    # the warm-store row: the same stock repetitions; a fastfake child that read the
    # records the empty-store child before it kept (and that one read none)
    assert warm["mode"] == "fresh-warm-store" and warm["runs"]["stock"] == first["runs"]["stock"]
    (w,) = warm["runs"]["fastfake"]
    assert w["stats"]["store.file.loaded"] == 1
    assert first["runs"]["fastfake"][0]["stats"]["store.file.absent"] == 1
    assert first["mode"] == "fresh" and second["mode"] == "fresh-second"
    assert first["metric"] == second["metric"] == "cpu"
    assert first["graphs_identical"] is True, first.get("graph_diff")
    assert first["graph_labels"] and first["graph_labels"][0].startswith("dynamo")
    for row in (first, second):
        for impl in ("stock", "fastfake"):
            (run,) = row["runs"][impl]
            assert run["cpu"] > 0 and run["wall"] > 0 and run["trace"] > 0
            assert run["seconds"] == run["cpu"]
            assert row[f"{impl}_median_s"] == row[f"{impl}_cpu_median_s"] == run["cpu"]
            assert run["timing"]["entire_frame_compile"] > 0
            # the garbage collector's part of the trace: within its CPU, per generation
            g = run["gc"]
            assert 0 <= g["cpu"] <= run["cpu"] and g["cpu"] == pytest.approx(sum(g["cpu_by_generation"]))
            assert g["collections"][0] > 0 and g["tracked_after"] > 100_000
        assert row["speedup"] == pytest.approx(row["stock_median_s"] / row["fastfake_median_s"])
        assert row["verdict"] in ("ok", "slower (allowed)")
        assert row["never_slower"]["noise"] == pytest.approx(verdict.FLOOR)
    stock, fast = first["runs"]["stock"][0], first["runs"]["fastfake"][0]
    # each repetition is its own process: torch imported, warmed up, model built there
    for run in (stock, fast):
        assert {"import_torch", "import_fastfake", "warmup", "build", "process_wall"} <= set(run["child"])
    # fastfake installed in its child only, its install-time self-test read from the store
    assert "install" not in stock["child"] and fast["child"]["selftest"] == "disk"
    assert fast["stats"].get("dispatch.total", 0) > 0 and "dispatch.total" not in stock["stats"]
    # the warm-up left nothing in stock's cache: the first trace counts what the
    # second (after FakeTensorMode.cache_clear()) counts
    s1, s2 = stock["stats"], second["runs"]["stock"][0]["stats"]
    assert s1[harness.FTM_COUNTER] == s2[harness.FTM_COUNTER] > 0
    assert s1["stock_cache.hit"] == s2["stock_cache.hit"]


def test_fresh_process_model_free_workloads(tmp_path):
    """Both new workloads run in fresh processes under stock and fastfake with
    identical graphs (one row each, whatever --models says)."""
    rc, data, rows = _run(tmp_path, "synthetic", ["--models", "bert,gpt2", "--workloads",
                                                  "export_data_dependent,symint_arith", "--no-second"])
    assert rc == 0
    assert set(rows) == {("-", "export_data_dependent"), ("-", "symint_arith"),
                         ("-", "export_data_dependent (warm store)"), ("-", "symint_arith (warm store)")}
    rows = {k: v for k, v in rows.items() if not k[1].endswith("(warm store)")}
    for row in rows.values():
        assert row["graphs_identical"] is True, row.get("graph_diff")
        assert row["stock_median_s"] > 0 and row["fastfake_median_s"] > 0
    # export_data_dependent: one .item() per element, each an unbacked symbol in the graph
    labels = rows["-", "export_data_dependent"]["graph_labels"]
    assert labels == ["export"]
    stats = rows["-", "export_data_dependent"]["runs"]["stock"][0]["stats"]
    assert stats[harness.FTM_COUNTER] > 2 * 128


def test_install_cost_processes():
    """--install-cost: a fresh process per kind; the fastfake ones read the
    self-test result from the filled store, or run it with an empty one."""
    from bench import fresh

    res = fresh.install_cost(repeat=1)
    (stock,), (disk,), (first,) = res["stock"], res["disk"], res["first"]
    assert "install" not in stock and stock["import_torch"]["cpu"] > 0
    assert disk["selftest"] == "disk" and first["selftest"] == "run"
    assert disk["install"]["cpu"] > 0 and first["install"]["cpu"] > 0
    # a first FakeTensorMode, timed before fastfake in every kind of process
    assert all(r["first_mode"]["cpu"] > 0 for r in (stock, disk, first))
