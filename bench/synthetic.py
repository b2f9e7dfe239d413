"""Model-independent workloads: programs of their own, not zoo models, that stress
one part of tracing. Each is a workload factory like those of bench/workloads.py
(``factory(model, inputs, *, spec=None, size=...)``); the model and inputs it is
given are ignored and it builds its own module and inputs for ``size``.

export_data_dependent
    ``torch.export.export(strict=False)`` of a module that, N times (N = 40 at size
    ``default``, 2 at ``small``), turns a 128-element int64 tensor into Python ints
    (``unbind`` + ``.item()`` on every element, each with ``torch._check(item >= 0)``),
    splits a data tensor with those sizes, flips each piece and concatenates them;
    under ``torch._dynamo.config.patch(capture_scalar_outputs=True)`` and, on
    releases that have it, ``torch.fx.experimental._config.patch(
    aggressive_guard_free_semantics=AggressiveGuardFreeMode.SKIP_RANGE_ANALYSIS)``.
    Every ``.item()`` makes an unbacked symbol: what remains is unbacked-symbol
    bookkeeping, deferred runtime asserts and the ShapeEnv's reasoning about them.
symint_arith
    ``make_fx(tracing_mode="symbolic")`` of a function whose views, reshapes,
    slices, expands and ``new_zeros`` take sizes computed from the symbolic input
    sizes (``s0*s1``, ``s0*s1//2``, ``sym_max``, ``%``, sums and differences), K
    blocks (K = 60 / 6): a program where SymNode arithmetic and the ShapeEnv's
    evaluation of the guards it makes dominate, not tensor dispatch.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from .records import GraphRecord, record_graph

#: Repetitions of each program's block per size.
DATA_DEPENDENT_N = {"small": 2, "default": 40}
SYMINT_BLOCKS = {"small": 6, "default": 60}
#: Elements of each size tensor of export_data_dependent.
SPLITS = 128


def _n(table: dict[str, int], size: str) -> int:
    try:
        return table[size]
    except KeyError:
        raise ValueError(f"unknown size {size!r}; expected one of {tuple(table)}") from None


# --------------------------------------------------------------------------- #
# export_data_dependent
# --------------------------------------------------------------------------- #


class DataDependentSplit(nn.Module):
    """``forward(sizes [n, 128] int64, data [n, L])``: row i of ``data`` split
    with the values of row i of ``sizes`` (data-dependent, each checked >= 0),
    every piece flipped, the pieces concatenated; the n results stacked."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, sizes: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        outs = []
        for i in range(self.n):
            items = [x.item() for x in sizes[i].unbind(0)]
            for s in items:
                torch._check(s >= 0)
            pieces = torch.split(data[i], items)
            outs.append(torch.cat([p.flip(0) for p in pieces]))
        return torch.stack(outs)


def data_dependent_inputs(n: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``sizes``: n rows of 128 nonnegative int64 values, every row summing to L
    (= 3 * 128); ``data``: [n, L] floats."""
    g = torch.Generator().manual_seed(seed)
    length = 3 * SPLITS
    sizes = torch.randint(0, 3, (n, SPLITS), generator=g, dtype=torch.int64)
    sizes[:, -1] = length - sizes[:, :-1].sum(1)  # >= 384 - 2 * 127 > 0
    data = torch.randn(n, length, generator=g)
    return sizes, data


def data_dependent_config():
    """The settings export_data_dependent runs under (a context manager)."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch._dynamo.config.patch(capture_scalar_outputs=True))
    from torch.fx.experimental import _config as fx_config

    if hasattr(fx_config, "aggressive_guard_free_semantics"):
        from torch.fx.experimental.symbolic_shapes import AggressiveGuardFreeMode

        stack.enter_context(fx_config.patch(
            aggressive_guard_free_semantics=AggressiveGuardFreeMode.SKIP_RANGE_ANALYSIS))
    return stack


def export_data_dependent(model=None, inputs=None, *, spec=None, size="default"):
    n = _n(DATA_DEPENDENT_N, size)
    module = DataDependentSplit(n).eval()
    args = data_dependent_inputs(n)

    def run(capture: bool = False) -> list[GraphRecord]:
        with data_dependent_config():
            ep = torch.export.export(module, args, strict=False)
        return [record_graph("export", ep.graph_module)] if capture else []

    return run


# --------------------------------------------------------------------------- #
# symint_arith
# --------------------------------------------------------------------------- #


class SymIntArith(nn.Module):
    """``forward(x [a, b], y [c])``: k blocks of views and slices whose sizes are
    arithmetic on a, b, c (each block's constants differ, so no expression repeats
    across blocks); returns the stacked sums."""

    def __init__(self, blocks: int) -> None:
        super().__init__()
        self.blocks = blocks

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a, b = x.shape
        c = y.shape[0]
        flat = x.reshape(a * b)
        sums = []
        for i in range(self.blocks):
            k = i % 5 + 1
            half = (a * b) // 2
            t = flat[:half].view(half, 1).expand(half, k).reshape(half * k)
            t = t[: torch.sym_max(a * k, c + i)]
            start = (a * (i + 1)) % b
            m = flat[start: start + b].view(1, b).expand(k, b).reshape(k * b)
            r = y.repeat(a).view(a, c)[:, : c - c // 2].reshape(-1)
            z = x.new_zeros(a + c, b * k)[a:, :b].reshape(c * b)
            w = torch.cat([t, m, r, z])[: (a * b) % (c + k) + b]
            sums.append(w.sum() + t.sum() + m.sum() + r.sum() + z.sum())
        return torch.stack(sums)


def symint_inputs(*, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 12, generator=g), torch.randn(6, generator=g)


def symint_arith(model=None, inputs=None, *, spec=None, size="default"):
    from .functional import trace_functional

    module = SymIntArith(_n(SYMINT_BLOCKS, size)).eval()
    args = symint_inputs()

    def run(capture: bool = False) -> list[GraphRecord]:
        gm, _ = trace_functional(module, args, "symbolic")
        return [record_graph("make_fx", gm)] if capture else []

    return run
