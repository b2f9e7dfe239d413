"""Long seeded random programs of symbolic views and reshapes (``_unsafe_view``
with sizes computed from SymInts, ``reshape`` + ``mm``, transposes, clones) with
guards in between, stock and fastfake side by side in one process
(tests/test_stateful.py's Twin): every step compared, including the derived
values (numel, contiguity) memoised on inputs and outputs and the whole ShapeEnv
state (guards, ranges, replacements, runtime asserts).

Seed 0 found that a served call left replacement chains uncompressed: stock's
cache key reads ``SymNode.expr`` of every argument SymNode, and ``ShapeEnv.replace``
path-compresses chains on the way (``s98 -> s31 -> s16`` becomes ``s98 -> s16``);
fastfake now does the same reads (``touch_exprs`` in csrc/cache/keys.cpp).

Seed 1 found a flaw of the comparison itself: two *stock* worlds fed this program
disagreed on which known guards get added again, because stock's lru-cached
ShapeEnv methods are shared by every ShapeEnv of the process and the interleaved
worlds gave each other cache histories. The Twin now starts each symbolic call
from empty ShapeEnv method caches in both worlds (tests/test_stateful.py);
:func:`test_two_stock_worlds_agree` keeps that control.
"""
from __future__ import annotations

import random

import pytest
import torch

import fastfake
import parity
from fastfake import _C
from test_stateful import Twin, World

pytestmark = parity.requires_symbolic_cache

uv = torch.ops.aten._unsafe_view.default


def _memo(t) -> str:
    return repr(_C.synth_recipe(t, True))


def _flatten(t):
    out = uv(t, [t.shape[0] * t.shape[1], *t.shape[2:]])
    return out, _memo(t), _memo(out)


def _split(t):
    out = uv(t, [t.shape[0], 2, t.shape[1] // 2, *t.shape[2:]]) if t.shape[1] % 2 == 0 else uv(t, list(t.shape))
    return out, _memo(t), _memo(out)


def _same(t):
    out = uv(t, list(t.shape))
    return out, _memo(t), _memo(out)


def _mm_then_view(t, w):
    h = torch.mm(t.reshape(-1, t.shape[-1]), w)
    out = uv(h, [*t.shape[:-1], w.shape[1]])
    return out, _memo(h), _memo(out)


STEPS = {
    "flatten": (_flatten, 1),
    "split": (_split, 1),
    "same": (_same, 1),
    "mm_then_view": (_mm_then_view, 2),
    "clone": (lambda t: t.clone(), 1),
    "mul": (lambda t: t * 2, 1),
    "contiguous_query": (lambda t: (t.is_contiguous(), _memo(t)), 1),
    "numel_query": (lambda t: (t.numel(), _memo(t)), 1),
    "transpose": (lambda t: t.transpose(0, 1), 1),
}

SHAPES = [(4, 6, 8), (4, 6, 8), (6, 8), (3, 4, 8), (4, 6, 8)]


def _hint(v) -> int:
    return v.node.hint if isinstance(v, torch.SymInt) else v


def equate_step(twin: Twin, rng: random.Random, live: list[int]) -> None:
    """``torch._check`` that two live tensors' first sizes are equal, for a pair whose
    hints agree: the ShapeEnv replaces one symbol by the other (or learns nothing)."""
    pairs = [(a, b) for a in live for b in live
             if a < b and twin.stock.pool[a].dim() and twin.stock.pool[b].dim()
             and _hint(twin.stock.pool[a].shape[0]) == _hint(twin.stock.pool[b].shape[0])]
    if pairs:
        twin.step(0, "check(size(0) == size(0))",
                  lambda t, u: torch._check(t.shape[0] == u.shape[0]), list(rng.choice(pairs)))


def view_steps(twin: Twin, rng: random.Random, n: int, repeat: float = 0.0, equate: float = 0.0) -> None:
    """``repeat``: the share of steps that redo one of the last ten calls on the same
    values (their fresh intermediates and outputs are new tensors with the same
    metadata, as each layer of a model calls the same ops); ``equate``: the share of
    steps that check two sizes equal (replacements in the ShapeEnv)."""
    weights: list[int] = []
    live: list[int] = []
    recent: list[tuple] = []
    for _ in range(n):
        if recent and repeat and rng.random() < repeat:
            name, fn, handles = rng.choice(recent)
            live.extend(twin.step(0, name, fn, handles))
            continue
        if equate and rng.random() < equate:
            equate_step(twin, rng, live)
            continue
        r = rng.random()
        if r < 0.08 or len(live) < 2:
            h = twin.new(0, rng.choice(SHAPES), None, torch.float32, "cpu", False)
            if h is not None:
                live.append(h)
            continue
        if r < 0.11:
            w = twin.new(0, (8, 8), None, torch.float32, "cpu", False)
            if w is not None:
                weights.append(w)
            continue
        if r < 0.115:
            twin.clear_caches()
            continue
        if r < 0.125:
            # a guard on one of the symbols: the ShapeEnv learns a range
            a = rng.choice(live)
            bound = rng.choice([2, 3, 100])
            twin.step(0, f"guard(size(0) >= {bound})",
                      lambda t, b=bound: torch._check(t.shape[0] >= b) if t.dim() else None, [a])
            continue
        name = rng.choice(list(STEPS))
        fn, arity = STEPS[name]
        a = rng.choice(live)
        handles = [a]
        if arity == 2:
            if not weights:
                continue
            handles.append(rng.choice(weights))
        if twin.stock.pool[a].dim() < 2:
            continue
        if name == "mm_then_view" and _hint(twin.stock.pool[a].shape[-1]) != 8:
            continue  # (by the hint: comparing the SymInt would guard in one world only)
        recent = _run(twin, live, recent, name, fn, handles)


def _run(twin: Twin, live: list[int], recent: list[tuple], name: str, fn, handles: list[int]) -> list[tuple]:
    """One step on both worlds; its outputs join the live values (the last 30), the
    call joins the recent ones a repeat may redo (the last 10), which are returned."""
    live.extend(twin.step(0, name, fn, handles))
    if len(live) > 30:
        del live[: len(live) - 30]
    return [*recent[-9:], (name, fn, handles)]


def _program(steps, seed: int, n: int) -> None:
    """``steps(twin, rng, n)`` from empty caches; the symbolic cache must have served."""
    fastfake.cache_clear()
    fastfake.reset_stats()
    twin = Twin(True)
    steps(twin, random.Random(seed), n)
    s = fastfake.stats()
    assert s["cache.symbolic.hit"] > 30, parity.counters_with_prefix(s, "cache.symbolic")


@pytest.mark.parametrize("seed", range(3))
def test_long_random_view_sequences(seed):
    _program(view_steps, 77 + seed, 500)


def test_two_stock_worlds_agree():
    """The comparison's control: the program that once made two interleaved stock
    worlds disagree (shared lru caches) runs the same in both."""
    twin = Twin(True)
    twin.fast = World(False, True, False)
    view_steps(twin, random.Random(78), 500)


# ---------------------------------------------------------------------------
# 4-D (convnet) programs: stock's cache key asks suggest_memory_format of every
# tensor argument, which for a 4-D symbolic tensor compares strides (and may add
# guards) -- here on NCHW and channels-last tensors, convolutions, pooling,
# batch norm and permutes, with the same side-by-side comparison.
# ---------------------------------------------------------------------------

F = torch.nn.functional

STEPS_4D = {
    "conv": (lambda t, w: F.conv2d(t, w, padding=1), 2),
    "relu": (lambda t: F.relu(t), 1),
    "add": (lambda t: t + t, 1),
    "channels_last": (lambda t: t.contiguous(memory_format=torch.channels_last), 1),
    "nchw": (lambda t: t.contiguous(), 1),
    "max_pool": (lambda t: F.max_pool2d(t, 2), 1),
    "avg_pool": (lambda t: F.adaptive_avg_pool2d(t, 1), 1),
    "batch_norm": (lambda t, w: F.batch_norm(t, w[:, 0, 0, 0], w[:, 0, 0, 1], training=False), 2),
    "permute": (lambda t: t.permute(0, 2, 3, 1), 1),
    "flatten": (lambda t: t.reshape(t.shape[0], -1), 1),
    "memory_format_query": (
        lambda t: (t.is_contiguous(memory_format=torch.channels_last), _memo(t)),
        1,
    ),
}

SHAPES_4D = [(2, 8, 6, 6), (4, 8, 8, 8), (2, 8, 6, 6)]


def conv_steps(twin: Twin, rng: random.Random, n: int) -> None:
    live: list[int] = []
    weights: list[int] = []
    recent: list[tuple] = []
    for _ in range(n):
        if recent and rng.random() < 0.25:
            name, fn, handles = rng.choice(recent)
            live.extend(twin.step(0, name, fn, handles))
            continue
        r = rng.random()
        if r < 0.08 or not live:
            h = twin.new(0, rng.choice(SHAPES_4D), None, torch.float32, "cpu", False)
            if h is not None:
                live.append(h)
            continue
        if r < 0.11 or not weights:
            w = twin.new(0, (8, 8, 3, 3), None, torch.float32, "cpu", False)
            if w is not None:
                weights.append(w)
            continue
        if r < 0.115:
            twin.clear_caches()
            continue
        name = rng.choice(list(STEPS_4D))
        fn, arity = STEPS_4D[name]
        a = rng.choice(live)
        t = twin.stock.pool[a]
        if t.dim() != 4 or _hint(t.shape[1]) != 8:
            continue  # (by the hint: comparing the SymInt would guard in one world only)
        if name == "max_pool" and (_hint(t.shape[2]) < 2 or _hint(t.shape[3]) < 2):
            continue
        handles = [a] if arity == 1 else [a, rng.choice(weights)]
        recent = _run(twin, live, recent, name, fn, handles)


@pytest.mark.parametrize("seed", range(2))
def test_long_random_convnet_sequences(seed):
    _program(conv_steps, 90 + seed, 300)
