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
    for kind in ("dtype", "device", "convert", "portable", "rerun", "symnode", "symnode_expr", "symnode_int", "item_memo"):
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


# Stock FakeTensorMode logs every failing meta kernel with a full traceback at
# ERROR level; the error tests provoke thousands of those on purpose. The log
# output is not part of what is compared, so keep it quiet (and fast).
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)


#: The longest files (seconds measured with --durations, 2 workers), started first so
#: that no long file is left for the end of a two-worker run.
SLOW_FIRST = (
    "test_elementwise_opinfo.py", "test_portable.py", "test_bench_graphs.py", "test_portable_fast.py",
    "test_cache_opinfo.py", "test_selftest_store.py", "test_cache_symbolic_opinfo.py", "test_stateful.py",
    "test_symbolic_views_random.py", "test_rerun.py", "test_elementwise_properties.py", "test_bench_fresh.py",
    "test_selftest.py", "test_shape_env_parity.py", "test_inductor.py", "test_rerun_scalar.py", "test_cli.py",
    "test_fake_prop.py", "test_portable_nested.py",
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
