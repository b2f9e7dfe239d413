"""The install-time self-test's result, kept on disk for an unchanged installation.

The self-test (:mod:`fastfake.core.selftest`) costs about a second per process; a
restarted job on the same installation would pay it again for the same answer.
So its report is kept in ``$FASTFAKE_CACHE_DIR/selftest/<key>.json`` (default
``$XDG_CACHE_HOME/fastfake``, else ``~/.cache/fastfake``) and reused only where
everything it was proven on is unchanged. The key covers

* the files: name, size and modification time of every Python module and shared
  library of torch, sympy, optree, fastfake itself (its extension included) and,
  when imported, torch_xla; the name of the PrivateUse1 device and, when imported,
  torch_tpu; the versions of torch (with its git revision), Python
  and the release the extension was built for;
* the process: the code of every function and method of the torch modules fastfake
  stands in for or calls (fake tensors, their converter and implementations,
  FunctionalTensor, proxy tracing, SymNode, ShapeEnv, the FX interpreter and
  FakeTensorProp, dispatch statistics) and of fastfake's own modules imported so
  far, their module-level scalars, fastfake's table of proven stock sources and the
  features the self-test would run -- so a method replaced in this process before
  ``install()`` gives another key, and the self-test runs (a module not imported
  yet has only its file, which the files above cover: the self-test's programs,
  fastfake/core/selftest.py, are imported only when they run);
* torch's fake-tensor and symbolic-shape settings.

A fault injected for testing (``_C._inject_fault``, ``_fake_prop._fault``) skips
the store: the self-test must judge it. An unreadable, truncated or ill-formed
file, or one whose content does not match its key, is ignored (the self-test runs
and the file is rewritten). Nothing here raises: a directory that cannot be
written only means the next process runs the self-test too. At most
``MAX_FILES`` results are kept (the least recently used go first), and temporary
files a writer that died left behind are removed after ten minutes.

``FASTFAKE_NO_SELFTEST_CACHE=1`` turns the store off (neither read nor written).
What happened is in ``selftest_report()``: ``source`` (``run`` or ``disk``) and
``store`` (one of ``OUTCOMES``).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
import types
from dataclasses import dataclass, field

import torch

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.tracing import fake_prop as _fake_prop
from fastfake.elementwise import registry as _registry
from fastfake.common import cache_files as _cache_files
from fastfake.common.env import cache_root as _cache_root
from fastfake.common.env import flag as _env_flag
from fastfake._version import __version__

FORMAT = 1
MAX_FILES = 32

#: What can happen to the stored result (``selftest_report()["store"]``).
OUTCOMES = ("hit", "written", "write_failed", "unreadable", "off", "fault")

#: torch modules whose functions and classes the key covers (missing ones count as
#: missing: a release without one gets another key).
TORCH_MODULES = (
    "torch._subclasses.fake_tensor",
    "torch._subclasses._fake_tensor_utils",
    "torch._subclasses.fake_impls",
    "torch._subclasses.fake_utils",
    "torch._subclasses.meta_utils",
    "torch._subclasses.functional_tensor",
    "torch.fx.experimental.symbolic_shapes",
    "torch.fx.experimental.sym_node",
    "torch.fx.experimental.proxy_tensor",
    "torch.fx.interpreter",
    "torch.fx.passes.fake_tensor_prop",
    "torch._prims_common",
    "torch._ops",
    "torch._guards",
    "torch.utils._stats",
    "torch.utils._sympy.value_ranges",
)

#: Counters of those modules (module-level, or ``Class.attr``), left out of the key:
#: they count what the process did before ``install()`` (a describer id per
#: FakeTensorMode made, stock's cache hits and misses), not how torch behaves
#: (tests/test_selftest_store.py finds them).
VOLATILE_SCALARS = {
    "torch._subclasses.meta_utils": frozenset({"DESCRIBER_NEXT_ID"}),
    "torch._subclasses.fake_tensor": frozenset({"FakeTensorMode.cache_hits", "FakeTensorMode.cache_misses"}),
}

#: torch settings read by fake propagation and ShapeEnv.
TORCH_CONFIGS = ("torch._functorch.config", "torch.fx.experimental._config")

_FILE_SUFFIXES = (".py", ".so", ".pyd", ".dylib", ".dll")
_SKIP_DIRS = frozenset({"__pycache__", "include", "share", "bin"})


def directory() -> str | None:
    """Where results are kept; None when there is no cache directory to use (no
    ``FASTFAKE_CACHE_DIR``, ``XDG_CACHE_HOME`` or home directory)."""
    root = _cache_root()
    return None if root is None else os.path.join(root, "selftest")


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------


@dataclass
class Report:
    """What the install-time self-test found: from its programs
    (:func:`fastfake.core.selftest.run`), or a result kept for this installation
    (:meth:`from_stored`, with no program run and the self-test module not imported)."""

    torch_version: str
    built_for: str
    passed: dict[str, bool] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: "run" (the programs ran in this process) or "disk" (a result kept for this
    #: installation, read below), and what happened to the store.
    source: str = "run"
    store: str = "off"
    #: proofs of this installation that are not self-test programs, kept with the
    #: result: name -> [proven, why not] (the stock key builder: fastfake/stock/key.py)
    proofs: dict[str, list] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "torch_version": self.torch_version,
            "built_for": self.built_for,
            "passed": dict(self.passed),
            "failures": dict(self.failures),
            "served": dict(self.served),
            "skipped": list(self.skipped),
            "seconds": self.seconds,
            "source": self.source,
            "store": self.store,
            "proofs": {k: list(v) for k, v in self.proofs.items()},
        }

    @classmethod
    def from_stored(cls, d: dict, seconds: float) -> Report:
        """A report kept on disk (validated by the store), as read in ``seconds``."""
        return cls(
            torch_version=d["torch_version"],
            built_for=d["built_for"],
            passed=dict(d["passed"]),
            failures=dict(d["failures"]),
            served=dict(d["served"]),
            skipped=list(d["skipped"]),
            seconds=seconds,
            source="disk",
            store="hit",
            proofs={k: list(v) for k, v in d.get("proofs", {}).items()},
        )


# ---------------------------------------------------------------------------
# The key
# ---------------------------------------------------------------------------


def tree_digest(root: str) -> str:
    """Name, size and modification time of every module and shared library under
    ``root`` (caches and headers skipped), in a fixed order (the listing is made in
    C++: ``_C.file_listing``)."""
    try:
        listing = _C.file_listing(root, list(_FILE_SUFFIXES), sorted(_SKIP_DIRS))
    except (UnicodeError, ValueError, TypeError) as e:  # a path C++ cannot take
        listing = f"!{root!r}:{type(e).__name__}".encode()
    return hashlib.blake2b(listing, digest_size=16).hexdigest()


def _package(name: str) -> str:
    mod = sys.modules.get(name)
    if mod is None:
        return "absent"
    file = getattr(mod, "__file__", None)
    version = getattr(mod, "__version__", "?")
    if not file:
        return f"{version} (no file)"
    return f"{version} {tree_digest(os.path.dirname(file))}"


def _stable(v) -> bytes:
    """Bytes for ``v`` that are the same in every process (no addresses, no
    hash-seeded orders): ``_C.stable_stream`` (csrc/common/code_digest.h)."""
    return _C.stable_stream(v)


def module_digest(mod: types.ModuleType) -> str:
    """The code of every function and method a module defines or holds, and its
    module-level scalars: the stream ``_C.module_code_stream`` writes
    (csrc/common/code_digest.h; tests/test_selftest_store.py writes the same in
    Python), hashed."""
    volatile = VOLATILE_SCALARS.get(mod.__name__, frozenset())
    return hashlib.blake2b(_C.module_code_stream(mod, volatile), digest_size=16).hexdigest()


def _modules_digest(names) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in names:
        try:
            mod = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a missing module is part of the key
            h.update(f"{name}: missing ({type(e).__name__})\n".encode())
            continue
        h.update(f"{name}: {module_digest(mod)}\n".encode())
    return h.hexdigest()


def _configs() -> str:
    # (each value's stream delimits itself: their concatenation is unambiguous)
    h = hashlib.blake2b(digest_size=16)
    for name in TORCH_CONFIGS:
        h.update(_stable(name))
        try:
            cfg = importlib.import_module(name)
            items = cfg.get_config_copy()
        except Exception as e:  # noqa: BLE001 - part of the key
            h.update(b"!" + _stable(type(e).__name__))
            continue
        for k, v in sorted(items.items()):
            h.update(_stable(k) + _stable(v))
        h.update(b";")
    return h.hexdigest()


def _proven_sources() -> str:
    tables = {k: v for k, v in sorted(vars(_compat).items()) if k.isupper()}
    return hashlib.blake2b(_stable(list(map(repr, tables.items()))), digest_size=16).hexdigest()


def components(features: list[str]) -> dict[str, str]:
    """Everything the stored result is keyed on, as named texts."""
    # the whole package (this module is fastfake/core/selftest_store.py)
    fastfake_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    own = sorted(n for n in sys.modules if n == "fastfake" or n.startswith("fastfake."))
    return {
        "format": str(FORMAT),
        "fastfake": f"{__version__} {tree_digest(fastfake_dir)}",
        "built_for": _C.built_for(),
        "python": f"{sys.version} {sys.implementation.cache_tag}",
        "torch": f"{torch.__version__} {torch.version.git_version} "
        f"{tree_digest(os.path.dirname(torch.__file__))}",
        "sympy": _package("sympy"),
        "optree": _package("optree"),
        "torch_xla": _package("torch_xla"),
        # an out-of-tree device (TorchTPU's tpu): the self-test runs on it too
        "privateuse1": f"{_compat.privateuse1_device()} {_package('torch_tpu')}",
        "torch_code": _modules_digest(TORCH_MODULES),
        "fastfake_code": _modules_digest(own),
        "torch_config": _configs(),
        "proven_sources": _proven_sources(),
        "features": ",".join(features),
    }


def key_of(parts: dict[str, str]) -> str:
    return hashlib.blake2b(
        json.dumps(parts, sort_keys=True).encode(), digest_size=20
    ).hexdigest()


# ---------------------------------------------------------------------------
# Reading and writing
# ---------------------------------------------------------------------------


def faults_requested() -> bool:
    """Whether a fault was injected for testing in this process."""
    return _C._faults_requested() > 0 or _fake_prop._fault is not None


def _valid_report(r, features: list[str]) -> bool:
    """The stored report has the self-test's shape and judges exactly ``features``
    (plus the device descriptor)."""
    if not isinstance(r, dict):
        return False
    if not (isinstance(r.get("torch_version"), str) and isinstance(r.get("built_for"), str)):
        return False
    if r["torch_version"] != torch.__version__ or r["built_for"] != _C.built_for():
        return False
    passed, served, failures = r.get("passed"), r.get("served"), r.get("failures")
    if not (isinstance(passed, dict) and isinstance(served, dict) and isinstance(failures, dict)):
        return False
    if set(passed) != {*features, "device"} or set(served) != set(passed):
        return False
    if not all(type(v) is bool for v in passed.values()):
        return False
    if not all(type(v) is int and v >= 0 for v in served.values()):
        return False
    if set(failures) != {k for k, ok in passed.items() if not ok}:
        return False
    if not all(isinstance(v, str) for v in failures.values()):
        return False
    proofs = r.get("proofs", {})
    if not (isinstance(proofs, dict) and all(
            isinstance(k, str) and isinstance(v, list) and len(v) == 2 and type(v[0]) is bool and isinstance(v[1], str)
            for k, v in proofs.items())):
        return False
    skipped = r.get("skipped")
    if not (isinstance(skipped, list) and all(isinstance(s, str) for s in skipped)):
        return False
    return isinstance(r.get("seconds"), (int, float))


def load_entry(path: str, key: str, features: list[str]) -> tuple[dict | None | str, list | None]:
    """``(report, pointwise)`` stored at ``path``: the report (a dict), ``None``
    when there is none, or ``"unreadable"`` when the file is there but cannot be
    used; and the pointwise-op table kept with it (``None`` when absent or
    ill-formed: then it is built again, the report still counts)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except (OSError, ValueError, UnicodeDecodeError):
        return "unreadable", None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return "unreadable", None
    report = data.get("report")
    if not _valid_report(report, features):
        return "unreadable", None
    try:
        os.utime(path)  # most recently used
    except OSError:
        pass
    pointwise = data.get("pointwise")
    return report, pointwise if _registry.valid_table(pointwise) else None


def load(path: str, key: str, features: list[str]) -> dict | None | str:
    """The stored report at ``path`` (see :func:`load_entry`)."""
    return load_entry(path, key, features)[0]


def save(
    path: str, key: str, parts: dict[str, str], report: dict, pointwise: list | None = None
) -> bool:
    """Write atomically; keep at most MAX_FILES results. False when it could not."""
    d = os.path.dirname(path)
    data = {
        "format": FORMAT,
        "key": key,
        "fastfake": __version__,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "components": parts,
        "report": report,
    }
    if pointwise is not None:
        data["pointwise"] = pointwise
    if not _cache_files.replace_json(path, data, indent=1):
        return False
    _cache_files.bound(d, MAX_FILES)
    return True


@dataclass
class Lookup:
    """What the store has for this installation: ``outcome`` is ``hit`` (``report``
    is the stored one), ``miss``, ``unreadable`` (a file that cannot be used),
    ``off`` or ``fault`` (the store is not used)."""

    outcome: str
    report: dict | None = None
    path: str | None = None
    key: str | None = None
    parts: dict[str, str] | None = None
    pointwise: list | None = None  # the pointwise-op table kept with a hit

    def keep(self, report: dict, pointwise: list | None = None) -> str:
        """Store ``report`` (a self-test that just ran) where this lookup looked;
        returns the outcome to record: ``written`` / ``write_failed`` after a miss,
        else the lookup's own (an unreadable file is overwritten). ``pointwise``
        (:func:`fastfake.elementwise.registry.pointwise_table`) is kept with it."""
        if self.path is None or self.key is None or self.parts is None:
            return self.outcome
        ok = save(self.path, self.key, self.parts, report, pointwise)
        if self.outcome == "miss":
            return "written" if ok else "write_failed"
        return self.outcome


def lookup(features: list[str]) -> Lookup:
    """Look for the stored result of a self-test of ``features`` on this installation."""
    where = directory()
    if _env_flag("FASTFAKE_NO_SELFTEST_CACHE") or where is None:
        return Lookup("off")
    if faults_requested():
        return Lookup("fault")
    parts = components(features)
    key = key_of(parts)
    path = os.path.join(where, f"{key}.json")
    got, pointwise = load_entry(path, key, features)
    if got is None:
        return Lookup("miss", None, path, key, parts)
    if got == "unreadable":
        return Lookup("unreadable", None, path, key, parts)
    return Lookup("hit", got, path, key, parts, pointwise)
