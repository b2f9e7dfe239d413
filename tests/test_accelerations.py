"""The one table of accelerations drives install() and uninstall(): each entry's hook
turns it on and off, FASTFAKE_DISABLE names entries (or their aliases), the old
FASTFAKE_NO_* variables still work for a release, and what an entry needs goes off
with it."""
from __future__ import annotations

import logging

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import fastfake
import parity
from fastfake.core import accelerations as _accelerations
from fastfake.core import install as _install
from fastfake.core import switches as _switches

ACC = _accelerations.ACCELERATIONS


def _expected_all_on() -> dict[str, bool]:
    report = _install._State.selftest
    on = {}
    for a in ACC:
        on[a.name] = (
            (not a.selftest or report.passed.get(a.name, False))
            and all(on[n] for n in a.needs)
            and _install.available(a)
            and _switches.enabled(a)
        )
    return on


def _dependents(name: str) -> set[str]:
    return {a.name for a in ACC if name in _accelerations.closure(a.name)}


def test_every_hook_resolves():
    for a in ACC:
        if a.apply:
            assert callable(_accelerations.resolve(a.apply)), a.name
        if a.available:
            assert isinstance(_accelerations.resolve(a.available)(), bool), a.name
        assert a.rides in _accelerations.RIDES
        for n in a.needs:
            assert ACC.index(_accelerations.BY_NAME[n]) < ACC.index(a), (a.name, n)  # decided first


def test_stats_reads_every_entry_s_counters_from_the_table(installed):
    """Every counter an entry says shows it served is in ``stats()``, read either from
    the extension's main map or from the source the entry's ``counts`` names (and
    ``stats()`` reads no other source than those and the per-overload stock calls);
    each source's counters carry its entry's prefix."""
    from fastfake import _C
    from fastfake.core import counters as _counters

    main = {name for name, _ in _C.counters()}
    stats = fastfake.stats()
    by_counts: dict = {}
    for a in ACC:
        for c in a.served:
            assert c in stats, (a.name, c)
        if a.counts:
            by_counts.setdefault(a.counts, []).append(a)
        else:
            assert any(c in main for c in a.served), (a.name, "not in the extension's map: needs counts")
    assert len(_counters.SOURCES) == len(by_counts) + 1  # + the stock calls per overload
    for source, (counts, entries) in zip(_counters.SOURCES, by_counts.items()):
        names = source.counters()
        assert names, counts
        assert all(any(n.startswith(e.counters) for e in entries) for n in names), (counts, names)
        assert not any(c in main for e in entries for c in e.served), counts
    assert _counters.SOURCES[-1].counters() == {}


def test_install_turns_on_what_the_table_says(installed):
    assert _install.decisions() == _expected_all_on()
    # on 2.13 everything is available and proven
    if torch.__version__.startswith("2.13"):
        assert all(v for k, v in _install.decisions().items() if not _accelerations.BY_NAME[k].opt_in), \
            _install.decisions()


@pytest.mark.parametrize("enable", ["", "store_symbolic"])
def test_an_opt_in_acceleration_is_on_only_where_enabled(monkeypatch, enable):
    opt_in = [a for a in ACC if a.opt_in]
    assert opt_in
    monkeypatch.setenv("FASTFAKE_ENABLE", enable)
    fastfake.install()
    on = _install.decisions()
    assert on == _expected_all_on()
    for a in opt_in:
        assert on[a.name] == (enable == a.name and _install.available(a)), (a.name, _install.explain()[a.name])
        if not on[a.name] and not enable:
            assert "FASTFAKE_ENABLE" in _install.explain()[a.name]


@pytest.mark.parametrize("name", [a.name for a in ACC])
def test_fastfake_disable_turns_one_off_with_what_needs_it(monkeypatch, name):
    monkeypatch.setenv("FASTFAKE_DISABLE", name)
    fastfake.install()
    on = _install.decisions()
    expected = _expected_all_on()
    for n in _dependents(name):
        expected[n] = False
    for a in ACC:
        if a.rides == "cache" and not expected["cache"]:
            expected[a.name] = False
    if not (expected["elementwise"] or expected["cache"]):
        for a in ACC:
            if a.rides in ("either", "plain"):
                expected[a.name] = False
    assert on == expected
    fastfake.uninstall()
    assert _install.decisions() is None


def test_hooks_patch_and_restore(monkeypatch):
    from torch.fx.experimental import proxy_tensor
    from torch.fx.experimental.sym_node import SymNode

    from fastfake.symbolic import symnode_expr as _symnode_expr

    stock_detach = proxy_tensor.fast_detach
    stock_expr = SymNode.__dict__["expr"]
    fastfake.install()
    assert proxy_tensor.fast_detach is not stock_detach
    # (not offered on every release: then stock's property stays)
    assert (SymNode.__dict__["expr"] is not stock_expr) == _symnode_expr.available()
    fastfake.uninstall()
    assert proxy_tensor.fast_detach is stock_detach
    assert SymNode.__dict__["expr"] is stock_expr
    # switched off by name: stock's object stays in place
    monkeypatch.setenv("FASTFAKE_DISABLE", "detach,symnode_expr")
    fastfake.install()
    assert proxy_tensor.fast_detach is stock_detach
    assert SymNode.__dict__["expr"] is stock_expr


def test_an_alias_and_a_legacy_variable_switch_off(monkeypatch, caplog):
    monkeypatch.setenv("FASTFAKE_DISABLE", "portable, rerun")
    fastfake.install()
    on = _install.decisions()
    assert not on["cache_portable"] and not on["cache_rerun"]
    assert on["cache_symbolic"] == _expected_all_on()["cache_symbolic"]
    fastfake.uninstall()
    monkeypatch.delenv("FASTFAKE_DISABLE")
    monkeypatch.setenv("FASTFAKE_NO_ITEM_MEMO", "1")
    _switches._reported.discard("FASTFAKE_NO_ITEM_MEMO")
    with caplog.at_level(logging.WARNING, logger="fastfake"):
        fastfake.install()
    assert not _install.decisions()["cache_item_memo"]
    assert any("FASTFAKE_NO_ITEM_MEMO is deprecated" in r.getMessage() and "FASTFAKE_DISABLE=cache_item_memo"
               in r.getMessage() for r in caplog.records)


def test_an_unknown_name_is_reported_with_the_names(monkeypatch, caplog):
    monkeypatch.setenv("FASTFAKE_DISABLE", "portabel")
    _switches._reported.discard("portabel")
    with caplog.at_level(logging.WARNING, logger="fastfake"):
        fastfake.install()
    assert fastfake.is_installed() and all(_install.decisions()[a.name] == v for a, v in
                                           zip(ACC, _expected_all_on().values()))
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "'portabel'" in msg and "cache_portable" in msg and "portable" in msg


def test_values_that_switch_nothing_off(monkeypatch):
    for v in ("0", "false", "off", ""):
        monkeypatch.setenv("FASTFAKE_DISABLE", v)
        assert not _switches.disabled_all() and not _switches.names()
    for v in ("1", "ALL", "yes"):
        monkeypatch.setenv("FASTFAKE_DISABLE", v)
        assert _switches.disabled_all()


@parity.requires_symbolic_cache
def test_a_switched_off_acceleration_serves_nothing(monkeypatch):
    """The decision is what runs: with the portable records off, a first call in a
    second ShapeEnv is not served from a record (the counter that shows it stays 0)."""

    def run():
        for _ in range(3):
            mode = FakeTensorMode(shape_env=ShapeEnv())
            ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.DYNAMIC])
            t = mode.from_tensor(torch.randn(6, 4), symbolic_context=ctx)
            with mode:
                t.transpose(0, 1).mul(2).softmax(-1)

    fastfake.install()
    run()
    served = fastfake.stats()["cache.symbolic.portable.served"]
    fastfake.uninstall()
    fastfake.reset_stats()
    monkeypatch.setenv("FASTFAKE_DISABLE", "portable")
    fastfake.install()
    run()
    assert fastfake.stats()["cache.symbolic.portable.served"] == 0
    assert served > 0
