"""One acceleration's own share of a first compile: fastfake with and without it.

``python -m bench.ab --disable sym_register --model gpt2 --workload compile_dynamic``
runs the benchmark's fresh-process children (bench/fresh.py: import torch,
``install()``, a tiny warm-up, caches emptied, the model's first trace timed) for
fastfake as installed and for fastfake with ``FASTFAKE_DISABLE=<name>``,
interleaved, ``--repeat`` each, and prints the medians of the first call's CPU and
wall seconds and of Dynamo's compile (``entire_frame_compile``) and the ratio
(without / with: above 1 the acceleration gains). Stock is not run: the rows of
``python -m bench`` compare with stock.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

from . import fresh


def _compile_seconds(rep: dict) -> float | None:
    timing = rep["first"].get("timing") or {}
    v = timing.get("entire_frame_compile")
    return v if isinstance(v, (int, float)) else None


def measure(model: str, workload: str, disable: str, repeat: int, size: str = "default") -> dict:
    store = fresh.make_store()
    runs: dict = {"with": [], "without": []}
    old = os.environ.get("FASTFAKE_DISABLE")
    try:
        for i in range(repeat):
            for kind in ("with", "without") if i % 2 == 0 else ("without", "with"):
                if kind == "without":
                    os.environ["FASTFAKE_DISABLE"] = ",".join(filter(None, [old, disable]))
                elif old is None:
                    os.environ.pop("FASTFAKE_DISABLE", None)
                else:
                    os.environ["FASTFAKE_DISABLE"] = old
                rep = fresh.run_child(model, workload, "fastfake", size=size, store=store, second=False)
                runs[kind].append(rep)
                print(f"[{i + 1}/{repeat}] {kind} {disable}: first call {rep['first']['cpu']:.2f} s cpu",
                      file=sys.stderr, flush=True)
    finally:
        if old is None:
            os.environ.pop("FASTFAKE_DISABLE", None)
        else:
            os.environ["FASTFAKE_DISABLE"] = old
        import shutil

        shutil.rmtree(store, ignore_errors=True)
    return runs


def summary(runs: dict) -> dict:
    out = {}
    for field in ("cpu", "wall"):
        out[field] = {k: statistics.median(r["first"][field] for r in v) for k, v in runs.items()}
    comp = {k: [c for c in map(_compile_seconds, v) if c is not None] for k, v in runs.items()}
    if all(comp.values()):
        out["compile"] = {k: statistics.median(v) for k, v in comp.items()}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    p.add_argument("--disable", required=True, help="the acceleration (FASTFAKE_DISABLE name) left out")
    p.add_argument("--model", default="gpt2")
    p.add_argument("--workload", default="compile_dynamic")
    p.add_argument("--size", default="default")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    runs = measure(args.model, args.workload, args.disable, args.repeat, args.size)
    res = summary(runs)
    print(f"{args.model} {args.workload}, fresh processes, {args.repeat} each, interleaved; medians, seconds")
    for field, v in res.items():
        print(f"  {field:8s} with {v['with']:.3f}  without {args.disable} {v['without']:.3f}  "
              f"ratio {v['without'] / v['with']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
