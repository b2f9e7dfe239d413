"""Shape propagation over an existing FX graph: ``FakeTensorProp`` (what Inductor,
ONNX export and many graph tools run) and ``torch.export`` followed by re-running
shape propagation over the exported program.

The graph is traced once, under stock, when the workload is created; each
repetition is a first propagation: a fresh ``FakeTensorMode`` (and ``ShapeEnv``),
fresh fake inputs, ``FakeTensorProp(gm, mode).propagate_dont_convert_inputs``.
Captured records: the graph with every node's new ``meta["val"]``, and for symbolic
propagation the ShapeEnv afterwards (guards, replacements, ranges, deferred runtime
asserts), so node metadata and shape-environment state are compared with stock.

Workloads
---------
fake_tensor_prop
    The aten graph of ``make_fx(tracing_mode="fake")`` of the functional forward
    (parameters and buffers are placeholders), propagated with static fakes: a first
    propagation (torch's and fastfake's caches emptied before each repetition).
fake_tensor_prop_warm
    The same propagation repeated in a process that has propagated this graph
    before (a fresh mode and fresh fakes each time, the caches kept): what a tool
    or compiler pass re-running shape propagation pays.
fake_tensor_prop_symbolic
    The graph of ``make_fx(tracing_mode="symbolic")``, propagated with the model
    inputs' dims symbolic (a new ShapeEnv per repetition; parameters static).
export_prop
    ``torch.export.export(model, strict=False)`` (timed), then ``FakeTensorProp``
    over the exported graph module (parameters, buffers, constants and user inputs
    in the graph signature's order) in a fresh mode.
"""
from __future__ import annotations

import torch

from .records import GraphRecord, record_graph


def record_shape_env(label: str, shape_env) -> GraphRecord:
    """The ShapeEnv's observable state as a record (compared line by line)."""
    meta = []
    for i, g in enumerate(shape_env.guards):
        meta.append((f"guard{i}", "guard", "", ("expr", str(g.expr))))
    for k, v in sorted(shape_env.replacements.items(), key=lambda kv: str(kv[0])):
        meta.append((str(k), "replacement", "", ("expr", str(v))))
    for k, r in sorted(shape_env.var_to_range.items(), key=lambda kv: str(kv[0])):
        meta.append((str(k), "range", "", ("range", str(r.lower), str(r.upper))))
    asserts = getattr(shape_env, "deferred_runtime_asserts", {}) or {}
    for k in sorted(asserts, key=str):
        for j, ra in enumerate(asserts[k]):
            meta.append((f"{k}[{j}]", "runtime_assert", "", ("expr", str(ra.expr))))
    return GraphRecord(label, "", meta)


def _propagate(gm, values, *, n_static: int, symbolic: bool, capture: bool) -> list[GraphRecord]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    shape_env = None
    if symbolic:
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=False)
    fakes = []
    for i, t in enumerate(values):
        if not isinstance(t, torch.Tensor):
            fakes.append(t)
            continue
        fakes.append(mode.from_tensor(t, static_shapes=not symbolic or i < n_static))
    with torch.no_grad():
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    if not capture:
        return []
    records = [record_graph("fake_tensor_prop", gm)]
    if shape_env is not None:
        records.append(record_shape_env("shape_env", shape_env))
    return records


def _prop_workload(model, inputs, tracing_mode: str, symbolic: bool):
    from .functional import trace_functional

    gm, params = trace_functional(model, inputs, tracing_mode)
    values, n_static = list(params) + list(inputs), len(params)

    def run(capture: bool = False) -> list[GraphRecord]:
        return _propagate(gm, values, n_static=n_static, symbolic=symbolic, capture=capture)

    return run


def fake_tensor_prop(model, inputs, *, spec=None, size="default"):
    return _prop_workload(model, inputs, "fake", symbolic=False)


def fake_tensor_prop_symbolic(model, inputs, *, spec=None, size="default"):
    return _prop_workload(model, inputs, "symbolic", symbolic=True)


def _export_values(ep, inputs) -> list:
    sig = ep.graph_signature
    state = dict(ep.state_dict)
    state.update(getattr(ep, "constants", {}) or {})
    values = []
    user = iter(inputs)
    for spec in sig.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            values.append(next(user))
        else:
            values.append(state[spec.target])
    return values


def export_prop(model, inputs, *, spec=None, size="default"):
    def run(capture: bool = False) -> list[GraphRecord]:
        model.eval()
        ep = torch.export.export(model, tuple(inputs), strict=False)
        gm = ep.graph_module
        records = [record_graph("export", gm)] if capture else []
        values = _export_values(ep, inputs)
        records += _propagate(gm, values, n_static=len(values), symbolic=False, capture=capture)
        return records

    return run
