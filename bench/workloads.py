"""Trace workloads: each ``WORKLOADS[name](model, inputs, spec=..., size=...)``
returns a callable ``run(capture=False) -> list[GraphRecord]`` that performs one
full trace from scratch (``capture=True`` also records the produced FX graphs:
GraphModule code and a per-node summary of ``meta["val"]`` /
``meta["example_value"]``: shape, stride, storage offset, dtype, device,
requires_grad; SymInts and Python values by their string).

Workloads
---------
compile_static / compile_dynamic
    ``torch.compile(model, backend="aot_eager", dynamic=False/True)``, first call
    under ``torch.no_grad()``; ``torch._dynamo.reset()`` first.
compile_train / compile_train_dynamic
    Same (dynamic=False / True) in training mode: forward + backward of the sum of
    outputs.
aot_function
    ``functorch.compile.aot_function`` over ``functional_call(model, params, inputs)``
    with forward/backward compilers that return the graph unchanged; forward +
    backward (parameters require grad).
make_fx_fake / make_fx_symbolic
    ``make_fx(f, tracing_mode="fake"/"symbolic")`` of the functional forward
    (parameters and buffers are graph inputs), under ``no_grad``.
export
    ``torch.export.export(model, inputs, strict=False)``.
fake_forward
    Plain forward of the model built inside a ``FakeTensorMode`` (model and inputs
    constructed in the mode once, when the workload is created); each call times
    one warm forward under ``no_grad``. Its "graph" is a summary of the outputs.

``Workload.warm`` is False for every workload except ``fake_forward``: the runner
clears torch's fake-tensor cache (and ``torch._dynamo.reset()``) before each
repetition of a cold workload so each one is a true first trace.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree


# --------------------------------------------------------------------------- #
# Graph records
# --------------------------------------------------------------------------- #


def summarize_val(v: Any) -> Any:
    """A hashable, printable summary of a node's ``val`` metadata."""
    if isinstance(v, torch.Tensor):
        try:
            stride = tuple(str(s) for s in v.stride())
            offset = str(v.storage_offset())
        except Exception:  # sparse and friends
            stride, offset = None, None
        return (
            "T",
            tuple(str(s) for s in v.shape),
            stride,
            offset,
            str(v.dtype),
            str(v.device),
            str(v.layout),
            bool(v.requires_grad),
        )
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return (type(v).__name__, str(v))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(summarize_val(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((str(k), summarize_val(x)) for k, x in v.items()))
    if v is None or isinstance(v, (bool, int, float, str, torch.dtype, torch.device)):
        return (type(v).__name__, repr(v))
    return (type(v).__name__,)


@dataclass
class GraphRecord:
    label: str  # e.g. "dynamo[0]", "aot_fw[0]", "make_fx", "export", "outputs", "xla_outputs"
    code: str
    meta: list[tuple]  # (node name, op, target, summary of val/example_value)
    # Real (CPU) tensors whose values must be identical too (record_values); compared
    # with torch.equal + dtype + shape by diff_graphs, on top of the byte digest in meta.
    values: list | None = field(default=None, compare=False, repr=False)

    def meta_lines(self) -> list[str]:
        return [f"{n} {op} {tgt}: {val}" for n, op, tgt, val in self.meta]


def record_graph(label: str, gm: torch.fx.GraphModule) -> GraphRecord:
    meta = []
    for node in gm.graph.nodes:
        if "val" in node.meta:
            val = summarize_val(node.meta["val"])
        elif "example_value" in node.meta:
            val = summarize_val(node.meta["example_value"])
        else:
            val = None
        meta.append((node.name, node.op, str(node.target), val))
    return GraphRecord(label, gm.code, meta)


def record_outputs(label: str, out: Any) -> GraphRecord:
    leaves = pytree.tree_leaves(out)
    meta = [(f"out{i}", "output", "", summarize_val(x)) for i, x in enumerate(leaves)]
    return GraphRecord(label, "", meta)


def record_values(label: str, out: Any) -> GraphRecord:
    """Real output values (any device) as a record: every tensor leaf is copied to
    the CPU; meta holds shape, dtype and a SHA-256 of its bytes, ``values`` the CPU
    tensors themselves (diff_graphs compares them with ``torch.equal`` too)."""
    import hashlib

    meta, values = [], []
    for i, x in enumerate(pytree.tree_leaves(out)):
        if not isinstance(x, torch.Tensor):
            meta.append((f"v{i}", "value", "", summarize_val(x)))
            continue
        c = x.detach().to("cpu").contiguous()
        raw = c.reshape(-1).view(torch.uint8)
        digest = hashlib.sha256(raw.numpy().tobytes()).hexdigest()[:16]
        meta.append((f"v{i}", "value", "", ("V", tuple(c.shape), str(c.dtype), digest)))
        values.append(c)
    return GraphRecord(label, "", meta, values)


def _diff_values(label: str, va: list, vb: list) -> str:
    if len(va) != len(vb):
        return f"{label}: {len(va)} vs {len(vb)} tensors"
    for i, (x, y) in enumerate(zip(va, vb)):
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"{label} v{i}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        if not torch.equal(x, y):
            return f"{label} v{i}: values differ (torch.equal is False)"
    return ""


def diff_graphs(a: list[GraphRecord], b: list[GraphRecord], names=("stock", "fastfake")) -> str:
    """'' when identical, else a short human-readable description of the first difference."""
    import difflib

    if [g.label for g in a] != [g.label for g in b]:
        return f"graph lists differ: {names[0]}={[g.label for g in a]} {names[1]}={[g.label for g in b]}"
    for ga, gb in zip(a, b):
        for what, la, lb in (
            ("code", ga.code.splitlines(), gb.code.splitlines()),
            ("meta", ga.meta_lines(), gb.meta_lines()),
        ):
            if la != lb:
                d = list(difflib.unified_diff(la, lb, names[0], names[1], n=1, lineterm=""))
                return f"{ga.label} {what} differs:\n" + "\n".join(d[:40])
        if ga.values is not None or gb.values is not None:
            d = _diff_values(ga.label, ga.values or [], gb.values or [])
            if d:
                return d
    return ""


# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #


def _sum_outputs(out: Any) -> torch.Tensor:
    leaves = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    total = leaves[0].sum()
    for x in leaves[1:]:
        total = total + x.sum()
    return total


def _param_inputs(model: torch.nn.Module, requires_grad: bool):
    names, tensors = [], []
    for n, p in model.named_parameters():
        names.append(n)
        tensors.append(p.detach().requires_grad_(requires_grad))
    for n, b in model.named_buffers():
        names.append(n)
        tensors.append(b)
    return names, tensors


def _functional(model: torch.nn.Module, names: list[str]) -> Callable:
    n = len(names)

    def f(*args):
        state = dict(zip(names, args[:n]))
        return torch.func.functional_call(model, state, tuple(args[n:]))

    return f


@dataclass
class Workload:
    name: str
    factory: Callable[..., Callable[..., list[GraphRecord]]]
    warm: bool = False
    uses_dynamo: bool = False
    doc: str = ""

    def __call__(self, model, inputs, *, spec=None, size: str = "default"):
        return self.factory(model, inputs, spec=spec, size=size)


# --------------------------------------------------------------------------- #
# Workloads
# --------------------------------------------------------------------------- #


def _compile(model, inputs, *, dynamic: bool, train: bool):
    from torch._dynamo.backends.debugging import aot_eager, boxed_nop

    def run(capture: bool = False) -> list[GraphRecord]:
        torch._dynamo.reset()
        graphs: list[GraphRecord] = []
        backend: Any = "aot_eager"
        if capture:
            counts = {"dynamo": 0, "aot_fw": 0, "aot_bw": 0}

            def tagged(kind):
                def compiler(gm, example_inputs):
                    graphs.append(record_graph(f"{kind}[{counts[kind]}]", gm))
                    counts[kind] += 1
                    return boxed_nop(gm, example_inputs)

                return compiler

            def backend(gm, example_inputs):
                graphs.append(record_graph(f"dynamo[{counts['dynamo']}]", gm))
                counts["dynamo"] += 1
                return aot_eager(gm, example_inputs, fw_compiler=tagged("aot_fw"), bw_compiler=tagged("aot_bw"))

        compiled = torch.compile(model, backend=backend, dynamic=dynamic)
        if train:
            model.train()
            try:
                _sum_outputs(compiled(*inputs)).backward()
            finally:
                model.zero_grad(set_to_none=True)
                model.eval()
        else:
            model.eval()
            with torch.no_grad():
                compiled(*inputs)
        return graphs

    return run


def compile_static(model, inputs, *, spec=None, size="default"):
    return _compile(model, inputs, dynamic=False, train=False)


def compile_dynamic(model, inputs, *, spec=None, size="default"):
    return _compile(model, inputs, dynamic=True, train=False)


def compile_train(model, inputs, *, spec=None, size="default"):
    return _compile(model, inputs, dynamic=False, train=True)


def compile_train_dynamic(model, inputs, *, spec=None, size="default"):
    return _compile(model, inputs, dynamic=True, train=True)


def aot_function_workload(model, inputs, *, spec=None, size="default"):
    from functorch.compile import aot_function

    def run(capture: bool = False) -> list[GraphRecord]:
        graphs: list[GraphRecord] = []

        def tagged(kind):
            def compiler(gm, example_inputs):
                if capture:
                    graphs.append(record_graph(kind, gm))
                return gm

            return compiler

        model.eval()
        names, tensors = _param_inputs(model, requires_grad=True)
        compiled = aot_function(_functional(model, names), fw_compiler=tagged("aot_fw"), bw_compiler=tagged("aot_bw"))
        _sum_outputs(compiled(*tensors, *inputs)).backward()
        return graphs

    return run


def _make_fx(model, inputs, tracing_mode: str):
    from torch.fx.experimental.proxy_tensor import make_fx

    def run(capture: bool = False) -> list[GraphRecord]:
        model.eval()
        names, tensors = _param_inputs(model, requires_grad=False)
        with torch.no_grad():
            gm = make_fx(_functional(model, names), tracing_mode=tracing_mode)(*tensors, *inputs)
        return [record_graph("make_fx", gm)] if capture else []

    return run


def make_fx_fake(model, inputs, *, spec=None, size="default"):
    return _make_fx(model, inputs, "fake")


def make_fx_symbolic(model, inputs, *, spec=None, size="default"):
    return _make_fx(model, inputs, "symbolic")


def export_workload(model, inputs, *, spec=None, size="default"):
    def run(capture: bool = False) -> list[GraphRecord]:
        model.eval()
        ep = torch.export.export(model, tuple(inputs), strict=False)
        return [record_graph("export", ep.graph_module)] if capture else []

    return run


def fake_forward(model, inputs, *, spec=None, size="default"):
    """Model and inputs are (re)built inside one FakeTensorMode when ``spec`` is
    given; otherwise the given model's parameters are converted to fakes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    if spec is not None:
        with mode:
            torch.manual_seed(0)
            fmodel = spec.build(size).eval()
            finputs = spec.make_inputs(size)

        def forward():
            return fmodel(*finputs)
    else:
        names, tensors = _param_inputs(model, requires_grad=False)
        fparams = [mode.from_tensor(t, static_shapes=True) for t in tensors]
        finputs = [mode.from_tensor(t, static_shapes=True) for t in inputs]
        f = _functional(model.eval(), names)

        def forward():
            return f(*fparams, *finputs)

    def run(capture: bool = False) -> list[GraphRecord]:
        with mode, torch.no_grad():
            out = forward()
        return [record_outputs("outputs", out)] if capture else []

    return run


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


class _XlaState:
    """Process-wide torch_xla plumbing shared by the openxla workloads."""

    ready = False
    evict_n = 0  # tiny graphs compiled to evict everything from the computation cache
    evict_serial = 0
    warned = False
    # lowering timers of the current run (reset by reset_backend_times)
    times: dict[str, float] = {}


def _xla_setup():
    """Import torch_xla (PJRT_DEVICE=CPU unless set), fix the computation-cache
    size so that it can be emptied between repetitions, warm the openxla path up
    once per process under both implementations. Returns the torch_xla module."""
    import os
    import warnings

    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault(XLA_CACHE_SIZE_ENV, str(XLA_CACHE_SIZE))
    import torch_xla
    import torch_xla.core.dynamo_bridge  # noqa: F401  (what torch's openxla backend calls)
    import torch_xla.core.xla_model  # noqa: F401

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
        for install in (False, True):
            fastfake.install() if install else fastfake.uninstall()
            torch._dynamo.reset()
            with torch.no_grad():
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

    torch_xla = _xla_setup()
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
        with _BridgeHook(graphs):
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
    Workload("compile_openxla", compile_openxla, uses_dynamo=True,
             doc='torch.compile(backend="openxla") on the XLA device, inference (needs torch_xla)'),
    Workload("compile_openxla_train", compile_openxla_train, uses_dynamo=True,
             doc='torch.compile(backend="openxla") on the XLA device, forward + backward (needs torch_xla)'),
)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("compile_static", compile_static, uses_dynamo=True,
                 doc='torch.compile(backend="aot_eager", dynamic=False), inference'),
        Workload("compile_dynamic", compile_dynamic, uses_dynamo=True,
                 doc='torch.compile(backend="aot_eager", dynamic=True), inference'),
        Workload("compile_train", compile_train, uses_dynamo=True,
                 doc='torch.compile(backend="aot_eager"), forward + backward'),
        Workload("compile_train_dynamic", compile_train_dynamic, uses_dynamo=True,
                 doc='torch.compile(backend="aot_eager", dynamic=True), forward + backward'),
        Workload("aot_function", aot_function_workload, doc="aot_function with nop compilers, fw + bw"),
        Workload("make_fx_fake", make_fx_fake, doc='make_fx(tracing_mode="fake")'),
        Workload("make_fx_symbolic", make_fx_symbolic, doc='make_fx(tracing_mode="symbolic")'),
        Workload("export", export_workload, doc="torch.export.export(strict=False)"),
        Workload("fake_forward", fake_forward, warm=True, doc="warm forward inside FakeTensorMode"),
    )
}

# The openxla workloads exist only where torch_xla can run (see have_torch_xla);
# elsewhere they are listed as unavailable with the reason.
UNAVAILABLE_WORKLOADS: dict[str, str] = {}
_xla_ok, _xla_why = have_torch_xla()
for _w in XLA_WORKLOADS:
    if _xla_ok:
        WORKLOADS[_w.name] = _w
    else:
        UNAVAILABLE_WORKLOADS[_w.name] = _xla_why
del _w

WORKLOAD_NAMES: tuple[str, ...] = tuple(WORKLOADS)
DEFAULT_WORKLOADS: tuple[str, ...] = ("compile_static", "compile_dynamic", "fake_forward")


def get(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        if name in UNAVAILABLE_WORKLOADS:
            raise KeyError(f"workload {name!r} is unavailable here: {UNAVAILABLE_WORKLOADS[name]}") from None
        raise KeyError(f"unknown workload {name!r}; available: {', '.join(WORKLOADS)}") from None


__all__ = [
    "GraphRecord",
    "WORKLOADS",
    "WORKLOAD_NAMES",
    "UNAVAILABLE_WORKLOADS",
    "XLA_WORKLOADS",
    "backend_times",
    "evict_xla_computation_cache",
    "have_torch_xla",
    "record_values",
    "reset_backend_times",
    "DEFAULT_WORKLOADS",
    "Workload",
    "diff_graphs",
    "record_graph",
    "summarize_val",
    "get",
]
