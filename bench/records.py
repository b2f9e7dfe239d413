"""What the workloads share: FX-graph / output records and their diff, the
``Workload`` descriptor, and the loss used by training workloads."""
from __future__ import annotations

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


def is_values(record: GraphRecord) -> bool:
    """A record of real output values (:func:`record_values`), not an FX graph: it
    holds the CPU tensors in this process, and after crossing a process boundary as
    JSON (bench/fresh.py) one ``value`` entry per leaf."""
    if record.values is not None:
        return True
    return bool(record.meta) and all(m[1] == "value" for m in record.meta)


def compare_runs(stock: list[list[GraphRecord]], fastfake: list[list[GraphRecord]]) -> dict:
    """fastfake's records of each repetition against stock's first, FX graphs and
    value records apart. The row keys of the benchmark: ``graphs_identical`` (False
    where no graph was captured: a check that cannot fail is no check),
    ``graph_labels`` and the first ``graph_diff``; where values were recorded,
    ``outputs_identical``, ``outputs_checked`` (tensors) and the first
    ``outputs_diff``. Both the in-process and the fresh-process paths use it."""
    out: dict = {}
    fx_ref = [g for g in stock[0] if not is_values(g)]
    vals_ref = [g for g in stock[0] if is_values(g)]
    out["graph_labels"] = [g.label for g in fx_ref]
    diffs = [d for d in (diff_graphs(fx_ref, [g for g in gs if not is_values(g)]) for gs in fastfake) if d]
    captured = any(g.meta for g in fx_ref)
    out["graphs_identical"] = not diffs and captured
    if diffs:
        out["graph_diff"] = diffs[0]
    elif not captured:
        out["graph_diff"] = "no graph was captured"
    if vals_ref or any(is_values(g) for gs in fastfake for g in gs):
        dv = [d for d in (diff_graphs(vals_ref, [g for g in gs if is_values(g)]) for gs in fastfake) if d]
        out["outputs_identical"] = not dv
        # (tensors: record_values describes each as ("V", shape, dtype, digest), a
        # list once it crossed as JSON; other leaves are compared but not counted)
        out["outputs_checked"] = sum(1 for g in vals_ref for m in g.meta if m[3] and m[3][0] == "V")
        if dv:
            out["outputs_diff"] = dv[0]
    return out


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
# Workload descriptor and shared helpers
# --------------------------------------------------------------------------- #


@dataclass
class Workload:
    name: str
    factory: Callable[..., Callable[..., list[GraphRecord]]]
    warm: bool = False
    uses_dynamo: bool = False
    doc: str = ""
    # Runs in a fresh child process per repetition (bench.inductor): its timings,
    # counters and output code come from the child's report.
    subprocess: bool = False
    # A first trace users pay once per process (compile_*, aot_function, make_fx_*,
    # export, ...): by default each repetition runs in a fresh process of its own
    # (bench/fresh.py), plus a row for a second trace in that process.
    fresh: bool = False
    # Builds its own program (bench/synthetic.py) and ignores the zoo model: one row,
    # not one per model.
    model_free: bool = False
    # The workload whose run on a tiny module warms a fresh child up before the
    # timed trace ("" = this one).
    warmup: str = ""
    # "module:function" a fresh child calls before ``import fastfake`` and
    # ``install()``: what the user's process has done by then (compile_tpu: TorchTPU
    # imported, its ``tpu`` device up, as at ``import torch`` on a TPU host).
    before_install: str = ""

    def __call__(self, model, inputs, *, spec=None, size: str = "default"):
        return self.factory(model, inputs, spec=spec, size=size)



def _sum_outputs(out: Any) -> torch.Tensor:
    leaves = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    total = leaves[0].sum()
    for x in leaves[1:]:
        total = total + x.sum()
    return total
