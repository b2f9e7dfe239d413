"""The install-time self-test (fastfake/core/selftest.py): it passes and proves each
feature ran on this release, leaves no state behind, and catches the faults a
wrong internal on another release causes -- a wrong device attribute (what a hand
port to torch 2.9 gave: silently wrong devices), a corrupted result, a fast path
that raises -- by turning the feature off or refusing to install."""
from __future__ import annotations

import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fastfake
from fastfake.common import compat as _compat
from fastfake.tracing import fake_prop as _fake_prop
from fastfake.tracing import pytree as _pytree
from fastfake.tracing import functional_dispatch as _functional_dispatch
from fastfake.tracing import proxy_dispatch as _proxy_dispatch
from fastfake.tracing import sym_register as _sym_register
from fastfake.store import records as _store
from fastfake.cache import item_memo as _item_memo
from fastfake.cache import rerun as _rerun
from fastfake.symbolic import symnode_memo as _symnode
from fastfake.symbolic import symnode_expr as _symnode_expr
from fastfake.symbolic import symnode_int as _symnode_int
from fastfake.runtime import frame_stack as _frame_stack
from fastfake.store import funcnames as _funcnames
from fastfake.tracing import config_attr as _config_attr
from faults import fault_turns_off_only, in_subprocess


_in_subprocess = in_subprocess  # (the self-test runs once per process)


def test_passes_here_and_every_feature_served():
    fastfake.install()
    report = fastfake.selftest_report()
    assert report is not None
    assert report["failures"] == {}
    expected = {"elementwise", "cache", "device", "detach"}
    if _compat.converter_layout_known():
        expected.add("convert")
    if _compat.functional_tensor_recomputes_storage():
        expected.add("functional_storage")
    if _compat.shape_env_counts_replacements():
        expected.add("cache_symbolic")
        if _compat.portable_entries_known():
            expected.add("cache_portable")
            expected.add("untrack")  # (proven on what the portable records store)
        if _compat.stock_reruns_unsafe_view():
            expected.add("cache_rerun")
        if _rerun.scalar_available():
            expected.add("cache_rerun_scalar")
    if _symnode.available():
        expected.add("symnode_memo")
    if _fake_prop.available():
        expected.add("fake_prop")
    if _symnode_expr.available():
        expected.add("symnode_expr")
    if _symnode_int.available():
        expected.add("symnode_int")
    if _item_memo.available():
        expected.add("cache_item_memo")
    if _pytree.available():
        expected.add("pytree")
    if _functional_dispatch.available():
        expected.add("functional_dispatch")
    if _proxy_dispatch.available():
        expected.add("proxy_dispatch")
    if _sym_register.available():
        expected.add("sym_register")
    from fastfake.tracing import sym_dispatch as _sym_dispatch

    if _sym_dispatch.available():
        expected.add("sym_dispatch")
    from fastfake.tracing import dce_pred as _dce_pred

    if _dce_pred.available():
        expected.add("dce_pred")
    from fastfake.tracing import fx_node as _fx_node

    if _fx_node.available():
        expected.add("fx_node")
    if _store.available():
        expected.add("store")
    from fastfake.store import symbolic as _store_symbolic

    if _store_symbolic.available():
        expected.add("store_symbolic")
    if _frame_stack.available():
        expected.add("frame_stack")
    if _funcnames.available():
        expected.add("funcnames")
    if _config_attr.available():
        expected.add("config_attr")
    assert set(report["passed"]) == expected
    assert all(report["passed"].values())
    # Each feature served results itself, so the comparison proved something.
    assert all(report["served"][f] > 0 for f in expected), report["served"]
    assert report["built_for"].split(".")[:2] == torch.__version__.split("+")[0].split(".")[:2]
    assert 0 < report["seconds"] < 30
    stats = fastfake.stats()
    assert not any(v for k, v in stats.items() if k.startswith("selftest.")), stats


def test_leaves_no_state_behind():
    """The self-test's programs leave neither fastfake's nor stock's caches or
    counters changed (checked in a fresh process, where it runs: the result kept
    on disk is not used)."""
    r = _in_subprocess(
        """
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode as M
        import fastfake
        with M():
            x = torch.empty(3, 4)
            torch.mm(x, x.t())
        before = (dict(M.cache), M.cache_hits, M.cache_misses, dict(M.cache_bypasses))
        fastfake.install()
        after = (dict(M.cache), M.cache_hits, M.cache_misses, dict(M.cache_bypasses))
        assert fastfake.selftest_report()["failures"] == {}
        assert before == after, (len(before[0]), len(after[0]), before[1:], after[1:])
        assert fastfake._C.cache_size() == 0
        assert fastfake._C.symnode_memo_size() == 0
        assert not any(v for v in fastfake.stats().values()), fastfake.stats()
        report = fastfake.elementwise_report()
        assert not any(r["admitted"] or r["rejected"] for r in report.values())
        assert fastfake.selftest_report()["source"] == "run"
        print("ok")
        """,
        FASTFAKE_NO_SELFTEST_CACHE="1",
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_wrong_device_is_caught():
    """The fault a wrong internal gives on another release (a hand port to 2.9 built
    outputs whose device attribute held the wrong device): FakeTensors stored with
    a wrong device. The feature that built them is turned off, naming the field."""
    r = _in_subprocess(
        """
        import warnings
        import fastfake
        fastfake._C._inject_fault(1, "device")  # the first FakeTensor fastfake serves
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        r = fastfake.selftest_report()
        print("passed:", r["passed"])
        print("warned:", [str(x.message) for x in w])
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "'elementwise': False" in out and "'cache': True" in out, out
    assert "device (stock property): stock device(type='cpu'), fastfake device(type='meta')" in out, out


def test_unreadable_device_attribute_serves_nothing():
    """If the extension is told a device attribute stock's FakeTensors do not
    have, it finds no device on any input and serves nothing (every call goes to
    stock); the self-test reports each feature idle instead of passing it silently."""
    r = _in_subprocess(
        """
        import fastfake
        from fastfake.common import compat as _compat
        _compat.fake_device_attr = lambda: "_fake_device_of_another_release"
        fastfake.install()
        r = fastfake.selftest_report()
        s = fastfake.stats()
        print("served:", r["served"])
        print("idle:", sorted(k for k, v in s.items() if k.startswith("selftest.idle.") and v))
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "'elementwise': 0" in out and "'cache': 0" in out, out
    assert "selftest.idle.cache" in out and "selftest.idle.elementwise" in out, out


def test_corrupted_result_turns_the_feature_off():
    """A fast result with a wrong dtype (fault injection in C++): the feature that
    produced it is turned off with the field named; the others stay on."""
    r = _in_subprocess(
        """
        import warnings
        import fastfake
        fastfake._C._inject_fault(1)  # corrupt the dtype of the next fast result
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        r = fastfake.selftest_report()
        print("passed:", r["passed"])
        print("warned:", [str(x.message) for x in w])
        s = fastfake.stats()
        print("counted:", s["selftest.failed.elementwise"], s["selftest.failed.cache"])
        from fastfake.core.install import current_options
        print("options:", current_options())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "'elementwise': False" in out and "'cache': True" in out, out
    assert "stays off" in out and "nbytes" in out, out  # a float64 result: 8-byte elements
    assert "counted: 1 0" in out, out
    assert "elementwise=False, cache=True, device=True" in out, out


def test_raising_fast_path_refuses_install():
    """If every feature asked for differs from stock, install() refuses with a
    clear error naming what differed."""
    r = _in_subprocess(
        """
        import fastfake
        from fastfake.core import selftest as _selftest
        real = _selftest._first_difference
        _selftest._first_difference = lambda s, f: ("dtype", "forced difference")
        try:
            fastfake.install(device=False)
        except RuntimeError as e:
            print("refused:", e)
        print("installed:", fastfake.is_installed())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused: fastfake refuses to install on torch" in r.stdout, r.stdout
    assert "forced difference" in r.stdout
    assert "installed: False" in r.stdout


def test_unknown_release_is_self_tested_not_trusted():
    """A release not in SUPPORTED_TORCH_VERSIONS: a log line says the self-test
    decides, and what it proved runs."""
    r = _in_subprocess(
        """
        import logging
        import fastfake
        from fastfake.common import compat as _compat
        from fastfake.core import install as _install
        logging.basicConfig(level=logging.WARNING)
        _install.SUPPORTED_TORCH_VERSIONS = ("0.0.0",)
        fastfake.install()
        print("passed:", fastfake.selftest_report()["passed"])
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "the install-time self-test decides" in r.stderr, r.stderr[-2000:]
    assert "'cache': True" in r.stdout


def test_stock_counters_unchanged_in_process():
    """In this process too: stock's cache statistics are what they were."""
    fastfake.install()  # the self-test may already have run in this process
    fastfake.uninstall()
    before = (FakeTensorMode.cache_hits, FakeTensorMode.cache_misses)
    fastfake.install()
    assert (FakeTensorMode.cache_hits, FakeTensorMode.cache_misses) == before


def test_build_mismatch_is_refused_clearly():
    r = _in_subprocess(
        """
        import torch
        torch.__version__ = "2.99.0"
        try:
            import fastfake
        except ImportError as e:
            print("refused:", e)
        """
    )
    assert "refused: fastfake's C++ extension was built against torch" in r.stdout, (
        r.stdout + r.stderr[-2000:]
    )


@pytest.mark.skipif("torch_xla" not in sys.modules and not _compat.torch_release().startswith("2.9"),
                    reason="torch_xla is installed only beside torch 2.9")
def test_xla_device_in_selftest():
    r = _in_subprocess(
        """
        import os
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        import torch_xla  # noqa: F401
        import fastfake
        fastfake.install()
        r = fastfake.selftest_report()
        print("passed:", r["passed"], "skipped:", r["skipped"])
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "xla" not in r.stdout.split("skipped:")[1], r.stdout
    assert "False" not in r.stdout, r.stdout


@pytest.mark.skipif(
    not _compat.functional_tensor_recomputes_storage(),
    reason="no FunctionalTensor storage-size memo on this torch (2.15 passes the size itself)",
)
def test_wrong_functional_storage_size_is_caught():
    """A memoised FunctionalTensor storage size that differs from what stock
    computes (fault injection: one byte more) turns that feature off, naming the
    field; the rest stays on."""
    r = _in_subprocess(
        """
        import warnings
        import fastfake
        from fastfake.tracing import functional as _functional
        _functional._setup()
        real = _functional._State.sym_node
        _functional._State.sym_node = lambda e, env, t, h, **kw: (
            real(e + 1, env, t, h + 1, **kw) if t is int else real(e, env, t, h, **kw))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        print("passed:", fastfake.selftest_report()["passed"])
        print("warned:", [str(x.message) for x in w])
        print("memo installed:", _functional.is_installed())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "'functional_storage': False" in out and "'cache': True" in out, out
    assert "nbytes" in out, out
    assert "memo installed: False" in out, out


@pytest.mark.skipif(
    _compat.proxy_sym_register() is None or not _compat.functional_tensor_recomputes_storage(),
    reason="no proxy-tracing replay of FunctionalTensor storage sizes on this torch",
)
def test_broken_proxy_replay_is_caught():
    """A replay that does not register its SymNode operations with the tracer
    (what a changed _sym_register on another release could do) makes the self-test's
    make_fx program differ from stock's: the feature stays off."""
    r = _in_subprocess(
        """
        import warnings
        import fastfake
        from fastfake.tracing import functional as _functional
        _functional._setup()
        _functional._State.proxy_tensor_dict = {"_sym_register": lambda *a: None}
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        print("passed:", fastfake.selftest_report()["passed"])
        print("memo installed:", _functional.is_installed())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "'functional_storage': False" in r.stdout and "'cache': True" in r.stdout, r.stdout
    assert "memo installed: False" in r.stdout, r.stdout


def test_wrong_snapshot_is_caught():
    """A fast_detach whose snapshots differ from stock's (fault injection: the
    snapshot requires grad) turns that feature off, naming the field; stock's
    fast_detach stays in place and the rest stays on."""
    r = _in_subprocess(
        """
        import warnings
        import fastfake
        from fastfake import _C
        from fastfake.convert import detach as _detach
        from torch.fx.experimental import proxy_tensor

        def wrong(mode, x, include_real=False):
            out = _C.fast_detach(mode, x, include_real)
            return out.requires_grad_(True) if out.dtype.is_floating_point and not out.is_inference() else out

        _detach.fast = wrong
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        print("passed:", fastfake.selftest_report()["passed"])
        print("failure:", fastfake.selftest_report()["failures"].get("detach"))
        print("stock in place:", proxy_tensor.fast_detach is _detach.stock_fast_detach())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "'detach': False" in out and "'cache': True" in out, out
    assert "requires_grad" in out, out
    assert "stock in place: True" in out, out


def test_leaked_dispatch_state_is_caught_and_undone():
    """A fast path that leaves thread-local dispatch state behind (fault injection:
    Meta left in the include set, what a guard that restores by key did on torch
    2.9) fails its feature, and the self-test puts the state back, so the process
    keeps working (real tensor ops, the other features)."""
    r = _in_subprocess(
        """
        import warnings
        import torch
        import fastfake
        from fastfake import _C
        from fastfake.convert import detach as _detach

        def leaky(mode, x, include_real=False):
            out = _C.fast_detach(mode, x, include_real)
            torch._C._set_meta_in_tls_dispatch_include(True)
            return out

        _detach.fast = leaky
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        print("passed:", fastfake.selftest_report()["passed"])
        print("meta in tls:", torch._C._meta_in_tls_dispatch_include())
        torch.empty(3).uniform_()
        print("real ops work")
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "'detach': False" in out and "'cache': True" in out, out
    assert "meta in tls: False" in out and "real ops work" in out, out


def test_wrong_conversion_turns_convert_off():
    """A conversion that leaves requires_grad unset (fault injection in C++): the
    self-test turns 'convert' off, naming the field, and stock's
    ``from_real_tensor`` stays in place."""
    r = _in_subprocess(
        """
        import warnings
        import fastfake
        from torch._subclasses.fake_tensor import FakeTensorConverter
        stock = FakeTensorConverter.__dict__["from_real_tensor"]
        fastfake._C._inject_fault(1, "convert")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        r = fastfake.selftest_report()
        print("passed:", r["passed"])
        print("warned:", [str(x.message) for x in w])
        print("stock kept:", FakeTensorConverter.__dict__["from_real_tensor"] is stock)
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "'convert': False" in out and "'cache': True" in out, out
    assert "requires_grad" in out and "stock kept: True" in out, out


def _fault_turns_off_only(kind: str, feature: str, setter: str, keep: str = "cache_symbolic") -> str:
    """Install in a fresh process with C++ fault ``kind`` injected: the self-test must
    turn ``feature`` off (warned, counted, its switch off) and keep ``keep`` on."""
    return fault_turns_off_only(
        f'fastfake._C._inject_fault(100, "{kind}")', feature, keep=keep,
        still_on=f"fastfake._C.{setter}(False)",
    )


@pytest.mark.skipif(
    not (_compat.shape_env_counts_replacements() and _compat.portable_entries_known()),
    reason="no portable entries on this release",
)
def test_portable_hit_recipe_served_as_miss_is_caught():
    """A served first call in another ShapeEnv built as stock's *hit* builds it
    (the likeliest mix-up: its SymNode identities and storage-size expression are
    not those of stock's miss) turns cache_portable off and nothing else."""
    _fault_turns_off_only("portable", "cache_portable", "set_portable")


@pytest.mark.skipif(
    not (_compat.shape_env_counts_replacements() and _compat.stock_reruns_unsafe_view()),
    reason="no rerun entries on this release",
)
def test_rerun_forgotten_input_memos_are_caught():
    """Served repeats of a call stock reruns that leave out what the kernel memoised
    on its input turn cache_rerun off and nothing else."""
    out = _fault_turns_off_only("rerun", "cache_rerun", "set_rerun")
    assert "'cache_portable': True" in out, out


@pytest.mark.skipif(
    not (_compat.shape_env_counts_replacements() and _rerun.scalar_available()),
    reason="no rerun entries for SymFloat calls on this release",
)
def test_rerun_scalar_forgotten_input_memos_are_caught():
    """Served repeats of a pointwise call with a SymFloat that leave out what the
    kernel memoised on its input turn cache_rerun_scalar off and nothing else."""
    out = _fault_turns_off_only("rerun_scalar", "cache_rerun_scalar", "set_rerun_scalar")
    assert "'cache_rerun_scalar': False" in out, out


@pytest.mark.skipif(not _symnode.available(), reason="no SymNode memo on this release")
def test_symnode_memo_wrong_flag_is_caught():
    """SymNodes served from the memo with the other optimized-summation flag turn
    symnode_memo off and nothing else."""
    out = _fault_turns_off_only("symnode", "symnode_memo", "set_symnode_memo", keep="cache")
    if _compat.shape_env_counts_replacements():
        assert "'cache_symbolic': True" in out, out
