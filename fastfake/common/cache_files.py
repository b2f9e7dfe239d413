"""Files in fastfake's cache directory: written atomically, bounded in number.

Shared by the self-test's kept result (fastfake/core/selftest_store.py) and the
learned-record store (fastfake/store/files.py). Nothing here raises ``OSError``.
"""
from __future__ import annotations

import json
import os
import tempfile
import time

#: A writer's temporary file older than this was left by a process that died while
#: writing; it is removed when the directory is bounded.
STALE_TMP_NS = 600 * 10**9


def replace_json(path: str, data: object, *, indent: int | None = None, sync: bool = False) -> bool:
    """Write ``data`` as JSON to a temporary file beside ``path`` (flushed to disk
    with ``sync``), then put it in place with ``os.replace``: a reader sees the old
    file or the new one, never a part. False when it could not."""
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError:
        return False
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def bound(d: str, max_files: int) -> None:
    """Keep the ``max_files`` most recently written ``*.json`` files of ``d``; remove
    temporary files older than ``STALE_TMP_NS``."""
    try:
        files = []
        now = time.time_ns()
        with os.scandir(d) as it:
            for e in it:
                if e.name.startswith(".tmp-"):
                    if now - e.stat().st_mtime_ns > STALE_TMP_NS:
                        os.unlink(e.path)
                elif e.name.endswith(".json"):
                    files.append((e.stat().st_mtime_ns, e.path))
        files.sort()
        for _, p in files[: max(0, len(files) - max_files)]:
            os.unlink(p)
    except OSError:
        pass
