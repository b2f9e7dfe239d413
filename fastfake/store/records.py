"""Stock's misses on calls without symbols, kept on disk and served in later processes.

Every process pays a stock miss (the fake kernel, 1-5 ms) for the first call of
each distinct op, shapes, strides and dtypes it meets, though an earlier process on
the same installation made exactly that call. Stock's own dispatch cache lives
only in memory. This module keeps what those misses did and does it again in a
later process instead of running the kernel.

**Recorded** (``FakeTensorMode._cached_dispatch_impl`` wrapped while the store is
on): a call whose stock key holds no symbols (stock's ShapeEnv-free cache,
``FakeTensorMode.cache``) and that stock missed, when

* the key and the entry stock stored are made only of values
  fastfake/store/codec.py keeps exactly (an aten or prims op; dtypes, devices,
  layouts, memory formats, ints, floats, strings, bools, None, type markers;
  tensor outputs and in-place outputs), and read back equal;
* the output is what stock's *hit* builds from that entry: no view op and no
  view output (a hit builds a fresh tensor over the input's storage, the kernel a
  view sharing its version counter), no named tuple (a hit builds a plain tuple),
  each new tensor a plain ``FakeTensor`` of this mode at storage offset 0 whose
  storage holds exactly its elements (what ``empty_strided`` allocates), each
  in-place output the very argument;
* the kernel dispatched nothing of its own (no Python decomposition's nested
  calls: served, they would not run, and fastfake's result cache and elementwise
  path would not learn from them as they do where stock runs them), and stock's
  cache and counters moved by exactly one miss and one entry, this call's
  (nothing else logged by fastfake.cache.portable's key log, counted by
  ``torch.utils._stats`` or added to stock's counters).

**Served** (on the key stock's ``_cached_dispatch_impl`` has just built, before it
looks it up: fastfake.cache.portable.key_logger hands it over): a call made outside
any stock kernel, whose key is kept and not in stock's cache. The entry is stored
into stock's cache as stock's miss stores it and counted as its miss; stock then
finds it and builds the output as its hit does -- which is what its miss returned
where the record was made (checked there) -- and counts nothing more. Not served
under stock's own cache crosscheck (``cache_crosscheck_enabled``) or while real
tensors are propagated (``fake_tensor_propagate_real_tensors``).

With ``install(crosscheck=True)`` nothing is served: a call the store could serve
runs stock's miss, and the record that miss makes must equal the kept one
(:class:`fastfake.parity.crosscheck.CrosscheckError` otherwise).

Records hold ops, dtypes and such (never a mode, ShapeEnv or tensor), at most
``files.MAX_BYTES`` of them in memory. New records are written at exit and at
``uninstall()`` (fastfake/store/files.py). Counters: ``store.*`` (``served``,
``learned``, ``miss``, ``declined.*``, ``invalid``, ``file.*``).
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

import torch
from torch._subclasses import fake_tensor as ft
from torch.utils import _stats as torch_stats

from fastfake.cache import portable as _portable
from fastfake.common import compat as _compat
from fastfake.stock import cache as _stock_cache
from fastfake.store import codec as _codec
from fastfake.store import files as _files
from fastfake.store import table as _table

_NAMES = ("served", "learned", "miss", "invalid", "full", "crosschecked",
          "declined.mode", "declined.output", "declined.nested", "declined.encode")
_counts: Counter = Counter()

_ON = [False]  # serving and recording
_CROSS = [False]  # crosscheck: record and compare, never serve

# One frame per call of stock's _cached_dispatch_impl in progress (while on).
_STACK: list = []


class _Frame:
    __slots__ = ("key", "snap", "start", "expect")

    def __init__(self) -> None:
        self.key = None
        self.snap = None  # stock's cache state before a miss being recorded
        self.start = 0
        self.expect = None  # crosscheck: the kept record for this call


def counters() -> dict[str, int]:
    out = {f"store.{k}": _counts[k] for k in _NAMES}
    out.update(_files.counters())
    return out


def reset_counters() -> None:
    _counts.clear()
    _files.reset_counters()


def saved_counters() -> dict:
    return {"records": dict(_counts), "files": _files.saved_counters()}


def restore_counters(saved: Any) -> None:
    _counts.clear()
    _counts.update(saved["records"])
    _files.restore_counters(saved["files"])


def available() -> bool:
    return _compat.store_entries_known()


# --------------------------------------------------------------------------- #
# The table
# --------------------------------------------------------------------------- #


class _Table(_table.Table):
    """The records (name: the key's JSON text), at most ``files.MAX_BYTES`` of
    them, with the op of each (a call is looked up by its op first) and the entries
    decoded so far."""

    def __init__(self) -> None:
        # (a record read from the file counts its name and 64 bytes: its text is not
        # made again for each)
        super().__init__(_files.path, _files.counts, lambda: _files.MAX_BYTES, _counts,
                         loaded_size=lambda name, rec: len(name) + 64)
        #: name -> the entry the record holds, decoded
        self.decoded: dict[str, tuple] = {}
        self.ops: set = set()

    def admit(self, name: str, rec: Any) -> bool:
        op = _op_of(rec)
        if op is None:
            _counts["invalid"] += 1
            return False
        self.ops.add(op)
        return True

    def clear(self) -> None:
        super().clear()
        self.decoded.clear()
        self.ops.clear()

    def saved(self) -> tuple:
        return super().saved(), dict(self.decoded), set(self.ops)

    def restore(self, saved: tuple) -> None:
        super().restore(saved[0])
        self.decoded.update(saved[1])
        self.ops.update(saved[2])


_kept = _Table()


def _op_of(rec: Any) -> Any:
    try:
        if type(rec) is not dict:
            return None
        return _codec.decode(rec.get("op"))
    except _codec.Invalid:
        return None


def _decode(name: str, rec: dict) -> Any:
    """The entry a kept record holds (None, counted, if it is not one)."""
    try:
        if set(rec) != {"op", "entry"}:
            raise _codec.Invalid("record fields")
        return _codec.decode_entry(rec["entry"])
    except (_codec.Invalid, TypeError, ValueError, KeyError):
        _counts["invalid"] += 1
        return None


# --------------------------------------------------------------------------- #
# Serving: FakeTensorMode._cache_key
# --------------------------------------------------------------------------- #


def at_key(mode: Any, state: Any, func: Any, key: Any) -> None:
    """Each key stock's ``_cached_dispatch_impl`` builds, before it looks it up
    (handed over by ``FakeTensorMode._cache_key``'s wrapper,
    fastfake.cache.portable.key_logger). While the store is off: one flag read."""
    if _ON[0] and _STACK and not state.cache_on_shape_env():
        _at_key(mode, key, func)


def _at_key(mode: Any, key: Any, func: Any) -> None:
    frame = _STACK[-1]
    if frame.key is not None:
        return  # (not this call's own key)
    frame.key = key
    cache = ft.FakeTensorMode.cache
    if cache.get(key) is not None:
        return  # stock hits
    if not _kept.loaded:
        _kept.load()
    if func in _kept.ops and len(_STACK) == 1:
        # (only a call made outside stock's kernels: served inside one, it would not
        # run as it does where stock's kernel makes it, and fastfake's result cache
        # and elementwise path would not learn from it as they do there)
        _serve(mode, key, frame)
    if cache.get(key) is None:
        _begin(mode, frame)  # stock misses: record it


def _serve(mode: Any, key: Any, frame: _Frame) -> None:
    name = _codec.key_text(key)
    rec = _kept.records.get(name) if name is not None else None
    if rec is None:
        _counts["miss"] += 1
        return
    entry = _kept.decoded.get(name)
    if entry is None:
        entry = _decode(name, rec)
        if entry is None:
            del _kept.records[name]
            return
        _kept.decoded[name] = entry
    if mode.cache_crosscheck_enabled or _propagating_real_tensors():
        _counts["declined.mode"] += 1
        return
    if _CROSS[0]:
        frame.expect = rec
        return
    # what stock's miss does to its cache and counters (its hit, next, counts one
    # hit: taken back here)
    M = ft.FakeTensorMode
    ft._set_cache_key(M.cache, key, entry)
    M.cache_misses += 1
    M.cache_hits -= 1
    _counts["served"] += 1


def _propagating_real_tensors() -> bool:
    return bool(getattr(torch._functorch.config, "fake_tensor_propagate_real_tensors", False))


# --------------------------------------------------------------------------- #
# Recording: FakeTensorMode._cached_dispatch_impl
# --------------------------------------------------------------------------- #


def _state(mode: Any) -> tuple:
    _stock_cache.flush()
    M = ft.FakeTensorMode
    env = mode.shape_env
    return (M.cache_hits, M.cache_misses, dict(M.cache_bypasses), len(M.cache),
            len(env.fake_tensor_cache) if env is not None else 0, dict(torch_stats.simple_call_counter))


def _begin(mode: Any, frame: _Frame) -> None:
    frame.snap = _state(mode)
    frame.start = len(_portable._KEY_LOG)
    _portable._OPEN[0] += 1


def _end(frame: _Frame) -> list:
    if frame.snap is None:
        return []
    logged = _portable._KEY_LOG[frame.start:]
    _portable._OPEN[0] -= 1
    if _portable._OPEN[0] <= 0:
        _portable._OPEN[0] = 0
        _portable._KEY_LOG.clear()
    return logged


def dispatch_wrapper(original: Any) -> Any:
    """``FakeTensorMode._cached_dispatch_impl`` with a frame per call while the store
    is on (the miss it turns out to be is recorded)."""

    def _cached_dispatch_impl(self, func, types, args, kwargs):
        if not _ON[0]:
            return original(self, func, types, args, kwargs)
        frame = _Frame()
        _STACK.append(frame)
        try:
            out = original(self, func, types, args, kwargs)
        except BaseException:
            _pop(frame)
            raise
        logged = _pop(frame)
        if frame.snap is not None:
            _learn(self, func, args, out, frame, logged)
        return out

    _cached_dispatch_impl.__wrapped__ = original  # type: ignore[attr-defined]
    _cached_dispatch_impl.__qualname__ = original.__qualname__
    _cached_dispatch_impl.__doc__ = original.__doc__
    return _cached_dispatch_impl


def _pop(frame: _Frame) -> list:
    while _STACK:
        top = _STACK.pop()
        logged = _end(top)
        if top is frame:
            return logged
    return []


def _learn(mode: Any, func: Any, args: Any, out: Any, frame: _Frame, logged: list) -> None:
    rec = _record(mode, func, args, out, frame, logged)
    if frame.expect is not None:
        _crosscheck(func, frame, rec)
    if rec is None:
        return
    name, record = rec
    if name not in _kept.records:
        _kept.learn(name, record, _table.size_of(name, record))


def _crosscheck(func: Any, frame: _Frame, rec: Any) -> None:
    from fastfake.parity.crosscheck import CrosscheckError

    _counts["crosschecked"] += 1
    if rec is None or rec[1] != frame.expect:
        got = "nothing it could keep" if rec is None else json.dumps(rec[1])[:400]
        raise CrosscheckError(
            f"fastfake store: {func}: the kept record differs from what stock's miss does now: "
            f"kept {json.dumps(frame.expect)[:400]}; now {got}")


def _record(mode: Any, func: Any, args: Any, out: Any, frame: _Frame, logged: list) -> tuple | None:
    M = ft.FakeTensorMode
    key = frame.key
    cache = M.cache
    entry = cache.get(key)
    if type(entry) is not ft._DispatchCacheValidEntry:
        return None  # (a negative entry: nothing to keep)
    hits, misses, bypasses, static, held, calls = frame.snap
    now = _state(mode)
    if (
        now[3] != static + 1 or now[4] != held or next(reversed(cache)) is not key
        or logged or now[0] != hits or now[1] != misses + 1
        or now[2] != bypasses or now[5] != calls
    ):
        # a kernel that dispatched calls of its own (or a count stock's miss does
        # not make): served, they would not run, and fastfake's result cache and
        # elementwise path would not learn from them as they do where stock runs
        # them (nor count later calls in stock's counters by what they learned)
        _counts["declined.nested"] += 1
        return None
    if not _plain_output(mode, func, args, out, entry):
        _counts["declined.output"] += 1
        return None
    record = _encode(func, key, entry)
    if record is None:
        _counts["declined.encode"] += 1
    return record


def _encode(func: Any, key: Any, entry: Any) -> tuple | None:
    name = _codec.key_text(key)
    op = _codec.encode(func)
    enc = _codec.encode_entry(entry)
    if name is None or enc is None or not isinstance(op, list):
        return None
    # read back: the same key, entry and op, or nothing is kept
    try:
        if _codec.key_from_text(name) != key or _codec.decode(op) is not func:
            return None
        if _codec.decode_entry(enc) != entry:
            return None
    except _codec.Invalid:
        return None
    return name, json.loads(json.dumps({"op": op, "entry": enc}))


def _plain_output(mode: Any, func: Any, args: Any, out: Any, entry: Any) -> bool:
    """The output is what stock's hit builds from ``entry`` (module docstring)."""
    if func.is_view:
        return False
    infos = entry.output_infos
    if entry.is_output_tuple:
        if type(out) is not tuple or len(out) != len(infos):
            return False
        outs = out
    else:
        if len(infos) != 1:
            return False
        outs = (out,)
    for info, o in zip(infos, outs):
        if info.view_idx is not None:
            return False
        if info.inplace_idx is not None:
            if info.inplace_idx >= len(args) or o is not args[info.inplace_idx]:
                return False
            continue
        m = info.metadata
        if m is None or type(o) is not ft.FakeTensor or o.fake_mode is not mode:
            return False
        if o._is_view() or o.is_inference() or o.storage_offset() != 0 or o.layout != torch.strided:
            return False
        if tuple(o.shape) != tuple(m.shape) or o.stride() != tuple(m.stride) or o.dtype != m.dtype:
            return False
        if o.requires_grad != m.requires_grad or o.is_conj() != m.is_conj or o.is_neg() != m.is_neg:
            return False
        if o.untyped_storage().nbytes() != _bytes_of(o.shape, o.stride(), o.dtype):
            return False
    return True


def _bytes_of(shape, stride, dtype) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, stride))) * dtype.itemsize


# --------------------------------------------------------------------------- #
# Writing, switching, clearing
# --------------------------------------------------------------------------- #


flush = _kept.flush
clear = _kept.clear
isolated = _kept.isolated


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py)."""
    if not on and _ON[0]:
        flush()
    _ON[0] = on
    _CROSS[0] = on and crosscheck
    _STACK.clear()
