"""Shared fixtures: every test starts and ends with fastfake uninstalled and zeroed counters."""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # `import parity` from the test modules

# The self-test result install() keeps on disk (fastfake/core/selftest_store.py) goes
# to a directory of this test run, never the user's cache; subprocesses inherit it.
_STORE = tempfile.mkdtemp(prefix="fastfake-test-store-")
os.environ["FASTFAKE_CACHE_DIR"] = _STORE
atexit.register(shutil.rmtree, _STORE, True)

import torch  # noqa: E402,F401  (fastfake._C needs libc10 loaded; see report)

import fastfake  # noqa: E402


def _no_faults() -> None:
    for kind in ("dtype", "device", "convert", "portable", "rerun", "symnode", "symnode_expr", "symnode_int", "item_memo",
                 "config_attr"):
        fastfake._C._inject_fault(0, kind)
    fastfake.tracing.fake_prop._fault = None


@pytest.fixture(autouse=True)
def _fastfake_clean_state():
    fastfake.uninstall()
    fastfake.reset_stats()
    _no_faults()
    yield
    _no_faults()
    fastfake.uninstall()
    fastfake.reset_stats()
    assert not fastfake.is_installed()


@pytest.fixture
def installed():
    """fastfake installed for the test (uninstalled after it)."""
    fastfake.install()
    try:
        yield
    finally:
        fastfake.uninstall()


@pytest.fixture
def compile_state_restored():
    """For tests that compile: fastfake uninstalled and dynamo reset afterwards."""
    yield
    fastfake.uninstall()
    torch._dynamo.reset()


def _extract_test_fn():
    """``torch.testing._internal.common_utils.extract_test_fn`` without
    ``inspect.stack()``: the same walk over the caller frames (the innermost first)
    for a ``unittest.TestCase`` ``self`` naming its running test, but without reading
    every frame's source file and module (two thirds of the OpInfo sweeps' time
    went there, since every ``op.sample_inputs(...)`` asks twice). These tests are
    pytest functions, so both find no test case and return None, and the samples
    and their seeds are the same."""
    import unittest

    try:
        frame = sys._getframe(1)
        while frame is not None:
            f_locals = frame.f_locals
            if "self" in f_locals:
                self_val = f_locals["self"]
                if isinstance(self_val, unittest.TestCase):
                    test_id = self_val.id()
                    *_, cls_name, test_name = test_id.rsplit(".", 2)
                    if cls_name == type(self_val).__name__ and test_name.startswith("test"):
                        return getattr(self_val, test_name).__func__
            frame = frame.f_back
    except Exception:  # noqa: BLE001 - as stock's: no test function
        pass
    return None


#: torch's own extract_test_fn, per module it was replaced in (tests compare with it)
STOCK_EXTRACT_TEST_FN: dict = {}


def pytest_collection_finish(session) -> None:
    """Where the collected test modules imported torch's OpInfo machinery, its
    ``extract_test_fn`` is the frame walk above (nothing else of it is imported
    here: ``common_utils`` sets process-wide flags on import)."""
    for name in ("torch.testing._internal.common_utils", "torch.testing._internal.opinfo.core"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "extract_test_fn", None) is not None:
            if module.extract_test_fn is not _extract_test_fn:
                STOCK_EXTRACT_TEST_FN.setdefault(name, module.extract_test_fn)
            module.extract_test_fn = _extract_test_fn


# Stock FakeTensorMode logs every failing meta kernel with a full traceback at
# ERROR level; the error tests provoke thousands of those on purpose. The log
# output is not part of what is compared, so keep it quiet (and fast).
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)


#: The longest files (seconds measured with --durations, 2 workers), started first so
#: that no long file is left for the end of a two-worker run.
SLOW_FIRST = (
    "test_bench_graphs.py", "test_portable_fast.py", "test_selftest_store.py", "test_symbolic_views_random.py",
    "test_stateful.py", "test_rerun.py", "test_bench_fresh.py", "test_selftest.py", "test_inductor.py",
    "test_shape_env_parity.py", "test_elementwise_properties.py", "test_cache_symbolic_opinfo.py",
    "test_elementwise_opinfo.py", "test_cache_opinfo.py", "test_rerun_scalar.py", "test_fake_prop.py", "test_cli.py",
    "test_portable.py", "test_portable_nested.py", "test_functional_dispatch.py", "test_proxy_dispatch.py",
)


def _order(item) -> tuple[int, int]:
    name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
    if name == "test_openxla.py":
        return (0, 0)
    return (1, SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST))


def pytest_collection_modifyitems(session, config, items):
    """The openxla tests run first: torch 2.9's autograd engine sizes its per-device
    ready queues at its first backward, so a backward on the XLA device fails
    (INTERNAL ASSERT in engine.cpp) once a CPU backward ran before torch_xla was
    imported. Then the longest files (SLOW_FIRST), then the rest. The sort is
    stable: tests keep their order within a file."""
    items.sort(key=_order)
