"""Portable entries of calls whose kernel dispatches other calls ("nested" records,
fastfake/cache/portable.py): ``view`` -> ``prims.collapse_view``, ``native_layer_norm``
-> ``var_mean`` -> ``prims.var`` ..., ``gelu`` -> ``erf``, ``embedding`` ->
``new_empty``.

Serving such a call in a new ShapeEnv must leave stock's cache exactly as stock's
miss there leaves it: the nested calls' entries stored (same keys, in the same
order, same entry kinds), the same hit / miss / bypass counts and the same
``torch.utils._stats`` call counts. The driver below runs seeded random programs
epoch after epoch, each epoch in new modes and ShapeEnvs, once with stock alone and
once with fastfake (starting from empty caches both), and compares after every
step: the result, the ShapeEnv, the ShapeEnv's stock cache (keys by value, entry
kinds) and how the counters moved.
"""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses import fake_tensor as ft
from torch.utils import _stats as torch_stats

import fastfake
import parity
from fastfake.common import compat as _compat
from fastfake.cache import portable as _portable
from test_cache_symbolic import _mode, _sym

pytestmark = [
    parity.requires_symbolic_cache,
    pytest.mark.skipif(not _compat.portable_entries_known(), reason="no portable entries on this release"),
]

# Unary programs on a symbolic [s0, s1, s2] float tensor (most decompose with
# symbolic sizes); the pool grows with their outputs.
OPS = {
    "view_flat": lambda x: x.view(-1),
    "view_merge": lambda x: x.view(x.shape[0] * x.shape[1], *x.shape[2:]) if x.dim() >= 2 else x.view(-1),
    "reshape": lambda x: x.reshape(x.shape[0], -1),
    "transpose": lambda x: x.transpose(0, -1),
    "permute": lambda x: x.permute(*reversed(range(x.dim()))),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "rsqrt": torch.rsqrt,
    "clone": torch.clone,
    "expand": lambda x: x.unsqueeze(0).expand(2, *x.shape),
    "softmax": lambda x: torch.softmax(x, -1),
    "var_mean": lambda x: torch.var_mean(x, -1)[0],
    # the op itself: its decomposition returns a named tuple (return_types.var_mean)
    "var_mean_op": lambda x: torch.ops.aten.var_mean.dim(x, [-1], True, True),
    "slice": lambda x: x[1:],
    "select": lambda x: x[0] if x.dim() > 1 else x,
    "flatten": lambda x: x.flatten(1) if x.dim() > 1 else x,
    "mean": lambda x: x.mean(-1),
}


def _embedding(idx, w):
    return F.embedding(idx, w)


def _addmm(b, x, w):
    return torch.addmm(b, x, w)


def _stock_cache(env) -> tuple:
    cache = env.fake_tensor_cache
    return tuple(cache), tuple(
        (type(e).__name__, getattr(e, "reason", None), len(getattr(e, "output_infos", ()))) for e in cache.values()
    )


def _counters() -> tuple:
    info = ft.FakeTensorMode.cache_info()  # (fastfake's: moves the served calls' counts in)
    return info.hits, info.misses, dict(info.bypasses), dict(torch_stats.simple_call_counter)


def _moved(before: tuple, after: tuple) -> tuple:
    def d(a, b):
        return {k: v - a.get(k, 0) for k, v in b.items() if v != a.get(k, 0)}

    return after[0] - before[0], after[1] - before[1], d(before[2], after[2]), d(before[3], after[3])


def _epoch_inputs(mode, sizes):
    b, s, h = sizes
    x = _sym(mode, torch.randn(b, s, h))
    idx = _sym(mode, torch.randint(0, 10, (b, s)))
    w = _sym(mode, torch.randn(10, h))
    mat = _sym(mode, torch.randn(b * s, h))
    wt = _sym(mode, torch.randn(h, 6))
    bias = _sym(mode, torch.randn(6))
    return x, idx, w, mat, wt, bias


class _Error:
    def __init__(self, outcome) -> None:
        self.outcome = outcome


def _memo_structure(pool: list) -> list:
    """Which SymNodes the pool's sizes, strides and numels share (by first
    occurrence): a kernel memoises its input's numel and may return it as an
    output size (``view(-1)``), so a served call must leave the same sharing."""
    first: dict[int, int] = {}
    out = []
    for i, t in enumerate(pool):
        for v in (*t.shape, *t.stride(), t.numel()):
            if isinstance(v, torch.SymInt):
                out.append(first.setdefault(id(v.node), len(first)))
            else:
                out.append(-1)
    return out


def _run_world(fast: bool, seed: int, epochs: int, steps: int) -> list:
    """Every step's record in one world."""
    records: list = []
    master = random.Random(seed)
    if fast:
        fastfake.install()
    try:
        ft.FakeTensorMode.cache_clear()  # (fastfake's when installed: both caches)
        for epoch in range(epochs):
            program = master.randrange(3)
            rng = random.Random(1000 * seed + program)
            # other hints (declined: another signature), a guard (another range)
            sizes = (5, 8, 6) if epoch % 4 == 3 or master.random() < 0.1 else (4, 8, 6)
            guard = epoch % 5 == 4 or master.random() < 0.1
            mode = _mode()
            env = mode.shape_env
            x, idx, w, mat, wt, bias = _epoch_inputs(mode, sizes)
            pool = [x]
            with mode:
                if guard:
                    torch._check(x.shape[0] < 1000)
                for step in range(steps):
                    before = _counters()
                    r = rng.random()
                    if r < 0.06:
                        name, out = "embedding", _embedding(idx, w)
                    elif r < 0.12:
                        name, out = "addmm", _addmm(bias, mat, wt)
                    else:
                        name = rng.choice(sorted(OPS))
                        src = rng.choice(pool)
                        try:
                            out = OPS[name](src)
                        except Exception as e:  # noqa: BLE001 - both worlds must raise alike
                            out = _Error(parity.error_outcome(e))
                    after = _counters()
                    if isinstance(out, _Error):
                        desc = out.outcome
                    else:
                        desc = parity.describe_value(out, pool, mode)
                        if isinstance(out, torch.Tensor) and out.dim() >= 1 and len(pool) < 24:
                            pool.append(out)
                    records.append((epoch, step, name, desc, parity.shape_env_fields(env),
                                    _stock_cache(env), _moved(before, after)))
                records.append((epoch, steps, "end", _memo_structure(pool), None, None, None))
    finally:
        if fast:
            fastfake.uninstall()
    # nothing of a recorded miss outlives it (errors included): no open frame, no key
    assert _portable._OPEN[0] == 0 and not _portable._KEY_LOG
    return records


def _first_difference(stock: list, fast: list) -> str | None:
    what = ("result / SymNode sharing", "shape env", "stock cache", "counters moved")
    for a, b in zip(stock, fast):
        for i, name in enumerate(what, start=3):
            if a[i] != b[i]:
                out: list[str] = []
                parity._diff(a[i], b[i], name, out)
                return f"epoch {a[0]} step {a[1]} ({a[2]}): {name} differs: " + "; ".join(out[:4] or [f"{a[i]!r} vs {b[i]!r}"])
    if len(stock) != len(fast):
        return f"{len(stock)} vs {len(fast)} steps"
    return None


@pytest.mark.parametrize("seed", range(3))
def test_random_programs_across_shape_envs(seed):
    fastfake.cache_clear()
    stock = _run_world(False, seed, epochs=10, steps=60)
    fastfake.reset_stats()
    fast = _run_world(True, seed, epochs=10, steps=60)
    s = fastfake.stats()
    assert _first_difference(stock, fast) is None, _first_difference(stock, fast)
    assert s["cache.symbolic.portable.served_nested"] >= 5, parity.counters_with_prefix(s, "cache.symbolic.portable")
    assert s["cache.symbolic.portable.declined.shape_env"] >= 1, parity.counters_with_prefix(s, "cache.symbolic.portable")


@pytest.mark.parametrize("side", ["python", "c++"])
def test_a_replay_that_skips_the_nested_calls_is_caught(side):
    """The comparison can fail: served without storing the nested calls' entries
    (and without their counts), stock's cache and counters differ -- whether
    fastfake.cache.portable.commit or the extension's commit (csrc/cache/portable_fast.cpp)
    skips them."""
    real_commit = _portable.commit

    def broken(mode, keys, record, store, count=True):
        key, nested = keys
        return real_commit(mode, (key, None), record, store, count)

    fastfake.cache_clear()
    stock = _run_world(False, 0, epochs=3, steps=40)
    if side == "python":
        fast_on = fastfake._C.set_portable_fast(False)
        fastfake._C.setup_portable(_portable.before, _portable.learn, _portable.admit, broken, _portable.log_hit, _portable.replay)
    else:
        fastfake._C._inject_fault(100000, "portable_commit")
    try:
        fastfake.reset_stats()
        fast = _run_world(True, 0, epochs=3, steps=40)
    finally:
        if side == "python":
            fastfake._C.setup_portable(_portable.before, _portable.learn, _portable.admit, real_commit, _portable.log_hit, _portable.replay)
            fastfake._C.set_portable_fast(fast_on)
        else:
            fastfake._C._inject_fault(0, "portable_commit")
        fastfake.cache_clear()
    s = fastfake.stats()
    assert s["cache.symbolic.portable.learned_nested"] >= 1 and s["cache.symbolic.portable.served"] >= 1
    diff = _first_difference(stock, fast)
    assert diff is not None and ("stock cache" in diff or "counters" in diff), diff


def test_declined_where_a_nested_key_is_already_there():
    """In the new ShapeEnv a nested call of the recorded kernel would hit (an
    earlier call stored its key): stock's miss there stores less, so the call is
    left to stock."""
    real = torch.randn(4, 8, 6)

    def run(prime: bool):
        mode = _mode()
        x = _sym(mode, real)
        # (another tensor with the same sizes: duck-sized to the same symbols, so
        # the same key, without memoising anything on x)
        other = _sym(mode, real.clone())
        with mode:
            if prime:
                torch.erf(other)  # gelu's nested aten.erf, same key
            F.gelu(x)
        return _stock_cache(mode.shape_env)

    fastfake.cache_clear()
    ft.FakeTensorMode.cache_clear()
    want = run(True)
    fastfake.install()
    try:
        ft.FakeTensorMode.cache_clear()
        run(False)  # learns
        fastfake.reset_stats()
        got = run(True)
        s = fastfake.stats()
    finally:
        fastfake.uninstall()
    assert got == want
    declined = parity.counters_with_prefix(s, "cache.symbolic.portable.declined")
    assert sum(declined.values()) >= 1, parity.counters_with_prefix(s, "cache.symbolic.portable")


@pytest.mark.parametrize("shape_of", [lambda x: (-1,), lambda x: (x.shape[0] * x.shape[1], x.shape[2])],
                         ids=["flat", "merge"])
def test_output_holding_the_inputs_memoised_numel_is_not_served(shape_of):
    """``view`` under symbolic sizes returns its input's memoised numel SymNode as
    an output size (stock's decomposition computes ``x.numel()`` first): a first
    call served elsewhere would build a new SymNode there, so the call is not
    recorded, and the sharing is stock's."""
    real = torch.randn(4, 8, 6)

    def run():
        mode = _mode()
        x = _sym(mode, real)
        with mode:
            y = x.view(*shape_of(x))
        n = x.numel().node
        return [isinstance(s, torch.SymInt) and s.node is n for s in (*y.shape, *y.stride())]

    fastfake.cache_clear()
    ft.FakeTensorMode.cache_clear()
    want = [run(), run()]
    fastfake.install()
    try:
        ft.FakeTensorMode.cache_clear()
        fastfake.reset_stats()
        got = [run(), run()]
        s = fastfake.stats()
    finally:
        fastfake.uninstall()
    assert got == want
    if any(want[0]):
        assert s["cache.symbolic.portable.input_memo"] >= 1, parity.counters_with_prefix(s, "cache.symbolic.portable")

