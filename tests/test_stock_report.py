"""fastfake.stock_report(): the calls handed to stock, per overload, outermost and
nested (csrc/stock/calls.cpp)."""
from __future__ import annotations

import json

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
import parity
from fastfake import _C
from faults import in_subprocess


def _total(report) -> int:
    return sum(r["outermost"] + r["nested"] for r in report.values())


def test_counts_each_stock_call_once_and_sums_to_dispatch_stock():
    fastfake.install()
    FakeTensorMode.cache_clear()
    fastfake.cache_clear()
    fastfake.reset_stats()
    assert fastfake.stock_report() == {}
    with FakeTensorMode() as m:
        a = m.from_tensor(torch.empty(4, 6))
        b = m.from_tensor(torch.empty(6, 3))
        torch.mm(a, b)  # a first call: stock
        after_first = fastfake.stock_report()
        torch.mm(a, b)  # served from fastfake's cache
        assert fastfake.stock_report() == after_first
    assert after_first["aten.mm.default"] == {"outermost": 1, "nested": 0}
    assert _total(fastfake.stock_report()) == fastfake.stats()["dispatch.stock"]
    fastfake.reset_stats()
    assert fastfake.stock_report() == {}


def test_nested_calls_of_a_stock_kernel_are_told_apart():
    fastfake.install()
    FakeTensorMode.cache_clear()
    fastfake.cache_clear()
    fastfake.reset_stats()
    mode = FakeTensorMode(shape_env=torch.fx.experimental.symbolic_shapes.ShapeEnv())
    with mode:
        x = parity.symbolic_fake(mode, 4, 6)
        x.view(2, 2, 6)  # a symbolic view: stock's reference kernel dispatches prims
    report = fastfake.stock_report()
    assert report["aten.view.default"]["outermost"] == 1
    nested = {k: v["nested"] for k, v in report.items() if v["nested"]}
    assert nested, report
    assert all(v["outermost"] == 0 for k, v in report.items() if k.startswith("prims."))
    assert _total(report) == fastfake.stats()["dispatch.stock"]
    # most outermost calls first
    outer = [v["outermost"] for v in report.values()]
    assert outer == sorted(outer, reverse=True)


def test_the_bound_on_names():
    fastfake.install()
    FakeTensorMode.cache_clear()
    fastfake.cache_clear()
    fastfake.reset_stats()
    old = _C._set_stock_calls_max(1)
    try:
        with FakeTensorMode() as m:
            a = m.from_tensor(torch.empty(4, 6))
            torch.mm(a, a.t())
            a.sum(0)
            a.mean(0)
        report = fastfake.stock_report()
        assert len(report) <= 2 and "other" in report, report
        assert _total(report) == fastfake.stats()["dispatch.stock"]
    finally:
        _C._set_stock_calls_max(old)
        fastfake.reset_stats()


def test_install_leaves_the_report_empty():
    """The self-test's programs hand calls to stock; their counts are put back."""
    code = (
        "import json, fastfake\n"
        "fastfake.install()\n"
        "print(json.dumps([fastfake.stock_report(), fastfake.selftest_report()['source']]))\n"
    )
    r = in_subprocess(code, FASTFAKE_NO_SELFTEST_CACHE="1")
    assert r.returncode == 0, r.stderr[-2000:]
    report, source = json.loads(r.stdout.strip().splitlines()[-1])
    assert source == "run" and report == {}
