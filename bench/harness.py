"""Measurement harness shared by the CLI (``python -m bench``) and the tests.

* :func:`set_impl` switches between stock torch (``fastfake.uninstall()``; torch's
  own fake-tensor cache stays ON, its default) and ``fastfake.install()``.
* :func:`fresh_state` makes the next trace a true first trace
  (``torch._dynamo.reset()``, ``FakeTensorMode.cache_clear()`` and, unless asked
  otherwise, fastfake's learned elementwise signatures are forgotten too; plus the
  workload's own backend cache, ``run.fresh_state``, e.g. torch_xla's computation
  cache for the openxla workloads).
* :class:`DispatchTimer` wraps the stock ``FakeTensorMode.__torch_dispatch__``
  and accumulates the time of the outermost calls only.
* :func:`capture_graphs` / :func:`check_graphs` run a workload with graph capture
  under both implementations and diff the results.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field

import torch  # noqa: F401  (fastfake's extension needs torch's libraries loaded first)

import fastfake
from torch._subclasses import fake_tensor as _ft
from torch.utils._stats import simple_call_counter

from . import models as _models
from . import workloads as _workloads

IMPLS = ("stock", "fastfake")
FTM_COUNTER = "FakeTensorMode.__torch_dispatch__"


def set_impl(impl: str) -> None:
    if impl == "fastfake":
        fastfake.install()
    elif impl == "stock":
        fastfake.uninstall()
    else:
        raise ValueError(f"unknown impl {impl!r}")


def forget_signatures() -> None:
    """Make fastfake cold again: drop its result cache, its learned elementwise
    signatures (the registrations are restored at once) and the records its store
    holds in memory (those on disk are read again at the next first call). Uses
    fastfake internals for the latter; a no-op if they are missing."""
    fastfake.cache_clear()
    try:
        from fastfake import _C
        from fastfake.elementwise import registry as _registry

        _C.clear_elementwise()
        _registry.register_all(_C)
    except Exception:  # pragma: no cover - internals moved
        pass
    try:
        from fastfake.store import records as _records

        _records.clear()
    except Exception:  # pragma: no cover - internals moved
        pass


def fresh_state(*, cold_fastfake: bool = True, run=None, keep_learned: bool = False) -> None:
    """Next trace is a first trace. ``run`` is the workload callable; a workload
    whose backend keeps its own compile cache attaches ``run.fresh_state`` to empty
    it (openxla: torch_xla's computation cache). ``keep_learned``: only Dynamo is
    reset, as between two compiles of a long-running process: stock's dispatch
    cache and everything fastfake learned stay."""
    torch._dynamo.reset()
    backend_reset = getattr(run, "fresh_state", None)
    if keep_learned:
        if backend_reset is not None:
            backend_reset()
        return
    _ft.FakeTensorMode.cache_clear()
    if cold_fastfake:
        forget_signatures()
    if backend_reset is not None:
        backend_reset()


def release(run) -> None:
    """Drop what a workload callable keeps on disk (``run.cleanup``: the inductor
    workloads' cache directories); a no-op for the others."""
    cleanup = getattr(run, "cleanup", None)
    if cleanup is not None:
        cleanup()


def reset_counters() -> None:
    simple_call_counter.clear()
    fastfake.reset_stats()
    _workloads.reset_backend_times()
    try:
        from torch._dynamo.utils import compilation_time_metrics

        compilation_time_metrics.clear()
    except Exception:  # pragma: no cover
        pass


def dynamo_times() -> dict[str, float]:
    """entire_frame_compile / backend_compile (seconds) of the dynamo compiles since
    the last :func:`reset_counters`, from ``torch._dynamo.utils.compilation_time_metrics``."""
    try:
        from torch._dynamo.utils import compilation_time_metrics as m
    except Exception:  # pragma: no cover
        return {}
    out = {}
    if "_compile.compile_inner" in m:
        out["entire_frame_compile"] = float(sum(m["_compile.compile_inner"]))
    if "OutputGraph.call_user_compiler" in m:
        out["backend_compile"] = float(sum(m["OutputGraph.call_user_compiler"]))
    return out


def workload_times() -> dict[str, float]:
    """:func:`dynamo_times` plus the timers of backends that compile outside
    entire_frame_compile (openxla: xla_lowering, xla_compile, xla_compiles, ...)."""
    out = dynamo_times()
    out.update(_workloads.backend_times())
    return out


def collect_stats(cache_hits_before: int) -> dict[str, int]:
    st = {FTM_COUNTER: int(simple_call_counter.get(FTM_COUNTER, 0))}
    st["stock_cache.hit"] = int(_ft.FakeTensorMode.cache_hits - cache_hits_before)
    if fastfake.is_installed():
        for k, v in fastfake.stats().items():
            if v:
                st[k] = v
    return st


def stock_report() -> dict[str, dict[str, int]]:
    """fastfake's calls handed to stock per overload since the last reset (empty
    when fastfake is not installed or has no such report)."""
    report = getattr(fastfake, "stock_report", None)
    return report() if report is not None and fastfake.is_installed() else {}


def stats_line(st: dict[str, int]) -> str:
    parts = [
        f"{FTM_COUNTER}:{st.get(FTM_COUNTER, 0)}",
        f"elementwise.hit:{st.get('elementwise.hit', 0)}",
        f"cache.hit:{st.get('cache.hit', 0)}",
        f"stock_cache.hit:{st.get('stock_cache.hit', 0)}",
    ]
    extra = [
        f"{k}:{v}"
        for k, v in sorted(st.items())
        if v and (k.startswith(("elementwise.fallback.", "elementwise.reject.", "cache.bypass."))
                  or k in ("elementwise.admit", "cache.miss", "crosscheck.mismatch"))
    ]
    return "STATS: " + " | ".join(parts + extra)


# (the timers live in bench/timers.py; names kept here for callers)
from .timers import DispatchTimer, SymNodeTimer  # noqa: E402,F401


#: Workloads whose rows also report what remains under fastfake with symbolic
#: shapes (SymNode arithmetic share, calls still handed to stock).
SYMBOLIC_WORKLOADS = ("compile_dynamic", "compile_train_dynamic", "make_fx_symbolic", "symint_arith")


@dataclass
class RunResult:
    seconds: float  # trace time: dynamo's entire_frame_compile when available, else wall
    wall: float  # wall time of the whole workload call (includes running the compiled code)
    timing: dict[str, float] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)


def trace_seconds(wall: float, timing: dict[str, float]) -> float:
    """Compile workloads also run the compiled graph once on real inputs; their
    trace time is dynamo's entire_frame_compile (the real execution is noise).
    openxla lowers lazily, after entire_frame_compile; should any lowering run
    inside it, that time is taken out (``xla_lowering_in_compile``); compile_tpu's
    StableHLO building runs inside it and is taken out too (``tpu_stablehlo_in_compile``)."""
    if "first_output" in timing:  # inductor workloads: time to first output in the child
        return timing["first_output"]
    if "entire_frame_compile" in timing:
        return (timing["entire_frame_compile"] - timing.get("xla_lowering_in_compile", 0.0)
                - timing.get("tpu_stablehlo_in_compile", 0.0))
    return wall


def code_digest(codes: list[str]) -> str:
    import hashlib

    h = hashlib.sha256()
    for c in codes:
        h.update(c.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def timed_run(run, *, warm: bool, inner: int = 1, cold_fastfake: bool = True,
              keep_learned: bool = False) -> RunResult:
    """One measured repetition of a workload callable under the current impl.

    Cold workloads: fresh state, one call. Warm workloads: ``inner`` calls, the
    reported time is the mean per call, the counters are those of the last call."""
    if not warm:
        fresh_state(cold_fastfake=cold_fastfake and fastfake.is_installed(), run=run,
                    keep_learned=keep_learned)
    gc.collect()
    if warm and inner > 1:
        t0 = time.perf_counter()
        for _ in range(inner - 1):
            run()
        t_pre = time.perf_counter() - t0
    else:
        t_pre, inner = 0.0, 1
    reset_counters()
    hits0 = _ft.FakeTensorMode.cache_hits
    t0 = time.perf_counter()
    run()
    dt = time.perf_counter() - t0
    stats = collect_stats(hits0)
    child = _workloads.child_report()
    if child:  # a workload that ran in a child process: its counters
        stats = dict(child.get("stats", {}))
        stats["caches"] = child.get("caches", {})
        stats["code_digest"] = code_digest(child.get("code", []))
    timing = workload_times()
    wall = (t_pre + dt) / inner
    return RunResult(trace_seconds(wall, timing), wall, timing, stats)


def capture_graphs(spec_name: str, workload_name: str, impl: str, *, size: str = "small",
                   model_and_inputs: tuple | None = None) -> list[_workloads.GraphRecord]:
    """Run one workload with graph capture under ``impl`` from a fresh state
    (``spec_name`` None for a model-free workload)."""
    wl = _workloads.get(workload_name)
    spec = None if spec_name is None or wl.model_free else _models.get(spec_name)
    if spec is None:
        model, inputs = None, None
    else:
        model, inputs = model_and_inputs if model_and_inputs is not None else spec.create(size)
    prev = fastfake.is_installed()
    set_impl("stock")
    run = wl(model, inputs, spec=spec, size=size)  # fake_forward builds its model under stock
    set_impl(impl)
    try:
        fresh_state(cold_fastfake=impl == "fastfake", run=run)
        return run(capture=True)
    finally:
        set_impl("fastfake" if prev else "stock")
        release(run)


def check_graphs(spec_name: str, workload_name: str, *, size: str = "small",
                 model_and_inputs: tuple | None = None) -> str:
    """'' if the workload produces identical FX graphs (code + node val metadata)
    with and without fastfake, else a description of the first difference."""
    mi = model_and_inputs
    if mi is None and spec_name is not None and not _workloads.get(workload_name).model_free:
        mi = _models.get(spec_name).create(size)
    stock = capture_graphs(spec_name, workload_name, "stock", size=size, model_and_inputs=mi)
    fast = capture_graphs(spec_name, workload_name, "fastfake", size=size, model_and_inputs=mi)
    return _workloads.diff_graphs(stock, fast)
