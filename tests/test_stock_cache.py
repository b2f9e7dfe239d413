"""Stock's dispatch-cache statistics and clearing with fastfake installed.

FakeTensorMode.cache_info() must report what stock alone would report (a call
fastfake serves counts as the hit or miss stock's cache would have had, bypasses
are stock's own), FakeTensorMode.cache_clear() clears fastfake's cache too, and
stock's own crosscheck setting makes every fast path verify its results.
"""
from __future__ import annotations

import contextlib
import random

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake

FEATURES = {
    "all": {},
    "elementwise_only": {"cache": False},
    "cache_only": {"elementwise": False},
}


def _info() -> tuple:
    i = FakeTensorMode.cache_info()
    return (i.hits, i.misses, i.size, dict(i.bypasses))


def _stock_then_fast(program, features: dict, fast_runs: int = 2) -> tuple[list, list[list]]:
    """The sequence of cache_info() readings of ``program`` under stock, then
    ``fast_runs`` times with fastfake installed (learned state carried over)."""
    fastfake.uninstall()
    FakeTensorMode.cache_clear()
    stock = program()
    fast = []
    fastfake.install(**features)
    try:
        for _ in range(fast_runs):
            FakeTensorMode.cache_clear()
            fast.append(program())
    finally:
        fastfake.uninstall()
        FakeTensorMode.cache_clear()
    return stock, fast


def _basic_program() -> list:
    out = []
    with FakeTensorMode():
        x, y, z = torch.randn(4, 3), torch.randn(4, 3), torch.randn(2, 3)
        FakeTensorMode.cache_clear()
        out.append(_info())
        for step in (
            lambda: x + y,
            lambda: x + y,
            lambda: z * z,
            lambda: z * z,
            lambda: torch.mm(x, y.t()),
            lambda: torch.mm(x, y.t()),
            lambda: x.sum(1),
            lambda: x.sum(1),
            lambda: x.add_(1),
            lambda: x.add_(1),
            lambda: torch.relu(z),
        ):
            step()
            out.append(_info())
        with torch.inference_mode():
            x + y
            out.append(_info())
            x + y
            out.append(_info())
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            x + 1.5
            out.append(_info())
        finally:
            torch.set_default_dtype(prev)
        x + 1.5
        out.append(_info())
        FakeTensorMode.cache_clear()
        x + x
        x + x
        out.append(_info())
    return out


@pytest.mark.parametrize("features", list(FEATURES), ids=list(FEATURES))
def test_cache_info_counts_as_stock(features):
    stock, fast = _stock_then_fast(_basic_program, FEATURES[features])
    assert fast[0] == stock
    assert fast[1] == stock
    s = fastfake.stats()
    assert s["elementwise.hit"] + s["cache.hit"] > 0, "nothing was served: the test proves nothing"


def _random_program(seed: int, steps: int):
    def program() -> list:
        rng = random.Random(seed)
        out = []
        with FakeTensorMode():
            pool = [
                torch.randn(4, 3),
                torch.randn(4, 3, dtype=torch.float64),
                torch.randn(1, 3),
                torch.randn(3, 4).t(),
                torch.randn(4, 1),
                torch.randint(0, 5, (4, 3)),
                torch.randn(0, 3),
            ]
            FakeTensorMode.cache_clear()
            for _ in range(steps):
                a, b = rng.choice(pool), rng.choice(pool)
                kind = rng.randrange(10)
                with contextlib.suppress(RuntimeError, ValueError):
                    if kind == 0:
                        torch.add(a, b, alpha=2)
                    elif kind == 1:
                        a * 0.5
                    elif kind == 2:
                        torch.where(a > 0, a, b)
                    elif kind == 3:
                        a.sum(-1)
                    elif kind == 4:
                        a.t().contiguous()
                    elif kind == 5:
                        torch.mm(a, b.t())
                    elif kind == 6:
                        a.clone().mul_(b)
                    elif kind == 7:
                        torch.cat([a, b])
                    elif kind == 8:
                        a.view(-1)
                    elif rng.random() < 0.3:
                        FakeTensorMode.cache_clear()
                    else:
                        torch.sigmoid(a)
                out.append(_info())
        return out

    return program


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_count_as_stock(seed):
    """Long random sequences with cache_clear() in the middle: every reading of
    cache_info() after every call is stock's."""
    stock, fast = _stock_then_fast(_random_program(seed, 300), {})
    for run, readings in enumerate(fast):
        for step, (s, f) in enumerate(zip(stock, readings)):
            assert f == s, f"run {run}, step {step}: fastfake {f} vs stock {s}"
    assert fastfake.stats()["elementwise.hit"] > 0


def test_cache_clear_clears_fastfake():
    fastfake.install()
    with FakeTensorMode():
        x = torch.randn(4, 3)
        for _ in range(2):
            torch.mm(x, x.t())
            x + x
        assert fastfake._C.cache_size() > 0
        FakeTensorMode.cache_clear()
        assert fastfake._C.cache_size() == 0
        assert _info()[:3] == (0, 0, 0)
        x + x
        x + x
        assert _info()[:3] == (1, 1, 1)


def test_counts_land_in_stock_attributes():
    """cache_info() and uninstall() move the served calls' counts into stock's own
    class attributes, which some code reads directly."""

    def program(fast: bool) -> tuple:
        FakeTensorMode.cache_clear()
        if fast:
            fastfake.install()
        with FakeTensorMode():
            x = torch.randn(4, 3)
            for _ in range(3):
                x + x
        fastfake.uninstall()
        return (FakeTensorMode.cache_hits, FakeTensorMode.cache_misses)

    stock = program(False)
    assert stock[0] == 2
    fastfake.reset_stats()
    assert program(True) == stock
    assert fastfake.stats()["elementwise.hit"] >= 2
    assert _info()[:2] == stock
    FakeTensorMode.cache_clear()


@pytest.mark.parametrize("flag", [True, False])
def test_stock_crosscheck_setting_is_honoured(flag):
    """torch._dynamo.config.fake_tensor_cache_crosscheck_enabled: stock recomputes
    its cache hits; fastfake verifies the results it builds (a wrong one raises)."""
    fastfake.install()
    with torch._dynamo.config.patch(fake_tensor_cache_crosscheck_enabled=flag):
        mode = FakeTensorMode()
    with mode:
        x = torch.randn(4, 3)
        x + x  # admitted
        fastfake.reset_stats()
        fastfake._C._inject_fault(1)  # the next served result gets a wrong dtype
        ctx = pytest.raises(fastfake.CrosscheckError, match="dtype") if flag else contextlib.nullcontext()
        with ctx:
            r = x + x
    fastfake._C._inject_fault(0)
    s = fastfake.stats()
    assert s["elementwise.hit"] == 1
    if not flag:
        assert r.dtype != torch.float32  # the fault went through: the check above can fail
        assert s["crosscheck.checked"] == 0
    else:
        assert s["crosscheck.checked"] == 1 and s["crosscheck.mismatch"] == 1


@pytest.mark.parametrize("crosscheck", ["stock", "fastfake"])
def test_crosschecked_calls_are_counted_once(crosscheck):
    """With crosscheck on (stock's flag, as PyTorch's own test suite sets it, or
    fastfake's), stock's verifying call counts the served call in stock's
    statistics; fastfake does not count it again (found by running PyTorch's
    test_fake_tensor.py FakeTensorDispatchCache tests under the plugin)."""

    def program():
        with torch._dynamo.config.patch(fake_tensor_cache_crosscheck_enabled=crosscheck == "stock"):
            mode = FakeTensorMode()
        seen = []
        with mode:
            x = torch.randn(4, 3)
            y = torch.randn(4, 3)
            x + y  # the signature is learned before the counted part
            FakeTensorMode.cache_clear()
            for _ in range(3):
                x + y
                seen.append(_info())
            x.add_(y)
            seen.append(_info())
            x.add_(y)
            seen.append(_info())
        FakeTensorMode.cache_clear()
        return seen

    fastfake.uninstall()
    stock = program()
    fastfake.install(crosscheck=crosscheck == "fastfake")
    fastfake.reset_stats()
    try:
        fast = program()
        s = fastfake.stats()
    finally:
        fastfake.uninstall()
    assert fast == stock
    assert s["elementwise.hit"] >= 3 and s["crosscheck.checked"] >= 3, s
