"""Fresh-process rows: the first trace a user pays, one new Python process per
repetition.

For every first-trace workload (``Workload.fresh``: compile_*, aot_function,
make_fx_*, export, export_data_dependent, symint_arith) ``python -m bench`` runs
each repetition as a child ``python -m bench.fresh --child ...`` that

1. imports torch, imports fastfake and, for fastfake, calls ``fastfake.install()``
   (each timed and reported; the install-time self-test result comes from a
   store one ``install()`` filled before the run, as on any process after the
   first since installation, see ``FASTFAKE_CACHE_DIR``);
2. warms up: the same workload (same tracer, backend, dynamic flag, training or
   not) on a tiny module, ``Sequential(Linear(8, 8), GELU(), LayerNorm(8))`` on a
   [2, 8] input -- for the model-free workloads, the zoo workload named by
   ``Workload.warmup`` (export, make_fx_symbolic) -- so Python's lazy imports and
   one-time initialisation are paid before anything is timed; then
   ``torch._dynamo.reset()``, ``FakeTensorMode.cache_clear()`` (stock's cache and
   fastfake's result cache, portable records included) and fastfake's learned
   elementwise signatures are forgotten (``--warm-signatures`` keeps them), so
   nothing learned from the tiny module serves the timed trace;
3. builds the model and its inputs from the zoo spec (seed 0; not timed);
4. times the workload's first trace: ``time.process_time()`` (CPU seconds of the
   whole process, every thread) and ``time.perf_counter()`` (wall) around one
   ``run()`` after a full garbage collection; dynamo's ``entire_frame_compile``,
   ``fastfake.stats()``, stock's dispatch counters and the garbage collector's CPU
   seconds per generation during the trace (``gc``) are reported too;
5. unless ``--no-second``: ``torch._dynamo.reset()``, ``FakeTensorMode.cache_clear()``
   and times the same trace again: the **second compile in the same process** (the
   process is warm; both implementations' caches are empty; fastfake keeps its
   learned signatures).

The report is JSON, written to ``--out``. The parent interleaves children (stock,
fastfake, stock, fastfake, ...) and reports medians (bench/__main__.py).

``python -m bench.fresh --install-cost`` measures what ``import fastfake`` and
``fastfake.install()`` cost a fresh process, with the self-test result on disk and
without (a new installation's first process), after a first ``FakeTensorMode``
(whose imports every fake-tensor program pays, stock or not, timed apart).

Children read and write Python bytecode as an installed package does
(``PYTHONDONTWRITEBYTECODE`` is dropped from their environment): the first child
compiles fastfake's modules from the source tree, the others load them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPLS = ("stock", "fastfake")


def _clock() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def _since(t: tuple[float, float]) -> dict[str, float]:
    c, w = _clock()
    return {"cpu": c - t[0], "wall": w - t[1]}


# --------------------------------------------------------------------------- #
# The child process
# --------------------------------------------------------------------------- #


def _tiny():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.LayerNorm(8)).eval()
    return model, (torch.randn(2, 8),)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _graphs_json(graphs) -> list:
    """The records, with the object addresses in node targets (``<function
    sym_max at 0x7f...>``) dropped: they differ from one process to the next."""
    return [[g.label, _ADDRESS.sub("", g.code),
             [(n, op, _ADDRESS.sub("", tgt), val) for n, op, tgt, val in g.meta]] for g in graphs]


class _GcTimer:
    """A ``gc.callbacks`` entry: CPU seconds and number of collections per generation."""

    def __init__(self) -> None:
        self.cpu = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.start = time.process_time()
        else:
            g = info["generation"]
            self.cpu[g] += time.process_time() - self.start
            self.count[g] += 1


def _timed(run, *, capture: bool = False, fake_share: bool = False, symnode: bool = False) -> dict:
    """One timed trace (``run()``) with the counters of the in-process harness."""
    import gc

    from torch._subclasses import fake_tensor as _ft

    from . import harness

    timer = None
    if fake_share:
        timer = harness.DispatchTimer()
    elif symnode:
        timer = harness.SymNodeTimer()
    gc.collect()
    harness.reset_counters()
    hits0 = _ft.FakeTensorMode.cache_hits
    collector = _GcTimer()
    if timer is not None:
        timer.__enter__()
    gc.callbacks.append(collector)
    try:
        t = _clock()
        graphs = run(capture=capture)
        took = _since(t)
    finally:
        gc.callbacks.remove(collector)
        if timer is not None:
            timer.__exit__(None, None, None)
    timing = harness.workload_times()
    out = {
        "cpu": took["cpu"],
        "wall": took["wall"],
        "trace": harness.trace_seconds(took["wall"], timing),
        "timing": timing,
        "stats": harness.collect_stats(hits0),
        # (the garbage collector's part of "cpu", by generation; objects it tracks after)
        "gc": {"cpu": sum(collector.cpu), "cpu_by_generation": collector.cpu,
               "collections": collector.count, "tracked_after": len(gc.get_objects())},
    }
    if capture:
        out["graphs"] = _graphs_json(graphs)
    if fake_share:
        out["fake_dispatch_s"], out["fake_calls"] = timer.seconds, timer.calls
    if symnode:
        out["symnode_s"], out["symnode_calls"] = timer.seconds, timer.calls
        out["stock_ops"] = harness.stock_report()
    return out


def run_hook(hook: str) -> None:
    """Call a ``"module:function"`` hook ("" = none)."""
    import importlib

    if hook:
        mod, fn = hook.split(":")
        getattr(importlib.import_module(mod), fn)()


def _before_install(workload: str) -> None:
    """The workload's ``before_install`` hook (bench.records.Workload), if any."""
    from . import workloads

    run_hook(workloads.get(workload).before_install)


def child(args) -> dict:
    t_start = _clock()
    t = _clock()
    import torch

    report: dict = {"impl": args.impl, "model": args.model, "workload": args.workload, "size": args.size,
                    "torch": torch.__version__, "import_torch": _since(t)}
    if args.install_only:
        # What any fake-tensor program imports at its first FakeTensorMode (Dynamo's
        # config and with it Dynamo, sympy, ...), stock or not: timed apart, so that
        # install() below is fastfake's own setup.
        t = _clock()
        from torch._subclasses.fake_tensor import FakeTensorMode

        FakeTensorMode()
        report["first_mode"] = _since(t)
    if not args.install_only:
        _before_install(args.workload)
    t = _clock()
    import fastfake

    report["import_fastfake"] = _since(t)
    if args.impl == "fastfake":
        t = _clock()
        fastfake.install()
        report["install"] = _since(t)
        report["selftest"] = (fastfake.selftest_report() or {}).get("source")
    if args.install_only:
        report["child"] = _since(t_start)
        return report

    import warnings

    warnings.filterwarnings("ignore")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception:
        pass
    from . import determinism, harness, models, workloads

    determinism.pin()  # graphs compared across processes: stock's address-dependent order fixed
    wl = workloads.get(args.workload)
    if not args.no_warmup:
        t = _clock()
        tiny, tiny_inputs = _tiny()
        workloads.get(wl.warmup or wl.name)(tiny, tiny_inputs, spec=None, size="small")()
        report["warmup"] = _since(t)
    harness.fresh_state(cold_fastfake=args.impl == "fastfake" and not args.warm_signatures)

    t = _clock()
    if wl.model_free:
        spec, model, inputs = None, None, None
    else:
        spec = models.get(args.model)
        model, inputs = spec.create(args.size)
    run = wl(model, inputs, spec=spec, size=args.size)
    report["build"] = _since(t)

    report["first"] = _timed(run, capture=args.capture, fake_share=args.fake_share, symnode=args.symnode)
    if args.second:
        harness.fresh_state(cold_fastfake=False)
        report["second"] = _timed(run)
    harness.release(run)
    report["child"] = _since(t_start)
    return report


# --------------------------------------------------------------------------- #
# The parent side
# --------------------------------------------------------------------------- #


def _env(store: str | None, cache_dir: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # Children read and write bytecode: fastfake's modules run from the source tree
    # here, and an installed package has its bytecode (pip compiles it; torch's and
    # the other site-packages have theirs), so an environment that turns writing
    # off would time compiling fastfake's sources in every process.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if store is not None:
        env["FASTFAKE_CACHE_DIR"] = store
    if cache_dir is not None:  # nothing on disk carries over from one child to the next
        env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    return env


def make_store() -> str:
    """A directory for fastfake's install-time self-test result, filled by one
    ``install()`` in a fresh process (so no timed child runs the self-test)."""
    from . import workloads

    store = tempfile.mkdtemp(prefix="fastfake-fresh-store-")
    # one result per set of devices the children prove (a before_install hook that
    # brings a device up gives the self-test another key)
    hooks = sorted({w.before_install for w in workloads.WORKLOADS.values() if w.before_install})
    for hook in ["", *hooks]:
        code = f"import torch; from bench.fresh import run_hook; run_hook({hook!r}); import fastfake; fastfake.install()"
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(store), capture_output=True, text=True,
                           timeout=1800)
        if r.returncode != 0:
            shutil.rmtree(store, ignore_errors=True)
            raise RuntimeError(f"fastfake.install() failed in a fresh process: {r.stderr[-2000:]}")
    return store


def run_child(model: str, workload: str, impl: str, *, size: str = "default", store: str | None = None,
              second: bool = True, capture: bool = False, fake_share: bool = False, symnode: bool = False,
              warm_signatures: bool = False, warmup: bool = True, install_only: bool = False,
              timeout: float = 3600) -> dict:
    """Run one child and return its report; RuntimeError with the tail of its
    stderr if it fails."""
    tmp = tempfile.mkdtemp(prefix="fastfake-fresh-")
    out = os.path.join(tmp, "report.json")
    cmd = [sys.executable, "-m", "bench.fresh", "--child", "--model", model, "--workload", workload,
           "--size", size, "--impl", impl, "--out", out]
    for flag, on in (("--no-second", not second), ("--capture", capture), ("--fake-share", fake_share),
                     ("--symnode", symnode), ("--warm-signatures", warm_signatures), ("--no-warmup", not warmup),
                     ("--install-only", install_only)):
        if on:
            cmd.append(flag)
    try:
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, env=_env(store, os.path.join(tmp, "inductor")), capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"child {impl} {model} {workload} failed ({r.returncode}): {r.stderr[-3000:]}")
        with open(out) as f:
            rep = json.load(f)
        rep["process_wall"] = time.perf_counter() - t0
        return rep
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def graph_records(graphs_json: list) -> list:
    """The child's captured graphs as GraphRecords (bench.records.diff_graphs)."""
    from .records import GraphRecord

    return [GraphRecord(label, code, [tuple(m) for m in meta]) for label, code, meta in graphs_json]


def run_entry(rep: dict, which: str) -> dict:
    """One repetition of a row from a child report: ``seconds`` (the row's metric,
    CPU seconds), cpu, wall, trace, timing, stats, the garbage collector's part, and
    the child's other costs."""
    m = rep[which]
    entry = {"seconds": m["cpu"], "cpu": m["cpu"], "wall": m["wall"], "trace": m["trace"],
             "timing": m["timing"], "stats": m["stats"], "gc": m.get("gc")}
    if which == "first":
        entry["child"] = {k: rep[k] for k in ("import_torch", "import_fastfake", "install", "warmup", "build",
                                               "child", "process_wall", "selftest") if k in rep}
    return entry


# --------------------------------------------------------------------------- #
# install() cost
# --------------------------------------------------------------------------- #


def install_cost(repeat: int = 5) -> dict:
    """Fresh processes that only import torch, import fastfake and (fastfake)
    install it: with the self-test result on disk (a store filled before) and
    with an empty store (the first process of a new installation), interleaved
    with stock processes (import torch + import fastfake, no install)."""
    filled = make_store()
    res: dict = {"stock": [], "disk": [], "first": []}
    try:
        for rep in range(repeat):
            for kind in ("stock", "disk", "first"):
                store = filled if kind != "first" else tempfile.mkdtemp(prefix="fastfake-empty-store-")
                try:
                    r = run_child("-", "-", "stock" if kind == "stock" else "fastfake", store=store,
                                  install_only=True)
                finally:
                    if kind == "first":
                        shutil.rmtree(store, ignore_errors=True)
                res[kind].append(r)
                line = (f"[{rep + 1}/{repeat}] {kind}: import torch {r['import_torch']['wall']:.2f} s, "
                        f"import fastfake {r['import_fastfake']['wall']:.2f} s")
                if "install" in r:
                    line += (f", install {r['install']['cpu']:.2f} s cpu / {r['install']['wall']:.2f} s wall "
                             f"(self-test: {r.get('selftest')})")
                print(line, file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(filled, ignore_errors=True)
    return res


def _print_install_cost(res: dict) -> None:
    def med(kind: str, key: str, field: str) -> float:
        xs = [r[key][field] for r in res[kind] if key in r]
        return statistics.median(xs) if xs else float("nan")

    n = len(res["stock"])
    print(f"fresh processes, {n} per kind, interleaved; medians, seconds")
    print(f"  {'':44s} {'cpu':>6s} {'wall':>6s}")
    lines = (
        ("import torch (stock processes)", "stock", "import_torch"),
        ("a first FakeTensorMode (stock processes)", "stock", "first_mode"),
        ("import fastfake (after those)", "disk", "import_fastfake"),
        ("install(), self-test result on disk", "disk", "install"),
        ("install(), self-test run (first process)", "first", "install"),
    )
    for what, kind, key in lines:
        print(f"  {what:44s} {med(kind, key, 'cpu'):6.3f} {med(kind, key, 'wall'):6.3f}")

    def own(r: dict, field: str) -> float:
        return r["import_fastfake"][field] + r["install"][field]

    setup = {f: statistics.median(own(r, f) for r in res["disk"]) for f in ("cpu", "wall")}
    print(f"  {'setup: import fastfake + install(), on disk':44s} {setup['cpu']:6.3f} {setup['wall']:6.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fresh", description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help="run one repetition (used by python -m bench)")
    p.add_argument("--install-cost", action="store_true",
                   help="measure import fastfake + install() in fresh processes and print a table")
    p.add_argument("--repeat", type=int, default=5, help="--install-cost: processes per kind (default 5)")
    p.add_argument("--json", help="--install-cost: also write the reports as JSON")
    p.add_argument("--model", default="-")
    p.add_argument("--workload", default="-")
    p.add_argument("--size", default="default")
    p.add_argument("--impl", choices=IMPLS, default="stock")
    p.add_argument("--out")
    p.add_argument("--no-second", dest="second", action="store_false")
    p.add_argument("--capture", action="store_true")
    p.add_argument("--fake-share", action="store_true")
    p.add_argument("--symnode", action="store_true")
    p.add_argument("--warm-signatures", action="store_true")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--install-only", action="store_true")
    args = p.parse_args(argv)
    if args.install_cost:
        res = install_cost(args.repeat)
        _print_install_cost(res)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0
    if not args.child or not args.out:
        p.error("use --child --out FILE (as python -m bench does) or --install-cost")
    rep = child(args)
    with open(args.out, "w") as f:
        json.dump(rep, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
