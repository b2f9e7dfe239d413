"""Reads of torch's configuration modules in C (csrc/tracing/config_attr.cpp).

What must hold: every read answers the object stock's ``ConfigModule.__getattr__``
answers (and raises what it raises), for every setting of torch's own config modules
and through a long random sequence of assignments, deletions, ``patch`` blocks,
environment values and other contexts on a module of the test's own; the class is
stock's again after ``uninstall()``; the self-test and ``crosscheck=True`` catch a
wrong answer.
"""
from __future__ import annotations

import contextvars
import importlib.util
import random
import threading
import warnings

import pytest

import fastfake
from faults import fault_turns_off_only, unknown_source_stays_stock
from fastfake import _C
from fastfake.core import selftest as _selftest
from fastfake.tracing import config_attr

pytestmark = pytest.mark.skipif(not config_attr.available(), reason="config_attr is not proven on this release")

from torch.utils._config_module import ConfigModule, install_config_module  # noqa: E402

# the self-test's own configuration module (every kind of entry)
SOURCE = _selftest._CONFIG_SOURCE
KEYS = ("flag", "number", "ratio", "name", "pair", "nothing", "items", "table", "env_flag", "forced", "knob",
        "old", "aliased", "missing")
VALUES = (True, False, 0, 1, 2.5, "s", (1,), None, [4], {"a": 2})


def _module(tmp_path, monkeypatch, tag="m"):
    monkeypatch.setenv("FASTFAKE_SELFTEST_ENV_DEFAULT", "1")
    monkeypatch.setenv("FASTFAKE_SELFTEST_ENV_FORCE", "0")
    path = tmp_path / f"fastfake_test_config_{tag}.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    install_config_module(mod)
    return mod


def _stock(mod, k):
    try:
        return ("value", config_attr.stock_read(mod, k))
    except AttributeError as e:
        return ("AttributeError", str(e))


def _read(mod, k):
    try:
        return ("value", getattr(mod, k))
    except AttributeError as e:
        return ("AttributeError", str(e))


def _same(got, want) -> bool:
    return got[0] == want[0] and (got[1] is want[1] if got[0] == "value" else got[1] == want[1])


def test_every_setting_of_torchs_config_modules(installed):
    import sys

    import torch._functorch.config  # noqa: F401
    import torch._inductor.config  # noqa: F401

    mods = [m for m in list(sys.modules.values()) if isinstance(m, ConfigModule)]
    assert len(mods) >= 3
    n = 0
    for mod in mods:
        for k in list(mod._config):
            if "." in k:
                continue  # a sub-config's setting: read through its proxy
            want = _stock(mod, k)
            got = _read(mod, k)
            assert _same(got, want), (mod.__name__, k, got, want)
            n += 1
    assert fastfake.stats()["config_attr.served"] > n // 2


def test_long_random_sequence(installed, tmp_path, monkeypatch):
    """Assignments, deletions, patch blocks, reads in other contexts, in a random
    order: every read is stock's."""
    mod = _module(tmp_path, monkeypatch)
    rng = random.Random(5)
    patches = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(3000):
            r = rng.random()
            k = rng.choice(KEYS[:-2])
            if r < 0.15:
                setattr(mod, k, rng.choice(VALUES))
            elif r < 0.2:
                try:
                    delattr(mod, k)
                except Exception:
                    pass
            elif r < 0.25 and len(patches) < 4:
                p = mod.patch({k: rng.choice(VALUES)})
                try:
                    p.__enter__()  # (stock's __getattr__ itself: raises for a deleted setting)
                except AttributeError:
                    continue
                patches.append(p)
            elif r < 0.3 and patches:
                patches.pop().__exit__(None, None, None)
            elif r < 0.35:
                ctx = contextvars.copy_context()
                kk, v = rng.choice(KEYS[:-2]), rng.choice(VALUES)

                def other():
                    setattr(mod, kk, v)
                    for key in KEYS:
                        got = _read(mod, key)
                        assert _same(got, _stock(mod, key)), (step, key, got)

                ctx.run(other)
            else:
                key = rng.choice(KEYS)
                got = _read(mod, key)
                assert _same(got, _stock(mod, key)), (step, key, got)
        while patches:
            patches.pop().__exit__(None, None, None)
    assert fastfake.stats()["config_attr.served"] > 1000


def test_threads_read_their_own_context(installed, tmp_path, monkeypatch):
    mod = _module(tmp_path, monkeypatch)
    mod.number = 10
    seen = {}

    def worker():
        seen["before"] = mod.number  # a new thread: the variable's default context value
        mod.number = 20
        seen["after"] = mod.number

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["after"] == 20
    assert mod.number == 10
    # what stock answers in a new thread
    stock_seen = {}
    fastfake.uninstall()
    t = threading.Thread(target=lambda: stock_seen.setdefault("before", mod.number))
    t.start()
    t.join()
    assert stock_seen["before"] == seen["before"]


def test_names_the_module_has_and_errors_are_stocks(installed, tmp_path, monkeypatch):
    mod = _module(tmp_path, monkeypatch)
    assert mod._config is vars(mod)["_config"]
    assert callable(mod.patch) and mod.__name__ == "fastfake_test_config_m"
    with pytest.raises(AttributeError, match="missing does not exist"):
        mod.missing
    with pytest.raises(TypeError):
        getattr(mod, 1)  # noqa: B009
    with pytest.raises(TypeError):
        ConfigModule.__getattribute__(mod)
    assert fastfake.stats()["config_attr.stock"] > 0


def test_uninstall_and_the_switch_leave_the_class_stocks(monkeypatch):
    assert "__getattribute__" not in vars(ConfigModule)
    fastfake.install()
    assert "__getattribute__" in vars(ConfigModule)
    fastfake.uninstall()
    assert "__getattribute__" not in vars(ConfigModule)
    monkeypatch.setenv("FASTFAKE_DISABLE", "config_attr")
    fastfake.install()
    assert "__getattribute__" not in vars(ConfigModule)


def test_crosscheck_finds_a_wrong_answer(tmp_path, monkeypatch):
    from fastfake.parity.crosscheck import CrosscheckError

    mod = _module(tmp_path, monkeypatch)
    fastfake.install(crosscheck=True)
    assert mod.flag is True and mod.number == 3  # checked against stock, and equal
    _C._inject_fault(1, "config_attr")
    with pytest.raises(CrosscheckError, match="flag"):
        mod.flag


def test_the_self_test_fails_a_wrong_answer():
    fault_turns_off_only(
        "fastfake._C._inject_fault(1000, 'config_attr')", "config_attr", keep="cache",
        still_on="'__getattribute__' in vars(__import__('torch.utils._config_module', fromlist=['x']).ConfigModule)",
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock(
        "CONFIG_ATTR_SOURCES", "config_attr",
        still_on="'__getattribute__' in vars(__import__('torch.utils._config_module', fromlist=['x']).ConfigModule)",
    )
