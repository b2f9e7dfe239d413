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
    ("`FunctionalTensorMode.__torch_dispatch__`, fastfake's C method (every call)", "bench/layers.py",
     "_functional_c_method"),
    ("`FunctionalTensor.__new__`", "_subclasses/functional_tensor.py", "__new__"),
    ("`ProxyTorchDispatchMode.__torch_dispatch__`", "fx/experimental/proxy_tensor.py", "__torch_dispatch__"),
    ("`ProxyTorchDispatchMode.__torch_dispatch__`, fastfake's C method (every call)", "bench/layers.py",
     "_proxy_c_method"),
    ("`FakeTensorMode.__torch_dispatch__` (calls reaching Python)", "_subclasses/fake_tensor.py",
     "__torch_dispatch__"),
    ("`FakeTensorMode.__torch_dispatch__`, fastfake's C dispatch (every call)", "bench/layers.py", "_fake_c_method"),
    ("FX `create_proxy`", "torch/fx/proxy.py", "create_proxy"),
    ("`proxy_tensor.set_meta`", "fx/experimental/proxy_tensor.py", "set_meta"),
    ("`proxy_tensor.track_tensor_tree`", "fx/experimental/proxy_tensor.py", "track_tensor_tree"),
    ("Dynamo `wrap_fx_proxy`", "_dynamo/variables/builder.py", "wrap_fx_proxy"),
    ("Dynamo `get_fake_value`", "_dynamo/utils.py", "get_fake_value"),
    ("TorchTPU `SplitCompiler` propagation (`run_node`)", "compile/split_compiler.py", "run_node"),
    ("TorchTPU StableHLO step (bench's placeholder `_compile`)", "bench/torchtpu.py", "_placeholder_compile"),
)
PYTREE = "torch/utils/_pytree.py"


def _c_method_shims() -> list:
    """cProfile sees no C method the dispatcher calls (its time is charged to the
    Python frame above). Where fastfake put a C ``__torch_dispatch__`` on a mode
    class, a one-line Python function calling it takes its place for the profiled
    run, so the mode's time is a row again (inclusive, as stock's rows are; the
    shim's own frame is all it adds). Returns what to put back."""
    import types

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch._subclasses.functional_tensor import FunctionalTensorMode
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

    restore = []
    for cls, name in ((FunctionalTensorMode, "_functional_c_method"), (ProxyTorchDispatchMode, "_proxy_c_method"),
                      (FakeTensorMode, "_fake_c_method")):
        method = vars(cls).get("__torch_dispatch__")
        if isinstance(method, types.FunctionType):
            continue

        def make(method=method):
            get = getattr(type(method), "__get__", None)

            def shim(self, *args):
                return (get(method, self, type(self)) if get else method.__get__(self))(*args)
            return shim

        shim = make()
        shim.__code__ = shim.__code__.replace(co_name=name)
        shim.__name__ = shim.__qualname__ = name  # (what cProfile names it where it calls on from C)
        restore.append((cls, method))
        cls.__torch_dispatch__ = shim
    return restore


def _modes_own(stats) -> float | None:
    """The functional and proxy modes' own time: the outermost functional-mode row
    (fastfake's C method where it is in place, else stock's method) less what the
    proxy mode calls that is neither mode: FX ``create_proxy`` and the fake op
    (the edges from the proxy mode's C method or stock's ``proxy_call``)."""
    def match(key, suffix, name):
        if key[0] == "~":  # (a shim, as cProfile names it where it calls on from C)
            return suffix == "bench/layers.py" and key[2].startswith(f"<function {name} at ")
        return key[2] == name and key[0].replace(os.sep, "/").endswith(suffix)

    top = None
    for suffix, name in (("bench/layers.py", "_functional_c_method"),
                         ("_subclasses/functional_tensor.py", "__torch_dispatch__")):
        cums = [v[3] for k, v in stats.stats.items() if k[0] != "~" and match(k, suffix, name)]
        if cums:
            top = sum(cums)
            break
    if top is None:
        return None
    callers = (("bench/layers.py", "_proxy_c_method"), ("fx/experimental/proxy_tensor.py", "proxy_call"))
    callees = (("torch/fx/proxy.py", "create_proxy"), ("_subclasses/fake_tensor.py", "__torch_dispatch__"),
               ("bench/layers.py", "_fake_c_method"))
    below = 0.0
    for key, (_cc, _nc, _tt, _ct, edges) in stats.stats.items():
        if not any(match(key, s, n) for s, n in callees):
            continue
        for caller, edge in edges.items():
            if any(match(caller, s, n) for s, n in callers):
                below += edge[3]
    # (a profile taken with a C method in place but without its shim has no
    # outermost row to start from)
    return top - below if top >= below else None


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
    modes = _modes_own(stats)
    if modes is not None:
        out["functional + proxy modes, own (the row above them less FX `create_proxy` and the fake op under the proxy mode)"] = (
            modes / total, modes, 0)
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
    restore = _c_method_shims() if impl == "fastfake" else []
    gc.collect()
    gc.disable()
    prof = cProfile.Profile()
    try:
        prof.enable()
        run()
        prof.disable()
    finally:
        gc.enable()
        for cls, method in restore:
            cls.__torch_dispatch__ = method
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
