"""Dynamo's function-name tables, kept on disk for the next process (``funcnames``).

For every FX node Dynamo makes from a new source line, ``SubgraphTracer._create_proxy``
builds a header naming the enclosing function (for a debug log line it formats only
when that log is on), through ``torch._dynamo.funcname_cache.get_funcname``. The
first ask about a file in a process runs ``_add_file``: the whole file through the
pure-Python ``tokenize`` into a table line -> qualified function name. A first compile
of a transformers model tokenizes five to seven files of its own, transformers' and
torch's: 24-49 ms, 1.5-4 % of a first static compile (docs/performance.md). Every
process pays it again for the same files.

The table is a function of the file's bytes alone: ``_add_file`` reads them through
``tokenize.open`` (which decodes them by their encoding declaration) and derives the
table from the token stream, writing ``cache[filename]`` and nothing else. So
fastfake reads the file's bytes (one read) and

* finds a record under their digest: the table is rebuilt from it into
  ``funcname_cache.cache[filename]``, the same items in the same order (stock's
  table is built in ascending line order, and so is the record);
* finds none: stock's own ``_add_file`` code runs on those very bytes -- its code
  object with ``tokenize.open`` answering from the bytes read, so a file that changes
  meanwhile cannot give a table of other bytes -- and the table it wrote is recorded.

A file that cannot be read, and any error of stock's code on the bytes, goes to
stock's ``_add_file`` itself (which reads the file again and answers, or raises, as
it does without fastfake). Offered where ``_add_file``, ``get_funcname`` and
``tokenize.open`` are source-identical to code it was proven on
(:data:`fastfake.common.compat.FUNCNAMES_SOURCES`); the records' names carry the
digest of that code and of ``tokenize``'s module, and the file the installation's key
(torch, Python, fastfake: fastfake/store/files.py).

Kept in ``$FASTFAKE_CACHE_DIR/store/funcnames/<installation>.json`` exactly as the
learned-record store keeps its file (atomic replace under a lock, a digest checked on
reading, a corrupt, truncated, foreign or stale file ignored and counted as
``funcnames.file.<outcome>``), at most ``MAX_BYTES``; new records are written at exit
and at ``uninstall()``. With ``install(crosscheck=True)`` nothing is served: stock's
code runs on the bytes and its table must equal the kept one.

Counters (``stats()``): ``funcnames.served``, ``funcnames.learned``,
``funcnames.stock.unreadable`` (the file could not be read: stock's ``_add_file``),
``funcnames.stock.error`` (stock's code raised on the bytes: stock's ``_add_file``),
``funcnames.stock.large`` (a table over ``MAX_RECORD_BYTES``: not kept),
``funcnames.invalid`` (a kept record that is not a table: dropped), ``funcnames.full``,
``funcnames.crosschecked``, ``funcnames.file.*``.
"""
from __future__ import annotations

import hashlib
import io
import os
import sys
import types
from collections import Counter
from typing import Any

from fastfake.common import compat as _compat
from fastfake.store import files as _files
from fastfake.store import table as _table

#: the largest records text kept (a transformers model's files: 10-40 KB each)
MAX_BYTES = 4 * 1024 * 1024
#: the largest one table kept
MAX_RECORD_BYTES = 512 * 1024

_NAMES = ("served", "learned", "stock.unreadable", "stock.error", "stock.large", "invalid", "full",
          "crosschecked")
_counts: Counter = Counter()
_file_counts: Counter = Counter()

_ON = [False]
_CROSS = [False]
#: (stock's funcname_cache module, stock's _add_file, the records' name prefix)
_STATE: list = []


def counters() -> dict[str, int]:
    out = {f"funcnames.{k}": _counts[k] for k in _NAMES}
    out.update({f"funcnames.file.{k}": _file_counts[k] for k in _files.OUTCOMES})
    return out


def reset_counters() -> None:
    _counts.clear()
    _file_counts.clear()


def saved_counters() -> dict:
    return {"records": dict(_counts), "files": dict(_file_counts)}


def restore_counters(saved: Any) -> None:
    _counts.clear()
    _counts.update(saved["records"])
    _file_counts.clear()
    _file_counts.update(saved["files"])


def available() -> bool:
    return _compat.funcnames_proven()


def path() -> str | None:
    d, key = _files.directory(), _files.installation_key()
    return None if d is None or key is None else os.path.join(d, "funcnames", f"{key}.json")


#: the records by name (the code's digest and the file bytes'), at most MAX_BYTES
_kept = _table.Table(path, _file_counts, lambda: MAX_BYTES, _counts)


def _setup() -> tuple:
    if not _STATE:
        import tokenize

        from torch._dynamo import funcname_cache

        from fastfake.common.originals import original

        stock = original(funcname_cache, "_add_file")
        try:
            with open(tokenize.__file__, "rb") as f:
                tok = f.read()
        except (OSError, TypeError, AttributeError):
            tok = b""
        prefix = hashlib.blake2b(
            repr((_compat.funcnames_source_digest(), sys.version)).encode() + tok, digest_size=8
        ).hexdigest()
        _STATE[:] = [funcname_cache, stock, prefix]
    return tuple(_STATE)


# --------------------------------------------------------------------------- #
# Records: {"names": [qualified names, first use first], "lines": [line, name index, line, ...]}
# (flat: a table held in memory is three tracked objects, not one per line)
# --------------------------------------------------------------------------- #


def _encode(table: dict) -> dict | None:
    names: dict[str, int] = {}
    lines: list[int] = []
    last = 0
    for line, name in table.items():
        if type(line) is not int or type(name) is not str or line <= last:
            return None  # not a table as stock builds one: not kept
        last = line
        lines += (line, names.setdefault(name, len(names)))
    return {"names": list(names), "lines": lines}


def _decode(rec: Any) -> dict | None:
    """The table a record holds, or None if it is not one."""
    if type(rec) is not dict or set(rec) != {"names", "lines"}:
        return None
    names, lines = rec["names"], rec["lines"]
    if type(names) is not list or type(lines) is not list or len(lines) % 2 or not all(
            type(n) is str for n in names):
        return None
    table: dict[int, str] = {}
    last = 0
    for j in range(0, len(lines), 2):
        line, k = lines[j], lines[j + 1]
        if type(line) is not int or type(k) is not int or line <= last or not 0 <= k < len(names):
            return None
        last = line
        table[line] = names[k]
    return table


# --------------------------------------------------------------------------- #
# Stock's code on the bytes read
# --------------------------------------------------------------------------- #


def _tokenize_on(data: bytes) -> types.ModuleType:
    """``tokenize`` as stock's ``_add_file`` sees it while it runs on bytes already
    read: a module with tokenize's names, whose ``open`` is ``tokenize.open`` reading
    those bytes instead of the file."""
    import tokenize

    shim = types.ModuleType("tokenize")
    shim.__dict__.update(vars(tokenize))

    def open(filename: Any) -> io.TextIOWrapper:  # noqa: A001 - tokenize.open, on the bytes
        buffer = io.BytesIO(data)
        encoding, _lines = tokenize.detect_encoding(buffer.readline)
        buffer.seek(0)
        text = io.TextIOWrapper(buffer, encoding, line_buffering=True)
        text.mode = "r"  # type: ignore[misc]
        return text

    shim.open = open  # type: ignore[attr-defined]
    return shim


def _stock_on(stock: Any, data: bytes, filename: str) -> bool:
    """Run stock's ``_add_file`` code on ``data`` as ``filename``'s bytes; False if it
    raised (nothing was written then: it raises before its one write)."""
    g = dict(stock.__globals__)
    g["tokenize"] = _tokenize_on(data)
    fn = types.FunctionType(stock.__code__, g, stock.__name__, stock.__defaults__, stock.__closure__)
    try:
        fn(filename)
    except Exception:
        return False
    return True


def add_file(filename: str) -> None:
    """``funcname_cache._add_file`` while fastfake is installed."""
    module, stock, prefix = _setup()
    if not _ON[0]:
        return stock(filename)
    try:
        with open(filename, "rb") as f:
            data = f.read()
    except (OSError, TypeError, ValueError):
        _counts["stock.unreadable"] += 1
        return stock(filename)
    if not _kept.loaded:
        _kept.load()
    name = f"{prefix}:{hashlib.blake2b(data, digest_size=20).hexdigest()}"
    kept = None
    rec = _kept.records.get(name)
    if rec is not None:
        kept = _decode(rec)
        if kept is None:
            del _kept.records[name]
            _counts["invalid"] += 1
        elif not _CROSS[0]:
            module.cache[filename] = kept
            _counts["served"] += 1
            return None
    if not _stock_on(stock, data, filename):
        _counts["stock.error"] += 1
        module.cache.pop(filename, None)
        return stock(filename)
    made = module.cache.get(filename)
    if kept is not None:  # crosscheck
        _crosscheck(filename, kept, made)
        return None
    enc = _encode(made) if type(made) is dict else None
    if enc is None:
        return None
    size = _table.size_of(name, enc)
    if size > MAX_RECORD_BYTES:
        _counts["stock.large"] += 1
        return None
    _kept.learn(name, enc, size)
    return None


def _crosscheck(filename: str, kept: dict, made: Any) -> None:
    from fastfake.parity.crosscheck import CrosscheckError

    _counts["crosschecked"] += 1
    if type(made) is not dict or list(kept.items()) != list(made.items()):
        raise CrosscheckError(
            f"fastfake: the function-name table kept for {filename!r} differs from the one "
            "stock's funcname_cache._add_file builds from the same bytes"
        )


flush = _kept.flush
clear = _kept.clear
isolated = _kept.isolated


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): ``funcname_cache._add_file``
    replaced or put back."""
    if not available():
        return
    if not on and _ON[0]:
        flush()
    module, _stock, _prefix = _setup()
    from fastfake.common.originals import patch

    _ON[0] = on
    _CROSS[0] = on and crosscheck
    patch(module, "_add_file", add_file if on else None)
