"""install() / uninstall() / enabled(): what gets patched, and that it is put back exactly."""
from __future__ import annotations

import json
import os
import sys
import logging
import warnings

import pytest
import torch
import torch.utils._stats as torch_stats
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import fastfake
from fastfake import _C
from fastfake.core import install as _install

FAST_DISPATCH_TYPE = "fastfake._C.FastDispatch"
DEVICE_DESCR_TYPE = "fastfake._C.DeviceDescriptor"


def _tname(obj: object) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _snapshot() -> dict[type, dict[str, object]]:
    from torch.fx.experimental.sym_node import SymNode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    return {
        FakeTensorMode: dict(vars(FakeTensorMode)),
        FakeTensor: dict(vars(FakeTensor)),
        SymNode: dict(vars(SymNode)),
        FakeTensorProp: dict(vars(FakeTensorProp)),
        torch.fx.Interpreter: dict(vars(torch.fx.Interpreter)),
    }


def _is_counter(v: object) -> bool:
    # torch's own class-level int counters (FakeTensorMode.cache_hits / cache_misses,
    # epoch, ...) are rebound by stock dispatch itself; fastfake never patches ints.
    return type(v) is int


def _assert_identical(before: dict, after: dict, *, ignore: tuple[str, ...] = ()) -> None:
    for cls in before:
        b, a = before[cls], after[cls]
        assert set(a) == set(b), f"{cls.__name__}: attribute set changed: {set(a) ^ set(b)}"
        changed = [
            k
            for k in b
            if k not in ignore
            and a[k] is not b[k]
            and not (_is_counter(a[k]) and _is_counter(b[k]))
        ]
        assert not changed, f"{cls.__name__}: not the identical objects: {changed}"


def _dispatch():
    return FakeTensorMode.__dict__["__torch_dispatch__"]


def _device():
    return FakeTensor.__dict__["device"]


@pytest.fixture
def stock():
    """The stock attributes (the fixture uninstalled fastfake first)."""
    d, dev = _dispatch(), _device()
    # really torch's own objects, not something left behind by an earlier test
    assert getattr(d, "__module__", None) == "torch._subclasses.fake_tensor"
    assert isinstance(dev, property)
    assert dev.fget.__module__ == "torch._subclasses.fake_tensor"
    return d, dev


def _program():
    """A small pointwise program run twice, so the second add is a fast hit."""
    with FakeTensorMode():
        a = torch.empty(4, 5)
        b = torch.empty(4, 5)
        r1 = a + b
        r2 = a + b
        return (r1.shape, r1.dtype, r1.stride(), r2.shape, r2.dtype, r2.stride(), str(r2.device))


EXPECTED_PROGRAM = (torch.Size([4, 5]), torch.float32, (5, 1), torch.Size([4, 5]), torch.float32, (5, 1), "cpu")


# ---------------------------------------------------------------------------
# round trip, idempotence, selective patching
# ---------------------------------------------------------------------------


def test_round_trip_restores_identical_objects(stock):
    stock_dispatch, stock_device = stock
    before = _snapshot()
    fastfake.install()
    assert fastfake.is_installed()
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
    assert _tname(_device()) == DEVICE_DESCR_TYPE
    assert _program() == EXPECTED_PROGRAM
    fastfake.uninstall()
    assert not fastfake.is_installed()
    assert _dispatch() is stock_dispatch
    assert _device() is stock_device
    _assert_identical(before, _snapshot())


def test_install_touches_only_the_patched_attributes(stock):
    before = _snapshot()
    fastfake.install()
    during = _snapshot()
    from fastfake.tracing import fake_prop as _fake_prop
    from fastfake.symbolic import symnode_memo as _symnode
    from fastfake.symbolic import symnode_expr as _symnode_expr
    from fastfake.symbolic import symnode_int as _symnode_int
    from torch.fx.experimental.sym_node import SymNode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    hooked = tuple(_symnode.hooks())  # the SymNode memo's binary ops (fastfake/symbolic/symnode_memo.py)
    patched = ("__torch_dispatch__", "device", "_output_from_cache_entry", "_cache_key", "_cached_dispatch_impl",
               "cache_info", "cache_clear")
    # SymNode.expr (fastfake/symbolic/symnode_expr.py), FakeTensorProp.run_node (fastfake/tracing/fake_prop.py)
    patched += ("expr",) * _symnode_expr.available() + ("run_node",) * _fake_prop.available()
    patched += ("maybe_as_int",) * _symnode_int.available()  # fastfake/symbolic/symnode_int.py
    _assert_identical(before, during, ignore=patched + hooked)
    assert all(during[SymNode][k] is not before[SymNode][k] for k in hooked)
    if _symnode_expr.available():
        assert type(during[SymNode]["expr"]).__name__ == "SymNodeExprDescriptor"
    if _symnode_int.available():
        assert type(during[SymNode]["maybe_as_int"]).__name__ == "instancemethod"
    if _fake_prop.available():
        assert during[FakeTensorProp]["run_node"] is _fake_prop.run_node
        assert during[torch.fx.Interpreter]["run_node"] is before[torch.fx.Interpreter]["run_node"]
    # stock's cache statistics and clearing, wrapped (fastfake/stock/cache.py)
    for name in ("cache_info", "cache_clear"):
        assert isinstance(during[FakeTensorMode][name], classmethod)
        assert during[FakeTensorMode][name].__func__.__wrapped__ is before[FakeTensorMode][name].__func__
    assert during[FakeTensorMode]["__torch_dispatch__"] is not before[FakeTensorMode]["__torch_dispatch__"]
    assert during[FakeTensor]["device"] is not before[FakeTensor]["device"]
    # the symbolic cache's capture of stock's synthesised outputs (a pass-through)
    wrapped = during[FakeTensorMode]["_output_from_cache_entry"]
    assert wrapped.__wrapped__ is before[FakeTensorMode]["_output_from_cache_entry"]
    fastfake.install(cache=False)
    assert _snapshot()[FakeTensorMode]["_output_from_cache_entry"] is before[FakeTensorMode][
        "_output_from_cache_entry"
    ]
    fastfake.install(cache=False, elementwise=False)  # serving nothing: stock's own
    for name in ("cache_info", "cache_clear"):
        assert _snapshot()[FakeTensorMode][name] is before[FakeTensorMode][name]


def test_install_is_idempotent(stock):
    stock_dispatch, stock_device = stock
    fastfake.install()
    once = _snapshot()
    fastfake.install()
    twice = _snapshot()
    _assert_identical(once, twice)
    assert _C.get_config()[:2] == (True, False)
    # one uninstall undoes two installs
    fastfake.uninstall()
    assert _dispatch() is stock_dispatch
    assert _device() is stock_device
    assert not fastfake.is_installed()


def test_uninstall_when_not_installed_is_a_noop(stock):
    before = _snapshot()
    fastfake.uninstall()
    fastfake.uninstall()
    _assert_identical(before, _snapshot())
    assert not fastfake.is_installed()


def test_device_false_leaves_device_stock(stock):
    stock_dispatch, stock_device = stock
    fastfake.install(device=False)
    assert _device() is stock_device
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
    assert _install.current_options().device is False
    assert _program() == EXPECTED_PROGRAM
    assert fastfake.stats()["elementwise.hit"] >= 1
    assert fastfake.stats()["device.fast"] == 0


def test_elementwise_false_leaves_dispatch_stock(stock):
    stock_dispatch, stock_device = stock
    fastfake.install(elementwise=False, cache=False)
    assert _dispatch() is stock_dispatch
    assert _tname(_device()) == DEVICE_DESCR_TYPE
    assert _C.get_config()[0] is False
    assert _program() == EXPECTED_PROGRAM
    s = fastfake.stats()
    assert s["dispatch.total"] == 0 and s["elementwise.hit"] == 0
    assert s["device.fast"] >= 1


def test_both_false_patches_nothing(stock):
    before = _snapshot()
    fastfake.install(elementwise=False, cache=False, device=False)
    assert fastfake.is_installed()
    _assert_identical(before, _snapshot())


def test_reconfigure_without_device_patch(stock):
    # Reconfiguration between option sets that never patch FakeTensor.device.
    stock_dispatch, stock_device = stock
    fastfake.install(device=False)
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
    fastfake.install(device=False, crosscheck=True)
    assert _C.get_config()[:2] == (True, True)
    assert _install.current_options().crosscheck is True
    fastfake.install(elementwise=False, cache=False, device=False)
    assert _dispatch() is stock_dispatch
    assert _C.get_config()[0] is False
    fastfake.install(device=False)
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
    assert _device() is stock_device
    assert _C.get_config()[:2] == (True, False)


def test_reconfigure_from_default_install(stock):
    stock_dispatch, stock_device = stock
    fastfake.install()
    fastfake.install(elementwise=False, cache=False)
    assert _dispatch() is stock_dispatch
    assert _tname(_device()) == DEVICE_DESCR_TYPE
    fastfake.install(device=False)
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
    assert _device() is stock_device
    fastfake.install(crosscheck=True)
    assert _C.get_config()[:2] == (True, True)
    assert _tname(_device()) == DEVICE_DESCR_TYPE


def test_is_installed():
    assert fastfake.is_installed() is False
    fastfake.install(device=False)
    assert fastfake.is_installed() is True
    fastfake.uninstall()
    assert fastfake.is_installed() is False
    fastfake.install()
    assert fastfake.is_installed() is True


# ---------------------------------------------------------------------------
# enabled()
# ---------------------------------------------------------------------------


def test_enabled_restores_uninstalled_state(stock):
    before = _snapshot()
    with fastfake.enabled():
        assert fastfake.is_installed()
        assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
        assert _tname(_device()) == DEVICE_DESCR_TYPE
        assert _program() == EXPECTED_PROGRAM
    assert not fastfake.is_installed()
    _assert_identical(before, _snapshot())
    assert _C.get_config()[:2] == (False, False)


def test_enabled_restores_previous_options(stock):
    stock_dispatch, stock_device = stock
    fastfake.install(device=False)
    prev = _install.current_options()
    with fastfake.enabled(elementwise=False, cache=False, device=False, crosscheck=True):
        assert _dispatch() is stock_dispatch
        assert _install.current_options().crosscheck is True
    assert _install.current_options() == prev
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
    assert _device() is stock_device
    assert _C.get_config()[:2] == (True, False)


def test_enabled_nested_restores_each_level(stock):
    stock_dispatch, stock_device = stock
    before = _snapshot()
    with fastfake.enabled(device=False):
        lvl1 = _install.current_options()
        d1 = _dispatch()
        assert _tname(d1) == FAST_DISPATCH_TYPE
        with fastfake.enabled(device=False, crosscheck=True):
            lvl2 = _install.current_options()
            assert lvl2.crosscheck and _C.get_config()[1] is True
            with fastfake.enabled(elementwise=False, cache=False, device=False):
                assert _dispatch() is stock_dispatch
                assert _C.get_config()[0] is False
            assert _install.current_options() == lvl2
            assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
            assert _C.get_config()[:2] == (True, True)
        assert _install.current_options() == lvl1
        assert _C.get_config()[:2] == (True, False)
    assert not fastfake.is_installed()
    _assert_identical(before, _snapshot())


def test_enabled_nested_with_device_descriptor(stock):
    before = _snapshot()
    with fastfake.enabled():
        with fastfake.enabled(crosscheck=True):
            assert _C.get_config()[1] is True
            assert _tname(_device()) == DEVICE_DESCR_TYPE
        assert _C.get_config()[:2] == (True, False)
        assert _tname(_device()) == DEVICE_DESCR_TYPE
    _assert_identical(before, _snapshot())


def test_enabled_restores_on_exception_when_uninstalled(stock):
    before = _snapshot()

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with fastfake.enabled():
            assert fastfake.is_installed()
            raise Boom
    assert not fastfake.is_installed()
    _assert_identical(before, _snapshot())


def test_enabled_restores_on_exception_when_installed(stock):
    stock_dispatch, stock_device = stock
    fastfake.install(elementwise=False, cache=False, device=False)
    prev = _install.current_options()
    with pytest.raises(KeyError):
        with fastfake.enabled(device=False, crosscheck=True):
            assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
            raise KeyError("x")
    assert _install.current_options() == prev
    assert _dispatch() is stock_dispatch
    assert _device() is stock_device
    assert _C.get_config()[:2] == (False, False)


# ---------------------------------------------------------------------------
# environment variables
# ---------------------------------------------------------------------------


def test_fastfake_disable_env_makes_install_a_logged_noop(stock, monkeypatch, caplog):
    monkeypatch.setenv("FASTFAKE_DISABLE", "1")
    before = _snapshot()
    with caplog.at_level(logging.WARNING, logger="fastfake"):
        fastfake.install()
    assert not fastfake.is_installed()
    _assert_identical(before, _snapshot())
    recs = [r for r in caplog.records if r.name == "fastfake"]
    assert recs, "install() under FASTFAKE_DISABLE logged nothing on the 'fastfake' logger"
    assert any("FASTFAKE_DISABLE" in r.getMessage() for r in recs)
    # enabled() is a no-op too
    with fastfake.enabled():
        assert not fastfake.is_installed()
    _assert_identical(before, _snapshot())


def test_fastfake_disable_env_zero_does_not_disable(monkeypatch):
    monkeypatch.setenv("FASTFAKE_DISABLE", "0")
    fastfake.install()
    assert fastfake.is_installed()
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE


def test_fastfake_crosscheck_env_turns_crosscheck_on(monkeypatch):
    monkeypatch.setenv("FASTFAKE_CROSSCHECK", "1")
    fastfake.install(device=False)
    assert _install.current_options().crosscheck is True
    assert _C.get_config()[1] is True
    assert _program() == EXPECTED_PROGRAM
    assert fastfake.stats()["crosscheck.checked"] >= 1


def test_crosscheck_off_by_default():
    fastfake.install(device=False)
    assert _C.get_config()[1] is False
    assert _program() == EXPECTED_PROGRAM
    assert fastfake.stats()["elementwise.hit"] >= 1
    assert fastfake.stats()["crosscheck.checked"] == 0


# ---------------------------------------------------------------------------
# version guard / missing internals
# ---------------------------------------------------------------------------


def test_untested_torch_version_is_logged_once_and_self_tested(monkeypatch, caplog):
    """A release not in SUPPORTED_TORCH_VERSIONS: one log line says the self-test
    decides (tests/test_selftest.py covers what it decides), and what it proved
    runs; no warning for reconfiguring later."""
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    monkeypatch.setattr(_install._State, "warned_version", False)
    with caplog.at_level(logging.WARNING, logger="fastfake"):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
    ours = [r for r in caplog.records if "self-test decides" in r.getMessage()]
    assert len(ours) == 1 and "2.99.0" in ours[0].getMessage()
    assert not [x for x in w if issubclass(x.category, RuntimeWarning)], [str(x.message) for x in w]
    assert fastfake.is_installed()
    assert _tname(_dispatch()) == FAST_DISPATCH_TYPE
    assert _program() == EXPECTED_PROGRAM
    assert fastfake.stats()["elementwise.hit"] >= 1
    fastfake.uninstall()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fastfake"):
        fastfake.install(device=False)
        fastfake.uninstall()
        fastfake.install(elementwise=False, cache=False)
    assert not [r for r in caplog.records if "self-test decides" in r.getMessage()]
    assert fastfake.is_installed()


def test_supported_torch_version_does_not_warn(monkeypatch):
    assert torch.__version__.split("+")[0] in fastfake.SUPPORTED_TORCH_VERSIONS
    monkeypatch.setattr(_install._State, "warned_version", False)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fastfake.install()
    assert not [x for x in w if issubclass(x.category, RuntimeWarning)]


@pytest.mark.parametrize(
    "owner, name, expected",
    [
        (FakeTensor, "device", "FakeTensor.device"),
        (FakeTensorMode, "__torch_dispatch__", "FakeTensorMode.__torch_dispatch__"),
        (torch_stats, "simple_call_counter", "simple_call_counter"),
    ],
    ids=["FakeTensor.device", "FakeTensorMode.__torch_dispatch__", "simple_call_counter"],
)
def test_missing_internal_raises_clear_error(stock, monkeypatch, owner, name, expected):
    original = owner.__dict__[name]
    before = _snapshot()
    monkeypatch.delattr(owner, name)
    assert name not in owner.__dict__
    with pytest.raises(RuntimeError) as ei:
        fastfake.install()
    msg = str(ei.value)
    assert expected in msg
    assert "missing" in msg and torch.__version__ in msg
    assert "2.13.0" in msg and "2.9.0" in msg  # names the supported versions
    assert not fastfake.is_installed()
    monkeypatch.undo()
    assert owner.__dict__[name] is original
    # nothing was patched by the failed install
    _assert_identical(before, _snapshot())
    # and a later install works normally
    fastfake.install()
    assert _program() == EXPECTED_PROGRAM


def test_functional_memo_installed_only_where_stock_recomputes():
    """The FunctionalTensor storage-size memo is installed exactly where stock's
    FunctionalTensor.__new__ leaves the size to _make_wrapper_subclass (up to
    2.14); from 2.15 on torch.Tensor is left untouched."""
    from fastfake.common import compat as _compat
    from fastfake.tracing import functional as _functional

    fastfake.install()
    try:
        assert _functional.is_installed() == _compat.functional_tensor_recomputes_storage()
    finally:
        fastfake.uninstall()
    assert "_make_wrapper_subclass" not in torch.Tensor.__dict__


def test_every_switch_names_an_acceleration_and_is_documented():
    from fastfake.core import accelerations as _accelerations

    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    names = [n for a in _accelerations.ACCELERATIONS for n in a.names]
    assert len(set(names)) == len(names)
    legacy = [a.legacy for a in _accelerations.ACCELERATIONS if a.legacy]
    assert len(set(legacy)) == len(legacy)
    for a in _accelerations.ACCELERATIONS:
        assert f"`{a.switch}`" in readme, a.switch
        if a.legacy:
            assert f"`{a.legacy}`" in readme, a.legacy




_FIRST_TRACE = r"""
import json, sys
import torch
import fastfake
if sys.argv[1] == "fastfake":
    fastfake.install()
from torch._subclasses import meta_utils
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _stats
from functorch.compile import aot_function, nop

def f(x, w):
    return torch.nn.functional.gelu(x @ w).sum(-1)

out = {}
for name, run in (
    ("make_fx symbolic", lambda: make_fx(f, tracing_mode="symbolic")(torch.randn(4, 8), torch.randn(8, 16))),
    ("make_fx fake", lambda: make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 16))),
    ("aot dynamic", lambda: aot_function(f, nop, dynamic=True)(torch.randn(4, 8, requires_grad=True),
                                                              torch.randn(8, 16))),
):
    _stats.simple_call_counter.clear()
    before = (FakeTensorMode.cache_info(), meta_utils.DESCRIBER_NEXT_ID)
    run()
    after = (FakeTensorMode.cache_info(), meta_utils.DESCRIBER_NEXT_ID)
    out[name] = {
        "counter": dict(_stats.simple_call_counter),
        "stock cache": [after[0].hits - before[0].hits, after[0].misses - before[0].misses,
                        {k: v - before[0].bypasses.get(k, 0) for k, v in after[0].bypasses.items()},
                        after[0].size - before[0].size],
        "describers made": after[1] - before[1],
    }
print(json.dumps(out))
"""


def test_a_first_trace_after_install_counts_what_stocks_counts(tmp_path):
    """The first traces of a process where the self-test's result comes from disk
    (nothing fastfake reads lazily may run a probe inside them: the FakeTensor
    dict template once did, a torch.empty counted in torch.utils._stats and kept
    in stock's cache): torch.utils._stats' counters, stock's ``cache_info()``
    (hits, misses, bypasses, size) and the describer ids made are stock's."""
    import subprocess

    script = tmp_path / "first_trace.py"
    script.write_text(_FIRST_TRACE)
    env = {**os.environ, "FASTFAKE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FASTFAKE_DISABLE", None)

    def run(impl: str) -> dict:
        r = subprocess.run([sys.executable, str(script), impl], capture_output=True, text=True,
                           timeout=600, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    run("fastfake")  # the self-test runs once; its result is kept
    got = run("fastfake")
    want = run("stock")
    assert got == want
    assert want["make_fx symbolic"]["counter"]["FakeTensorMode.__torch_dispatch__"] > 0
