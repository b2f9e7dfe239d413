"""Symbolic calls stock never caches, served from an earlier call's output
(csrc/cache/rerun.cpp, fastfake/cache/rerun.py): ``aten._unsafe_view`` on releases
whose stock refuses to cache it ("unsafe view").

Learned state is the risk here: an entry is learned from one call and serves
later ones, while the ShapeEnv learns guards and the inputs memoise derived
values (``numel``, contiguity) that the kernel reads and writes. So the main test
is long seeded random programs in one process, stock and fastfake side by side
(tests/test_symbolic_views_random.py's driver with repeated calls), every step
compared: outputs, inputs, the values memoised on the call's input and output,
the ShapeEnv state. Stock's cache statistics are compared exactly in a separate
test (the Twin's worlds share the class counters).
"""
from __future__ import annotations

import gc
import random
import weakref

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
import parity
from fastfake import _C
from fastfake.common import compat as _compat
from test_cache_symbolic import _mode, _sym
from test_stateful import Twin
from test_symbolic_views_random import _mm_then_view, view_steps

pytestmark = [
    parity.requires_symbolic_cache,
    pytest.mark.skipif(not _compat.stock_reruns_unsafe_view(),
                       reason="stock caches _unsafe_view on this release"),
]

uv = torch.ops.aten._unsafe_view.default
@pytest.mark.parametrize("seed", range(4))
def test_long_random_rerun_sequences(seed):
    fastfake.cache_clear()
    fastfake.reset_stats()
    twin = Twin(True)
    view_steps(twin, random.Random(177 + seed), 500, repeat=0.3)
    s = fastfake.stats()
    assert s["cache.symbolic.rerun.served"] >= 3, parity.counters_with_prefix(s, "cache.symbolic.rerun")
    assert s["cache.symbolic.rerun.learned"] >= 5, parity.counters_with_prefix(s, "cache.symbolic.rerun")


def test_programs_again_in_new_shape_envs():
    """The same random programs in new ShapeEnvs with every record kept, every
    step compared with stock: ``_unsafe_view`` records stay in their ShapeEnv
    (stock's call there stores its negative entry in the ShapeEnv's cache, which a
    new one may lack)."""
    fastfake.cache_clear()
    fastfake.reset_stats()
    for prog in (0, 0, 1, 0):
        view_steps(Twin(True), random.Random(377 + prog), 250, repeat=0.3)
    s = fastfake.stats()
    assert s["cache.symbolic.rerun.served"] >= 3, parity.counters_with_prefix(s, "cache.symbolic.rerun")
    assert s["cache.symbolic.rerun.served_other_env"] == 0


@pytest.mark.parametrize("seed", range(3))
def test_long_random_rerun_sequences_with_replacements(seed):
    """The same driver with checks that two sizes are equal in between: the
    ShapeEnv replaces symbols, and records involving a replaced symbol (learned
    before or after the replacement) must still give stock's answer."""
    from fastfake.cache import rerun as _rerun

    served_replaced = []

    def admit(mode, record, same_env):
        ok = _rerun.admit(mode, record, same_env)
        (symbols, _), *_ = record
        if ok and any(s in mode.shape_env.replacements for s in symbols):
            served_replaced.append(1)
        return ok

    fastfake.cache_clear()
    fastfake.reset_stats()
    fastfake.install()  # (the hooks are set up once per process, at the first install)
    fastfake.uninstall()
    _C.setup_rerun(_rerun.before, _rerun.learn, admit, tuple(_rerun.OPS), _rerun.SCALAR_OPS, torch.SymFloat)
    try:
        view_steps(Twin(True), random.Random(1177 + seed), 400, repeat=0.3, equate=0.04)
    finally:
        _rerun.setup(_C)
    s = fastfake.stats()
    assert s["cache.symbolic.rerun.served"] >= 3, parity.counters_with_prefix(s, "cache.symbolic.rerun")
    assert served_replaced, "no record with a replaced symbol was served"


def _mm_steps(twin: Twin, n: int) -> None:
    t = twin.new(0, (4, 6, 8), None, torch.float32, "cpu", False)
    w = twin.new(0, (8, 8), None, torch.float32, "cpu", False)
    for _ in range(n):
        twin.step(0, "mm_then_view", _mm_then_view, [t, w])


def test_repeats_on_fresh_inputs_are_served_exactly():
    """Each repeat's input is a new tensor (an mm output), so each served call seeds
    the kernel's memoised numel into it: compared with stock at every step."""
    fastfake.cache_clear()
    fastfake.reset_stats()
    _mm_steps(Twin(True), 8)
    assert fastfake.stats()["cache.symbolic.rerun.served"] >= 3


def test_the_comparison_catches_forgotten_input_memos():
    """The same program with served calls that skip what the kernel memoised on
    their input: the comparison must fail (a test that cannot fail proves nothing)."""
    fastfake.cache_clear()
    fastfake.install()  # the install-time self-test runs first (it would meet the fault)
    fastfake.uninstall()
    twin = Twin(True)
    _C._inject_fault(10_000, "rerun")
    try:
        with pytest.raises(AssertionError, match="fastfake differs from stock"):
            _mm_steps(twin, 8)
    finally:
        _C._inject_fault(0, "rerun")
        fastfake.uninstall()


def _counts(fast: bool, program) -> tuple:
    fastfake.install() if fast else fastfake.uninstall()
    try:
        mode = _mode()
        x = _sym(mode, torch.randn(4, 6, 8))
        w = _sym(mode, torch.randn(8, 8))
        with mode:
            program(x, w)  # first calls and one learning call
            before = FakeTensorMode.cache_info()
            program(x, w)
            after = FakeTensorMode.cache_info()
        keys = set(before.bypasses) | set(after.bypasses)
        return (after.hits - before.hits, after.misses - before.misses,
                {k: after.bypasses.get(k, 0) - before.bypasses.get(k, 0) for k in sorted(keys)},
                after.size - before.size)
    finally:
        fastfake.uninstall()


def _run_program(times: int = 1):
    """``_program`` ``times`` times in a new symbolic mode; returns the mode."""
    mode = _mode()
    x = _sym(mode, torch.randn(4, 6, 8))
    w = _sym(mode, torch.randn(8, 8))
    with mode:
        for _ in range(times):
            _program(x, w)
    return mode


def _program(x, w):
    for _ in range(3):
        h = torch.mm(x.view(-1, 8), w)
        y = uv(h, [x.shape[0], x.shape[1], 8])
        uv(y, [x.shape[0] * x.shape[1], 8])


def test_served_calls_count_as_stock_counts_them():
    """cache_info(): a served repeat counts stock's bypass and the hits of the calls
    its kernel dispatches, as stock's rerun does."""
    fastfake.cache_clear()
    stock = _counts(False, _program)
    fastfake.reset_stats()
    fast = _counts(True, _program)
    assert fastfake.stats()["cache.symbolic.rerun.served"] >= 6
    assert fast == stock, (fast, stock)


def test_under_crosscheck_no_mismatch():
    fastfake.cache_clear()
    fastfake.install(crosscheck=True)
    try:
        fastfake.reset_stats()
        _run_program(times=2)
        s = fastfake.stats()
        assert s["cache.symbolic.rerun.served"] >= 3 and s["crosscheck.mismatch"] == 0, s
    finally:
        fastfake.uninstall()


def test_not_under_proxy_tracing_and_graphs_identical():
    """make_fx: stock's kernel arithmetic is traced there, so nothing is served
    (the graph and guards are identical)."""
    from test_cache_symbolic import _trace_symbolic

    def f(x, w):
        h = torch.mm(x.view(-1, 8), w)
        y = torch.ops.aten._unsafe_view.default(h, [x.shape[0], x.shape[1], 8])
        return y.sum()

    args = (torch.randn(4, 6, 8), torch.randn(8, 8))
    def without_memo(r):
        # (the SymNode memos are warm in the second run; the frame-stack chunks
        # follow the process's stack, the collector's callbacks included, not the
        # program: runs of one trace count them differently)
        stock, fast, stats = r
        return stock, fast, {k: v for k, v in stats.items() if not k.startswith(("symnode.", "frame_stack."))}

    # (a process's first symbolic trace under fastfake makes one fake dispatch more
    # than the next: the two compared must not depend on what the process ran before)
    _trace_symbolic(f, args)
    fastfake.cache_clear()
    stock = without_memo(_trace_symbolic(f, args))
    fastfake.cache_clear()
    fast = without_memo(_trace_symbolic(f, args, crosscheck=False))
    assert fast == stock


def test_entries_keep_nothing_alive_and_go_with_clear_and_switch():
    fastfake.install()
    try:
        mode = _run_program(times=2)
        assert _C.rerun_size() >= 1
        env = weakref.ref(mode.shape_env)
        del mode
        parity.clear_shape_env_lru_caches()  # (torch's own lru caches keep it until evicted)
        gc.collect()
        assert env() is None
        fastfake.cache_clear()
        assert _C.rerun_size() == 0
    finally:
        fastfake.uninstall()
    assert _C.set_rerun(False) is False


def test_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_RERUN", "1")
    fastfake.install()
    try:
        fastfake.reset_stats()
        _run_program(times=2)
        assert fastfake.stats()["cache.symbolic.rerun.served"] == 0
    finally:
        fastfake.uninstall()
