"""The openxla workloads: ``torch.compile(backend="openxla")`` with torch_xla on
PJRT (CPU here), trace time and XLA lowering time measured apart. Registered in
:mod:`bench.workloads` only where torch_xla matches the installed torch."""
from __future__ import annotations

import sys
import time
from typing import Any

import torch

from .records import (
    GraphRecord,
    Workload,
    _sum_outputs,
    record_graph,
    record_values,
)

# --------------------------------------------------------------------------- #
# torch_xla: torch.compile(backend="openxla")
# --------------------------------------------------------------------------- #
#
# The openxla backend is ``aot_autograd(fw_compiler=openxla_eval_boxed)`` (torch's
# torch/_dynamo/backends/torchxla.py): Dynamo and AOTAutograd trace the model on
# FakeTensors whose fake device is the XLA device, then hand the AOT graph to
# ``torch_xla.core.dynamo_bridge.extract_compiled_graph`` -- lazily, at the first
# call of the compiled function (the backward graph at the first backward). That
# call is the lowering: the graph is run once on XLA lazy tensors, the resulting IR
# is compiled by XLA (``_xla_warm_up_cache``) and stored in torch_xla's computation
# cache under its graph hash. Dynamo's ``entire_frame_compile`` therefore does not
# include the lowering; it is timed separately by wrapping extract_compiled_graph.

XLA_CACHE_SIZE_ENV = "XLA_COMPILATION_CACHE_SIZE"
XLA_CACHE_SIZE = 16  # set (when unset) before torch_xla creates its computation cache
_XLA_EVICT_MAX = 64  # above this cache size, evicting by filling costs too much


def have_torch_xla() -> tuple[bool, str]:
    """(available, reason). Checked without importing torch_xla (the import takes
    seconds and patches torch): it must be installed and built for this torch's
    major.minor version (torch_xla 2.9 only runs on torch 2.9)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("torch_xla") is None:
        return False, "torch_xla is not installed"
    try:
        xv = importlib.metadata.version("torch_xla")
    except importlib.metadata.PackageNotFoundError:
        return True, ""  # e.g. a source checkout: try it
    tv = torch.__version__.split("+")[0]
    if xv.split(".")[:2] != tv.split(".")[:2]:
        return False, f"torch_xla {xv} does not match torch {tv}"
    return True, ""


_CONFIG_MODULES = ("torch._dynamo.config", "torch._functorch.config", "torch._inductor.config")


def _config_module(name: str):
    import importlib

    return importlib.import_module(name)


def _torch_configs() -> dict[str, dict]:
    return {n: _config_module(n).get_config_copy() for n in _CONFIG_MODULES}


def _xla_config():
    """Context: the torch config flags torch_xla's import sets, for one openxla run."""
    import contextlib

    stack = contextlib.ExitStack()
    for name, changed in _XlaState.config.items():
        stack.enter_context(_config_module(name).patch(changed))
    return stack


class _XlaState:
    """Process-wide torch_xla plumbing shared by the openxla workloads."""

    ready = False
    # the warm-up compiles under both implementations (the in-process CLI); a fresh
    # child warms up only the one it runs (bring_up_torch_xla)
    warm_both = True
    config: dict[str, dict] = {}  # config module -> flags torch_xla's import changed
    evict_n = 0  # tiny graphs compiled to evict everything from the computation cache
    evict_serial = 0
    # lowering timers of the current run (reset by reset_backend_times)
    times: dict[str, float] = {}


def bring_up_torch_xla() -> None:
    """A fresh child's ``before_install`` hook: torch_xla imported and its device
    registered before anything else runs. torch's autograd engine sizes its
    per-device ready queues at the first backward of a process; one that ran before
    torch_xla registered the XLA device (the install-time self-test, a warm-up on
    the CPU) leaves XLA without a queue, and every XLA backward then fails an
    internal assertion in engine.cpp, stock or not. The child then warms up only the
    implementation it runs."""
    _XlaState.warm_both = False
    torch_xla = _import_torch_xla()
    torch_xla.device()


def _import_torch_xla():
    """Import torch_xla (PJRT_DEVICE=CPU unless set), keeping the torch config flags
    its import changes for the openxla runs only (:func:`_xla_config`)."""
    import os

    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault(XLA_CACHE_SIZE_ENV, str(XLA_CACHE_SIZE))
    first_import = "torch_xla" not in sys.modules
    before = _torch_configs() if first_import else None
    import torch_xla
    import torch_xla.core.dynamo_bridge  # noqa: F401  (what torch's openxla backend calls)
    import torch_xla.core.xla_model  # noqa: F401

    if before is not None:
        # Importing torch_xla sets torch config flags for itself (2.9:
        # dynamo.automatic_dynamic_shapes=False, dynamo.specialize_float=True). Keep
        # them for the openxla runs only (_xla_config) and put torch's values back,
        # so that other workloads in this process trace as without torch_xla.
        after = _torch_configs()
        for name, cfg in before.items():
            changed = {k: v for k, v in after[name].items() if cfg.get(k, object()) != v}
            if changed:
                _XlaState.config[name] = changed
                for k in changed:
                    setattr(_config_module(name), k, cfg[k])
    return torch_xla


def setup_torch_xla():
    """Import torch_xla (:func:`_import_torch_xla`), fix the computation-cache size so
    that it can be emptied between repetitions, warm the openxla path up once per
    process (under both implementations in the in-process CLI, under the child's
    own in a fresh child). Returns the torch_xla module."""
    import os
    import warnings

    torch_xla = _import_torch_xla()
    if _XlaState.ready:
        return torch_xla
    size = int(os.environ[XLA_CACHE_SIZE_ENV])
    if os.environ.get("XLA_PERSISTENT_CACHE_PATH"):
        warnings.warn("XLA_PERSISTENT_CACHE_PATH is set: openxla repetitions after the first load the "
                      "compiled graph from disk, the lowering times are not first compiles", stacklevel=2)
    if size > _XLA_EVICT_MAX:
        warnings.warn(f"{XLA_CACHE_SIZE_ENV}={size}: too large to empty between repetitions; openxla "
                      "repetitions after the first will hit torch_xla's computation cache (see xla_compiles)",
                      stacklevel=2)
        _XlaState.evict_n = 0
    else:
        _XlaState.evict_n = size
    _XlaState.ready = True
    _xla_warmup(torch_xla)
    return torch_xla


def _xla_warmup(torch_xla) -> None:
    """One tiny openxla compile per implementation: pays torch_xla's one-time costs
    (lazy imports in the bridge, PJRT executable setup) before anything is timed."""
    import fastfake

    def f(x, y):
        return torch.relu(x @ y + 1).sum(-1)

    dev = torch_xla.device()
    x, y = torch.randn(4, 8).to(dev), torch.randn(8, 4).to(dev)
    prev = fastfake.is_installed()
    try:
        for install in ((False, True) if _XlaState.warm_both else (prev,)):
            fastfake.install() if install else fastfake.uninstall()
            torch._dynamo.reset()
            with _xla_config(), torch.no_grad():
                torch.compile(f, backend="openxla")(x, y).cpu()
    finally:
        fastfake.install() if prev else fastfake.uninstall()
        torch._dynamo.reset()


def evict_xla_computation_cache() -> None:
    """Empty torch_xla's in-memory computation cache (graph hash -> compiled XLA
    executable, an LRU of ``XLA_COMPILATION_CACHE_SIZE`` entries; torch_xla has no
    API to clear it) by compiling that many tiny graphs never seen before, so the
    next lowering of a model compiles again instead of finding its graph hash."""
    import torch_xla

    if not _XlaState.evict_n:
        return
    dev = torch_xla.device()
    for _ in range(_XlaState.evict_n):
        _XlaState.evict_serial += 1
        t = torch.zeros(_XlaState.evict_serial, device=dev) + 1  # new shape -> new graph hash
        torch_xla.sync()
        del t
    torch_xla.sync(wait=True)


def _xla_counter(name: str) -> int:
    import torch_xla.debug.metrics as met

    return int(met.counter_value(name) or 0)


def _xla_metric_seconds(name: str) -> float:
    import torch_xla.debug.metrics as met

    data = met.metric_data(name)
    return float(data[1]) / 1e9 if data else 0.0  # accumulator, nanoseconds


def reset_backend_times() -> None:
    _XlaState.times = {}


def backend_times() -> dict[str, float]:
    """Timers of backends that compile outside dynamo's entire_frame_compile, since
    the last :func:`reset_backend_times` (openxla: ``xla_lowering`` = seconds inside
    extract_compiled_graph, ``xla_compile`` = XLA's own CompileTime within it,
    ``xla_compiles`` = uncached XLA compiles, ``xla_lowering_in_compile`` = lowering
    seconds that ran inside a dynamo compile, normally 0)."""
    return dict(_XlaState.times)


class _BridgeHook:
    """Wraps ``extract_compiled_graph`` (both names: torch_xla.core.dynamo_bridge,
    which torch's backend calls, and torch_xla._dynamo.dynamo_bridge) for one run:
    accumulates the lowering timers and, when ``graphs`` is a list, records the FX
    graph handed to the bridge (before the bridge rewrites it)."""

    def __init__(self, graphs: list | None) -> None:
        self.graphs = graphs
        self.depth = 0

    def __enter__(self):
        import torch._guards as _guards
        import torch_xla._dynamo.dynamo_bridge as b1
        import torch_xla.core.dynamo_bridge as b0

        self.mods = (b0, b1)
        self.orig = [m.__dict__["extract_compiled_graph"] for m in self.mods]
        inner = self.orig[0]
        hook = self

        def extract_compiled_graph(xla_model, xla_args):
            if hook.depth:
                return inner(xla_model, xla_args)
            if hook.graphs is not None:
                hook.graphs.append(record_graph(f"bridge[{sum(g.label.startswith('bridge') for g in hook.graphs)}]",
                                                xla_model))
            in_compile = _guards.TracingContext.try_get() is not None
            c0, x0 = _xla_counter("UncachedCompile"), _xla_metric_seconds("CompileTime")
            hook.depth = 1
            t0 = time.perf_counter()
            try:
                return inner(xla_model, xla_args)
            finally:
                dt = time.perf_counter() - t0
                hook.depth = 0
                t = _XlaState.times
                t["xla_lowering"] = t.get("xla_lowering", 0.0) + dt
                t["xla_compile"] = t.get("xla_compile", 0.0) + _xla_metric_seconds("CompileTime") - x0
                t["xla_compiles"] = t.get("xla_compiles", 0) + _xla_counter("UncachedCompile") - c0
                t["xla_lowering_calls"] = t.get("xla_lowering_calls", 0) + 1
                if in_compile:
                    t["xla_lowering_in_compile"] = t.get("xla_lowering_in_compile", 0.0) + dt

        for m in self.mods:
            m.extract_compiled_graph = extract_compiled_graph
        return self

    def __exit__(self, *exc: Any) -> None:
        for m, f in zip(self.mods, self.orig):
            m.extract_compiled_graph = f


def _openxla(model, inputs, *, train: bool):
    """Model (a deep copy; the zoo's CPU model is left alone) and inputs are moved
    to the XLA device once; each call compiles from scratch (the harness calls
    ``run.fresh_state`` first: XLA computation cache emptied), calls the compiled
    model once (under no_grad, or forward + backward of the sum of the outputs with
    XLA's RNG seeded to 0) and synchronises. ``capture=True`` records the dynamo
    graphs, the graphs handed to the bridge and the real outputs (and, for training,
    the parameter gradients) copied to the CPU."""
    import copy

    torch_xla = setup_torch_xla()
    import torch_xla.core.xla_model as xm
    from torch._dynamo.backends.registry import lookup_backend

    dev = torch_xla.device()
    xmodel = copy.deepcopy(model).to(dev).eval()
    xinputs = tuple(x.to(dev) if isinstance(x, torch.Tensor) else x for x in inputs)
    torch_xla.sync(wait=True)
    openxla = lookup_backend("openxla")

    def run(capture: bool = False) -> list[GraphRecord]:
        torch._dynamo.reset()
        graphs: list[GraphRecord] | None = [] if capture else None
        backend: Any = "openxla"
        if capture:
            n = [0]

            def backend(gm, example_inputs):
                graphs.append(record_graph(f"dynamo[{n[0]}]", gm))
                n[0] += 1
                return openxla(gm, example_inputs)

        xm.set_rng_state(0)
        with _xla_config(), _BridgeHook(graphs):
            compiled = torch.compile(xmodel, backend=backend)
            if train:
                xmodel.train()
                try:
                    out = compiled(*xinputs)
                    _sum_outputs(out).backward()
                    torch_xla.sync(wait=True)
                    if capture:
                        grads = [p.grad for p in xmodel.parameters()]
                        graphs.append(record_values("xla_outputs", (out, grads)))
                finally:
                    xmodel.zero_grad(set_to_none=True)
                    xmodel.eval()
            else:
                with torch.no_grad():
                    out = compiled(*xinputs)
                torch_xla.sync(wait=True)
                if capture:
                    graphs.append(record_values("xla_outputs", out))
        del out
        torch_xla.sync(wait=True)
        return graphs or []

    run.fresh_state = evict_xla_computation_cache  # called by harness.fresh_state
    return run


def compile_openxla(model, inputs, *, spec=None, size="default"):
    return _openxla(model, inputs, train=False)


def compile_openxla_train(model, inputs, *, spec=None, size="default"):
    return _openxla(model, inputs, train=True)


XLA_WORKLOADS: tuple[Workload, ...] = (
    Workload("compile_openxla", compile_openxla, uses_dynamo=True, fresh=True,
             before_install="bench.openxla:bring_up_torch_xla",
             doc='torch.compile(backend="openxla") on the XLA device, inference (needs torch_xla)'),
    Workload("compile_openxla_train", compile_openxla_train, uses_dynamo=True, fresh=True,
             before_install="bench.openxla:bring_up_torch_xla",
             doc='torch.compile(backend="openxla") on the XLA device, forward + backward (needs torch_xla)'),
)
