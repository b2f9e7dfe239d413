"""FASTFAKE=1 installs fastfake when a program imports torch (startup/fastfake.pth,
startup/fastfake_autoinstall.py), costs nothing otherwise, never stops a program,
and setup.py ships both files at the top of site-packages."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP = os.path.join(ROOT, "startup")


def _run(code: str, *, fastfake_env: str | None, pythonpath: str = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("FASTFAKE", None)
    env.pop("FASTFAKE_DISABLE", None)
    if fastfake_env is not None:
        env["FASTFAKE"] = fastfake_env
    env["PYTHONPATH"] = pythonpath
    # the site directory is added as site-packages is at start: its .pth runs
    prog = f"import site; site.addsitedir({STARTUP!r})\n" + textwrap.dedent(code)
    # (run outside the checkout: `python -c` puts the working directory first on sys.path)
    return subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(STARTUP) if pythonpath == ROOT else pythonpath)


def test_fastfake_1_installs_when_torch_is_imported():
    r = _run(
        """
        import sys
        assert "fastfake" not in sys.modules and "torch" not in sys.modules
        import torch
        import fastfake
        print(fastfake.is_installed())
        """,
        fastfake_env="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_unset_or_zero_does_nothing():
    for value in (None, "0", ""):
        r = _run(
            """
            import sys
            assert "fastfake_autoinstall" not in sys.modules
            import torch, fastfake
            print(fastfake.is_installed())
            """,
            fastfake_env=value,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "False", value


def test_a_program_without_torch_imports_nothing():
    r = _run(
        """
        import sys
        print(sorted(m for m in ("torch", "fastfake") if m in sys.modules))
        """,
        fastfake_env="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_failing_install_leaves_the_program_running(tmp_path):
    broken = tmp_path / "fastfake"
    broken.mkdir()
    (broken / "__init__.py").write_text("def install():\n    raise RuntimeError('refused here')\n")
    r = _run(
        """
        import torch
        print(torch.ones(2).sum().item())
        """,
        fastfake_env="1",
        pythonpath=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2.0"
    assert "FASTFAKE=1: fastfake.install() failed, running stock: refused here" in r.stderr


def test_setup_ships_the_startup_files(tmp_path):
    r = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "fastfake.pth").read_text() == open(os.path.join(STARTUP, "fastfake.pth")).read()
    assert (tmp_path / "fastfake_autoinstall.py").exists()
    assert (tmp_path / "fastfake" / "core" / "accelerations.py").exists()
