"""The learned-record store's file: one per installation, read once, written at exit.

``$FASTFAKE_CACHE_DIR/store/<key>.json`` (the cache directory of the self-test's
result, fastfake/core/selftest_store.py: default ``$XDG_CACHE_HOME/fastfake``, else
``~/.cache/fastfake``), where ``<key>`` covers what the self-test's result is keyed
on (torch's files, build and revision, Python, sympy, optree, fastfake's own files
and build, the code of the torch modules fastfake stands in for, torch's fake-tensor
and symbolic-shape settings, the table of proven stock sources: ``install()`` hands
them over, :func:`set_installation`) and this file's format. Another torch, fastfake or Python is another file.

The file holds the records as one JSON text and a digest of it. It is used only
when it parses, names this key and format, and the digest matches: a truncated,
corrupt, foreign or stale file is ignored and counted (``stats()``:
``store.file.<outcome>``), never used. A process writes its new records at exit
(and at ``uninstall()``): under an exclusive lock on ``<key>.lock`` (other writers
wait up to ``LOCK_SECONDS``, then skip: ``store.file.busy``), it reads the file
again, adds its records after those already there, drops the oldest until the text
is at most ``MAX_BYTES``, and replaces the file atomically (a temporary file in the
same directory, flushed to disk, then ``os.replace``). A reader never sees a
partial file. At most ``MAX_FILES`` installations are kept (least recently written
first); temporary files a writer that died left behind are removed after ten
minutes. Nothing here raises: a directory that cannot be read or written means
only that the store starts empty or is not kept.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections import Counter
from typing import Any

from fastfake._version import __version__
from fastfake.common import cache_files as _cache_files
from fastfake.common.env import cache_root

FORMAT = 1
#: the largest records text kept per installation
MAX_BYTES = 16 * 1024 * 1024
MAX_FILES = 8
LOCK_SECONDS = 2.0

#: What reading and writing can come to (``stats()``: ``store.file.<outcome>``).
OUTCOMES = ("loaded", "absent", "unreadable", "corrupt", "foreign", "stale", "too_large", "off",
            "written", "write_failed", "busy")

counts: Counter = Counter()


def directory() -> str | None:
    root = cache_root()
    return None if root is None else os.path.join(root, "store")


def set_installation(parts: dict[str, str]) -> None:
    """What this installation is (the self-test result's key components,
    fastfake/core/selftest_store.py, less the features it judged): the file's key."""
    parts = dict(parts)
    parts.pop("features", None)
    parts["store_format"] = str(FORMAT)
    _KEY.clear()
    _KEY.append(hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=20).hexdigest())


def installation_key() -> str | None:
    """The key of this installation's file (None before ``install()`` said what
    the installation is)."""
    return _KEY[0] if _KEY else None


_KEY: list[str] = []


def path() -> str | None:
    d, key = directory(), installation_key()
    return None if d is None or key is None else os.path.join(d, f"{key}.json")


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=20).hexdigest()


def read(where: str | None = None, *, counter: Counter | None = None,
         max_bytes: int | None = None) -> list:
    """The records kept for this installation, oldest first (``[]`` when there are
    none or the file cannot be used; the outcome is counted in ``counter``, by
    default this module's). ``where`` and ``max_bytes`` name another kind of file
    kept the same way (fastfake/store/funcnames.py)."""
    outcome, records = _read(where or path(), MAX_BYTES if max_bytes is None else max_bytes)
    (counts if counter is None else counter)[outcome] += 1
    return records


def _read(p: str | None, max_bytes: int | None = None) -> tuple[str, list]:
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    if p is None:
        return "off", []
    try:
        size = os.stat(p).st_size
        if size > 2 * max_bytes + 4096:
            return "too_large", []
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return "absent", []
    except (OSError, UnicodeDecodeError):
        return "unreadable", []
    except ValueError:
        return "corrupt", []
    if not isinstance(data, dict):
        return "corrupt", []
    if data.get("format") != FORMAT:
        return "stale", []
    if data.get("key") != installation_key():
        return "foreign", []
    text, digest = data.get("records"), data.get("digest")
    if not isinstance(text, str) or not isinstance(digest, str) or _digest(text) != digest:
        return "corrupt", []
    try:
        records = json.loads(text)
    except ValueError:
        return "corrupt", []
    if not isinstance(records, list) or not all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) for r in records
    ):
        return "corrupt", []
    return "loaded", records


def write(new: list, where: str | None = None, *, counter: Counter | None = None,
          max_bytes: int | None = None) -> str:
    """Add ``new`` records (``[name, record]``, oldest first) to the file; the
    outcome (counted as :func:`read` counts)."""
    outcome = _write(where or path(), new, MAX_BYTES if max_bytes is None else max_bytes)
    (counts if counter is None else counter)[outcome] += 1
    return outcome


def _write(p: str | None, new: list, max_bytes: int) -> str:
    if p is None:
        return "off"
    d = os.path.dirname(p)
    try:
        os.makedirs(d, exist_ok=True)
        lock = os.open(p[: -len(".json")] + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return "write_failed"
    try:
        if not _lock(lock):
            return "busy"
        outcome, old = _read(p, max_bytes)
        names = {r[0] for r in new}
        records = [r for r in old if r[0] not in names] + list(new)
        text = json.dumps(records, separators=(",", ":"))
        while len(text) > max_bytes and records:
            records = records[max(1, len(records) // 8):]  # the oldest eighth goes
            text = json.dumps(records, separators=(",", ":"))
        data = {"format": FORMAT, "key": installation_key(), "fastfake": __version__,
                "python": sys.version.split()[0],
                "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "digest": _digest(text), "records": text}
        return "written" if _cache_files.replace_json(p, data, sync=True) else "write_failed"
    finally:
        os.close(lock)  # (releases the lock)
        _cache_files.bound(d, MAX_FILES)


def _lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: atomic replace alone
        return True
    deadline = time.monotonic() + LOCK_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        except OSError:
            return False


def counters() -> dict[str, int]:
    return {f"store.file.{k}": counts[k] for k in OUTCOMES}


def reset_counters() -> None:
    counts.clear()


def saved_counters() -> dict:
    return dict(counts)


def restore_counters(saved: Any) -> None:
    counts.clear()
    counts.update(saved)
