"""`.item()` repeats answered from the tensor's item memo (csrc/cache/item_memo.cpp,
fastfake/cache/item_memo.py): the same values, the same SymNode objects, the same
unbacked symbols and stock's cache counters as stock, over long random sequences
in one process (memos made stale by in-place updates and new epochs, views,
constants, modes without a ShapeEnv, cache clears), and the comparisons shown able
to fail."""
from __future__ import annotations

import os
import random

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
import parity
from faults import fault_turns_off_only
from fastfake import _C
from fastfake.cache import item_memo as _item_memo

pytestmark = pytest.mark.skipif(not _item_memo.available(), reason="stock's item memo differs here")

REASON = _item_memo.REASON
DTYPES = [torch.float64, torch.float32, torch.int64, torch.int32, torch.bool]


def _counts() -> tuple:
    info = FakeTensorMode.cache_info()
    return info.hits, info.misses, info.bypasses.get(REASON, 0), sum(info.bypasses.values())


class _Values:
    """Every value returned so far, so that identity is compared, not only equality."""

    def __init__(self) -> None:
        self.seen: list = []

    def describe(self, v) -> tuple:
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            # the same SymNode (the Python SymInt / SymFloat around it is new each time)
            idx = next((i for i, s in enumerate(self.seen) if s.node is v.node), None)
            if idx is None:
                idx = len(self.seen)
                self.seen.append(v)
            return ("sym", type(v).__name__, str(v.node.expr), idx)
        return ("value", type(v).__name__, repr(v))


def _program(seed: int, steps: int) -> list:
    """A random history of `.item()` calls and what makes their memos stale; one
    comparable record per step (its outcome and how stock's counters moved), then
    every ShapeEnv's unbacked symbols."""
    rng = random.Random(seed)
    modes = [FakeTensorMode(shape_env=ShapeEnv()), FakeTensorMode(shape_env=ShapeEnv()), FakeTensorMode()]
    pool: list[tuple[int, torch.Tensor]] = []
    values = _Values()
    out = []

    def new(m: int) -> torch.Tensor:
        with modes[m]:
            kind = rng.random()
            if kind < 0.15:
                return torch.tensor(rng.choice([2.5, 3, True]))  # a constant
            return torch.empty(rng.choice([(), (1,), (1, 1)]), dtype=rng.choice(DTYPES))

    for m in range(len(modes)):
        pool.append((m, new(m)))
    for step in range(steps):
        before = _counts()
        op = rng.choices(
            ["item", "new", "inplace", "epoch", "view", "derived", "clear", "fastfake_clear"],
            [10, 2, 2, 1, 1, 1, 0.3, 0.3],
        )[0]
        m, t = rng.choice(pool)
        try:
            with modes[m]:
                if op == "item":
                    r = values.describe(t.item())
                elif op == "new":
                    m = rng.randrange(len(modes))
                    pool.append((m, new(m)))
                    r = ("new", m)
                elif op == "inplace":
                    r = ("inplace", t.fill_(1)._version)
                elif op == "epoch":
                    modes[m].epoch += 1
                    r = ("epoch", modes[m].epoch)
                elif op == "view":
                    v = t.view(t.shape)
                    pool.append((m, v))
                    r = ("view", v._version)
                elif op == "derived":
                    d = t * 2 if t.dtype is not torch.bool else ~t
                    pool.append((m, d))
                    r = ("derived", str(d.dtype))
                elif op == "clear":
                    FakeTensorMode.cache_clear()
                    r = ("clear",)
                else:
                    if fastfake.is_installed():
                        fastfake.cache_clear()
                    r = ("fastfake_clear",)
        except Exception as e:  # noqa: BLE001 - compared with the other world
            r = parity.error_outcome(e)
        after = _counts()
        out.append((step, op, r, tuple(a - b for a, b in zip(after, before))))
    for i, mode in enumerate(modes):
        env = mode.shape_env
        out.append(("env", i, None if env is None else sorted(map(str, env.var_to_range))))
    return out


def _clear_both() -> None:
    """Stock's cache and fastfake's result cache emptied (FakeTensorMode.cache_clear()
    while fastfake is uninstalled leaves fastfake's entries, whose hits would count
    as stock's hits after the next install(): README, Limits)."""
    FakeTensorMode.cache_clear()
    _C.cache_clear()


def _diff(stock: list, fast: list) -> list:
    return [(s, f) for s, f in zip(stock, fast) if s != f]


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_match_stock(seed):
    _clear_both()
    stock = _program(seed, 600)
    _clear_both()
    fastfake.install()
    fast = _program(seed, 600)
    stats = fastfake.stats()
    fastfake.uninstall()
    assert len(stock) == len(fast)
    assert not _diff(stock, fast), _diff(stock, fast)[:5]
    assert stats["cache.item_memo.served"] > 10, stats
    assert stats["cache.item_memo.learned"] >= 1, stats
    # stale memos, constants and the mode without a ShapeEnv all reached stock
    assert stats["cache.item_memo.declined.no_memo"] > 0, stats


def test_random_comparison_sees_a_wrong_answer():
    """The comparison above can fail: a served memo kept across an in-place update
    or a new epoch (stock's staleness check skipped) differs from stock."""
    _clear_both()
    stock = _program(0, 600)
    _clear_both()
    fastfake.install()
    _C._inject_fault(100000, "item_memo")
    fast = _program(0, 600)
    _C._inject_fault(0, "item_memo")
    fastfake.uninstall()
    assert len(_diff(stock, fast)) > 10


def test_counted_as_stock_counts_without_the_extension():
    """Miss, proof, then served repeats: the values are the first call's SymNode
    objects and stock's cache counters move exactly as stock's own calls move them."""

    def run():
        _clear_both()
        mode = FakeTensorMode(shape_env=ShapeEnv())
        with mode:
            x = torch.empty((), dtype=torch.float64)
            before = _counts()
            vals = [x.item() for _ in range(6)]
        return [v.node is vals[0].node for v in vals], str(vals[0]), tuple(a - b for a, b in zip(_counts(), before))

    stock = run()
    fastfake.install()
    fastfake.reset_stats()
    fast = run()
    stats = fastfake.stats()
    assert fast == stock
    assert stock[0] == [True] * 6 and stock[2][2] == 6
    # the first call creates the symbol (stock's miss, a negative entry learned), the
    # second is stock's answer from the memo (the entry proven), four served
    assert stats["cache.item_memo.declined.no_memo"] == 0
    assert stats["cache.item_memo.learned"] == 1
    assert stats["cache.item_memo.served"] == 4
    assert fastfake.stock_report()[str(_item_memo.OP)]["outermost"] == 2


def test_crosscheck_verifies_served_repeats():
    def run():
        _clear_both()
        with FakeTensorMode(shape_env=ShapeEnv()):
            x = torch.empty((), dtype=torch.int64)
            before = _counts()
            vals = [x.item() for _ in range(5)]
        return [v.node is vals[0].node for v in vals], tuple(a - b for a, b in zip(_counts(), before))

    stock = run()
    fastfake.install(crosscheck=True)
    fast = run()
    stats = fastfake.stats()
    assert fast == stock
    assert stats["cache.item_memo.served"] == 3
    assert stats["crosscheck.checked"] >= 3 and stats["crosscheck.mismatch"] == 0


def _repeats(mode_kwargs: dict) -> tuple:
    _clear_both()
    with FakeTensorMode(shape_env=ShapeEnv(), **mode_kwargs):
        x = torch.empty((), dtype=torch.float64)
        vals = [x.item() for _ in range(4)]
    return [v.node is vals[0].node for v in vals], str(vals[0])


def test_not_served_under_what_stock_consults_first(monkeypatch):
    """A Python decomposition of the op (stock's dispatch would consult it before the
    op's fake implementation), or real-tensor propagation: the repeats go to stock
    (declined, counted) and the answers are stock's."""
    fastfake.install()
    _repeats({})  # learned and proven
    for label, patch in (
        ("decomposition", lambda: monkeypatch.setitem(torch._decomp.decomposition_table, _item_memo.OP, lambda x: 7)),
    ):
        fastfake.uninstall()
        patch()
        stock = parity.outcome(lambda: _repeats({}))
        fastfake.install()
        fastfake.reset_stats()
        fast = parity.outcome(lambda: _repeats({}))
        stats = fastfake.stats()
        assert fast == stock, label
        assert stats["cache.item_memo.served"] == 0, label
        assert stats["cache.item_memo.declined.mode_state"] >= 2, label
        monkeypatch.undo()
    mode = FakeTensorMode()
    assert _item_memo.eligible(mode)
    mode.propagate_real_tensors = True
    assert not _item_memo.eligible(mode)


def test_environment_switch_leaves_item_to_stock(monkeypatch):
    monkeypatch.setenv("FASTFAKE_NO_ITEM_MEMO", "1")
    fastfake.install()
    assert fastfake.selftest_report()["passed"].get("cache_item_memo") is True
    _repeats({})
    assert fastfake.stats()["cache.item_memo.served"] == 0
    assert _C.set_item_memo(False) is False
    fastfake.uninstall()
    monkeypatch.delenv("FASTFAKE_NO_ITEM_MEMO")
    fastfake.install()
    _repeats({})
    assert fastfake.stats()["cache.item_memo.served"] == 2
    fastfake.uninstall()
    assert _C.set_item_memo(False) is False  # uninstall() turned it off


def test_selftest_catches_a_wrong_answer():
    fault_turns_off_only(
        'fastfake._C._inject_fault(100, "item_memo")', "cache_item_memo", keep="cache",
        still_on="fastfake._C.set_item_memo(False)",
    )


def test_stock_source_recognised_here():
    """On the releases fastfake supports, stock's fake `_local_scalar_dense` answers
    from the memo first and its cache refuses the op with the reason served here."""
    assert _item_memo.available()
    assert os.environ.get("FASTFAKE_NO_ITEM_MEMO") is None
