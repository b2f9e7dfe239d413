"""python -m fastfake: run (the program's output and exit code unchanged, the report
on standard error), report (from a JSON dump), doctor."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent(
    """
    import sys, torch
    from torch.fx.experimental.proxy_tensor import make_fx
    import fastfake

    def f(x):
        return torch.softmax(x @ x.t(), -1) + 1

    for n in (3, 4, 5):
        make_fx(f, tracing_mode="symbolic")(torch.randn(n, 8))
    print("installed:", fastfake.is_installed(), "argv:", sys.argv[1:], "main:", __name__)
    if len(sys.argv) > 1 and sys.argv[1] == "raise":
        raise ValueError("from the program")
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """
)


def _py(*args: str, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return str(path)


def test_run_keeps_stdout_and_exit_code(program):
    plain = _py(program, "3", "--flag")
    fast = _py("-m", "fastfake", "run", program, "3", "--flag")
    assert plain.returncode == fast.returncode == 3
    assert plain.stdout.replace("False", "?") == fast.stdout.replace("True", "?")
    assert "installed: True argv: ['3', '--flag'] main: __main__" in fast.stdout
    assert "fastfake" in fast.stderr and "report" in fast.stderr
    assert "fake dispatch:" in fast.stderr and "operators stock computed" in fast.stderr


def test_run_an_exception_is_the_program_s(program):
    r = _py("-m", "fastfake", "run", program, "raise")
    assert r.returncode == 1
    assert "ValueError: from the program" in r.stderr
    assert "fake dispatch:" in r.stderr  # the report still comes


def test_run_module_and_report_json(tmp_path, program):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text(PROGRAM)
    dump = tmp_path / "stats.json"
    r = _py("-m", "fastfake", "run", "--report-json", str(dump), "-m", "mypkg.job", "0", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "installed: True" in r.stdout
    data = json.loads(dump.read_text())
    assert data["stats"]["dispatch.total"] > 0
    again = _py("-m", "fastfake", "report", str(dump))
    assert again.returncode == 0
    # the same report as the run printed
    report = again.stdout.strip()
    assert report and report in r.stderr


def test_report_of_a_bad_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _py("-m", "fastfake", "report", str(bad))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_quiet_run_prints_no_report(program):
    r = _py("-m", "fastfake", "run", "--quiet", program, "0")
    assert r.returncode == 0 and "fake dispatch:" not in r.stderr


def test_doctor():
    r = _py("-m", "fastfake", "doctor")
    assert r.returncode == 0, r.stderr[-2000:]
    import torch

    assert f"torch {torch.__version__}" in r.stdout
    assert "self-test:" in r.stdout and "install()" in r.stdout
    for feature in ("elementwise", "cache", "cache_portable", "device"):
        assert f"  {feature} " in r.stdout
    if torch.__version__.startswith("2.13"):
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith("cache_portable "))
        assert line.split()[1] == "on", line
    r = _py("-m", "fastfake", "doctor", env={"FASTFAKE_DISABLE": "portable"})
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("cache_portable "))
    assert "switched off (FASTFAKE_DISABLE=cache_portable)" in line


def test_format_report_counts():
    from fastfake.cli import format_report

    text = format_report({"fastfake": "x", "torch": "y", "stats": {
        "dispatch.total": 10, "dispatch.stock": 4, "elementwise.hit": 6,
        "cache.bypass.stock_uncacheable": 3, "cache.hit": 0},
        "stock_calls": {"aten.mm.default": {"outermost": 4, "nested": 0}}})
    assert "10 calls, 6 served (60.0%), 4 computed by stock" in text
    assert "cache.bypass.stock_uncacheable" in text and "aten.mm.default" in text
    assert "result cache" not in text  # nothing served there


def test_readme_table_is_the_registry_s():
    from fastfake.core import accelerations as _accelerations

    readme = open(os.path.join(ROOT, "README.md")).read()
    assert _accelerations.markdown() in readme
    r = _py("-m", "fastfake", "accelerations")
    assert r.returncode == 0 and r.stdout.strip() == _accelerations.markdown()


def test_the_registry_drives_the_self_test_and_the_switches():
    import fastfake
    from fastfake.core import accelerations as _accelerations
    from fastfake.core import install as _install
    from fastfake.core import selftest as _selftest

    assert _selftest.FEATURES == _accelerations.selftest_features()
    names = set(_accelerations.BY_NAME)
    known = set(fastfake.stats())
    for a in _accelerations.ACCELERATIONS:
        assert set(a.needs) <= names, a.name
        for c in a.served:
            assert c.startswith(a.counters) and c in known, (a.name, c)
        assert a.switch == f"FASTFAKE_DISABLE={a.name}" and a.rides in _accelerations.RIDES, a.name
