"""torch.compile with the default Inductor backend (CPU), measured in fresh
processes: what ``torch.compile(model)`` costs a user the first time (cold) and
after a restart with the on-disk caches filled (warm).

Each repetition is a new Python process (``python -m bench.inductor --child``)
that imports torch (and installs fastfake when the parent has it installed),
builds the model from its spec (seed 0), and times ``torch.compile(model,
dynamic=...)`` up to the first output -- ``compiled(*inputs)`` under ``no_grad``,
or forward + ``backward()`` of the sum of outputs in training mode ("time to
first output"; imports and model building are not timed, and a full garbage
collection runs just before, as the in-process harness does). The child reports that
time, dynamo's compile metrics, the Inductor / AOTAutograd cache counters, every
generated output-code module (``GraphLowering.save_output_code``, called for new
and for cache-loaded graphs alike) and fastfake's counters.

cold
    A fresh, empty ``TORCHINDUCTOR_CACHE_DIR`` per process: the FX graph cache,
    the AOTAutograd cache, the compiled C++ kernels and every other on-disk
    Inductor cache start empty (their default settings otherwise: FX graph and
    AOTAutograd caches on), and a new process has no in-memory caches.
warm
    A cache directory filled once by a stock process for the same model and
    settings, copied afresh for every repetition: the FX graph cache and the
    AOTAutograd cache hit, so what remains is Dynamo's own tracing and fake
    propagation, guard building and loading the compiled code -- what a restarted
    training or serving job pays.

fastfake's install-time self-test result, which ``install()`` keeps on disk for
an unchanged installation (``fastfake/core/selftest_store.py``), is kept in a
directory filled by one ``install()`` before the first repetition, shared by every
workload of the process, cold and warm alike (the warm rows' primed cache
directory is made once per model and settings too): it belongs to the installation, not to the compile caches (so no timed
process runs the self-test's programs; the child reports where its result came
from).

Capture records the output code (identical with and without fastfake, checked
by ``--check-graphs``) and the cache counters (identical too: fastfake must
never turn a cache hit into a miss, i.e. the cache keys it produces are stock's).
For the dispatch share the child times stock's ``FakeTensorMode.__torch_dispatch__``
(outermost calls) in one extra stock process.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from .records import GraphRecord, Workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Timings of the last child (read by the harness through :func:`backend_times`).
_LAST: dict[str, Any] = {}


def backend_times() -> dict[str, float]:
    return dict(_LAST.get("timing", {}))


def reset_backend_times() -> None:
    _LAST.clear()


def _child_env(cache_dir: str, store_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    env["FASTFAKE_CACHE_DIR"] = store_dir
    env.pop("FASTFAKE_NO_SELFTEST_CACHE", None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    return env


def _fill_store(store_dir: str) -> None:
    """One ``install()`` in a fresh process keeps the self-test result there."""
    env = _child_env(tempfile.gettempdir(), store_dir)
    r = subprocess.run([sys.executable, "-c", "import fastfake; fastfake.install()"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"fastfake.install() failed in a fresh process: {r.stderr[-2000:]}")


def _run_child(spec_name: str, size: str, *, dynamic: bool, train: bool, impl: str, cache_dir: str,
               store_dir: str, fake_share: bool = False) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, "-m", "bench.inductor", "--child", "--model", spec_name, "--size", size,
           "--impl", impl, "--out", out]
    if dynamic:
        cmd.append("--dynamic")
    if train:
        cmd.append("--train")
    if fake_share:
        cmd.append("--fake-share")
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=_child_env(cache_dir, store_dir), capture_output=True, text=True,
                           timeout=3600)
        if r.returncode != 0:
            raise RuntimeError(f"inductor child failed ({r.returncode}): {r.stderr[-2000:]}")
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


#: Made once per process and shared by every workload (removed at exit): the
#: directory of the kept self-test result (it belongs to the installation, not to a
#: workload), and per (model, size, dynamic, train) the cache directory one stock
#: process filled for the warm rows (each run copies it afresh).
_SHARED: dict[str, Any] = {"root": None, "store": None, "primed": {}}


def _shared_root() -> str:
    if _SHARED["root"] is None:
        import atexit

        _SHARED["root"] = tempfile.mkdtemp(prefix="fastfake-inductor-shared-")
        atexit.register(shutil.rmtree, _SHARED["root"], ignore_errors=True)
    return _SHARED["root"]


def _shared_store() -> str:
    if _SHARED["store"] is None or not os.path.isdir(_SHARED["store"]):
        store = os.path.join(_shared_root(), "fastfake-store")
        _fill_store(store)
        _SHARED["store"] = store
    return _SHARED["store"]


def _primed_key(spec_name: str, size: str, dynamic: bool, train: bool) -> tuple[tuple, str]:
    """The warm rows' primed cache directory for a model and settings: its key and
    its path (made by :func:`_primed` or donated by :func:`_donate_primed`)."""
    key = (spec_name, size, dynamic, train)
    return key, os.path.join(_shared_root(), "primed-" + "-".join(map(str, key)))


def _primed(spec_name: str, size: str, *, dynamic: bool, train: bool) -> str:
    key, path = _primed_key(spec_name, size, dynamic, train)
    if key not in _SHARED["primed"]:
        shutil.rmtree(path, ignore_errors=True)  # (a failed earlier attempt's)
        os.makedirs(path)
        _run_child(spec_name, size, dynamic=dynamic, train=train, impl="stock", cache_dir=path,
                   store_dir=_shared_store())
        _SHARED["primed"][key] = path
    return path


def _donate_primed(cache_dir: str, spec_name: str, size: str, *, dynamic: bool, train: bool) -> None:
    """Keep a cold stock run's cache directory as the warm rows' primed one (the
    same run :func:`_primed` would make), unless one is kept already."""
    key, path = _primed_key(spec_name, size, dynamic, train)
    if key not in _SHARED["primed"]:
        shutil.copytree(cache_dir, path)
        _SHARED["primed"][key] = path


def _factory(*, warm: bool, dynamic: bool, train: bool):
    def make(model, inputs, *, spec=None, size="default"):
        if spec is None:
            raise ValueError("the inductor workloads build the model from its spec in a fresh process")
        base = tempfile.mkdtemp(prefix="fastfake-inductor-")
        store = _shared_store()
        primed = _primed(spec.name, size, dynamic=dynamic, train=train) if warm else None

        def run(capture: bool = False, fake_share: bool = False) -> list[GraphRecord]:
            import fastfake

            impl = "fastfake" if fastfake.is_installed() else "stock"
            cache_dir = tempfile.mkdtemp(prefix="run-", dir=base)
            try:
                if primed is not None:
                    shutil.rmtree(cache_dir)
                    shutil.copytree(primed, cache_dir)
                rep = _run_child(spec.name, size, dynamic=dynamic, train=train, impl=impl,
                                 cache_dir=cache_dir, store_dir=store, fake_share=fake_share)
                if primed is None and impl == "stock" and not fake_share:
                    # a cold stock run fills exactly what the warm rows' priming run would
                    _donate_primed(cache_dir, spec.name, size, dynamic=dynamic, train=train)
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
            if impl == "fastfake" and rep.get("selftest") != "disk":
                print(f"[inductor] note: the fastfake child ran the self-test ({rep.get('selftest')}); "
                      "its wall time includes it", file=sys.stderr)
            _LAST.clear()
            _LAST.update(rep)
            if not capture:
                return []
            caches = sorted(rep["caches"].items())
            return [GraphRecord(f"output_code[{i}]", code, []) for i, code in enumerate(rep["code"])] + [
                GraphRecord("inductor caches", "", [(k, "counter", "", ("int", str(v))) for k, v in caches])
            ]

        run.cleanup = lambda: shutil.rmtree(base, ignore_errors=True)  # type: ignore[attr-defined]
        return run

    return make


def _workloads() -> list[Workload]:
    out = []
    for warm in (False, True):
        for train in (False, True):
            for dynamic in (False, True):
                name = "inductor_" + ("warm" if warm else "cold") + ("_train" if train else "") + (
                    "_dynamic" if dynamic else "")
                doc = (f'torch.compile(dynamic={dynamic}) default backend, '
                       f'{"forward + backward" if train else "inference"}, '
                       f'{"warm on-disk caches" if warm else "empty caches"}, fresh process, time to first output')
                out.append(Workload(name, _factory(warm=warm, dynamic=dynamic, train=train), doc=doc,
                                    subprocess=True))
    return out


INDUCTOR_WORKLOADS: list[Workload] = _workloads()


# --------------------------------------------------------------------------- #
# The child process
# --------------------------------------------------------------------------- #


def _child(args) -> None:
    import torch

    import fastfake

    if args.impl == "fastfake":
        fastfake.install()
    from torch._dynamo.utils import compilation_time_metrics, counters
    from torch._inductor.graph import GraphLowering

    from . import determinism, models, timers
    from .records import _sum_outputs

    determinism.pin()  # output code compared across processes: stock's address-dependent order fixed

    spec = models.get(args.model)
    model, inputs = spec.create(args.size)
    codes: list[str] = []
    GraphLowering.save_output_code = staticmethod(codes.append)  # type: ignore[assignment]
    timer = timers.DispatchTimer() if args.fake_share else None
    if timer is not None:
        timer.__enter__()
    fastfake.reset_stats()
    gc.collect()  # as the in-process harness does before every timed run
    t0 = time.perf_counter()
    compiled = torch.compile(model, dynamic=args.dynamic)
    if args.train:
        model.train()
        _sum_outputs(compiled(*inputs)).backward()
    else:
        with torch.no_grad():
            compiled(*inputs)
    first = time.perf_counter() - t0
    if timer is not None:
        timer.__exit__(None, None, None)
    m = compilation_time_metrics
    timing = {"first_output": first}
    if "_compile.compile_inner" in m:
        timing["entire_frame_compile"] = float(sum(m["_compile.compile_inner"]))
    if "OutputGraph.call_user_compiler" in m:
        timing["backend_compile"] = float(sum(m["OutputGraph.call_user_compiler"]))
    caches = {f"{group}.{k}": int(v) for group in ("inductor", "aot_autograd") for k, v in counters[group].items()
              if "cache" in k}
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    report = {
        "timing": timing,
        "caches": caches,
        "code": [c.replace(cache_dir, "<cache>") if cache_dir else c for c in codes],
        "stats": {k: v for k, v in fastfake.stats().items() if v} if fastfake.is_installed() else {},
        "selftest": (fastfake.selftest_report() or {}).get("source"),
        "fake_dispatch_s": timer.seconds if timer is not None else None,
        "fake_calls": timer.calls if timer is not None else None,
    }
    with open(args.out, "w") as f:
        json.dump(report, f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--size", default="default")
    p.add_argument("--impl", choices=("stock", "fastfake"), required=True)
    p.add_argument("--dynamic", action="store_true")
    p.add_argument("--train", action="store_true")
    p.add_argument("--fake-share", action="store_true")
    p.add_argument("--out", required=True)
    _child(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
