"""Stock's dispatch-cache keys and entries as plain JSON values, and back.

A record kept on disk (fastfake/store/records.py) holds stock's key for a call
without symbols and the entry stock's miss stored for it. Both are built of a few
kinds of values: the op overload, dtypes, devices, layouts, memory formats, the
type markers stock puts before each argument (``<class 'int'>``), ints, floats,
strings, bools, None, the ShapeEnv settings, and, in an entry, ``TensorMetadata``.
Each has one JSON form here; anything else cannot be kept (``None`` from the
encoders), and a value read back is rebuilt only from these kinds -- an unknown tag,
type or op, or a wrong field, raises :class:`Invalid` and the record is ignored.
Nothing is ever evaluated or imported from what a file says.

Floats are kept as ``float.hex`` (exact); ``True`` and ``1`` stay distinct (stock's
keys put a type marker before each, so the kept form is never less strict).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import torch
from torch._subclasses import fake_tensor as ft


class Invalid(ValueError):
    """A kept value that does not decode to what this release builds."""


_TYPES: dict[str, type] = {}
for _t in (int, float, bool, str, bytes, complex, tuple, list, dict, type(None), slice, type(Ellipsis),
           torch.Size, torch.device, torch.dtype, torch.layout, torch.memory_format):
    _TYPES[f"{_t.__module__}.{_t.__qualname__}"] = _t
_TYPE_NAMES = {t: n for n, t in _TYPES.items()}

_DTYPES = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
_LAYOUTS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.layout)}
_FORMATS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.memory_format)}


def _settings_type() -> type | None:
    try:
        from torch.fx.experimental.symbolic_shapes import ShapeEnvSettings
    except ImportError:  # pragma: no cover - every supported release has it
        return None
    return ShapeEnvSettings if dataclasses.is_dataclass(ShapeEnvSettings) else None


_SETTINGS = _settings_type()
_MISSING = object()


def encode(v: Any) -> Any:
    """The JSON form of one key or metadata value, or ``_MISSING`` if it cannot be kept."""
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return ["f", v.hex()]
    if t is torch.dtype:
        return ["dt", str(v).removeprefix("torch.")]
    if t is torch.device:
        return ["dev", str(v)]
    if t is torch.layout:
        return ["lay", str(v).removeprefix("torch.")]
    if t is torch.memory_format:
        return ["mf", str(v).removeprefix("torch.")]
    if t is type:
        name = _TYPE_NAMES.get(v)
        return _MISSING if name is None else ["ty", name]
    if isinstance(v, torch._ops.OpOverload):
        if v.namespace not in ("aten", "prims"):
            return _MISSING
        return ["op", v.namespace, v._opname, v._overloadname]
    if t is tuple or t is torch.Size or t is list:
        items = [encode(x) for x in v]
        if any(x is _MISSING for x in items):
            return _MISSING
        return ["t" if t is tuple else ("sz" if t is torch.Size else "l"), items]
    if t is complex:
        return ["c", v.real.hex(), v.imag.hex()]
    if _SETTINGS is not None and t is _SETTINGS:
        fields = {}
        for f in dataclasses.fields(v):
            x = encode(getattr(v, f.name))
            if x is _MISSING:
                return _MISSING
            fields[f.name] = x
        return ["ses", fields]
    return _MISSING


def decode(v: Any) -> Any:
    """The value :func:`encode` gave ``v`` for; :class:`Invalid` if it is not one."""
    if v is None or type(v) in (bool, int, str):
        return v
    if type(v) is not list or not v or type(v[0]) is not str:
        raise Invalid(f"not a kept value: {v!r:.80}")
    tag = v[0]
    try:
        if tag == "f":
            return float.fromhex(v[1])
        if tag == "dt":
            return _DTYPES[v[1]]
        if tag == "dev":
            return torch.device(v[1])
        if tag == "lay":
            return _LAYOUTS[v[1]]
        if tag == "mf":
            return _FORMATS[v[1]]
        if tag == "ty":
            return _TYPES[v[1]]
        if tag == "op":
            _, ns, name, overload = v
            if ns not in ("aten", "prims"):
                raise Invalid(f"op namespace {ns!r}")
            packet = getattr(getattr(torch.ops, ns), name)
            op = getattr(packet, overload)
            if not isinstance(op, torch._ops.OpOverload):
                raise Invalid(f"not an op overload: {v!r:.80}")
            return op
        if tag in ("t", "sz", "l"):
            items = [decode(x) for x in v[1]]
            return tuple(items) if tag == "t" else (torch.Size(items) if tag == "sz" else items)
        if tag == "c":
            return complex(float.fromhex(v[1]), float.fromhex(v[2]))
        if tag == "ses" and _SETTINGS is not None:
            fields = v[1]
            names = {f.name for f in dataclasses.fields(_SETTINGS)}
            if type(fields) is not dict or set(fields) != names:
                raise Invalid("ShapeEnv settings fields")
            return _SETTINGS(**{k: decode(x) for k, x in fields.items()})
    except Invalid:
        raise
    except (KeyError, ValueError, TypeError, AttributeError, RuntimeError, IndexError) as e:
        raise Invalid(f"{tag}: {type(e).__name__}") from None
    raise Invalid(f"unknown tag {tag!r:.20}")


def key_text(key: Any) -> str | None:
    """A stock key's items as one canonical JSON text (the record's name), or None."""
    items = encode(tuple(key.key))
    if items is _MISSING:
        return None
    return json.dumps(items, separators=(",", ":"))


def key_from_text(text: str) -> Any:
    """The stock key :func:`key_text` was given (:class:`Invalid` if it is not one)."""
    try:
        v = json.loads(text)
    except ValueError:
        raise Invalid("key text") from None
    items = decode(v)
    if type(items) is not tuple:
        raise Invalid("key items")
    return ft._DispatchCacheKey(items)


_META_FIELDS = (tuple(f.name for f in dataclasses.fields(ft.TensorMetadata))
                if dataclasses.is_dataclass(getattr(ft, "TensorMetadata", None)) else ())


def encode_entry(entry: Any) -> Any:
    """A valid entry (tensors and in-place outputs only) as JSON, or None."""
    if type(entry) is not ft._DispatchCacheValidEntry:
        return None
    outs = []
    for info in entry.output_infos:
        if type(info) is not ft._DispatchCacheEntryOutputInfo or info.constant_value is not ft.SingletonConstant:
            return None
        if info.metadata is None:
            if info.inplace_idx is None:
                return None
            meta = None
        else:
            if type(info.metadata) is not ft.TensorMetadata:
                return None
            meta = {}
            for name in _META_FIELDS:
                x = encode(getattr(info.metadata, name))
                if x is _MISSING:
                    return None
                meta[name] = x
        if not all(i is None or type(i) is int for i in (info.inplace_idx, info.view_idx)):
            return None
        outs.append({"inplace": info.inplace_idx, "view": info.view_idx, "meta": meta})
    return {"tuple": bool(entry.is_output_tuple), "outputs": outs}


def decode_entry(v: Any) -> Any:
    """The entry :func:`encode_entry` was given (:class:`Invalid` if it is not one)."""
    if type(v) is not dict or set(v) != {"tuple", "outputs"} or type(v["tuple"]) is not bool:
        raise Invalid("entry")
    if type(v["outputs"]) is not list or not v["outputs"]:
        raise Invalid("entry outputs")
    infos = []
    for o in v["outputs"]:
        if type(o) is not dict or set(o) != {"inplace", "view", "meta"}:
            raise Invalid("output")
        inplace, view, meta = o["inplace"], o["view"], o["meta"]
        if not all(i is None or type(i) is int for i in (inplace, view)):
            raise Invalid("output index")
        if meta is None:
            if inplace is None:
                raise Invalid("output without metadata")
            metadata = None
        else:
            if type(meta) is not dict or set(meta) != set(_META_FIELDS):
                raise Invalid("metadata fields")
            try:
                metadata = ft.TensorMetadata(**{k: decode(x) for k, x in meta.items()})
            except TypeError:
                raise Invalid("metadata") from None
        infos.append(ft._DispatchCacheEntryOutputInfo(
            inplace_idx=inplace, metadata=metadata, view_idx=view, constant_value=ft.SingletonConstant))
    return ft._DispatchCacheValidEntry(output_infos=tuple(infos), is_output_tuple=v["tuple"])
