"""pytest plugin: run any test suite with fastfake installed for the whole session.

    pytest -p fastfake.testing path/to/pytorch/test/test_fake_tensor.py
    pytest -p fastfake.testing --fastfake-crosscheck ...   # also recompute every fast result

fastfake is installed before the first test is collected (so modules that build
fake tensors at import see it too) and uninstalled at the end; the terminal summary
says how many dispatches fastfake served and how many went to stock.
``scripts/pytorch_suites`` runs PyTorch's own fake-tensor, make_fx and AOTAutograd
tests of the installed release with and without this plugin and compares them.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fastfake")
    group.addoption(
        "--fastfake-crosscheck",
        action="store_true",
        default=False,
        help="recompute every fast result with stock and fail on any difference",
    )


def pytest_configure(config: pytest.Config) -> None:
    import fastfake

    fastfake.install(crosscheck=config.getoption("--fastfake-crosscheck"))
    fastfake.reset_stats()


def pytest_unconfigure(config: pytest.Config) -> None:
    import fastfake

    fastfake.uninstall()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    import fastfake

    s = fastfake.stats()
    served = s["elementwise.hit"] + s["cache.hit"]
    terminalreporter.write_sep("-", "fastfake")
    terminalreporter.write_line(
        f"installed: {fastfake.is_installed()}; dispatches {s['dispatch.total']}, "
        f"served {served} (elementwise {s['elementwise.hit']}, cache {s['cache.hit']}), "
        f"to stock {s['dispatch.stock']}; crosschecked {s['crosscheck.checked']}, "
        f"mismatches {s['crosscheck.mismatch']}; conversions served {s['convert.fast']}, "
        f"to stock {sum(v for k, v in s.items() if k.startswith('convert.stock.'))}; "
        f"snapshots served {s['detach.fast']}"
    )
