"""The self-test result kept on disk (fastfake/core/selftest_store.py): reused only on an
unchanged installation in an unchanged process, never when a fault is injected,
ignored when unreadable, bounded, and never an error."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import types

import pytest
import torch

import fastfake
from fastfake.common import cache_files as _cache_files
from fastfake.core import selftest_store as store
from faults import in_subprocess

# Prints, after install(): whether the self-test's programs ran in this process
# (a profile hook on _selftest.run, which changes no code the key covers), the
# report, and what is in force.
_PROBE = """
import json, sys
import fastfake
from fastfake.core import selftest as _selftest
from fastfake.stock import key as _stock_key
ran = []
proved = []
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _selftest.run.__code__:
        ran.append(1)
    if event == "call" and frame.f_code is _stock_key.prove.__code__:
        proved.append(1)
{before}
sys.setprofile(hook)
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    fastfake.install()
sys.setprofile(None)
from fastfake.core import install as _install
from fastfake.tracing import functional as _functional
from fastfake.elementwise import registry as _registry
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
walked = _registry.pointwise_registry.cache_info().currsize
fastfake.reset_stats()
with FakeTensorMode() as m:
    x = m.from_tensor(torch.empty(4, 3))
    for _ in range(3):
        torch.sigmoid(x * 2)
elementwise_hits = fastfake.stats()["elementwise.hit"]
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.fx.experimental.sym_node import SymNode
r = fastfake.selftest_report()
print(json.dumps({{
    "ran": bool(ran),
    "proved": bool(proved),
    "stock_key": [_stock_key._state["proved"], fastfake.stats()["stock_key.disabled"]],
    "report": r,
    "warned": [str(x.message) for x in w if "self-test" in str(x.message)],
    "walked": walked,
    "registered": sorted(fastfake._C.elementwise_report()),
    "elementwise_hits": elementwise_hits,
    "in_force": [
        repr(_install.current_options()),
        repr(fastfake._C.get_config()),
        FakeTensorProp.run_node.__module__,
        type(SymNode.__dict__["expr"]).__module__,
        type(SymNode.__dict__["maybe_as_int"]).__name__,
        _functional.is_installed(),
    ],
}}))
"""


def _install_in(tmp, before: str = "", **env) -> dict:
    r = in_subprocess(_PROBE.format(before=before), FASTFAKE_CACHE_DIR=str(tmp), **env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _stored(tmp) -> list[str]:
    d = os.path.join(tmp, "selftest")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


@pytest.fixture(scope="module")
def first_install(tmp_path_factory) -> tuple[str, dict]:
    """One first process for the whole file: a store it wrote, and what it printed."""
    base = tmp_path_factory.mktemp("first")
    return str(base), _install_in(base)


def _seeded(tmp, first_install: tuple[str, dict]) -> dict:
    """``tmp`` holds the store a first process wrote (a copy of the module's one
    first process's); returns what that process printed."""
    import shutil

    base, first = first_install
    shutil.copytree(os.path.join(base, "selftest"), os.path.join(tmp, "selftest"))
    return first


_SAME = ("torch_version", "built_for", "passed", "failures", "served", "skipped")


def test_second_process_reads_the_result_and_installs_the_same(tmp_path, first_install):
    first = _seeded(tmp_path, first_install)
    assert first["ran"] and first["report"]["source"] == "run"
    assert first["report"]["store"] == "written"
    assert len(_stored(tmp_path)) == 1
    second = _install_in(tmp_path)
    assert not second["ran"], "the programs ran although a result was kept"
    assert second["report"]["source"] == "disk" and second["report"]["store"] == "hit"
    assert {k: second["report"][k] for k in _SAME} == {k: first["report"][k] for k in _SAME}
    assert second["in_force"] == first["in_force"]
    # the pointwise registry came with the result: torch's operators were not
    # walked, the same overloads are registered, and they are served
    assert first["walked"] == 1 and second["walked"] == 0
    assert second["registered"] == first["registered"] and len(first["registered"]) > 100
    assert first["elementwise_hits"] > 0 and second["elementwise_hits"] > 0
    assert second["report"]["seconds"] < first["report"]["seconds"]
    # Another hash seed gives the same key (no address or set order in it).
    third = _install_in(tmp_path, PYTHONHASHSEED="12345")
    assert not third["ran"] and len(_stored(tmp_path)) == 1


def test_a_stored_failure_is_honoured(tmp_path, first_install):
    """The kept result decides as the run did: a feature it failed stays off, with
    the warning naming it."""
    _seeded(tmp_path, first_install)
    (name,) = _stored(tmp_path)
    path = os.path.join(tmp_path, "selftest", name)
    with open(path) as f:
        data = json.load(f)
    data["report"]["passed"]["cache"] = False
    data["report"]["failures"]["cache"] = "program on cpu: a recorded difference"
    with open(path, "w") as f:
        json.dump(data, f)
    got = _install_in(tmp_path)
    assert not got["ran"] and got["report"]["passed"]["cache"] is False
    assert any("'cache', which stays off: program on cpu: a recorded difference" in w for w in got["warned"])
    assert "cache=False" in got["in_force"][0]


@pytest.mark.parametrize(
    "before",
    [
        # A stock method replaced in this process before install().
        "from torch.fx.experimental.symbolic_shapes import ShapeEnv\n"
        "_real = ShapeEnv._maybe_evaluate_static\n"
        "ShapeEnv._maybe_evaluate_static = lambda self, *a, **k: _real(self, *a, **k)",
        # fastfake's own comparison replaced: the one case a kept result must never hide.
        "_selftest._first_difference = lambda stock, fast: None",
        # A stock module-level setting changed.
        "import torch._subclasses.fake_tensor as ft\nft.CONSTANT_NUMEL_LIMIT = 2",
        # A torch setting fake propagation reads.
        "import torch._functorch.config as c\nc.fake_tensor_allow_unsafe_data_ptr_access = "
        "not c.fake_tensor_allow_unsafe_data_ptr_access",
        # A feature no longer offered (its proven-source table emptied).
        "from fastfake.common import compat as _compat\n_compat.FAKE_PROP_SOURCES.clear()",
    ],
    ids=["torch-method", "fastfake-function", "torch-constant", "torch-config", "features"],
)
def test_a_changed_process_runs_the_programs(tmp_path, first_install, before):
    _seeded(tmp_path, first_install)
    got = _install_in(tmp_path, before)
    assert got["ran"] and got["report"]["source"] == "run", got["report"]
    assert got["report"]["store"] == "written" and len(_stored(tmp_path)) == 2


def test_what_the_process_did_before_install_keeps_the_key(tmp_path, first_install):
    """Fake tensors made before ``install()`` (modes, conversions, a symbolic
    make_fx trace) change no part of the key: the kept result is read (a describer
    counter of torch's meta_utils once made it another key per mode made)."""
    _seeded(tmp_path, first_install)
    got = _install_in(tmp_path, (
        "import torch\n"
        "from torch._subclasses.fake_tensor import FakeTensorMode\n"
        "from torch.fx.experimental.proxy_tensor import make_fx\n"
        "for _ in range(3):\n"
        "    FakeTensorMode().from_tensor(torch.randn(2, 3))\n"
        "make_fx(lambda x: x.sin().sum(0), tracing_mode='symbolic')(torch.randn(3, 4))"))
    assert not got["ran"] and got["report"]["source"] == "disk", got["report"]


def test_the_key_is_the_same_after_tracing_compiling_and_exporting():
    """In one process, everything the key covers reads the same before and after
    fake tensors, ShapeEnvs, make_fx, a dynamic compile and an export, run with
    fastfake installed and then uninstalled: no counter or cache of torch or
    fastfake is in the key (a module-level scalar that moves is found here)."""
    out = in_subprocess(
        "import json, warnings\n"
        "warnings.filterwarnings('ignore')\n"
        "import torch, fastfake\n"
        "from fastfake.core import selftest_store as store\n"
        "from torch._subclasses.fake_tensor import FakeTensorMode\n"
        "from torch.fx.experimental.symbolic_shapes import ShapeEnv\n"
        "from torch.fx.experimental.proxy_tensor import make_fx\n"
        "fastfake.install(); fastfake.uninstall()\n"
        "features = ['cache', 'elementwise']\n"
        "before = store.components(features)\n"
        "def f(x):\n"
        "    return (x.sin() + 1).sum(0)\n"
        "for on in (False, True):\n"
        "    if on:\n"
        "        fastfake.install()\n"
        "    for _ in range(3):\n"
        "        FakeTensorMode(shape_env=ShapeEnv()).from_tensor(torch.randn(3, 4))\n"
        "    make_fx(f, tracing_mode='symbolic')(torch.randn(3 + on, 4))\n"
        "    torch.compile(f, backend='aot_eager', dynamic=True)(torch.randn(5 + on, 4))\n"
        "    torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),))\n"
        "fastfake.uninstall()\n"
        "after = store.components(features)\n"
        "print(json.dumps([k for k in before if before[k] != after[k]]))\n"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], out.stdout


@pytest.mark.parametrize(
    "inject",
    ['fastfake._C._inject_fault(1, "device")', 'fastfake.tracing.fake_prop._fault = "rebind"'],
    ids=["c-fault", "python-fault"],
)
def test_an_injected_fault_is_judged_not_read(tmp_path, first_install, inject):
    _seeded(tmp_path, first_install)
    got = _install_in(tmp_path, inject)
    assert got["ran"] and got["report"]["store"] == "fault"
    assert not all(got["report"]["passed"].values()), got["report"]["passed"]
    assert len(_stored(tmp_path)) == 1  # a faulty result is not kept


_PLAIN = """
import json, sys
import fastfake
from fastfake.core import install as _install
fastfake.install()
print(json.dumps({
    "source": fastfake.selftest_report()["source"],
    "imported": "fastfake.core.selftest" in sys.modules,
    "decisions": _install.decisions(),
    "failed": {k: v for k, v in fastfake.stats().items() if k.startswith("selftest.")},
}))
"""


def test_a_kept_result_is_read_without_importing_the_self_test(tmp_path):
    """A process that finds the result kept on disk installs what the process that
    ran the programs installed, without importing them (fastfake/core/selftest.py):
    a fresh process's setup does not pay for the self-test's module."""
    got = []
    for _ in range(2):
        r = in_subprocess(_PLAIN, FASTFAKE_CACHE_DIR=str(tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        got.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = got
    assert first["source"] == "run" and first["imported"]
    assert second["source"] == "disk"
    assert not second["imported"], "install() imported the self-test's programs although a result was kept"
    assert second["decisions"] == first["decisions"] and second["failed"] == first["failed"]


def test_switched_off(tmp_path, first_install):
    _seeded(tmp_path, first_install)
    got = _install_in(tmp_path, FASTFAKE_NO_SELFTEST_CACHE="1")
    assert got["ran"] and got["report"]["store"] == "off" and got["report"]["source"] == "run"
    empty = tmp_path / "empty"
    got = _install_in(empty, FASTFAKE_NO_SELFTEST_CACHE="1")
    assert got["ran"] and _stored(empty) == []


def test_unwritable_directory_is_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    got = _install_in(blocker)
    assert got["ran"] and got["report"]["store"] == "write_failed"
    assert all(got["report"]["passed"].values())


def test_the_stock_key_proof_is_kept_with_the_result(tmp_path, first_install):
    """The proof of the C++ stock-key builder runs with the self-test and is kept
    with its result: a second process takes it (a stored negative proof too) and
    an ill-formed one makes the file unreadable."""
    first = _seeded(tmp_path, first_install)
    assert first["proved"] and first["report"]["proofs"] == {"stock_key": [True, ""]}
    second = _install_in(tmp_path)
    assert not second["ran"] and not second["proved"] and second["stock_key"] == [True, 0]
    (name,) = _stored(tmp_path)
    path = os.path.join(tmp_path, "selftest", name)
    with open(path) as f:
        data = json.load(f)
    data["report"]["proofs"]["stock_key"] = [False, "a recorded difference"]
    _write(path, data)
    got = _install_in(tmp_path)
    assert not got["ran"] and not got["proved"] and got["stock_key"] == [False, 1]
    data["report"]["proofs"]["stock_key"] = ["yes", 1]
    _write(path, data)
    got = _install_in(tmp_path)
    assert got["ran"] and got["proved"] and got["report"]["store"] == "unreadable"
    assert got["stock_key"] == [True, 0]


def test_an_unreadable_file_is_rewritten(tmp_path, first_install):
    _seeded(tmp_path, first_install)
    (name,) = _stored(tmp_path)
    path = os.path.join(tmp_path, "selftest", name)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text[: len(text) // 2])  # a truncated write
    got = _install_in(tmp_path)
    assert got["ran"] and got["report"]["store"] == "unreadable"
    assert not _install_in(tmp_path)["ran"]  # rewritten whole


def test_a_kept_pointwise_table_is_exactly_the_registry_and_an_ill_formed_one_is_rebuilt(tmp_path, first_install):
    from fastfake.elementwise import registry as _registry

    first = _seeded(tmp_path, first_install)
    (name,) = _stored(tmp_path)
    path = os.path.join(tmp_path, "selftest", name)
    with open(path) as f:
        data = json.load(f)
    assert data["pointwise"] == _registry.pointwise_table()
    data["pointwise"][0][1] = "yes"  # ill-formed: the table is built again
    _write(path, data)
    got = _install_in(tmp_path)
    assert not got["ran"] and got["report"]["store"] == "hit"  # the result still counts
    assert got["walked"] == 1 and got["registered"] == first["registered"]
    assert got["elementwise_hits"] > 0
    del data["pointwise"]  # a file without one (written before tables were kept)
    _write(path, data)
    got = _install_in(tmp_path)
    assert not got["ran"] and got["walked"] == 1 and got["registered"] == first["registered"]


# ---------------------------------------------------------------------------
# In this process: reading, the key's parts, the bound.
# ---------------------------------------------------------------------------

FEATURES = ["elementwise", "cache"]


def _good_report() -> dict:
    return {
        "torch_version": torch.__version__,
        "built_for": fastfake._C.built_for(),
        "passed": {"elementwise": True, "cache": False, "device": True},
        "failures": {"cache": "a difference"},
        "served": {"elementwise": 3, "cache": 0, "device": 2},
        "skipped": [],
        "seconds": 1.0,
    }


def _spoil(r: dict, how: str) -> dict:
    r = json.loads(json.dumps(r))
    if how == "missing feature":
        del r["passed"]["cache"], r["served"]["cache"], r["failures"]["cache"]
    elif how == "extra feature":
        r["passed"]["other"] = True
        r["served"]["other"] = 1
    elif how == "passed not bool":
        r["passed"]["elementwise"] = 1
    elif how == "served negative":
        r["served"]["elementwise"] = -1
    elif how == "failure without message":
        del r["failures"]["cache"]
    elif how == "message for a pass":
        r["failures"]["elementwise"] = "x"
    elif how == "other torch":
        r["torch_version"] = "0.0.0"
    elif how == "other build":
        r["built_for"] = "0.0.0"
    elif how == "skipped not strings":
        r["skipped"] = [1]
    elif how == "no seconds":
        del r["seconds"]
    return r


def _write(path, data) -> None:
    with open(path, "w") as f:
        f.write(data if isinstance(data, str) else json.dumps(data))


def test_load_accepts_only_a_well_formed_result_for_its_key(tmp_path):
    path = str(tmp_path / "k.json")
    assert store.load(path, "k", FEATURES) is None
    good = {"format": store.FORMAT, "key": "k", "report": _good_report()}
    _write(path, good)
    assert store.load(path, "k", FEATURES) == _good_report()
    bad = [
        "",
        "{",
        "[]",
        "\xff\xfe",
        json.dumps({**good, "format": store.FORMAT + 1}),
        json.dumps({**good, "key": "other"}),
        json.dumps({**good, "report": None}),
    ]
    for how in ("missing feature", "extra feature", "passed not bool", "served negative",
                "failure without message", "message for a pass", "other torch", "other build",
                "skipped not strings", "no seconds"):
        bad.append(json.dumps({**good, "report": _spoil(_good_report(), how)}))
    for text in bad:
        _write(path, text)
        assert store.load(path, "k", FEATURES) == "unreadable", text[:200]
    with open(path, "wb") as f:
        f.write(b"\xff\xfe\x00")
    assert store.load(path, "k", FEATURES) == "unreadable"


def _change_seen(digest):
    """A function telling whether ``digest()`` now gives a value not seen before
    (the first value counts as seen)."""
    seen = {digest()}

    def changed() -> bool:
        d = digest()
        new = d not in seen
        seen.add(d)
        return new

    return changed


def test_tree_digest_sees_every_module_change(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    mod = tmp_path / "pkg" / "sub" / "m.py"
    mod.write_text("x = 1\n")
    (tmp_path / "pkg" / "lib.so").write_bytes(b"\0" * 8)
    root = str(tmp_path / "pkg")
    changed = _change_seen(lambda: store.tree_digest(root))

    # Not covered: byte caches, headers, data files.
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "m.cpython.pyc").write_bytes(b"x")
    (tmp_path / "pkg" / "notes.txt").write_text("x")
    assert not changed()
    mod.write_text("x = 2\n")  # same size, new time
    os.utime(mod, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert changed()
    mod.write_text("x = 22\n")
    assert changed()
    (tmp_path / "pkg" / "lib.so").write_bytes(b"\0" * 9)
    assert changed()
    (tmp_path / "pkg" / "sub" / "n.py").write_text("")
    assert changed()
    os.unlink(tmp_path / "pkg" / "sub" / "n.py")
    assert not changed()  # back to an earlier state: the earlier digest
    os.rename(mod, tmp_path / "pkg" / "m.py")
    assert changed()


def _reference_listing(root: str) -> bytes:
    """The listing ``_C.file_listing`` makes, walked in Python."""
    out = []
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            out.append(f"!{d}:OSError\n")
            continue
        dirs = []
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if e.name not in store._SKIP_DIRS:
                        dirs.append(e.path)
                elif e.name.endswith(store._FILE_SUFFIXES):
                    st = e.stat()
                    out.append(f"{e.path}\0{st.st_size}\0{st.st_mtime_ns}\n")
            except OSError:
                out.append(f"!{e.path}:OSError\n")
        stack.extend(reversed(dirs))
    return "".join(out).encode()


def _listing(root: str) -> bytes:
    return fastfake._C.file_listing(root, list(store._FILE_SUFFIXES), sorted(store._SKIP_DIRS))


def test_file_listing_is_the_reference_walk(tmp_path):
    root = tmp_path / "pkg"
    for d in ("a/b/c", "include/x", "__pycache__", "Zed", "a/bin", "é"):
        (root / d).mkdir(parents=True)
    for f in ("a/m.py", "a/b/n.so", "a/b/c/o.pyd", "include/x/h.py", "__pycache__/p.py", "Zed/q.dll",
              "a/bin/r.py", "é/s.py", "t.dylib", "u.txt", "a/b/v.pyc", "B.py"):
        (root / f).write_text("x" * len(f))
    os.symlink(root / "a", root / "link_to_dir")  # not entered
    os.symlink(root / "a" / "m.py", root / "link.py")  # the target's stat
    os.symlink(root / "missing.py", root / "dangling.py")  # unreadable entry
    os.symlink(root / "a", root / "dir_link.py")  # a directory through a link: its stat
    os.mkdir(root / "closed")
    (root / "closed" / "w.py").write_text("")
    os.chmod(root / "closed", 0)
    try:
        got = _listing(str(root))
        assert got == _reference_listing(str(root))
        assert b"dangling.py:OSError" in got and b"link_to_dir" not in got
        if os.access(root / "closed", os.R_OK):  # running as a superuser
            assert b"closed/w.py" in got
        else:
            assert f"!{root / 'closed'}:OSError".encode() in got
    finally:
        os.chmod(root / "closed", 0o755)
    assert _listing(str(tmp_path / "absent")) == _reference_listing(str(tmp_path / "absent"))
    torch_root = os.path.dirname(torch.__file__)
    assert _listing(torch_root) == _reference_listing(torch_root)
    # a path that is no UTF-8 text: a digest, not an error
    assert store.tree_digest(str(tmp_path / "\udcff")) != store.tree_digest(str(tmp_path / "absent"))


def _put(tag: str, data: bytes) -> bytes:
    return tag.encode() + str(len(data)).encode() + b":" + data


def _ref_type_name(v, with_module: bool) -> bytes:
    t = type(v)
    return (_put("s", f"{t.__module__}".encode()) if with_module else b"") + _put("s", f"{t.__qualname__}".encode())


def _ref_stable(v, depth: int = 0) -> bytes:
    """The stream ``_C.stable_stream`` writes, in Python."""
    if v is None:
        return b"N"
    if v is True or v is False:
        return b"T" if v else b"F"
    if type(v) is str:
        return _put("s", v.encode())
    if type(v) is bytes:
        return _put("b", v)
    if isinstance(v, (int, float, str, bytes, complex)):
        return _put("r", repr(v).encode())
    if depth > 4:
        return b"t" + _ref_type_name(v, False)
    if isinstance(v, types.CodeType):
        return _ref_code(v, depth + 1)
    if isinstance(v, (tuple, list)):
        return b"(" + b"".join(_ref_stable(x, depth + 1) for x in v) + b")"
    if isinstance(v, (frozenset, set)):
        return b"{" + b"".join(sorted(_ref_stable(x, depth + 1) for x in v)) + b"}"
    return b"o" + _ref_type_name(v, True)


def _ref_names(t: tuple) -> bytes:
    return b"(" + b"".join(_ref_stable(x) for x in t) + b")"


def _ref_code(c: types.CodeType, depth: int = 0) -> bytes:
    return (b"c(" + _put("b", c.co_code) + _ref_stable(c.co_filename, depth)
            + f"i{c.co_firstlineno};".encode() + _ref_names(c.co_names) + _ref_names(c.co_varnames)
            + _ref_stable(c.co_consts, depth) + b")")


def _ref_callable(name: str, f) -> bytes:
    if isinstance(f, (staticmethod, classmethod)):
        f = f.__func__
    if isinstance(f, property):
        parts = (("get", f.fget), ("set", f.fset), ("del", f.fdel))
        return b"".join(_ref_callable(f"{name}.{part}", g) for part, g in parts if g is not None)
    code = getattr(f, "__code__", None)
    module, qualname = getattr(f, "__module__", None), getattr(f, "__qualname__", None)
    head = _put("s", name.encode()) + _put("s", f"{module}".encode()) + _put("s", f"{qualname}".encode())
    if isinstance(code, types.CodeType):
        return b"F" + head + _ref_code(code) + _ref_stable(getattr(f, "__defaults__", None))
    return b"B" + head + _ref_type_name(f, True)


def _ref_scalar(name: str, v, volatile) -> bytes:
    return b"" if name in volatile else b"V" + _put("s", name.encode()) + _put("r", repr(v).encode())


def _reference_module_stream(mod: types.ModuleType, volatile=frozenset()) -> bytes:
    """The stream ``_C.module_code_stream`` writes, in Python."""
    out = []
    for name, v in sorted(vars(mod).items()):
        if isinstance(v, type):
            if v.__module__ != mod.__name__:
                out.append(b"C" + _put("s", name.encode()) + _put("s", f"{v.__module__}".encode())
                           + _put("s", f"{v.__qualname__}".encode()))
                continue
            out.append(b"K" + _put("s", name.encode())
                       + b"(" + b"".join(_put("s", f"{b.__qualname__}".encode()) for b in v.__mro__) + b")")
            for attr, a in sorted(vars(v).items()):
                if callable(a) or isinstance(a, (staticmethod, classmethod, property)):
                    out.append(_ref_callable(f"{name}.{attr}", a))
                elif a is None or isinstance(a, (bool, int, float, str)):
                    out.append(_ref_scalar(f"{name}.{attr}", a, volatile))
        elif isinstance(v, types.ModuleType):
            continue
        elif callable(v):
            out.append(_ref_callable(name, v))
        elif (v is None or isinstance(v, (bool, int, float, str))) and not name.startswith("__"):
            out.append(_ref_scalar(name, v, volatile))
    return b"".join(out)


def _probe_module(name: str, source: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(source, mod.__dict__)  # (its classes' __module__ is the module's name)
    return mod


_ODD_SOURCE = (
    "import math, functools, enum, collections\n"
    "A = 1\nB = 2.5\nC = 'é'\nD = None\nE = True\n__hidden__ = 3\nVOL = 7\n"
    "F = b'x'\nG = 3j\nH = (1, 2)\n"
    "def deep(x=((((((1,),),),),),), y=frozenset({'b', 'a', 'é'}), z=[1.0, None]):\n"
    "    def inner():\n        return {1: 2}, lambda: 3.5j, b'\\xff', ('t', ('u', ('v', ('w', ('x',)))))\n"
    "    return inner\n"
    "class K(collections.OrderedDict):\n"
    "    flag = False\n    count = 3\n    VOL = 1\n    text = 'k'\n    other = [1]\n"
    "    def m(self, a=(1, {2, 3})):\n        return a\n"
    "    @property\n    def p(self):\n        return 1\n"
    "    @p.setter\n    def p(self, v):\n        pass\n"
    "    @classmethod\n    def c(cls):\n        return cls\n"
    "    @staticmethod\n    def s():\n        return (1, 2.5)\n"
    "    @functools.cached_property\n    def cp(self):\n        return 2\n"
    "    builtin = len\n"
    "    part = functools.partial(print, 1)\n"
    "class Color(enum.Enum):\n    RED = 1\n"
    "sqrt = math.sqrt\n"
    "OrderedDict = collections.OrderedDict\n"
    "wrapped = functools.lru_cache(None)(deep)\n"
    "part = functools.partial(deep, 1)\n"
)


def test_module_code_stream_is_the_reference_walk():
    """``_C.module_code_stream`` writes the stream the walk in Python writes: for a
    module of every kind of entry, and for every module the key reads."""
    import importlib

    odd = _probe_module("fastfake_probe_odd", _ODD_SOURCE)
    volatile = frozenset({"VOL", "K.VOL"})
    got = fastfake._C.module_code_stream(odd, volatile)
    assert got == _reference_module_stream(odd, volatile)
    assert b"s3:VOL" not in got and b"__hidden__" not in got and b"Vs7:K.countr1:3" in got
    assert fastfake._C.module_code_stream(odd, frozenset()) == _reference_module_stream(odd)
    names = list(store.TORCH_MODULES) + sorted(n for n in sys.modules if n.startswith("fastfake"))
    for name in names:
        mod = importlib.import_module(name)
        vol = store.VOLATILE_SCALARS.get(name, frozenset())
        assert fastfake._C.module_code_stream(mod, vol) == _reference_module_stream(mod, vol), name
    for v in (None, 1, True, 2.5, "s", b"b", 1j, (1, [2, (3,)]), {"b", "a"}, frozenset({1, 2}),
              ((((((1,),),),),),), object(), deep_code := compile("x = 1", "<probe>", "exec"),
              (deep_code, {deep_code})):
        assert fastfake._C.stable_stream(v) == _ref_stable(v), v


def test_module_code_stream_raises_what_the_walk_raises():
    mod = types.ModuleType("fastfake_probe_err")

    class Boom:
        def __call__(self):
            pass

        def __getattr__(self, name):
            raise KeyError(name)  # not an AttributeError: it propagates

    mod.f = Boom()
    with pytest.raises(KeyError):
        _reference_module_stream(mod)
    with pytest.raises(KeyError):
        fastfake._C.module_code_stream(mod, frozenset())
    mod.__dict__[1] = 2  # a key sorted() cannot order among str keys
    with pytest.raises(TypeError):
        fastfake._C.module_code_stream(mod, frozenset())
    # a property that is its own getter: the walk in Python and in C raise
    # RecursionError (C++'s stack is not what bounds it)
    loop = types.ModuleType("fastfake_probe_loop")
    p = property()
    p.__init__(p)
    loop.K = type("K", (), {"p": p, "__module__": loop.__name__})
    with pytest.raises(RecursionError):
        _reference_module_stream(loop)
    with pytest.raises(RecursionError):
        fastfake._C.module_code_stream(loop, frozenset())


def test_module_digest_sees_replaced_code_and_scalars():
    mod = types.ModuleType("fastfake_probe_mod")
    exec(
        "LIMIT = 3\n"
        "def f(x, y=1):\n    return x + y\n"
        "class C:\n    flag = True\n"
        "    def m(self):\n        return {'a', 'b'}\n"
        "    @property\n    def p(self):\n        return 1\n"
        "    @staticmethod\n    def s():\n        return (1, 2.5)\n",
        mod.__dict__,
    )
    for v in vars(mod).values():
        if isinstance(v, type):
            v.__module__ = mod.__name__
    changed = _change_seen(lambda: store.module_digest(mod))

    assert not changed()
    mod.LIMIT = 4
    assert changed()
    mod.f = lambda x, y=1: x + y
    assert changed()
    mod.f.__defaults__ = (2,)
    assert changed()
    mod.C.m = lambda self: None
    assert changed()
    mod.C.p = property(lambda self: 2)
    assert changed()
    mod.C.s = staticmethod(lambda: (1, 2.5))
    assert changed()
    mod.C.flag = False
    assert changed()
    mod.C.extra = len  # a builtin put in place
    assert changed()


def test_components_name_torch_xla_when_imported(tmp_path, monkeypatch):
    before = store.components(FEATURES)
    assert before["features"] == "elementwise,cache"
    xla = tmp_path / "torch_xla"
    xla.mkdir()
    (xla / "__init__.py").write_text("")
    fake = types.ModuleType("torch_xla")
    fake.__file__ = str(xla / "__init__.py")
    fake.__version__ = "9.9.9"
    if "torch_xla" in sys.modules:
        pytest.skip("torch_xla is imported here")
    monkeypatch.setitem(sys.modules, "torch_xla", fake)
    after = store.components(FEATURES)
    assert before["torch_xla"] == "absent" and after["torch_xla"].startswith("9.9.9 ")
    assert store.key_of(after) != store.key_of(before)
    assert store.key_of(store.components(["cache", "elementwise"])) != store.key_of(before)


def test_at_most_max_files_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_FILES", 3)
    d = tmp_path / "selftest"
    for i in range(5):
        assert store.save(str(d / f"k{i}.json"), f"k{i}", {}, _good_report())
        t = time.time_ns() - (10 - i) * 10**9
        os.utime(d / f"k{i}.json", ns=(t, t))
    assert sorted(os.listdir(d)) == ["k2.json", "k3.json", "k4.json"]
    # Reading one makes it the most recently used.
    assert store.load(str(d / "k2.json"), "k2", FEATURES) == _good_report()
    assert store.save(str(d / "k5.json"), "k5", {}, _good_report())
    assert sorted(os.listdir(d)) == ["k2.json", "k4.json", "k5.json"]


def test_a_dead_writers_temporary_file_is_removed(tmp_path):
    d = tmp_path / "selftest"
    d.mkdir()
    old, fresh = d / ".tmp-old.json", d / ".tmp-fresh.json"
    old.write_text("{")
    fresh.write_text("{")  # another process writing now
    t = time.time_ns() - _cache_files.STALE_TMP_NS - 10**9
    os.utime(old, ns=(t, t))
    assert store.save(str(d / "k.json"), "k", {}, _good_report())
    assert sorted(os.listdir(d)) == [".tmp-fresh.json", "k.json"]


def test_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTFAKE_CACHE_DIR", str(tmp_path / "a"))
    assert store.directory() == str(tmp_path / "a" / "selftest")
    monkeypatch.delenv("FASTFAKE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert store.directory() == str(tmp_path / "x" / "fastfake" / "selftest")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert store.directory() == str(tmp_path / "h" / ".cache" / "fastfake" / "selftest")
    monkeypatch.setenv("FASTFAKE_NO_SELFTEST_CACHE", "1")
    assert store.lookup(FEATURES).outcome == "off"


def test_the_key_covers_every_folder_of_the_package(monkeypatch):
    """The fastfake component digests the whole package tree, every subsystem folder
    included (the store module lives in fastfake/core/: a digest of its own folder
    would keep a result across a change elsewhere)."""
    import fastfake

    seen = []
    real = store.tree_digest
    monkeypatch.setattr(store, "tree_digest", lambda root: seen.append(root) or real(root))
    store.components(FEATURES)
    assert os.path.dirname(os.path.abspath(fastfake.__file__)) in seen
