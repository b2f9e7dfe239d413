"""``aten._unsafe_view`` (what ``matmul`` / ``linear`` without bias return on 3-d
inputs) through the result cache: stock caches it as a view from 2.15 on and
bypasses its cache for it before ("unsafe view"); there fastfake learns the entry
from stock's own uncached output (a view of the input's storage with a version
counter of its own) and serves repeats. Every field -- the version included, also
after in-place ops on the output and on the input -- and stock's cache statistics
equal stock's after every call, over fixed and long random sequences."""
from __future__ import annotations

import random

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily

import fastfake
from fastfake.common import compat as _compat
from parity import error_outcome, tensor_meta

UNSAFE_VIEW = torch.ops.aten._unsafe_view.default
# tensor_meta reads it; its first call runs a stock op, counted in cache_info()
_compat.fake_device_attr()


def _run(program, fast: bool):
    if fast:
        fastfake.install()
        fastfake.reset_stats()
    FakeTensorMode.cache_clear()
    mode = FakeTensorMode()
    trace = []

    def record(value):
        with unset_fake_temporarily():
            if isinstance(value, Exception):
                trace.append(("raised", error_outcome(value)))
            else:
                trace.append(tensor_meta(value, mode))
        trace.append(mode.cache_info())

    with mode:
        program(record)
    stats = fastfake.stats() if fast else None
    fastfake.uninstall()
    return trace, stats


def _both(program):
    stock, _ = _run(program, fast=False)
    fast, stats = _run(program, fast=True)
    for k, (s, f) in enumerate(zip(stock, fast)):
        assert s == f, f"entry {k}: stock {s} fastfake {f}"
    assert len(stock) == len(fast)
    return stats


def _call(record, *args):
    try:
        out = UNSAFE_VIEW(*args)
    except Exception as e:  # noqa: BLE001 - compared with the other side
        record(e)
        return None
    record(out)
    return out


def test_repeats_are_served_as_stock():
    def program(record):
        x = torch.empty(4, 6)
        x.add_(1)
        s = torch.empty(3, 8)[1:]
        z = torch.empty(0, 5)
        with torch.enable_grad():
            g = torch.empty(2, 3, requires_grad=True) * 2
        for _ in range(3):
            for a, size in ((x, [24]), (x, [2, -1]), (s, [16]), (z, [5, 0]), (g, [6]), (x, [5, 5])):
                out = _call(record, a, size)
                if out is not None and not out.requires_grad:
                    out.add_(1)  # bumps the output's own version, not the input's
                    record(out)
                    record(a)
        with torch.inference_mode():
            for _ in range(2):
                _call(record, torch.empty(4, 6), [24])

    stats = _both(program)
    assert stats["cache.hit"] >= 8


def test_linear_without_bias_matches_and_is_served():
    def program(record):
        w = torch.empty(16, 32)
        for _ in range(3):
            x = torch.empty(2, 5, 32)
            y = torch.nn.functional.linear(x, w)
            record(y)
            y.mul_(2)
            record(y)

    stats = _both(program)
    assert stats["cache.hit"] >= 2


@pytest.mark.parametrize("seed", range(3))
def test_random_sequences_match_stock(seed):
    rng = random.Random(seed)
    shapes = [(4, 6), (2, 3, 4), (24,), (1, 24), (6, 1, 4), (0, 3)]
    steps = []
    for _ in range(300):
        r = rng.random()
        if r < 0.5:
            steps.append(("view", rng.randrange(1 << 16), rng.randrange(1 << 16)))
        elif r < 0.7:
            steps.append(("new", rng.randrange(len(shapes)), rng.random() < 0.3))
        elif r < 0.85:
            steps.append(("mutate", rng.randrange(1 << 16)))
        elif r < 0.95:
            steps.append(("slice", rng.randrange(1 << 16)))
        else:
            steps.append(("clear",))

    def program(record):
        pool = [torch.empty(4, 6)]
        for step in steps:
            kind = step[0]
            if kind == "new":
                t = torch.empty(shapes[step[1]])
                pool.append(t.t() if step[2] and t.dim() == 2 else t)
            elif kind == "view":
                a = pool[step[1] % len(pool)]
                n = a.numel()
                sizes = [[n], [-1], [1, n], [n, 1]]
                if n and n % 2 == 0:
                    sizes.append([2, n // 2])
                out = _call(record, a, sizes[step[2] % len(sizes)])
                if out is not None:
                    pool.append(out)
            elif kind == "mutate":
                a = pool[step[1] % len(pool)]
                a.add_(1)
                record(a)
            elif kind == "slice":
                a = pool[step[1] % len(pool)]
                if a.dim() and a.shape[0] > 1:
                    pool.append(a[1:])
            else:
                FakeTensorMode.cache_clear()

    _both(program)
