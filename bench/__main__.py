"""Trace-time benchmark: stock FakeTensorMode vs fastfake.

First-trace workloads (compile_*, aot_function, make_fx_*, export and the
model-free export_data_dependent / symint_arith) run each repetition in a fresh
process (bench/fresh.py), stock and fastfake children interleaved, CPU-time
medians, plus a "(2nd in process)" row; the other workloads (fake_forward, ...)
are timed in this process, interleaved. A row where fastfake is slower than stock
beyond the repetitions' noise fails the run (bench/verdict.py).

    python -m bench                                   # default models and workloads
    python -m bench --size small --repeat 1
    python -m bench --models all --workloads all      # everything
    python -m bench --in-process                      # the single-process mode
    python -m bench --models bert,resnet --workloads make_fx_symbolic --check-graphs
    python -m bench --json out.json --plot out.png

See bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings

import torch

import fastfake

from . import fresh, harness, verdict
from .models import DEFAULT_MODELS, MODEL_NAMES, MODELS, SIZES, have_transformers
from .workloads import (
    DEFAULT_PLAN,
    DEFAULT_WORKLOADS,
    UNAVAILABLE_WORKLOADS,
    WORKLOAD_NAMES,
    WORKLOADS,
    child_report,
    diff_graphs,
)

# Extra timers some workloads report next to dynamo's (openxla: the XLA lowering,
# which runs outside entire_frame_compile). Medians are reported per key.
TIMING_KEYS = ("first_output", "entire_frame_compile", "backend_compile", "xla_lowering", "xla_compile", "xla_compiles",
               "xla_lowering_calls", "xla_lowering_in_compile")


def _csv(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    if value in ("all", ""):
        return list(allowed)
    names = [v.strip() for v in value.split(",") if v.strip()]
    unavailable = [n for n in names if n not in allowed and n in UNAVAILABLE_WORKLOADS]
    if unavailable:
        raise argparse.ArgumentTypeError("; ".join(f"workload {n} is unavailable here: {UNAVAILABLE_WORKLOADS[n]}"
                                                   for n in unavailable))
    bad = [n for n in names if n not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {what}: {', '.join(bad)} (available: {', '.join(allowed)})")
    return names


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Trace-time benchmark of stock torch FakeTensorMode vs fastfake (interleaved, medians).",
    )
    p.add_argument("--models", default=None,
                   help=f"comma-separated subset of: {', '.join(MODEL_NAMES)}, or 'all' "
                        f"(with --workloads but without --models: {','.join(DEFAULT_MODELS)})")
    p.add_argument("--workloads", default=None,
                   help=f"comma-separated subset of: {', '.join(WORKLOAD_NAMES)}, or 'all' "
                        f"(with --models but without --workloads: {','.join(DEFAULT_WORKLOADS)}). "
                        "Every model x workload runs, model-free workloads once. Without --models and "
                        "--workloads: the default plan, "
                        + ", ".join(f"{m or MODEL_FREE} {w}" for m, w in DEFAULT_PLAN))
    p.add_argument("--size", choices=SIZES, default="default", help="model size (default: default)")
    p.add_argument("--repeat", type=int, default=3, help="repetitions per implementation (default 3)")
    p.add_argument("--inner", type=int, default=5,
                   help="calls per repetition for warm workloads (fake_forward); default 5")
    p.add_argument("--json", metavar="OUT.json", help="write all measurements as JSON")
    p.add_argument("--plot", metavar="OUT.png",
                   help="speedup per workload and model, with the roofline (needs matplotlib)")
    p.add_argument("--replot", metavar="IN.json", help="only draw --plot (default IN.png) from a --json file")
    p.add_argument("--check-graphs", action="store_true",
                   help="also capture the FX graphs under both implementations and fail if they differ")
    p.add_argument("--no-dispatch-share", action="store_true",
                   help="skip the extra stock run that measures the time inside FakeTensorMode.__torch_dispatch__")
    p.add_argument("--warm-signatures", action="store_true",
                   help="keep fastfake's learned elementwise signatures between repetitions "
                        "(default: forget them, so every fastfake repetition is a cold first trace)")
    p.add_argument("--in-process", action="store_true",
                   help="time every workload in this one process, stock and fastfake interleaved "
                        "(default: first-trace workloads run each repetition in a fresh process)")
    p.add_argument("--no-second", dest="second", action="store_false",
                   help="fresh-process rows: skip the second trace in the same process "
                        "(the '(2nd in process)' rows)")
    p.add_argument("--no-warm-store", dest="warm_store", action="store_false",
                   help="fresh-process rows: skip the row of fastfake children that start with the "
                        "records the previous fastfake child kept on disk (fastfake/store/)")
    p.add_argument("--warm-process", action="store_true",
                   help="implies --in-process; compile rows as a long-running process compiles "
                        "again: one untimed compile per implementation first, then each repetition "
                        "resets only Dynamo (stock's dispatch cache and what fastfake learned stay)")
    p.add_argument("--allow-slower", action="store_true",
                   help="a row where fastfake is slower than stock beyond noise is a warning, "
                        "not a failure (exit status 0)")
    p.add_argument("--list", action="store_true", help="list models and workloads and exit")
    args = p.parse_args(argv)
    try:
        if args.models is None and args.workloads is None:
            args.cells = list(DEFAULT_PLAN)
        else:
            models = _csv(args.models or ",".join(DEFAULT_MODELS), MODEL_NAMES, "model")
            workloads = _csv(args.workloads or ",".join(DEFAULT_WORKLOADS), WORKLOAD_NAMES, "workload")
            args.cells = [(m, w) for m in models for w in workloads if not WORKLOADS[w].model_free]
            args.cells += [(None, w) for w in workloads if WORKLOADS[w].model_free]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    args.models = list(dict.fromkeys(m for m, _ in args.cells if m is not None))
    args.workloads = list(dict.fromkeys(w for _, w in args.cells))
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    if args.warm_process:
        args.in_process = True
    return args


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _median(xs):
    return statistics.median(xs) if xs else None


def _print_table(hdr: tuple, table: list) -> None:
    """Aligned columns: the first two left-aligned (model, workload), the rest right."""
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *table)]

    def row(cells) -> str:
        return "  ".join(str(x).ljust(w) if i < 2 else str(x).rjust(w) for i, (x, w) in enumerate(zip(cells, widths)))

    line = row(hdr)
    print(line)
    print("-" * len(line))
    for t in table:
        print(row(t))


def _fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def _warmup() -> None:
    """Pay one-time costs (lazy imports, sympy, dispatcher caches) before measuring,
    under both implementations, so the first measured cell is not penalised."""
    def f(x, y):
        return torch.relu(x @ y + 1).sum(-1)

    x, y = torch.randn(4, 8), torch.randn(8, 4)
    for impl in harness.IMPLS:
        harness.set_impl(impl)
        for dyn in (False, True):
            torch._dynamo.reset()
            with torch.no_grad():
                torch.compile(f, backend="aot_eager", dynamic=dyn)(x, y)
    torch._dynamo.reset()
    harness.set_impl("stock")


class Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.i = 0

    def step(self, what: str, fn):
        self.i += 1
        prefix = f"[{self.i}/{self.total}] {what} ..."
        t0 = time.perf_counter()
        try:
            out = fn()
        except BaseException as e:
            _log(f"{prefix} FAILED after {time.perf_counter() - t0:.1f}s: {type(e).__name__}: {str(e)[:200]}")
            raise
        _log(f"{prefix} {time.perf_counter() - t0:.1f}s")
        return out

    def note(self, msg: str) -> None:
        """One step done elsewhere (a child process): its line."""
        self.i += 1
        _log(f"[{self.i}/{self.total}] {msg}")


def run_cell(spec, model, inputs, wl, args, progress: Progress) -> dict:
    """One row timed in this process (``spec`` is None for a model-free workload)."""
    mname = spec.name if spec is not None else MODEL_FREE
    name = f"{mname} {wl.name}"
    row: dict = {"model": mname, "workload": wl.name, "mode": "in-process", "metric": "trace", "errors": {},
                 "runs": {i: [] for i in harness.IMPLS}}
    harness.set_impl("stock")
    try:
        run = wl(model, inputs, spec=spec, size=args.size)
    except Exception as e:
        row["errors"]["setup"] = f"{type(e).__name__}: {e}"
        progress.i += _steps_per_row(args, wl.name)
        _log(f"[{progress.i}/{progress.total}] {name} setup FAILED: {type(e).__name__}: {str(e)[:200]}")
        return row

    if wl.warm or (args.warm_process and not wl.subprocess):  # one untimed call per implementation
        for impl in harness.IMPLS:
            harness.set_impl(impl)
            try:
                run()
            except Exception as e:
                row["errors"].setdefault(impl, f"{type(e).__name__}: {e}")

    for rep in range(args.repeat):
        for impl in harness.IMPLS:
            label = f"{name} {impl} rep {rep + 1}/{args.repeat}"
            if impl in row["errors"]:
                progress.i += 1
                continue
            harness.set_impl(impl)
            try:
                res = progress.step(label, lambda: harness.timed_run(
                    run, warm=wl.warm, inner=args.inner, cold_fastfake=not args.warm_signatures,
                    keep_learned=args.warm_process and not wl.subprocess))
            except Exception as e:
                row["errors"][impl] = f"{type(e).__name__}: {str(e)[:500]}"
                if os.environ.get("BENCH_TRACEBACK"):
                    traceback.print_exc()
                continue
            row["runs"][impl].append({"seconds": res.seconds, "wall": res.wall, "timing": res.timing,
                                      "stats": res.stats})
    harness.set_impl("stock")

    # Share of stock time inside FakeTensorMode.__torch_dispatch__ (one extra stock run).
    if not args.no_dispatch_share:
        if "stock" in row["errors"]:
            progress.i += 1
        else:
            def share_run():
                if wl.subprocess:  # the child times stock's dispatch itself
                    run(fake_share=True)
                    rep = child_report()
                    total = harness.trace_seconds(0.0, rep["timing"])
                    return total, rep["fake_dispatch_s"], rep["fake_calls"]
                if not wl.warm:
                    harness.fresh_state(cold_fastfake=False, run=run, keep_learned=args.warm_process)
                import gc
                gc.collect()
                n = args.inner if wl.warm else 1
                harness.reset_counters()
                with harness.DispatchTimer() as timer:
                    t0 = time.perf_counter()
                    for _ in range(n):
                        run()
                    wall = time.perf_counter() - t0
                total = harness.trace_seconds(wall / n, harness.workload_times())
                return total, timer.seconds / n, timer.calls // n

            try:
                total, fake, calls = progress.step(f"{name} stock dispatch-share run", share_run)
                row["dispatch_share"] = {
                    "total_s": total,
                    "fake_dispatch_s": fake,
                    "outermost_calls": calls,
                    "share": fake / total if total else None,
                    "roofline_speedup": total / (total - fake) if total > fake else None,
                }
            except Exception as e:
                row["errors"]["dispatch_share"] = f"{type(e).__name__}: {e}"

    # Symbolic rows: what remains under fastfake (one extra fastfake run timing the
    # SymNode arithmetic; calls left to stock from the measured repetitions).
    if wl.name in harness.SYMBOLIC_WORKLOADS and not args.no_dispatch_share:
        if "fastfake" in row["errors"]:
            progress.i += 1
        else:
            def symnode_run():
                harness.set_impl("fastfake")
                harness.fresh_state(cold_fastfake=True, run=run, keep_learned=args.warm_process)
                import gc
                gc.collect()
                harness.reset_counters()
                with harness.SymNodeTimer() as timer:
                    t0 = time.perf_counter()
                    run()
                    wall = time.perf_counter() - t0
                total = harness.trace_seconds(wall, harness.workload_times())
                return total, timer.seconds, timer.calls, harness.stock_report()

            try:
                total, sym, calls, stock_ops = progress.step(
                    f"{name} fastfake SymNode-arithmetic run", symnode_run)
                runs = row["runs"]["fastfake"]
                row["symbolic_remains"] = {
                    "total_s": total,
                    "symnode_s": sym,
                    "symnode_calls": calls,
                    "symnode_share": sym / total if total else None,
                    "stock_calls": (runs[-1]["stats"].get("dispatch.stock", 0) if runs else None),
                    # per overload, the calls the SymNode run handed to stock
                    "stock_ops": stock_ops,
                }
            except Exception as e:
                row["errors"]["symnode_share"] = f"{type(e).__name__}: {e}"
            finally:
                harness.set_impl("stock")

    if args.check_graphs and wl.subprocess:
        # Every timed repetition reported its output code and cache counters:
        # all of them, stock's and fastfake's, must agree.
        seen = {(r["stats"].get("code_digest"), json.dumps(r["stats"].get("caches"), sort_keys=True))
                for impl in harness.IMPLS for r in row["runs"][impl]}
        if row["runs"]["stock"] and row["runs"]["fastfake"]:
            row["graphs_identical"] = len(seen) == 1
            row["graph_labels"] = ["output code", "inductor caches"]
            if len(seen) != 1:
                row["graph_diff"] = "output code or cache counters differ between runs: " + "; ".join(
                    f"{impl}: " + ", ".join(f"{r['stats'].get('code_digest')} {r['stats'].get('caches')}"
                                            for r in row["runs"][impl]) for impl in harness.IMPLS)
                _log(f"GRAPH MISMATCH {name}:\n{row['graph_diff']}")
    elif args.check_graphs:
        graphs = {}
        for impl in harness.IMPLS:
            if impl in row["errors"]:
                progress.i += 1
                continue
            try:
                graphs[impl] = progress.step(
                    f"{name} {impl} graph capture",
                    lambda: harness.capture_graphs(spec.name if spec is not None else None, wl.name, impl,
                                                   size=args.size, model_and_inputs=(model, inputs)))
            except Exception as e:
                row["errors"][impl] = f"{type(e).__name__}: {str(e)[:500]}"
        if len(graphs) == 2:
            # FX graphs (code + node metadata) and, for workloads that record real
            # outputs (openxla: "xla_outputs"), the values, checked separately.
            _compared(row, name, [graphs["stock"]], [graphs["fastfake"]])
    harness.set_impl("stock")
    harness.release(run)
    return finish_row(row)


def finish_row(row: dict) -> dict:
    """Medians and ratios of a row from its repetitions (``row["runs"]``)."""
    for impl in harness.IMPLS:
        runs = row["runs"][impl]
        row[f"{impl}_median_s"] = _median([r["seconds"] for r in runs])
        row[f"{impl}_wall_median_s"] = _median([r["wall"] for r in runs])
        for key in ("cpu", "trace"):
            if runs and all(key in r for r in runs):
                row[f"{impl}_{key}_median_s"] = _median([r[key] for r in runs])
        t = {}
        for key in TIMING_KEYS:
            vals = [r["timing"][key] for r in runs if key in r["timing"]]
            if vals:
                t[key] = _median(vals)
        row[f"{impl}_timing"] = t
        row[f"{impl}_stats"] = runs[-1]["stats"] if runs else {}
    s, f = row["stock_median_s"], row["fastfake_median_s"]
    row["speedup"] = s / f if s and f else None
    sw, fw = row["stock_wall_median_s"], row["fastfake_wall_median_s"]
    row["wall_speedup"] = sw / fw if sw and fw else None
    sl, fl = (row[f"{i}_timing"].get("xla_lowering") for i in harness.IMPLS)
    if sl is not None or fl is not None:
        row["stock_lowering_median_s"], row["fastfake_lowering_median_s"] = sl, fl
        row["lowering_ratio"] = sl / fl if sl and fl else None
    return row


def _steps_per_row(args, workload: str) -> int:
    """Progress steps of one (model, workload) row."""
    extra = 0 if args.no_dispatch_share else 1 + (workload in harness.SYMBOLIC_WORKLOADS)
    if _is_fresh(args, workload):  # the graphs are captured by the timed children
        return (3 if args.warm_store else 2) * args.repeat + extra
    checks = 2 if args.check_graphs and not WORKLOADS[workload].subprocess else 0
    return 2 * args.repeat + extra + checks


#: The model column of model-free workloads (bench/synthetic.py).
MODEL_FREE = "-"
SECOND = " (2nd in process)"
WARM = " (warm store)"


def _compared(row: dict, name: str, stock: list, fastfake: list) -> None:
    """The graph and output checks of a row (bench.records.compare_runs), logged
    where they differ."""
    from .records import compare_runs

    row.update(compare_runs(stock, fastfake))
    if row.get("graph_diff"):
        _log(f"GRAPH MISMATCH {name}:\n{row['graph_diff']}")
    if row.get("outputs_diff"):
        _log(f"OUTPUT MISMATCH {name}:\n{row['outputs_diff']}")


def _is_fresh(args, workload: str) -> bool:
    return not args.in_process and WORKLOADS[workload].fresh


def run_fresh(model_name: str, wl, args, progress: Progress, store: str) -> list[dict]:
    """A fresh-process row (and its second-compile row): each repetition one child
    per implementation, stock and fastfake interleaved; then, unless
    --no-dispatch-share, one stock child timing FakeTensorMode.__torch_dispatch__
    and, for symbolic workloads, one fastfake child timing SymNode arithmetic."""
    name = f"{model_name} {wl.name}"

    def new_row(workload: str, mode: str) -> dict:
        return {"model": model_name, "workload": workload, "mode": mode, "metric": "cpu", "errors": {},
                "runs": {i: [] for i in harness.IMPLS}}

    row = new_row(wl.name, "fresh")
    second = new_row(wl.name + SECOND, "fresh-second") if args.second else None
    # fastfake with the records an earlier process kept (fastfake/store/): the same
    # stock repetitions, and a fastfake child right after each empty-store one
    warm = new_row(wl.name + WARM, "fresh-warm-store") if args.warm_store else None
    learned = os.path.join(store, "store")
    graphs: dict[str, list] = {i: [] for i in harness.IMPLS}

    def child(impl: str, **kw) -> dict:
        return fresh.run_child(model_name, wl.name, impl, size=args.size, store=store,
                               warm_signatures=args.warm_signatures, **kw)

    for rep in range(args.repeat):
        for impl in harness.IMPLS:
            label = f"{name} {impl} rep {rep + 1}"
            if impl in row["errors"]:
                progress.note(f"{label}: skipped ({impl} failed before)")
                continue
            if impl == "fastfake":
                shutil.rmtree(learned, ignore_errors=True)  # an empty store: no earlier process
            try:
                r = child(impl, second=args.second, capture=args.check_graphs)
            except Exception as e:
                row["errors"][impl] = f"{type(e).__name__}: {str(e)[-1500:]}"
                progress.note(f"{label}: FAILED: {str(e).splitlines()[0][:200]}")
                continue
            row["runs"][impl].append(fresh.run_entry(r, "first"))
            if "graphs" in r["first"]:
                graphs[impl].append(fresh.graph_records(r["first"]["graphs"]))
            msg = f"{label}: {r['first']['cpu']:.1f} s cpu"
            if second is not None and "second" in r:
                second["runs"][impl].append(fresh.run_entry(r, "second"))
                msg += f" (2nd in process {r['second']['cpu']:.1f} s cpu)"
            progress.note(msg + f"; process {r['process_wall']:.0f} s wall")
            if warm is None:
                continue
            if impl == "stock":
                warm["runs"]["stock"].append(row["runs"]["stock"][-1])
                continue
            try:
                w = child("fastfake", second=False)
            except Exception as e:
                warm["errors"]["fastfake"] = f"{type(e).__name__}: {str(e)[-1500:]}"
                progress.note(f"{label} with the store it left: FAILED: {str(e).splitlines()[0][:200]}")
                continue
            warm["runs"]["fastfake"].append(fresh.run_entry(w, "first"))
            served = w["first"]["stats"].get("store.served", 0)
            tables = w["first"]["stats"].get("funcnames.served", 0)
            progress.note(f"{label} with the store it left: {w['first']['cpu']:.1f} s cpu "
                          f"({served} first calls and {tables} function-name tables served from it)")

    if not args.no_dispatch_share:
        if "stock" in row["errors"]:
            progress.note(f"{name} stock dispatch-share child: skipped")
        else:
            try:
                r = child("stock", second=False, fake_share=True)["first"]
                total = r["trace"]
                fake = r["fake_dispatch_s"]
                row["dispatch_share"] = {
                    "total_s": total, "fake_dispatch_s": fake, "outermost_calls": r["fake_calls"],
                    "share": fake / total if total else None,
                    "roofline_speedup": total / (total - fake) if total > fake else None,
                }
                progress.note(f"{name} stock dispatch-share child: {fake:.1f} s of {total:.1f} s in "
                              "FakeTensorMode.__torch_dispatch__")
            except Exception as e:
                row["errors"]["dispatch_share"] = f"{type(e).__name__}: {str(e)[-1500:]}"
                progress.note(f"{name} stock dispatch-share child: FAILED")
        if wl.name in harness.SYMBOLIC_WORKLOADS:
            if "fastfake" in row["errors"]:
                progress.note(f"{name} fastfake SymNode-arithmetic child: skipped")
            else:
                try:
                    r = child("fastfake", second=False, symnode=True)["first"]
                    runs = row["runs"]["fastfake"]
                    total = r["trace"]
                    row["symbolic_remains"] = {
                        "total_s": total, "symnode_s": r["symnode_s"], "symnode_calls": r["symnode_calls"],
                        "symnode_share": r["symnode_s"] / total if total else None,
                        "stock_calls": runs[-1]["stats"].get("dispatch.stock", 0) if runs else None,
                        "stock_ops": r["stock_ops"],
                    }
                    progress.note(f"{name} fastfake SymNode-arithmetic child: {r['symnode_s']:.1f} s")
                except Exception as e:
                    row["errors"]["symnode_share"] = f"{type(e).__name__}: {str(e)[-1500:]}"
                    progress.note(f"{name} fastfake SymNode-arithmetic child: FAILED")

    if args.check_graphs and graphs["stock"] and graphs["fastfake"]:
        # FX graphs and, for workloads that record real outputs (openxla), the
        # values' records (shape, dtype and a SHA-256 of the bytes per tensor: the
        # tensors themselves stay in the child), checked separately
        _compared(row, name, graphs["stock"][:1], graphs["fastfake"])
        stock_diffs = [d for d in (diff_graphs(graphs["stock"][0], g, ("stock rep 1", "stock"))
                                   for g in graphs["stock"][1:]) if d]
        if stock_diffs:  # stock itself traced differently in two fresh processes
            row["stock_graphs_reproducible"] = False
            _log(f"note: stock's own graphs differ between processes for {name}:\n{stock_diffs[0]}")
    out = [finish_row(row)]
    if second is not None:
        second["errors"] = {k: v for k, v in row["errors"].items() if k in harness.IMPLS}
        out.append(finish_row(second))
    if warm is not None:
        if "stock" in row["errors"]:
            warm["errors"]["stock"] = row["errors"]["stock"]
        out.append(finish_row(warm))
    shutil.rmtree(learned, ignore_errors=True)
    return out


def _print_symbolic(rows: list[dict]) -> None:
    """What remains of the symbolic rows under fastfake."""
    sym = [r for r in rows if r.get("symbolic_remains")]
    if not sym:
        return
    print()
    print("Symbolic rows, what remains under fastfake: calls still handed to stock's "
          "FakeTensorMode.__torch_dispatch__ (last repetition) and the time in SymNode "
          "arithmetic (outermost SymNode magic-method calls; one extra fastfake run)")
    hdr = ("model", "workload", "stock calls", "SymNode calls", "SymNode s", "SymNode share")
    table = []
    for r in sym:
        d = r["symbolic_remains"]
        share = d.get("symnode_share")
        table.append((r["model"], r["workload"], str(d.get("stock_calls", "-")), str(d["symnode_calls"]),
                      _fmt(d["symnode_s"]), "-" if share is None else f"{100 * share:.0f}%"))
    _print_table(hdr, table)


def _compile_ratio(r: dict) -> str:
    """stock / fastfake of the medians of Dynamo's entire_frame_compile, for a
    fresh-process compile_* row (its CPU seconds also run the compiled graph once);
    '-' elsewhere."""
    if r.get("metric") != "cpu" or not r["workload"].startswith("compile"):
        return "-"
    st, ff = r.get("stock_trace_median_s"), r.get("fastfake_trace_median_s")
    return f"{st / ff:.2f}x" if st and ff else "-"


def print_report(rows: list[dict], args) -> None:
    print()
    print(f"fastfake {fastfake.__version__} | torch {torch.__version__} | size={args.size} | "
          f"repeat={args.repeat} | medians | transformers={'yes' if have_transformers() else 'no (built-in models)'}")
    hdr = ("model", "workload", "time", "stock s", "fastfake s", "speedup", "compile x", "fake share", "roofline",
           "stock wall", "ff wall", "wall x", "graphs", "check")
    table = []
    for r in rows:
        ds = r.get("dispatch_share") or {}
        share = ds.get("share")
        roof = ds.get("roofline_speedup")
        if r["errors"] and r.get("stock_median_s") is None and r.get("fastfake_median_s") is None:
            sp = "error"
        else:
            sp = _fmt(r.get("speedup"), ".2f") + ("x" if r.get("speedup") else "")
        g = "-" if "graphs_identical" not in r else (
            "same" if r["graphs_identical"] and r.get("outputs_identical", True) else "DIFF")
        table.append((r["model"], r["workload"], r.get("metric", "trace"), _fmt(r.get("stock_median_s")),
                      _fmt(r.get("fastfake_median_s")),
                      sp, _compile_ratio(r), "-" if share is None else f"{100 * share:.0f}%", _fmt(roof, ".2f") + ("x" if roof else ""),
                      _fmt(r.get("stock_wall_median_s")), _fmt(r.get("fastfake_wall_median_s")),
                      _fmt(r.get("wall_speedup"), ".2f") + ("x" if r.get("wall_speedup") else ""), g,
                      r.get("verdict", "-")))
    _print_table(hdr, table)
    _print_symbolic(rows)
    low = [r for r in rows if "lowering_ratio" in r]
    if low:
        print()
        print("XLA lowering (time inside torch_xla's extract_compiled_graph: FX graph run on lazy tensors + "
              "XLA compile; not part of the trace times above)")
        lhdr = ("model", "workload", "stock s", "fastfake s", "ratio", "stock xla compile s", "ff xla compile s",
                "xla compiles stock/ff", "outputs")
        ltable = []
        for r in low:
            st, ft = r.get("stock_timing") or {}, r.get("fastfake_timing") or {}
            rr = r.get("lowering_ratio")
            o = "-" if "outputs_identical" not in r else ("bitwise" if r["outputs_identical"] else "DIFF")
            ltable.append((r["model"], r["workload"], _fmt(r.get("stock_lowering_median_s")),
                           _fmt(r.get("fastfake_lowering_median_s")), _fmt(rr, ".2f") + ("x" if rr else ""),
                           _fmt(st.get("xla_compile")), _fmt(ft.get("xla_compile")),
                           f"{_fmt(st.get('xla_compiles'), '.0f')}/{_fmt(ft.get('xla_compiles'), '.0f')}", o))
        _print_table(lhdr, ltable)
    print()
    for r in rows:
        print(f"== {r['model']} {r['workload']}")
        for impl in harness.IMPLS:
            med = r.get(f"{impl}_median_s")
            if med is None:
                continue
            t = r.get(f"{impl}_timing") or {}
            efc = t.get("entire_frame_compile", r.get(f"{impl}_trace_median_s", med))
            bc = t.get("backend_compile", 0.0)
            extra = "".join(f" {k}:{t[k]:.4f}" if k != "xla_compiles" and k != "xla_lowering_calls"
                            else f" {k}:{t[k]:.0f}" for k in TIMING_KEYS if k in t and k not in ("entire_frame_compile", "backend_compile"))
            print(f"  {impl:8s} TIMING: entire_frame_compile:{efc:.4f} backend_compile:{bc:.4f}{extra}")
            runs = r["runs"][impl]
            if r.get("metric") == "cpu":
                print(f"  {impl:8s} CPU s per repetition: " + ", ".join(f"{x['cpu']:.3f}" for x in runs)
                      + " | wall: " + ", ".join(f"{x['wall']:.3f}" for x in runs)
                      + f" | trace (entire_frame_compile or wall) median {_fmt(r.get(f'{impl}_trace_median_s'))}")
                costs = [x.get("child") or {} for x in runs]
                parts = []
                for key in ("import_torch", "import_fastfake", "install", "warmup", "build"):
                    vals = [c[key]["cpu"] for c in costs if key in c]
                    if vals:
                        parts.append(f"{key} {_median(vals):.2f}")
                vals = [c["process_wall"] for c in costs if "process_wall" in c]
                if vals:
                    parts.append(f"whole process {_median(vals):.1f} wall")
                if parts:
                    print(f"  {impl:8s} CHILD (median s cpu): " + " | ".join(parts))
            print(f"  {impl:8s} {harness.stats_line(r.get(f'{impl}_stats') or {})}")
            caches = (r.get(f"{impl}_stats") or {}).get("caches")
            if caches is not None:
                print(f"  {impl:8s} CACHES: " + (" | ".join(f"{k}:{v}" for k, v in sorted(caches.items())) or "-")
                      + f" | output code {(r.get(f'{impl}_stats') or {}).get('code_digest')}")
        left = (r.get("symbolic_remains") or {}).get("stock_ops")
        if left:
            top = sorted(left.items(), key=lambda kv: -kv[1]["outermost"])[:8]
            print("  fastfake STOCK CALLS (outermost, per op): "
                  + " | ".join(f"{k}:{v['outermost']}" for k, v in top if v["outermost"])
                  + f" | nested in all: {sum(v['nested'] for v in left.values())}")
        ds = r.get("dispatch_share")
        if ds:
            print(f"  stock    FakeTensorMode.__torch_dispatch__ time: {ds['fake_dispatch_s']:.4f}s of trace "
                  f"{ds['total_s']:.4f}s ({100 * ds['share']:.1f}%, {ds['outermost_calls']} outermost calls) "
                  f"-> roofline speedup {_fmt(ds['roofline_speedup'], '.2f')}x")
        ns = r.get("never_slower")
        if ns:
            print(f"  never slower: fastfake median {ns['fastfake_median']:.3f} s vs limit {ns['limit']:.3f} s "
                  f"(stock median {ns['stock_median']:.3f} s x (1 + noise {100 * ns['noise']:.1f}%)) -> "
                  f"{r.get('verdict')}")
        for k, v in r["errors"].items():
            print(f"  ERROR [{k}]: {v.splitlines()[0][:300] if v else v}")
        if r.get("graph_diff"):
            print("  GRAPH DIFF:\n    " + r["graph_diff"].replace("\n", "\n    "))
        if "outputs_identical" in r:
            if r.get("graphs_identical"):
                print(f"  graphs: identical ({', '.join(r.get('graph_labels') or [])})")
            print(f"  outputs: {r['outputs_checked']} tensors copied to the CPU, "
                  + ("bitwise identical (torch.equal, dtype, shape, SHA-256 of the bytes)" if r["outputs_identical"]
                     else "DIFFER: " + r.get("outputs_diff", "")))
    print()
    if any(r.get("metric") == "cpu" for r in rows):
        print("time 'cpu' rows (fresh processes): each repetition is a new process (import torch, install "
              "fastfake, a tiny warm-up trace of the same kind, caches emptied, model built untimed); 'stock s' / "
              "'fastfake s' are medians of the CPU seconds (time.process_time) of the first trace, which for "
              "compile_* includes running the compiled graph once (on real weights, with the process's intra-op "
              "threads); 'compile x' is the ratio of the medians of Dynamo's entire_frame_compile alone "
              "(Dynamo, AOTAutograd, the backend: the compile without that run); 'wall' columns the same call's wall time. "
              "'(2nd in process)': the same trace again in that process after torch._dynamo.reset() and "
              "FakeTensorMode.cache_clear(). Stock and fastfake children interleaved.")
    if any(r.get("metric", "trace") == "trace" for r in rows):
        print("time 'trace' rows (this process): 'stock s' / 'fastfake s' are medians of trace times: dynamo's "
              "entire_frame_compile for compile_* workloads, the wall time otherwise; 'wall' columns are the wall "
              "time of the whole workload call, which for compile_* also runs the compiled graph once on real "
              "inputs.")
    print("'fake share' is the share of the stock trace time spent inside FakeTensorMode.__torch_dispatch__ "
          "(outermost calls, one extra stock run) and 'roofline' = total / (total - fake time).")
    print(f"check: never slower than stock -- FAIL when the fastfake median > stock median x (1 + max("
          f"{100 * verdict.FLOOR:.0f}%, relative spread (max - min) / median of either implementation's "
          "repetitions)); 'slower (allowed)' under --allow-slower.")
    print("TIMING: entire_frame_compile / backend_compile are dynamo's compile-time metrics "
          "(_compile.compile_inner / OutputGraph.call_user_compiler) for compile_* workloads; for the "
          "others entire_frame_compile is the wall time of the trace and backend_compile is 0. "
          "STATS are from the last repetition (one call for warm workloads).")
    if any(WORKLOADS[r["workload"]].subprocess for r in rows if r["workload"] in WORKLOADS):
        print("inductor_*: each repetition is a fresh process; 'stock s' / 'fastfake s' are the time from "
              "torch.compile to the first output (forward, or forward + backward for _train), the 'wall' "
              "columns the whole child process (imports and model building included). _cold: empty "
              "TORCHINDUCTOR_CACHE_DIR; _warm: a copy of a cache directory a stock process filled. CACHES are "
              "Inductor's and AOTAutograd's cache counters and 'output code' a digest of every generated "
              "module; graphs 'same' means every repetition of both implementations agreed on both.")
    if low:
        print("compile_openxla*: the trace time is entire_frame_compile (Dynamo + AOTAutograd on fake XLA "
              "tensors); xla_lowering is the time inside torch_xla's extract_compiled_graph (called lazily at "
              "the first call of the compiled graph, and at the first backward), xla_compile the XLA compile "
              "time within it (torch_xla's CompileTime metric), xla_compiles the number of uncached XLA "
              "compiles; torch_xla's computation cache is emptied before every repetition.")


def plot(rows: list[dict], path: str, title: str = "") -> None:
    """One panel per workload: fastfake's speedup over stock per model (bars,
    labelled), the FakeTensorMode roofline of the row (black tick) and 1x (dashed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        _log(f"note: matplotlib is not importable; no plot written to {path}")
        return
    rows = [r for r in rows if r.get("speedup")]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    if not workloads:
        _log(f"note: nothing to plot; no plot written to {path}")
        return
    fig, axes = plt.subplots(1, len(workloads), figsize=(3.4 * len(workloads), 3.6), squeeze=False)
    for ax, wl in zip(axes[0], workloads):
        rs = [r for r in rows if r["workload"] == wl]
        xs = range(len(rs))
        ax.bar(xs, [r["speedup"] for r in rs], 0.6, color="tab:orange")
        top = max(max(r["speedup"] for r in rs), 1.0) * 1.25
        for x, r in zip(xs, rs):
            ax.text(x, r["speedup"], f"{r['speedup']:.2f}x", ha="center", va="bottom", fontsize=7)
            roof = (r.get("dispatch_share") or {}).get("roofline_speedup")
            if roof and roof <= top:
                ax.plot([x - 0.3, x + 0.3], [roof, roof], color="black", linewidth=1.5)
            elif roof:  # off the scale: marked at the top with its value
                ax.plot([x - 0.3, x + 0.3], [top * 0.97] * 2, color="black", linewidth=1.5, linestyle=":")
                ax.text(x, top * 0.97, f"{roof:.0f}x", ha="center", va="top", fontsize=6)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["model"] for r in rs], fontsize=8)
        ax.set_title(wl, fontsize=9)
        ax.set_ylim(0, top)
    axes[0][0].set_ylabel("speedup over stock (x)")
    fig.suptitle(title or "fastfake vs stock FakeTensorMode: trace-time speedup "
                 "(bars; black tick: FakeTensorMode roofline)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _log(f"plot written to {path}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.replot:
        with open(args.replot) as fh:
            data = json.load(fh)
        meta = data.get("meta", {})
        plot(data["rows"], args.plot or os.path.splitext(args.replot)[0] + ".png",
             f"fastfake vs stock, torch {meta.get('torch', '?')}, size {meta.get('size', '?')}: trace-time "
             "speedup (bars; black tick: FakeTensorMode roofline)")
        return 0
    if args.list:
        for n in MODEL_NAMES:
            print(f"model    {n:18s} [{MODELS[n].backend()}] {MODELS[n].description}")
        for n in WORKLOAD_NAMES:
            print(f"workload {n:18s} {WORKLOADS[n].doc}")
        for n, why in UNAVAILABLE_WORKLOADS.items():
            print(f"workload {n:18s} (unavailable: {why})")
        print("default plan (no --models, no --workloads): "
              + ", ".join(f"{m or MODEL_FREE} {w}" for m, w in DEFAULT_PLAN))
        return 0
    warnings.filterwarnings("ignore", message=".*doesn't take boxed arguments.*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception:
        pass

    progress = Progress(sum(_steps_per_row(args, w) for _, w in args.cells))
    t_start = time.perf_counter()
    # This process's own fastfake cache (the self-test result, learned records): a
    # directory of this run, so that nothing an earlier run kept serves its rows.
    parent_cache = tempfile.mkdtemp(prefix="fastfake-bench-cache-")
    os.environ["FASTFAKE_CACHE_DIR"] = parent_cache
    if any(not _is_fresh(args, w) for w in args.workloads):
        _log("warming up (one tiny compile per implementation) ...")
        _warmup()
    store = None
    if any(_is_fresh(args, w) for w in args.workloads):
        _log("fresh-process rows: one install() fills the self-test store the children read ...")
        store = fresh.make_store()
    rows = []
    built: tuple = (None, None, None)  # (model name, model, inputs): the last model built here
    try:
        for mname, wname in args.cells:
            wl = WORKLOADS[wname]
            if _is_fresh(args, wname):
                rows.extend(run_fresh(mname or MODEL_FREE, wl, args, progress, store))
                continue
            if mname is None:
                rows.append(run_cell(None, None, None, wl, args, progress))
                continue
            spec = MODELS[mname]
            if built[0] != mname:
                built = (None, None, None)
                t0 = time.perf_counter()
                model, inputs = spec.create(args.size)
                built = (mname, model, inputs)
                del model, inputs
                _log(f"built {mname} ({args.size}, {spec.backend()}) in {time.perf_counter() - t0:.1f}s")
            rows.append(run_cell(spec, built[1], built[2], wl, args, progress))
        built = (None, None, None)
    finally:
        if store is not None:
            shutil.rmtree(store, ignore_errors=True)
        harness.set_impl("stock")  # (uninstall() writes this process's new records)
        shutil.rmtree(parent_cache, ignore_errors=True)
    wall = time.perf_counter() - t_start
    verdict.check_rows(rows, allow_slower=args.allow_slower)

    print_report(rows, args)
    print(f"total benchmark wall time: {wall:.1f}s")

    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        meta = {
            "torch": torch.__version__,
            "fastfake": fastfake.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "size": args.size,
            "repeat": args.repeat,
            "inner": args.inner,
            "warm_signatures": args.warm_signatures,
            "warm_process": args.warm_process,
            "mode": "in-process" if args.in_process else "fresh",
            "second": args.second,
            "allow_slower": args.allow_slower,
            "never_slower_floor": verdict.FLOOR,
            "cells": [[m or MODEL_FREE, w] for m, w in args.cells],
            "transformers": have_transformers(),
            "wall_s": wall,
        }
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1, default=str)
        _log(f"results written to {args.json}")
    if args.plot:
        plot(rows, args.plot, f"fastfake vs stock, torch {torch.__version__}, size {args.size}: trace-time "
             "speedup (bars; black tick: FakeTensorMode roofline)")

    return exit_status(rows, allow_slower=args.allow_slower)


def exit_status(rows: list[dict], *, allow_slower: bool = False) -> int:
    """1 if any row's graphs or outputs differ, fastfake raised where stock did not,
    or (unless ``allow_slower``) a row failed the never-slower rule
    (``verdict.check_rows`` marked it); else 0. Logs each reason."""
    rc = 0
    slower = [r for r in rows if (r.get("never_slower") or {}).get("slower")]
    bad_graphs = [r for r in rows if r.get("graphs_identical") is False or r.get("outputs_identical") is False]
    fast_only = [r for r in rows if "fastfake" in r["errors"] and "stock" not in r["errors"]]
    both = [r for r in rows if "stock" in r["errors"] or "setup" in r["errors"]]
    if bad_graphs:
        _log(f"FAIL: FX graphs or outputs differ with fastfake for: {', '.join(r['model'] + ' ' + r['workload'] for r in bad_graphs)}")
        rc = 1
    if fast_only:
        _log(f"FAIL: fastfake raised where stock did not: {', '.join(r['model'] + ' ' + r['workload'] for r in fast_only)}")
        rc = 1
    if both:
        _log(f"note: stock torch itself fails on: {', '.join(r['model'] + ' ' + r['workload'] for r in both)} "
             "(not counted as a fastfake failure)")
    if slower:
        what = ", ".join(f"{r['model']} {r['workload']} ({r['never_slower']['fastfake_median']:.3f} s > "
                         f"{r['never_slower']['limit']:.3f} s)" for r in slower)
        if allow_slower:
            _log(f"WARNING: fastfake slower than stock beyond noise (allowed by --allow-slower): {what}")
        else:
            _log(f"FAIL: fastfake slower than stock beyond noise: {what}")
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
