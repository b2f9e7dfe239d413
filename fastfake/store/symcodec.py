"""The values of symbolic records as plain JSON values, and back.

A record that serves other ShapeEnvs (fastfake/cache/portable.py) holds sympy
expressions (the symbols it involves, the signature of the ShapeEnv facts about
them, the evaluations to replay), stock's symbolic cache entries and stripped keys
(``_SymIntOutputStub``, ``_DeconstructedSymNode``, ``_InputBackref``,
``_PySymInputStub``), and the recipes of csrc/cache/entry_io.cpp (tuples of ints,
devices, ops and new SymNodes' fields). fastfake/store/symbolic.py keeps them on
disk with this codec.

Every kind has one JSON form. sympy values are kept as their class and arguments and
rebuilt only through the constructors of a fixed list of classes (sympy's arithmetic,
relations and logic; torch's integer functions); symbols by name and the assumptions
they were made with, in their order (sympy's ``srepr`` shows it). Nothing is evaluated or imported from a file: an unknown tag or
class raises :class:`~fastfake.store.codec.Invalid`. What is kept is checked when it
is made: :func:`keepable` reads the value back and requires the same structure, the
same types at every level and equal sympy values (a value sympy's constructors would
rebuild differently -- one made with ``evaluate=False`` -- is not kept).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator
from typing import Any

import sympy
import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses import _fake_tensor_utils as ftu

from fastfake.store import codec as _codec
from fastfake.store.codec import Invalid

_MISSING = _codec._MISSING

# sympy classes a kept expression may be built of (by module and name)
_SYMPY_CLASSES: dict[str, type] = {}


def _register(cls: Any) -> None:
    if isinstance(cls, type):
        _SYMPY_CLASSES[f"{cls.__module__}.{cls.__qualname__}"] = cls


for _c in (sympy.Add, sympy.Mul, sympy.Pow, sympy.Mod, sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt,
           sympy.Ge, sympy.And, sympy.Or, sympy.Not, sympy.Max, sympy.Min, sympy.floor, sympy.ceiling,
           sympy.Abs):
    _register(_c)
try:
    from torch.utils._sympy import functions as _tf

    for _n in ("FloorDiv", "CleanDiv", "CeilDiv", "Mod", "PythonMod", "ModularIndexing", "Where", "Max", "Min",
               "PowByNatural", "IntTrueDiv", "FloatTrueDiv", "ToFloat", "TruncToInt", "FloorToInt", "CeilToInt",
               "RoundToInt", "Identity", "IsNonOverlappingAndDenseIndicator", "LShift", "RShift"):
        _register(getattr(_tf, _n, None))
except ImportError:  # pragma: no cover - every supported release has them
    pass
try:
    from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity, int_oo
except ImportError:  # pragma: no cover
    IntInfinity = NegativeIntInfinity = int_oo = None

_SYM_TYPES = {"SymInt": torch.SymInt, "SymFloat": torch.SymFloat, "SymBool": torch.SymBool}
_SYM_TYPE_NAMES = {t: n for n, t in _SYM_TYPES.items()}
_ATOMS = (torch.dtype, torch.device, torch.layout, torch.memory_format)
_META_FIELDS = _codec._META_FIELDS
_DSN = ftu._DeconstructedSymNode
_DSN_FIELDS = ("_expr", "pytype", "_hint", "constant", "fx_node")


# Within :func:`batch`: id -> (object, result) of encode / pool, and the pairs
# :func:`same` found the same (objects shared by many records are done once; the
# objects are held, so an id is not reused meanwhile).
_BATCH: list = [None]


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """Encode, pool and compare many values that share parts (a store's records)."""
    outer = _BATCH[0]
    if outer is None:
        _BATCH[0] = ({}, {}, {})
    try:
        yield
    finally:
        if outer is None:
            _BATCH[0] = None
            _SHARED.clear()


def encode(v: Any) -> Any:
    """The JSON form of ``v``, or ``_MISSING`` if it cannot be kept."""
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    b = _BATCH[0]
    if b is None:
        return _encode(v, t)
    got = b[0].get(id(v))
    if got is not None and got[0] is v:
        return got[1]
    e = _encode(v, t)
    b[0][id(v)] = (v, e)
    return e


def _encode(v: Any, t: type) -> Any:
    if t is float:
        return ["f", v.hex()]
    if t is tuple or t is list or t is frozenset or t is torch.Size:
        items = [encode(x) for x in v]
        if any(x is _MISSING for x in items):
            return _MISSING
        if t is frozenset:
            items.sort(key=repr)
        return [{tuple: "t", list: "l", frozenset: "fs", torch.Size: "sz"}[t], items]
    if isinstance(v, sympy.Basic):
        return _encode_sympy(v)
    if t in _ATOMS or isinstance(v, torch._ops.OpOverload) or t is _codec._SETTINGS:
        return _codec.encode(v)
    if v is ft.SingletonConstant:
        return ["sc"]
    if t is type:
        if v in _SYM_TYPE_NAMES:
            return ["st", _SYM_TYPE_NAMES[v]]
        return _codec.encode(v)
    if t is ft._DispatchCacheValidEntry:
        infos = encode(tuple(v.output_infos))
        return _MISSING if infos is _MISSING else ["E", infos, bool(v.is_output_tuple)]
    if t is ft._DispatchCacheBypassEntry:
        return ["BP", v.reason] if type(v.reason) is str else _MISSING
    if t is ft._DispatchCacheEntryOutputInfo:
        parts = [encode(getattr(v, f)) for f in ("inplace_idx", "metadata", "view_idx", "constant_value")]
        return _MISSING if any(p is _MISSING for p in parts) else ["O", parts]
    if t is ft.TensorMetadata:
        meta = {}
        for name in _META_FIELDS:
            x = encode(getattr(v, name))
            if x is _MISSING:
                return _MISSING
            meta[name] = x
        return ["M", meta]
    if t is ftu._SymIntOutputStub:
        x = encode(v.value)
        return _MISSING if x is _MISSING else ["os", x]
    if t is _DSN:
        if v.fx_node is not None and v.fx_node is not False:
            return _MISSING  # (an FX node of translation validation)
        parts = [encode(getattr(v, f)) for f in _DSN_FIELDS]
        return _MISSING if any(p is _MISSING for p in parts) else ["dn", parts]
    if t is ftu._InputBackref:
        return ["ib", v.value] if type(v.value) is int else _MISSING
    if t is ftu._PySymInputStub:
        x = encode(v.value)
        return _MISSING if x is _MISSING else ["ps", x]
    if t is ftu._DeconstructedSymType:
        ty, node = encode(v.ty), encode(v.node)
        return _MISSING if ty is _MISSING or node is _MISSING else ["ds", ty, node]
    return _MISSING


def _encode_sympy(v: Any) -> Any:
    t = type(v)
    if t is sympy.Symbol:
        orig = getattr(v, "_assumptions_orig", None)
        if not isinstance(orig, dict) or not all(type(x) is bool for x in orig.values()):
            return _MISSING
        # (in the order they were given: sympy's srepr shows them so)
        return ["S", v.name, [list(a) for a in orig.items()]]
    if isinstance(v, sympy.Integer):
        return ["I", int(v)]
    if isinstance(v, sympy.Rational):
        return ["Q", int(v.p), int(v.q)]
    if v is sympy.true or v is sympy.false:
        return ["B", bool(v)]
    if int_oo is not None and (v is int_oo or v is -int_oo):
        return ["ioo", 1 if v is int_oo else -1]
    if v is sympy.oo or v is -sympy.oo:
        return ["soo", 1 if v is sympy.oo else -1]
    name = f"{t.__module__}.{t.__qualname__}"
    if _SYMPY_CLASSES.get(name) is not t:
        return _MISSING
    args = [encode(a) for a in v.args]
    if any(a is _MISSING for a in args):
        return _MISSING
    return ["X", name, args]


_SYMBOLS: dict[tuple, Any] = {}

# --------------------------------------------------------------------------- #
# Shared parts: a record's large parts are kept once per file, by content
# --------------------------------------------------------------------------- #

#: the JSON text length from which a part is kept apart and referred to
POOL_MIN = 48
# (tags whose value may be shared by every record that refers to it: immutable)
_POOLED_TAGS = frozenset(("t", "fs", "sz", "X", "dn", "O", "E", "M", "os", "ps", "ds"))
# digest -> the value decoded, while parts are being read (emptied when the outermost
# read ends: nothing decoded outlives what holds it)
_SHARED: dict[str, Any] = {}
_MAX_SHARED = 1 << 16
# the parts of the file being read (digest -> JSON value), set by fastfake/store/symbolic.py
_PARTS: list = [None]


def pool(v: Any, parts: dict) -> Any:
    """``v`` (a JSON form) with each part of at least ``POOL_MIN`` characters replaced
    by a reference ``["@", digest]``; ``parts`` receives digest -> part (its own
    parts replaced the same way)."""
    if type(v) is not list or not v or type(v[0]) is not str:
        return v
    b = _BATCH[0]
    if b is None:
        return _pool(v, parts)
    got = b[1].get(id(v))
    if got is not None and got[0] is v:
        for d, part in got[2]:
            parts[d] = part
        return got[1]
    mine: dict = {}
    r = _pool(v, mine)
    parts.update(mine)
    b[1][id(v)] = (v, r, tuple(mine.items()))
    return r


def _pool(v: Any, parts: dict) -> Any:
    tag = v[0]
    if tag in ("t", "l", "fs", "sz"):
        v = [tag, [pool(x, parts) for x in v[1]]]
    elif tag == "X":
        v = ["X", v[1], [pool(x, parts) for x in v[2]]]
    elif tag in ("dn", "O"):
        v = [tag, [pool(x, parts) for x in v[1]]]
    elif tag == "E":
        v = ["E", pool(v[1], parts), v[2]]
    elif tag == "M":
        v = ["M", {k: pool(x, parts) for k, x in v[1].items()}]
    elif tag in ("os", "ps"):
        v = [tag, pool(v[1], parts)]
    elif tag == "ds":
        v = ["ds", pool(v[1], parts), pool(v[2], parts)]
    if tag not in _POOLED_TAGS:
        return v
    text = json.dumps(v, separators=(",", ":"))
    if len(text) < POOL_MIN:
        return v
    d = hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
    parts[d] = v
    return ["@", d]


def _shared(d: Any) -> Any:
    got = _SHARED.get(d) if type(d) is str else None
    if got is not None:
        return got
    parts = _PARTS[0]
    v = parts.get(d) if parts is not None and type(d) is str else None
    if v is None:
        raise Invalid("a shared part is missing")
    if type(v) is not list or not v or v[0] not in _POOLED_TAGS:
        raise Invalid("shared part")
    if hashlib.blake2b(json.dumps(v, separators=(",", ":")).encode(), digest_size=12).hexdigest() != d:
        raise Invalid("shared part digest")  # (kept under another part's name)
    got = decode(v)
    if len(_SHARED) >= _MAX_SHARED:
        _SHARED.clear()
    _SHARED[d] = got
    return got


def decode(v: Any) -> Any:
    """The value :func:`encode` gave ``v`` for; :class:`Invalid` if it is not one."""
    if v is None or type(v) in (bool, int, str):
        return v
    if type(v) is not list or not v or type(v[0]) is not str:
        raise Invalid(f"not a kept value: {v!r:.80}")
    tag = v[0]
    if tag == "@":
        if len(v) != 2:
            raise Invalid("reference")
        return _shared(v[1])
    try:
        if tag in ("t", "l", "fs", "sz"):
            if len(v) != 2 or type(v[1]) is not list:
                raise Invalid("sequence")
            items = [decode(x) for x in v[1]]
            if tag == "t":
                return tuple(items)
            if tag == "l":
                return items
            return frozenset(items) if tag == "fs" else torch.Size(items)
        if tag == "S":
            _, name, assumptions = v
            key = (name, tuple(tuple(a) for a in assumptions))
            s = _SYMBOLS.get(key)
            if s is None:
                if type(name) is not str or not all(
                        type(a) in (list, tuple) and len(a) == 2 and type(a[0]) is str and type(a[1]) is bool
                        for a in assumptions):
                    raise Invalid("symbol")
                s = sympy.Symbol(name, **dict(assumptions))
                if len(_SYMBOLS) < 65536:
                    _SYMBOLS[key] = s
            return s
        if tag == "I":
            if type(v[1]) is not int or len(v) != 2:
                raise Invalid("integer")
            return sympy.Integer(v[1])
        if tag == "Q":
            if len(v) != 3 or type(v[1]) is not int or type(v[2]) is not int or v[2] <= 0:
                raise Invalid("rational")
            return sympy.Rational(v[1], v[2])
        if tag == "B":
            return sympy.true if v[1] is True else (sympy.false if v[1] is False else _bad("bool"))
        if tag == "ioo" and int_oo is not None:
            return int_oo if v[1] == 1 else (-int_oo if v[1] == -1 else _bad("infinity"))
        if tag == "soo":
            return sympy.oo if v[1] == 1 else (-sympy.oo if v[1] == -1 else _bad("infinity"))
        if tag == "X":
            _, name, args = v
            cls = _SYMPY_CLASSES.get(name) if type(name) is str else None
            if cls is None or type(args) is not list:
                raise Invalid(f"sympy class {name!r:.60}")
            # (through the constructor, whose cache gives back an equal value
            # this process built already; keepable() checks the result)
            return cls(*[decode(a) for a in args])
        if tag == "st":
            return _SYM_TYPES[v[1]]
        if tag == "sc":
            return ft.SingletonConstant
        if tag == "E":
            _, infos, is_tuple = v
            infos = decode(infos)
            if type(infos) is not tuple or type(is_tuple) is not bool or not all(
                    type(i) is ft._DispatchCacheEntryOutputInfo for i in infos):
                raise Invalid("entry")
            return ft._DispatchCacheValidEntry(output_infos=infos, is_output_tuple=is_tuple)
        if tag == "BP":
            if type(v[1]) is not str or len(v) != 2:
                raise Invalid("bypass entry")
            return ft._DispatchCacheBypassEntry(v[1])
        if tag == "O":
            parts = v[1]
            if type(parts) is not list or len(parts) != 4:
                raise Invalid("output info")
            inplace, meta, view, constant = (decode(p) for p in parts)
            if not all(i is None or type(i) is int for i in (inplace, view)) or not (
                    meta is None or type(meta) is ft.TensorMetadata):
                raise Invalid("output info")
            return ft._DispatchCacheEntryOutputInfo(
                inplace_idx=inplace, metadata=meta, view_idx=view, constant_value=constant)
        if tag == "M":
            meta = v[1]
            if type(meta) is not dict or set(meta) != set(_META_FIELDS):
                raise Invalid("metadata fields")
            return ft.TensorMetadata(**{k: decode(x) for k, x in meta.items()})
        if tag == "os":
            value = decode(v[1])
            if not (type(value) is int or type(value) is _DSN):
                raise Invalid("output stub")
            stub = ftu._SymIntOutputStub.__new__(ftu._SymIntOutputStub)
            stub.value = value
            return stub
        if tag == "dn":
            parts = v[1]
            if type(parts) is not list or len(parts) != 5:
                raise Invalid("deconstructed node")
            expr, pytype, hint, constant, fx_node = (decode(p) for p in parts)
            if not isinstance(expr, sympy.Basic) or pytype not in (int, float, bool) or fx_node not in (None, False):
                raise Invalid("deconstructed node")
            return _DSN(expr, pytype, hint, constant, fx_node)
        if tag == "ib":
            if type(v[1]) is not int:
                raise Invalid("backref")
            return ftu._InputBackref(v[1])
        if tag == "ps":
            value = decode(v[1])
            if type(value) not in (ftu._InputBackref, ftu._DeconstructedSymType):
                raise Invalid("input stub")
            return ftu._PySymInputStub(value)
        if tag == "ds":
            ty, node = decode(v[1]), decode(v[2])
            if ty not in _SYM_TYPE_NAMES or type(node) is not _DSN:
                raise Invalid("deconstructed sym type")
            return ftu._DeconstructedSymType(ty, node)
        return _codec.decode(v)
    except Invalid:
        raise
    except (KeyError, ValueError, TypeError, AttributeError, RuntimeError, IndexError, RecursionError) as e:
        raise Invalid(f"{tag}: {type(e).__name__}") from None


def _bad(what: str) -> Any:
    raise Invalid(what)


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are the same value: the same types at every level, equal sympy
    values, the same fields (stock's stubs do not compare with ``==``)."""
    t = type(a)
    if t is not type(b):
        return False
    if a is b:
        return True
    bt = _BATCH[0]
    if bt is None or t in (int, str, float, bool):
        return _same(a, b, t)
    got = bt[2].get((id(a), id(b)))
    if got is not None and got[0] is a and got[1] is b:
        return True
    r = _same(a, b, t)
    if r:
        bt[2][(id(a), id(b))] = (a, b)
    return r


def _same(a: Any, b: Any, t: type) -> bool:
    if t in (tuple, list, torch.Size):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if t is sympy.Symbol:
        return a == b and list(a._assumptions_orig.items()) == list(b._assumptions_orig.items())
    if t is frozenset:
        return len(a) == len(b) and sorted(map(repr, map(encode, a))) == sorted(map(repr, map(encode, b))) and a == b
    if t is float:
        return a.hex() == b.hex() or (math.isnan(a) and math.isnan(b))
    if isinstance(a, sympy.Basic):
        return bool(a == b) and hash(a) == hash(b) and encode(a) == encode(b)
    if t in (ftu._SymIntOutputStub, ftu._PySymInputStub):
        return same(a.value, b.value)
    if t is _DSN:
        return all(same(getattr(a, f), getattr(b, f)) for f in _DSN_FIELDS)
    if t is ftu._DeconstructedSymType:
        return a.ty is b.ty and same(a.node, b.node)
    if dataclasses.is_dataclass(a) and t is not _codec._SETTINGS:
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if t is ft._DispatchCacheBypassEntry:
        return a.reason == b.reason
    return bool(a == b)


def keepable(v: Any, parts: dict | None = None) -> Any:
    """The JSON form of ``v`` if it reads back as the same value (:func:`same`), else
    ``_MISSING``. With ``parts``, the form is pooled (:func:`pool`; ``parts``
    receives its shared parts) and read back through them."""
    e = encode(v)
    if e is _MISSING:
        return _MISSING
    mine: dict = {}
    if parts is not None:
        e = pool(e, mine)
    outer = _PARTS[0]
    _PARTS[0] = mine if outer is None else {**outer, **mine}
    try:
        back = decode(e)
    except Invalid:
        return _MISSING
    finally:
        _PARTS[0] = outer
        if outer is None and _BATCH[0] is None:
            _SHARED.clear()
    if not same(back, v):
        return _MISSING
    if parts is not None:
        parts.update(mine)
    return e
