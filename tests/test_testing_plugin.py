"""fastfake.testing: `pytest -p fastfake.testing` runs a suite with fastfake installed."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_plugin_installs_for_the_session(tmp_path):
    (tmp_path / "test_probe.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch._subclasses.fake_tensor import FakeTensorMode
            import fastfake

            def test_installed_and_serving():
                assert fastfake.is_installed()
                with FakeTensorMode():
                    x = torch.empty(4, 3)
                    for _ in range(3):
                        y = x + x
                assert y.shape == (4, 3)
                assert fastfake.stats()["elementwise.hit"] >= 1
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fastfake.testing",
         "--fastfake-crosscheck", str(tmp_path / "test_probe.py")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
    summary = [line for line in r.stdout.splitlines() if line.startswith("installed: True")]
    assert summary and "mismatches 0" in summary[0], r.stdout
