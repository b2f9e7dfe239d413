"""Importing fastfake: clear error without the extension, version, stub completeness."""
from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap


import fastfake

PKG = pathlib.Path(fastfake.__file__).resolve().parent
ROOT = PKG.parent


def _run(code: str, pythonpath: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath
    env.pop("FASTFAKE_DISABLE", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(pathlib.Path(pythonpath)),
    )


def _assert_build_hint(msg: str) -> None:
    assert "fastfake._C" in msg
    assert "not built" in msg
    assert "build_ext --inplace" in msg
    assert "pip install --no-build-isolation" in msg
    assert "against the installed torch" in msg


CHECK = """
try:
    import fastfake
except ImportError as e:
    print("IMPORTERROR:" + str(e).replace("\\n", "\\\\n"))
    print("CAUSE:" + type(e.__cause__).__name__)
else:
    print("IMPORTED")
"""


def test_import_without_extension_blocked_by_finder():
    code = (
        """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "fastfake._C":
            raise ImportError("simulated: no fastfake._C")
        return None
sys.meta_path.insert(0, _Block())
"""
        + CHECK
    )
    p = _run(code, str(ROOT))
    assert p.returncode == 0, p.stderr
    assert "IMPORTED" not in p.stdout
    line = next(x for x in p.stdout.splitlines() if x.startswith("IMPORTERROR:"))
    msg = line[len("IMPORTERROR:") :].replace("\\n", "\n")
    _assert_build_hint(msg)
    assert "simulated: no fastfake._C" in msg  # the original error is included
    assert "CAUSE:ImportError" in p.stdout


def test_import_without_extension_in_copied_package(tmp_path):
    dst = tmp_path / "fastfake"
    shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    assert not list(dst.glob("_C*.so"))
    assert (dst / "__init__.py").exists()
    p = _run("import torch\n" + CHECK, str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "IMPORTED" not in p.stdout, p.stdout
    line = next(x for x in p.stdout.splitlines() if x.startswith("IMPORTERROR:"))
    msg = line[len("IMPORTERROR:") :].replace("\\n", "\n")
    _assert_build_hint(msg)
    assert "original error" in msg and "_C" in msg.split("original error", 1)[1]


def test_import_with_extension_after_torch_succeeds():
    # control for the two tests above: the same subprocess recipe imports fine
    p = _run("import torch\n" + CHECK, str(ROOT))
    assert p.returncode == 0, p.stderr
    assert "IMPORTED" in p.stdout, p.stdout


def test_import_in_fresh_interpreter_succeeds():
    p = _run(CHECK, str(ROOT))
    assert p.returncode == 0, p.stderr
    assert "IMPORTED" in p.stdout, p.stdout


def test_version_is_a_string():
    assert isinstance(fastfake.__version__, str)
    assert re.fullmatch(r"\d+\.\d+\.\d+([.+-]?[0-9A-Za-z.]+)?", fastfake.__version__)
    from fastfake import _version

    assert fastfake.__version__ == _version.__version__


def test_public_api_exists():
    for name in fastfake.__all__:
        assert hasattr(fastfake, name), name
    for name in ("install", "uninstall", "enabled", "is_installed", "stats", "reset_stats",
                 "elementwise_report", "CrosscheckError"):
        assert name in fastfake.__all__, name


def _stub_names() -> set[str]:
    tree = ast.parse((PKG / "_C.pyi").read_text())
    return {
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    } | {
        t.id
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }


def test_stub_names_every_extension_attribute():
    from fastfake import _C

    exposed = {n for n in dir(_C) if not (n.startswith("__") and n.endswith("__"))}
    stub = _stub_names()
    assert exposed, "the extension exposes nothing?"
    assert exposed - stub == set(), f"in fastfake._C but not in _C.pyi: {sorted(exposed - stub)}"
    assert stub - exposed == set(), f"in _C.pyi but not in fastfake._C: {sorted(stub - exposed)}"
