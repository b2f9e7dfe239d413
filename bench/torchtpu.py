"""The TorchTPU workload: ``torch.compile(model, backend="tpu")`` (torch-tpu 0.2.0)
traced up to the StableHLO hand-off, without a TPU. Registered in
:mod:`bench.workloads` only where ``torch_tpu`` and ``libtpu`` are installed.

What runs, and the one step that is replaced
--------------------------------------------

TorchTPU's ``tpu`` backend (``torch_tpu._internal.compile._backend.TpuBackend``)
runs TorchTPU's pre-AOT passes on Dynamo's graph, then AOTAutograd (Dynamo's
``FakeTensorMode``, TorchTPU's decompositions, the min-cut partitioner) and hands
each AOT graph to ``SplitCompiler`` and ``StaticCompiler.__call__``, whose FX passes
(auto-functionalized decomposition, GQA folding, causal-mask detection, embedded
constants) run on fake tensors. ``StaticCompiler._compile`` then leaves fake mode,
makes storage-less placeholders of the example inputs, re-runs the graph in
TorchTPU's compile mode (``EagerLikeFxInterpreter`` under
``EagerMode._INTERNAL_COMPILE_FX_GRAPH``), builds the StableHLO module and compiles
it for the device through PjRt. Without a TPU that last step cannot run.

This workload replaces ``StaticCompiler._compile`` -- and only it -- with the same
steps minus the device: placeholders (``tpu_torch_compile.placeholder_like``), the
same interpreter in the same mode, the same output processing
(``export._process_fx_outputs``), then ``tpu_torch_compile.build_mlir`` and
``serialize_mlir_text`` instead of ``traverse_and_compile``. The default-generator
plumbing of ``fx_to_mlir`` (which needs the PjRt client) is left out: graphs that
draw random numbers are refused. The compiled artifact it returns raises
:class:`StableHloReady` when called, so the compiled model's first call ends there;
nothing runs on a device. The replacement refuses to install when TorchTPU's code it
stands in for is not the code it was written against (:data:`KNOWN_SOURCES`).

The device is brought up as TorchTPU does when it finds a TPU
(``torch_tpu._loader._init_device("tpu")``: PrivateUse1 renamed ``tpu``, its device
module and interface registered); its PjRt client stays unavailable. On a TPU host
TorchTPU does this at ``import torch`` (torch's device-backend autoload), so a fresh
child does it before ``fastfake.install()`` (``Workload.before_install``) and
fastfake's self-test proves fake tensors on ``tpu`` too. The model's
parameters, buffers and inputs are TorchTPU placeholders on ``tpu:0``: the fake
tensors Dynamo and AOTAutograd make of them are on the ``tpu`` device, as on a TPU
host. AOTAutograd's cache save is off (``options={"serializable": False}``): the
placeholder artifact cannot be pickled, and the save is not part of the trace.

Timers (``backend_times``): ``tpu_stablehlo`` / ``tpu_stablehlo_cpu`` = wall / CPU
seconds of the replaced step (re-trace in compile mode, StableHLO build, text);
``tpu_stablehlo_in_compile`` = the part of it inside Dynamo's ``entire_frame_compile``
(all of it for inference; measured as openxla's lowering is), taken out of the row's trace time, which is then Dynamo + AOTAutograd + TorchTPU's passes up to
the StableHLO hand-off.

Inference only: training with placeholder inputs fails in the autograd engine (no
device to run the forward), and training with CPU inputs is not what a TPU host
traces.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
import time
from typing import Any

import torch

from .records import GraphRecord, Workload, record_graph

#: The TorchTPU release this workload was written against.
TORCH_TPU_VERSION = "0.2.0"

#: sha256 (first 16 hex) of the source of what the placeholder step stands in for or
#: reuses, per function, on TORCH_TPU_VERSION. Anything else: refused.
KNOWN_SOURCES: dict[str, str] = {
    "compiler.StaticCompiler._compile": "a44a922e703613c9",
    "export.fx_to_mlir": "c2aa63a849c2c5f3",
    "export._process_fx_outputs": "3808522b6760e5e4",
    "export.EagerLikeFxInterpreter.run_node": "989a8b197f8296ec",
}


class StableHloReady(Exception):
    """Raised by the placeholder artifact when the compiled model is called: the
    StableHLO of every graph has been built; nothing can run without a device."""


def have_torch_tpu() -> tuple[bool, str]:
    """(available, reason), without importing torch_tpu (the import loads libtpu
    and registers a backend)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("torch_tpu") is None:
        return False, "torch_tpu is not installed"
    if importlib.util.find_spec("libtpu") is None:
        return False, "libtpu is not installed (importing torch_tpu without it aborts)"
    try:
        v = importlib.metadata.version("torch-tpu")
    except importlib.metadata.PackageNotFoundError:
        return False, "torch_tpu has no package metadata"
    if v != TORCH_TPU_VERSION:
        return False, f"torch-tpu {v}: this workload is written against {TORCH_TPU_VERSION}"
    return True, ""


def _digest(obj) -> str:
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


class _TpuState:
    ready = False
    times: dict[str, float] = {}
    hlo: list[str] | None = None  # StableHLO texts of the current run, when captured
    graphs: list[GraphRecord] | None = None  # graphs handed to StaticCompiler._compile


def _sources() -> dict[str, Any]:
    from torch_tpu._internal.compile import compiler
    from torch_tpu._internal.export import export

    return {
        "compiler.StaticCompiler._compile": compiler.StaticCompiler._compile,
        "export.fx_to_mlir": export.fx_to_mlir,
        "export._process_fx_outputs": export._process_fx_outputs,
        "export.EagerLikeFxInterpreter.run_node": export.EagerLikeFxInterpreter.run_node,
    }


def check_sources() -> list[str]:
    """The functions whose source is not the one this workload was written against
    ([] when all match)."""
    got = {name: _digest(fn) for name, fn in _sources().items()}
    return [f"{name} (sha256 {d})" for name, d in got.items() if KNOWN_SOURCES.get(name) != d]


def setup_torch_tpu():
    """Import torch_tpu (TPU_SKIP_MDS_QUERY=1 unless set: no cloud metadata server
    here), bring the ``tpu`` device up, check TorchTPU's code and put the
    placeholder step in. Idempotent. Returns the ``tpu`` device."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tcmalloc advice
        import torch_tpu  # noqa: F401
        from torch_tpu import _loader
    if _TpuState.ready:
        return torch.device("tpu")
    bad = check_sources()
    if bad:
        raise RuntimeError("compile_tpu: TorchTPU's code is not what the placeholder step was written against "
                           f"(torch-tpu {TORCH_TPU_VERSION}): " + ", ".join(bad))
    _loader._init_device("tpu")
    from torch_tpu._internal.compile import compiler

    compiler.StaticCompiler._compile = _placeholder_compile
    _TpuState.ready = True
    return torch.device("tpu")


def _placeholder_compile(self, graph_module, example_inputs, is_fwd=True, bounds=None, argument_layouts=None,
                         dynamic_outputs=None, donated_inputs=None, module_name=None):
    """``StaticCompiler._compile`` without the device: the same placeholders, the
    same re-trace in TorchTPU's compile mode, the StableHLO module built and
    serialised; no PjRt compile (module docstring)."""
    import torch._guards as _guards
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch_tpu._internal import execution_mode
    from torch_tpu._internal.compile import tpu_torch_compile as ttc
    from torch_tpu._internal.export import export

    if bounds is not None or argument_layouts is not None or donated_inputs:
        raise NotImplementedError("compile_tpu: dynamic bounds, layouts and donation are not part of this step")
    if _TpuState.graphs is not None:
        _TpuState.graphs.append(record_graph(f"tpu_compile[{len(_TpuState.graphs)}]", graph_module))
    in_compile = _guards.TracingContext.try_get() is not None
    t0, c0 = time.perf_counter(), time.process_time()
    with unset_fake_temporarily():
        args = [ttc.placeholder_like(a) if isinstance(a, torch.Tensor) else a for a in example_inputs]
        if any(isinstance(a, torch.Generator) for a in args):
            raise NotImplementedError("compile_tpu: graphs with generators need the device's RNG state")
        with execution_mode.set_eager_mode(execution_mode.EagerMode._INTERNAL_COMPILE_FX_GRAPH):
            mapped = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            outs = export.EagerLikeFxInterpreter(graph_module).run(*mapped)
            results = export._process_fx_outputs(graph_module, outs, dynamic_outputs=dynamic_outputs)[0]
            module = ttc.build_mlir(results, [a for a in args if isinstance(a, torch.Tensor)])
        text = ttc.serialize_mlir_text(module)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    t = _TpuState.times
    t["tpu_stablehlo"] = t.get("tpu_stablehlo", 0.0) + dt
    t["tpu_stablehlo_cpu"] = t.get("tpu_stablehlo_cpu", 0.0) + dc
    if in_compile:
        t["tpu_stablehlo_in_compile"] = t.get("tpu_stablehlo_in_compile", 0.0) + dt
    t["tpu_graphs"] = t.get("tpu_graphs", 0) + 1
    if _TpuState.hlo is not None:
        _TpuState.hlo.append(text)

    def artifact(*args, **kwargs):
        raise StableHloReady()

    return artifact


def reset_backend_times() -> None:
    _TpuState.times = {}


def backend_times() -> dict[str, float]:
    return dict(_TpuState.times)


def to_placeholders(model: torch.nn.Module, inputs: tuple) -> tuple[torch.nn.Module, tuple]:
    """A deep copy of ``model`` whose parameters and buffers are TorchTPU
    placeholders on ``tpu:0`` (tied parameters stay tied), and the inputs as
    placeholders; no data is copied (placeholders have no storage)."""
    import copy

    from torch_tpu._internal.compile import tpu_torch_compile as ttc

    model = copy.deepcopy(model).eval()
    memo: dict[int, torch.Tensor] = {}
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None:
                if id(p) not in memo:
                    memo[id(p)] = torch.nn.Parameter(ttc.placeholder_like(p.detach()), requires_grad=False)
                mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is not None:
                if id(b) not in memo:
                    memo[id(b)] = ttc.placeholder_like(b)
                mod._buffers[name] = memo[id(b)]
    xs = tuple(ttc.placeholder_like(x) if isinstance(x, torch.Tensor) else x for x in inputs)
    return model, xs


def compile_tpu(model, inputs, *, spec=None, size="default"):
    """``torch.compile(model, backend="tpu")`` inference on placeholders, up to the
    StableHLO of every graph. ``capture=True`` records Dynamo's graphs, the graphs
    handed to ``StaticCompiler._compile`` (after TorchTPU's passes) and the StableHLO
    texts."""
    setup_torch_tpu()
    pmodel, pinputs = to_placeholders(model, inputs)

    def run(capture: bool = False) -> list[GraphRecord]:
        from torch._dynamo.backends.registry import lookup_backend

        torch._dynamo.reset()
        graphs: list[GraphRecord] = []
        tpu = lookup_backend("tpu")
        n = [0]

        def backend(gm, example_inputs, **kwargs):
            if capture:
                graphs.append(record_graph(f"dynamo[{n[0]}]", gm))
                n[0] += 1
            return tpu(gm, example_inputs, options={"serializable": False})

        _TpuState.hlo = [] if capture else None
        _TpuState.graphs = [] if capture else None
        try:
            compiled = torch.compile(pmodel, backend=backend)
            try:
                with torch.no_grad():
                    compiled(*pinputs)
            except StableHloReady:
                pass
            else:
                raise RuntimeError("compile_tpu: the compiled model ran without reaching the placeholder step")
            if capture:
                graphs.extend(_TpuState.graphs)
                graphs.extend(GraphRecord(f"stablehlo[{i}]", text, []) for i, text in enumerate(_TpuState.hlo))
        finally:
            _TpuState.hlo = None
            _TpuState.graphs = None
        return graphs

    return run


TPU_WORKLOADS: tuple[Workload, ...] = (
    Workload("compile_tpu", compile_tpu, uses_dynamo=True, fresh=True, before_install="bench.torchtpu:setup_torch_tpu",
             doc='torch.compile(backend="tpu") inference on TorchTPU placeholders, up to the StableHLO '
                 "(needs torch_tpu + libtpu; no device: the PjRt compile is replaced, bench/torchtpu.py)"),
)


def _print_digests() -> None:  # python -m bench.torchtpu: the digests of this installation
    for name, fn in _sources().items():
        print(f'    "{name}": "{_digest(fn)}",')


if __name__ == "__main__":
    _print_digests()
    sys.exit(0)
