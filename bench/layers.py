"""The tracing stack by layer: where a first compile's time goes, as one table.

``python -m bench.layers --model llama --workload compile_train --impl fastfake``
does what a fresh benchmark child does (import torch, ``install()`` for fastfake,
the workload's ``before_install`` hook, a tiny warm-up of the same workload, caches
emptied, the model built untimed) and then profiles the model's first trace with
cProfile, the garbage collector off (its collections would be charged to whichever
function allocates; docs/performance.md, "A profiler note"). It prints the share of
the profiled trace spent inside each layer (inclusive, outermost calls: cProfile
does not count a recursive call twice) and pytree's own time. Profiler seconds
inflate Python-heavy layers; compare shares between implementations, not with the
benchmark's CPU seconds. ``--json`` writes the table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

#: (label, file suffix, function name): inclusive time of that function.
LAYERS: tuple[tuple[str, str, str], ...] = (
    ("AOTAutograd (`aot_module_simplified`)", "_functorch/aot_autograd.py", "aot_module_simplified"),
    ("AOTAutograd partitioner", "_functorch/partitioners.py", "min_cut_rematerialization_partition"),
    ("`FunctionalTensorMode.__torch_dispatch__`", "_subclasses/functional_tensor.py", "__torch_dispatch__"),
    ("`FunctionalTensor.__new__`", "_subclasses/functional_tensor.py", "__new__"),
    ("`ProxyTorchDispatchMode.__torch_dispatch__`", "fx/experimental/proxy_tensor.py", "__torch_dispatch__"),
    ("`FakeTensorMode.__torch_dispatch__` (calls reaching Python)", "_subclasses/fake_tensor.py",
     "__torch_dispatch__"),
    ("FX `create_proxy`", "torch/fx/proxy.py", "create_proxy"),
    ("`proxy_tensor.set_meta`", "fx/experimental/proxy_tensor.py", "set_meta"),
    ("`proxy_tensor.track_tensor_tree`", "fx/experimental/proxy_tensor.py", "track_tensor_tree"),
    ("Dynamo `wrap_fx_proxy`", "_dynamo/variables/builder.py", "wrap_fx_proxy"),
    ("Dynamo `get_fake_value`", "_dynamo/utils.py", "get_fake_value"),
    ("TorchTPU `SplitCompiler` propagation (`run_node`)", "compile/split_compiler.py", "run_node"),
    ("TorchTPU StableHLO step (bench's placeholder `_compile`)", "bench/torchtpu.py", "_placeholder_compile"),
)
PYTREE = "torch/utils/_pytree.py"


def table(stats) -> dict:
    """{label: (share of the total, seconds, calls)} for the layers present, plus
    pytree's own time, from a ``pstats.Stats``."""
    total = stats.total_tt
    out: dict[str, tuple[float, float, int]] = {}
    for label, suffix, name in LAYERS:
        ct = nc = 0
        for (file, _line, fn), (_cc, n, _tt, cum, _callers) in stats.stats.items():
            if fn == name and file.replace(os.sep, "/").endswith(suffix):
                ct += cum
                nc += n
        if nc:
            out[label] = (ct / total, ct, nc)
    own = sum(tt for (file, _l, _f), (_cc, _n, tt, _ct, _c) in stats.stats.items()
              if file.replace(os.sep, "/").endswith(PYTREE))
    out["`torch.utils._pytree`, own time"] = (own / total, own, 0)
    out["total profiled"] = (1.0, total, 0)
    return out


def profile(model: str, workload: str, impl: str, size: str = "default", dump: str = "") -> dict:
    import cProfile
    import gc
    import pstats
    import warnings

    from . import fresh as _fresh

    _fresh._before_install(workload)
    import torch  # noqa: F401

    import fastfake

    if impl == "fastfake":
        fastfake.install()
    warnings.filterwarnings("ignore")
    from . import determinism, harness, models, workloads

    determinism.pin()
    wl = workloads.get(workload)
    tiny, tiny_inputs = _fresh._tiny()
    workloads.get(wl.warmup or wl.name)(tiny, tiny_inputs, spec=None, size="small")()
    harness.fresh_state(cold_fastfake=impl == "fastfake")
    if wl.model_free:
        spec, m, inputs = None, None, None
    else:
        spec = models.get(model)
        m, inputs = spec.create(size)
    run = wl(m, inputs, spec=spec, size=size)
    gc.collect()
    gc.disable()
    prof = cProfile.Profile()
    try:
        prof.enable()
        run()
        prof.disable()
    finally:
        gc.enable()
    if dump:
        prof.dump_stats(dump)
    return table(pstats.Stats(prof))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama")
    p.add_argument("--workload", default="compile_train")
    p.add_argument("--impl", choices=("stock", "fastfake"), default="fastfake")
    p.add_argument("--size", default="default")
    p.add_argument("--json", default="")
    p.add_argument("--dump", default="", help="write the raw cProfile data here (pstats)")
    args = p.parse_args(argv)
    res = profile(args.model, args.workload, args.impl, args.size, args.dump)
    print(f"{args.model} {args.workload} ({args.impl}), first trace in a fresh process, cProfile, collector off")
    print("| layer (inclusive, outermost) | share | profiler s | calls |")
    print("| --- | --- | --- | --- |")
    for label, (share, secs, calls) in res.items():
        print(f"| {label} | {share * 100:.1f} % | {secs:.2f} | {calls or ''} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "workload": args.workload, "impl": args.impl, "layers": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
