"""Records that serve other ShapeEnvs, kept on disk and served in later processes.

fastfake/cache/portable.py records a symbolic call stock missed, in a form that
serves the first call of the same call in another ShapeEnv when that ShapeEnv's
facts about the call's symbols are the same (the signature), stock's cache there
would miss, and the evaluations stock's kernel made replay with the same results.
Every ShapeEnv of a process benefits; this module carries the records to the next
process, where every `dynamic=True` compile starts with a new ShapeEnv whose
symbols get the same names for the same program.

**Kept** (at exit and at ``uninstall()``, from the extension's table:
``_C.portable_export``): a record whose key holds no SymFloat argument and the
ShapeEnv settings by value, whose op is an aten or prims overload, and whose parts
all read back as the same values (fastfake/store/symcodec.py's :func:`keepable`).
A key names SymNode values by ids this process interned
(fastfake/cache/learn.py); the file holds the values themselves (expression,
type, hint, constant, and the FX node field: None or False, never a node) and the
positions they take in the key, and the op by name.

**Loaded** once, at the first symbolic miss after ``install()`` (not at
``install()``: a program without symbolic shapes never reads the file): each
record is decoded, its values interned again and its op looked up, and it joins
the extension's table as if learned in a ShapeEnv of this process. It then serves
exactly as such a record does: admitted by the same checks against the serving
ShapeEnv (fastfake/cache/portable.py's ``admit``: the signature, stock's cache,
the replayed evaluations), in Python the first time (the C++ fast form holds this
process's templates and is not kept); that first admission builds the fast form
from the keys it stored (:func:`fast_for`), and later ShapeEnvs admit the record in
C++.

A record's parts of 48 characters or more (stock's stripped keys, entries, the
evaluations' expressions) are kept once per file under the digest of their text
and referred to from every record that holds them; read back, each is decoded once
and checked against its digest (fastfake/store/symcodec.py's :func:`pool`).

The file, ``<store>/<key>.symbolic.json``, is kept as the other store files
(fastfake/store/files.py): one per installation, digest-checked, written under a
lock, bounded in bytes (``MAX_BYTES``); a file that cannot be used and a record that
does not decode are ignored and counted (``store.symbolic.file.<outcome>``,
``store.symbolic.invalid``). Counters: ``store.symbolic.*``.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

from fastfake.cache import learn as _learn
from fastfake.cache import portable as _portable
from fastfake.store import codec as _codec
from fastfake.store import files as _files
from fastfake.store import symcodec as _symcodec
from fastfake.store import table as _table

#: the largest records text kept per installation
MAX_BYTES = 32 * 1024 * 1024
_K_SYM = 110  # csrc/cache/internal.h's kSym: the tag before a value id in a key
_SETTINGS_AT = 5  # csrc/cache/keys.cpp's global_key: 2 = the settings by value

_NAMES = ("loaded", "learned", "invalid", "full", "declined.key", "declined.values", "declined.encode")
_counts: Counter = Counter()
_file_counts: Counter = Counter()
_ON = [False]
_AT_EXIT = [False]


def counters() -> dict[str, int]:
    from fastfake import _C

    out = {f"store.symbolic.{k}": _counts[k] for k in _NAMES}
    # (first calls served from a record read from the file: csrc/cache/portable.cpp)
    out["store.symbolic.served"] = _C.portable_disk_served()
    out.update({f"store.symbolic.file.{k}": _file_counts[k] for k in _files.OUTCOMES})
    return out


def reset_counters() -> None:
    from fastfake import _C

    _counts.clear()
    _file_counts.clear()
    _C.portable_set_disk_served(0)


def saved_counters() -> tuple:
    from fastfake import _C

    return Counter(_counts), Counter(_file_counts), _C.portable_disk_served()


def restore_counters(saved: tuple) -> None:
    from fastfake import _C

    _counts.clear()
    _counts.update(saved[0])
    _file_counts.clear()
    _file_counts.update(saved[1])
    _C.portable_set_disk_served(saved[2])


def path() -> str | None:
    d, key = _files.directory(), _files.installation_key()
    return None if d is None or key is None else os.path.join(d, f"{key}.symbolic.json")


# (a record read from the file counts its name and 64 bytes, as the other store's:
# the file itself is bounded when written)
_kept = _table.Table(path, _file_counts, lambda: MAX_BYTES, _counts, loaded_size=lambda name, rec: len(name) + 64)


def available() -> bool:
    from fastfake.store import records as _records

    return _records.available() and _portable.available()


# --------------------------------------------------------------------------- #
# Keeping: the extension's records as JSON
# --------------------------------------------------------------------------- #


def export() -> int:
    """Add the records learned since the last export to the table (written by
    :func:`flush`); how many were added."""
    from fastfake import _C

    items = _C.portable_export()
    if not items:
        return 0
    values = _learn.interned_values()
    n = 0
    kept_all = []
    with _symcodec.batch():
        for item in items:
            parts: dict = {}
            kept_all.append((_describe(item, values, parts), parts))
    for kept, parts in kept_all:
        if kept is None:
            continue
        name, rec = kept
        if name in _kept.records:
            continue
        for d, part in parts.items():
            pname = "@" + d
            if pname not in _kept.records:
                if not _kept.learn(pname, part, _table.size_of(pname, part)):
                    break
            else:
                _kept.new[pname] = part  # (written again after the file's oldest: kept with the record)
        else:
            if _kept.learn(name, rec, _table.size_of(name, rec)):
                n += 1
    return n


def _describe(item: tuple, values: dict, parts: dict) -> tuple[str, dict] | None:
    """A record of the extension's as kept: (name, JSON value); its large parts go
    to ``parts`` (digest -> JSON value, fastfake/store/symcodec.py's :func:`pool`)."""
    key, positions, hit, miss, masks, seeds, record = item
    func = hit[1]
    op = _codec.encode(func)
    if (not isinstance(op, list) or op[0] != "op" or key[0] != id(func) or len(key) <= _SETTINGS_AT + 1
            or key[_SETTINGS_AT] != 2 or key[-1] != 0):
        _counts["declined.key"] += 1
        return None
    k = list(key)
    k[0] = 0
    vids = []
    for p in positions:
        value = values.get(key[p]) if 0 < p < len(key) and key[p - 1] == _K_SYM else None
        if value is None or (value[4] is not None and value[4] is not False):
            _counts["declined.values"] += 1  # (an id no longer interned, or an FX node)
            return None
        enc = _symcodec.keepable(tuple(value), parts)
        if enc is _symcodec._MISSING:
            _counts["declined.values"] += 1
            return None
        vids.append([p, enc])
        k[p] = 0
    recipes = _symcodec.keepable((hit, miss, tuple(masks), seeds), parts)
    rec = _symcodec.keepable(record, parts) if recipes is not _symcodec._MISSING else _symcodec._MISSING
    if rec is _symcodec._MISSING:
        _counts["declined.encode"] += 1
        return None
    head = json.dumps([op, k, vids], separators=(",", ":"))
    name = hashlib.blake2b(head.encode(), digest_size=16).hexdigest()
    return name, {"op": op, "key": k, "vids": vids, "recipes": recipes, "record": rec}


def flush() -> str | None:
    """Export, then write the records learned since the last write."""
    if _ON[0]:
        try:
            export()
        except Exception:  # noqa: BLE001 - keeping records never breaks a program's exit
            _counts["declined.encode"] += 1
    return _kept.flush()


# --------------------------------------------------------------------------- #
# Loading: the file's records into the extension's table
# --------------------------------------------------------------------------- #


def load() -> int:
    """Read the file and add its records to the extension's table (called once, by
    the extension, at the first symbolic miss); how many were added."""
    from fastfake import _C

    if not _ON[0]:
        return 0
    if not _kept.loaded:
        _kept.load()
    records = _kept.records
    parts = {name[1:]: rec for name, rec in records.items() if name[:1] == "@"}
    items = []
    with shared_parts(parts):
        for name, rec in list(records.items()):
            if name[:1] == "@" or name in _kept.new:
                continue  # (a shared part; a record learned here: the extension has it)
            try:
                items.append(_decode(rec))
            except (_codec.Invalid, TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError):
                _counts["invalid"] += 1
                del records[name]
    n = _C.portable_import(items) if items else 0
    _counts["loaded"] += n
    return n


@contextlib.contextmanager
def shared_parts(parts: dict) -> Iterator[None]:
    """Records decoded in the block find their shared parts in ``parts``."""
    outer = _symcodec._PARTS[0]
    _symcodec._PARTS[0] = parts
    try:
        yield
    finally:
        _symcodec._PARTS[0] = outer
        if outer is None:
            _symcodec._SHARED.clear()  # (decoded parts live only in what holds them)


class _Record:
    """A kept record's Python part (fastfake/cache/portable.py's record tuple),
    decoded at its first use: where its key first meets a call (most records of a
    file may be of programs this process never runs). A part that does not decode
    raises :class:`~fastfake.store.codec.Invalid` there (counted); the call then
    goes to stock."""

    __slots__ = ("_kept", "_parts", "_value")

    def __init__(self, kept: Any, parts: dict) -> None:
        self._kept = kept
        self._parts = parts
        self._value: tuple | None = None

    def __getitem__(self, i: Any) -> Any:
        v = self._value
        if v is None:
            v = self._decode()
        return v[i]

    def __len__(self) -> int:
        return 8

    def _decode(self) -> tuple:
        if self._kept is None:
            raise _codec.Invalid("record")
        try:
            with shared_parts(self._parts):
                v = _symcodec.decode(self._kept)
            if type(v) is not tuple or len(v) != 8:
                raise _codec.Invalid("record")
        except Exception:
            _counts["invalid"] += 1
            self._kept = self._parts = None
            raise
        self._value = v
        self._kept = self._parts = None
        return v


def _decode(rec: Any, parts: dict | None = None) -> tuple:
    if type(rec) is not dict or set(rec) != {"op", "key", "vids", "recipes", "record"}:
        raise _codec.Invalid("record fields")
    op = _codec.decode(rec["op"])
    k = rec["key"]
    if type(k) is not list or not all(type(x) is int and -(1 << 63) <= x < (1 << 63) for x in k):
        raise _codec.Invalid("key")
    k = list(k)
    k[0] = id(op)
    if type(rec["vids"]) is not list:
        raise _codec.Invalid("value ids")
    for p, enc in rec["vids"]:
        if type(p) is not int or not 0 < p < len(k) or k[p - 1] != _K_SYM or k[p] != 0:
            raise _codec.Invalid("value position")
        value = _symcodec.decode(enc)
        if (type(value) is not tuple or len(value) != 5 or value[1] not in (int, float, bool)
                or value[4] not in (None, False)):
            raise _codec.Invalid("value")
        k[p] = _learn.intern(value)
    recipes = _symcodec.decode(rec["recipes"])
    if type(recipes) is not tuple or len(recipes) != 4:
        raise _codec.Invalid("recipes")
    hit, miss, masks, seeds = recipes
    if type(hit) is not tuple or type(miss) is not tuple or len(hit) != 4 or len(miss) != 4:
        raise _codec.Invalid("recipes")
    if hit[1] is not op or miss[1] is not op:
        raise _codec.Invalid("recipe op")
    return tuple(k), hit, miss, masks, seeds, _Record(rec["record"], _symcodec._PARTS[0] if parts is None else parts)


def fast_for(record: Any, keys: tuple) -> tuple | None:
    """The C++ fast form (fastfake/cache/portable.py's ``_fast_form``) of a record
    read from disk, once admitted in Python and committed in a ShapeEnv of this
    process: built from the keys that commit stored (the call's own, with this
    call's SymNodes, and its nested calls', stripped by stock as stored), as learning
    builds it from the keys stock's miss stored. Later ShapeEnvs then admit the
    record in C++ by the same checks."""
    key, nested = keys
    stored = [k for k, _ in nested[0]] if nested and nested[0] else []
    return _portable._fast_form(record[1], record[3], record[4], key, record[2], record[5], stored)


# --------------------------------------------------------------------------- #
# Switching, clearing
# --------------------------------------------------------------------------- #


def clear() -> None:
    """Forget the records in memory; the file is read again at the next symbolic
    miss (while on)."""
    from fastfake import _C

    _kept.clear()
    if _ON[0]:
        _C.portable_set_loader(load)


def isolated():
    return _kept.isolated()


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py)."""
    from fastfake import _C

    if not on and _ON[0]:
        flush()
    _ON[0] = on
    _C.portable_set_loader(load if on and not _kept.loaded else None)
    _C.portable_set_fast_for(fast_for if on else None)
    if on and not _AT_EXIT[0]:
        _AT_EXIT[0] = True
        atexit.register(flush)
