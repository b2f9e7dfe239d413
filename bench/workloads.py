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
export_data_dependent / symint_arith
    Model-free (they ignore the zoo model and build their own program; one row per
    run, not one per model): a data-dependent ``torch.export`` (``.item()``,
    ``torch._check``, split / flip / cat) and ``make_fx(tracing_mode="symbolic")``
    of views sized by SymInt arithmetic; see :mod:`bench.synthetic`.
fake_tensor_prop / fake_tensor_prop_symbolic / export_prop
    Shape propagation over an existing FX graph (``FakeTensorProp``); see
    :mod:`bench.fake_prop`.
fake_forward
    Plain forward of the model built inside a ``FakeTensorMode`` (model and inputs
    constructed in the mode once, when the workload is created); each call times
    one warm forward under ``no_grad``. Its "graph" is a summary of the outputs.
inductor_{cold,warm}[_train][_dynamic]
    ``torch.compile(model)`` with the default Inductor backend, timed to the first
    output in a fresh process per repetition, with empty or warm on-disk caches;
    see :mod:`bench.inductor`.
compile_openxla / compile_openxla_train (only where torch_xla runs: torch_xla 2.9 on torch 2.9)
    ``torch.compile(model, backend="openxla")`` with a deep copy of the model and the
    inputs on the XLA device (``torch_xla.device()``, PJRT's CPU client unless
    ``PJRT_DEVICE`` says otherwise), static shapes; inference under ``no_grad``, or
    forward + backward of the sum of outputs with XLA's RNG seeded to 0. The XLA
    lowering (``extract_compiled_graph``, lazy, after dynamo's compile) is timed
    separately (:func:`backend_times`); torch_xla's computation cache is emptied
    before each repetition (``run.fresh_state``). Capture records the dynamo graphs,
    the graphs handed to the bridge and the real outputs (plus gradients) on the CPU.

``Workload.fresh`` marks the first-trace workloads the CLI runs in a fresh process
per repetition (:mod:`bench.fresh`): compile_*, aot_function, make_fx_*, export and
the two model-free ones.

``Workload.warm`` is False for every workload except ``fake_forward``: the runner
clears torch's fake-tensor cache (and ``torch._dynamo.reset()``, and the backend's
own cache when the workload's ``run`` has a ``fresh_state`` attribute) before each
repetition of a cold workload so each one is a true first trace.
"""
from __future__ import annotations

from typing import Any

import torch


from .records import (  # noqa: F401  (re-exported: bench.workloads is the public face)
    GraphRecord,
    Workload,
    _sum_outputs,
    diff_graphs,
    record_graph,
    record_outputs,
    record_values,
    summarize_val,
)


# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #


# (bench/functional.py)
from .functional import _functional, _param_inputs, trace_functional  # noqa: E402,F401


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
    def run(capture: bool = False) -> list[GraphRecord]:
        gm, _ = trace_functional(model, inputs, tracing_mode)
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


def fake_forward_real(model, inputs, *, spec=None, size="default"):
    """A real-weight model run on fake inputs: FakeTensorMode(allow_non_fake_inputs=True),
    the parameters stay real tensors (the mode converts them, memoised), as
    shape-inference tools and quick experiments do."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    model = model.eval()
    finputs = [mode.from_tensor(t, static_shapes=True) for t in inputs]

    def run(capture: bool = False) -> list[GraphRecord]:
        with mode, torch.no_grad():
            out = model(*finputs)
        return [record_outputs("outputs", out)] if capture else []

    return run


from .fake_prop import export_prop, fake_tensor_prop, fake_tensor_prop_symbolic  # noqa: E402,I001
from .synthetic import export_data_dependent, symint_arith  # noqa: E402
from . import inductor as _inductor  # noqa: E402
from .openxla import (  # noqa: E402  (they use the records above)
    XLA_WORKLOADS,
    evict_xla_computation_cache,
    have_torch_xla,
    setup_torch_xla,
)
from .openxla import backend_times as _xla_backend_times  # noqa: E402
from .openxla import reset_backend_times as _xla_reset_backend_times  # noqa: E402
from . import torchtpu as _torchtpu  # noqa: E402


def backend_times() -> dict[str, float]:
    """Timers of what runs outside the in-process dynamo metrics: openxla's
    lowering and compile, and the report of the last inductor child process."""
    out = _xla_backend_times()
    out.update(_torchtpu.backend_times())
    out.update(_inductor.backend_times())
    return out


def reset_backend_times() -> None:
    _xla_reset_backend_times()
    _torchtpu.reset_backend_times()
    _inductor.reset_backend_times()


def child_report() -> dict:
    """The full report of the last inductor child process ({} if none since the
    last :func:`reset_backend_times`)."""
    return dict(_inductor._LAST)

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("compile_static", compile_static, uses_dynamo=True, fresh=True,
                 doc='torch.compile(backend="aot_eager", dynamic=False), inference'),
        Workload("compile_dynamic", compile_dynamic, uses_dynamo=True, fresh=True,
                 doc='torch.compile(backend="aot_eager", dynamic=True), inference'),
        Workload("compile_train", compile_train, uses_dynamo=True, fresh=True,
                 doc='torch.compile(backend="aot_eager"), forward + backward'),
        Workload("compile_train_dynamic", compile_train_dynamic, uses_dynamo=True, fresh=True,
                 doc='torch.compile(backend="aot_eager", dynamic=True), forward + backward'),
        Workload("aot_function", aot_function_workload, fresh=True, doc="aot_function with nop compilers, fw + bw"),
        Workload("make_fx_fake", make_fx_fake, fresh=True, doc='make_fx(tracing_mode="fake")'),
        Workload("make_fx_symbolic", make_fx_symbolic, fresh=True, doc='make_fx(tracing_mode="symbolic")'),
        Workload("export", export_workload, fresh=True, doc="torch.export.export(strict=False)"),
        Workload("export_data_dependent", export_data_dependent, fresh=True, model_free=True, warmup="export",
                 doc="model-free: torch.export of N x (128 .item() + torch._check, split, flip, cat); "
                     "N=40 (small: 5)"),
        Workload("symint_arith", symint_arith, fresh=True, model_free=True, warmup="make_fx_symbolic",
                 doc='model-free: make_fx(tracing_mode="symbolic") of views/slices sized by SymInt '
                     "arithmetic (s0*s1, //, %, sym_max); 60 blocks (small: 6)"),
        Workload("fake_tensor_prop", fake_tensor_prop,
                 doc="first FakeTensorProp over the make_fx(fake) aten graph, static fakes, fresh mode"),
        Workload("fake_tensor_prop_warm", fake_tensor_prop, warm=True,
                 doc="FakeTensorProp again over a graph this process propagated before (fresh mode and fakes)"),
        Workload("fake_tensor_prop_symbolic", fake_tensor_prop_symbolic,
                 doc="FakeTensorProp over the make_fx(symbolic) graph, symbolic inputs, fresh ShapeEnv"),
        Workload("export_prop", export_prop,
                 doc="torch.export.export(strict=False), then FakeTensorProp over the exported graph"),
        Workload("fake_forward", fake_forward, warm=True, doc="warm forward inside FakeTensorMode"),
        Workload("fake_forward_real", fake_forward_real, warm=True,
                 doc="warm forward of the real-weight model, FakeTensorMode(allow_non_fake_inputs=True)"),
    )
}

for _w in _inductor.INDUCTOR_WORKLOADS:
    WORKLOADS[_w.name] = _w

# The openxla workloads exist only where torch_xla can run (see have_torch_xla);
# elsewhere they are listed as unavailable with the reason.
UNAVAILABLE_WORKLOADS: dict[str, str] = {}
_xla_ok, _xla_why = have_torch_xla()
for _w in XLA_WORKLOADS:
    if _xla_ok:
        WORKLOADS[_w.name] = _w
    else:
        UNAVAILABLE_WORKLOADS[_w.name] = _xla_why
# compile_tpu: only where torch_tpu 0.2.0 and libtpu are installed (bench/torchtpu.py).
_tpu_ok, _tpu_why = _torchtpu.have_torch_tpu()
for _w in _torchtpu.TPU_WORKLOADS:
    if _tpu_ok:
        WORKLOADS[_w.name] = _w
    else:
        UNAVAILABLE_WORKLOADS[_w.name] = _tpu_why
del _w

WORKLOAD_NAMES: tuple[str, ...] = tuple(WORKLOADS)
#: With --models but without --workloads.
DEFAULT_WORKLOADS: tuple[str, ...] = ("compile_static", "compile_dynamic", "compile_train_dynamic", "fake_forward",
                                      "fake_forward_real")

#: ``python -m bench`` / ``scripts/bench`` without --models and --workloads: (model,
#: workload) pairs, model None for a model-free workload. BERT-, GPT-2-, T5- and
#: Llama-style dynamic inference and training compiles, static compiles of two of
#: them, warm fake forwards, symint_arith: ~45 min at --repeat 3 on 2 cores
#: (bench/README.md). ``--models all --workloads all`` runs everything.
DEFAULT_PLAN: tuple[tuple[str | None, str], ...] = (
    ("bert", "compile_static"),
    *((m, w) for m in ("bert", "gpt2", "t5", "llama")
      for w in ("compile_dynamic", "compile_train_dynamic", "fake_forward", "fake_forward_real")),
    ("llama", "compile_static"),
    (None, "symint_arith"),
)


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
    "setup_torch_xla",
    "DEFAULT_PLAN",
    "DEFAULT_WORKLOADS",
    "Workload",
    "diff_graphs",
    "record_graph",
    "summarize_val",
    "get",
]
