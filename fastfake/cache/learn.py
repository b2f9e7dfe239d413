"""The result cache's Python half: reading stock's own cache entry after a miss.

The C++ cache (csrc/cache/) keys calls itself but never decides on its own what
an op returns or whether it may be cached: after the stock path has run a call,
:func:`learn` looks up the entry stock's dispatch cache made for it and describes
it to C++. Stock's bypass rules (data-dependent or dynamic output shapes,
in-place views, non-builtin ops, constants, unrepresented or unbacked symbols, ...)
therefore apply unchanged.

For calls with symbolic shapes the description carries, per tensor output, the
FakeTensor stock's own cache hit builds for this call (its "synthesised" output);
C++ reads every SymInt off it once and from then on rebuilds that tensor without
stock's SymNode arithmetic. :func:`sym_vid` interns SymNode values for the keys.
"""
from __future__ import annotations

import functools
import itertools
import weakref

import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses._fake_tensor_utils import (
    _CacheKeyState,
    _PySymInputStub,
    _SymIntOutputStub,
)

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.cache import free_symbols as _free_symbols
from fastfake.stock import key as _stock_key

# (expr, pytype, hint, constant, fx_node) -> id. Ids are never reused, so a SymNode
# that memoised its id before a reset still names its own value.
_VIDS: dict[tuple, int] = {}
_NEXT_VID = itertools.count(1)
_MAX_VIDS = 1 << 18


def sym_vid(node) -> int:
    """The value id of a SymNode: equal ids iff stock's `_PySymInputStub`s compare
    equal (`SymNode._value_eq`). Memoised on the node (its fields never change)."""
    vid = intern((node._expr, node.pytype, node._hint, node.constant, node.fx_node))
    node._fastfake_vid = vid
    return vid


def intern(value: tuple) -> int:
    """The value id of a SymNode value ``(expr, pytype, hint, constant, fx_node)``
    (the store's records name values so: fastfake/store/symbolic.py)."""
    vid = _VIDS.get(value)
    if vid is None:
        if len(_VIDS) >= _MAX_VIDS:
            _VIDS.clear()
            _C.vids_cleared()  # (ids C++ looked up are not reused)
        vid = _VIDS[value] = next(_NEXT_VID)
    return vid


def interned_values() -> dict[int, tuple]:
    """Value id -> value, for the values interned now."""
    return {vid: value for value, vid in _VIDS.items()}


# Synthesised outputs stock builds while validating a new entry of its own
# (``_output_from_cache_entry`` from ``_make_cache_entry``), captured for the call
# C++ is running on a symbolic miss, so learning does not build them a second time.
# A stack of [mode, func, args, {id(output_info): synthesised FakeTensor}, key]
# frames, one per symbolic miss in flight (misses nest through decompositions);
# ``key`` is stock's own cache key for the call, seen on the way.
_CAPTURES: list[list] = []


def capture_begin(mode, func, args) -> None:
    """Called by C++ right before it runs stock on a symbolic miss, and with
    ``mode=None`` when that stock call raised (nothing will be learned)."""
    if mode is None:
        if _CAPTURES:
            _CAPTURES.pop()
        return
    if len(_CAPTURES) > 256:  # defensive: frames that were never closed
        del _CAPTURES[:]
    _CAPTURES.append([mode, func, args, {}, None])


def _capture_end(mode, func, args) -> tuple[dict, object]:
    while _CAPTURES:
        frame = _CAPTURES.pop()
        if frame[0] is mode and frame[1] is func and frame[2] is args:
            return frame[3], frame[4]
    return {}, None


# Stock builds the tensor its next cache hit will return once per miss, to
# validate its new entry (``_output_from_cache_entry`` from ``_make_cache_entry``):
# empty_strided, and set_ for views, replaying their SymNode arithmetic (~0.3-0.8 ms
# in a dynamic compile). What that tensor carries beyond its sizes / strides /
# offset -- its storage size (fresh outputs) and the numel / contiguity values set_
# computed (views) -- depends only on those values, the view base's storage size,
# the dtype and the ShapeEnv's replacements, all in the memo key; so for a key seen
# before the tensor is built in C++ from the recorded recipe. Per ShapeEnv; the
# recipes hold sympy values only.
_SYNTH_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SYNTH_MEMO_MAX = 4096


def _value_key(v):
    if isinstance(v, torch.SymInt):
        n = v.node
        return (n._expr, n._hint, n.constant)
    return v


def _memo_synth(original, self, state, entry, key, func, args):
    info = entry.output_infos[0]
    m = info.metadata
    env = self.shape_env
    if (
        env is None
        or m is None
        or info.inplace_idx is not None
        or m.layout != torch.strided
        or m.requires_grad
        or m.is_conj
        or m.is_neg
        or m.is_quantized
        or (func is not None and func.is_view and info.view_idx is None)
    ):
        return _compat.output_from_cache_entry(original, self, state, entry, key, func, args)

    def value(v):
        return v.extract(key, env) if isinstance(v, _SymIntOutputStub) else v

    shape = tuple(value(v) for v in m.shape)
    stride = tuple(value(v) for v in m.stride)
    offset = value(m.storage_offset)
    is_view = info.view_idx is not None  # stock sets it for views only
    base = args[info.view_idx] if is_view else None
    if base is not None and type(base) is not ft.FakeTensor:
        return _compat.output_from_cache_entry(original, self, state, entry, key, func, args)
    base_nbytes = base.untyped_storage().nbytes() if base is not None else None
    mkey = (
        is_view,
        m.dtype,
        m.device,
        tuple(_value_key(v) for v in shape),
        tuple(_value_key(v) for v in stride),
        _value_key(offset),
        _value_key(base_nbytes),
        env._replacements_version_counter,
    )
    memo = _SYNTH_MEMO.get(env)
    if memo is None:
        memo = _SYNTH_MEMO[env] = {}
    recipe = memo.get(mkey)
    if recipe is not None:
        out = _C.synth_build(self, m.dtype, m.device, shape, stride, offset, base, recipe)
        if out is not None:
            return out
        # (None: the recipe's derived values do not fit this call's values; stock builds it)
        return _compat.output_from_cache_entry(original, self, state, entry, key, func, args)
    out = _compat.output_from_cache_entry(original, self, state, entry, key, func, args)
    if base is not None:
        after = base.untyped_storage().nbytes()
        if _value_key(after) != _value_key(base_nbytes) or (
            isinstance(after, torch.SymInt) and after.node is not base_nbytes.node
        ):
            return out  # set_ resized the base's storage: not a pure function of the key
    recipe = _C.synth_recipe(out, base is None)
    if recipe is not None:
        if len(memo) >= _SYNTH_MEMO_MAX:
            memo.clear()
        memo[mkey] = recipe
    return out


def _capturing_body(original, self, state, entry, key, func, args):
    if _CAPTURES:
        frame = _CAPTURES[-1]
        # ``func`` is None on releases whose stock no longer passes it; the
        # mode and the very args tuple of the call still identify the frame.
        if frame[0] is self and (func is None or frame[1] is func) and frame[2] is args:
            frame[4] = key
            if len(entry.output_infos) == 1 and not entry.is_output_tuple:
                out = _memo_synth(original, self, state, entry, key, func, args)
                frame[3][id(entry.output_infos[0])] = out
                return out
    return _compat.output_from_cache_entry(original, self, state, entry, key, func, args)


def capturing(original):
    """Wrap FakeTensorMode._output_from_cache_entry (installed by fastfake.install)."""
    return _compat.wrap_output_from_cache_entry(original, _capturing_body)


def _collect_symbols(items, symbols: set) -> None:
    """Free symbols of every SymInt in ``items``: SymInts, tensors' sizes, strides,
    storage offsets and storage sizes, nested lists / tuples."""
    for a in items:
        if isinstance(a, torch.SymInt):
            symbols.update(_free_symbols.of(a.node._expr))
        elif isinstance(a, torch.Tensor):
            _collect_symbols(
                (*a.shape, *a.stride(), a.storage_offset(), a.untyped_storage().nbytes()), symbols
            )
        elif isinstance(a, (list, tuple)):
            _collect_symbols(a, symbols)


def _validity(env, args, synths):
    """What must not change in ``env`` for the entry to stay exact: the replacement
    of every symbol in the call's SymInts and in the synthesised outputs."""
    symbols: set = set()
    _collect_symbols(args, symbols)
    _collect_symbols(synths, symbols)
    ordered = _free_symbols.ordered(symbols)
    return ordered, tuple(env.replacements.get(s) for s in ordered)


def still_valid(env, validity) -> bool:
    """Called by C++ when the ShapeEnv's replacements changed since an entry was
    recorded or last checked."""
    symbols, snapshot = validity
    replacements = env.replacements
    return all(replacements.get(s) == r for s, r in zip(symbols, snapshot))


def _classify(func, info):
    """One output of a stock entry: ``("inplace", idx)`` / ``("none",)`` /
    ``("constant", int)`` (final), ``("tensor", view_idx)`` (to be described), or a
    ``str`` reason not to cache. A constant is an int stock's hit returns equal to
    the one it stored (an SDPA kernel's ``max_q`` / ``max_k``; not the same object:
    stock's own hits do not keep its identity); a SymInt constant is not served."""
    if info.inplace_idx is not None:
        return ("inplace", info.inplace_idx)
    m = info.metadata
    if m is None and info.view_idx is None:
        v = info.constant_value
        if v is None:
            return ("none",)
        return ("constant", v) if type(v) is int else "constant output"
    if m is None or m.layout != torch.strided or m.requires_grad or m.is_quantized:
        return "output kind"
    if func.is_view and info.view_idx is None:
        return "view without base"
    # A view iff stock's entry names the input it aliases: `func.is_view` ops on
    # every release, and `_unsafe_view` too from 2.15 on (its hit shares storage).
    return ("tensor", info.view_idx if info.view_idx is not None else -1)


def _describe_static(func, entry):
    outputs = []
    for info in entry.output_infos:
        c = _classify(func, info)
        if isinstance(c, str):
            return c
        if c[0] != "tensor":
            outputs.append(c)
            continue
        m = info.metadata
        if not all(type(v) is int for v in (*m.shape, *m.stride, m.storage_offset)):
            return "symbolic output"
        outputs.append(
            ("tensor", m.dtype, tuple(m.shape), tuple(m.stride), m.storage_offset,
             m.device, m.is_conj, m.is_neg, c[1])
        )
    return (entry.is_output_tuple, outputs)


# Stock's entry behind the last symbolic description learn() returned, for
# fastfake.cache.portable (taken right after, by the same call).
_LAST_SYMBOLIC: list = [None]


def take_last_symbolic():
    entry, _LAST_SYMBOLIC[0] = _LAST_SYMBOLIC[0], None
    return entry


def _describe_symbolic(mode, state, key, func, args, kwargs, entry, out, stock_hit, captured):
    outs = out if entry.is_output_tuple else (out,)
    if not isinstance(outs, tuple) or len(outs) != len(entry.output_infos):
        return "output structure"
    outputs = []
    for info, o in zip(entry.output_infos, outs):
        c = _classify(func, info)
        if isinstance(c, str):
            return c
        if c[0] != "tensor":
            outputs.append(c)
            continue
        if stock_hit:
            synth = o  # stock answered from its cache: this is what a hit builds
        elif id(info) in captured:
            synth = captured[id(info)]  # built by stock while validating this entry
        else:
            # What stock's next hit will build (stock built the same tensor while
            # validating its entry; not captured when its key came another way).
            single = ft._DispatchCacheValidEntry(output_infos=(info,), is_output_tuple=False)
            synth = _compat.output_from_cache_entry(
                type(mode)._output_from_cache_entry, mode, state, single, key, func, args
            )
        if type(synth) is not ft.FakeTensor:
            return "output kind"
        outputs.append(("tensor_sym", synth, c[1]))
    synths = [o[1] for o in outputs if o[0] == "tensor_sym"]
    inputs = (*args, *kwargs.values()) if kwargs else args
    _LAST_SYMBOLIC[0] = entry
    return (entry.is_output_tuple, outputs, _validity(mode.shape_env, inputs, synths))


@functools.cache
def _plain_keys() -> list:
    return list(_compat.fake_dict_template())


def _plain_state(t) -> bool:
    """``t.__dict__`` is a fresh FakeTensor's: stock's keys, nothing but the mode
    and the device set (what every FakeTensor rebuilt here carries)."""
    d = vars(t)
    if list(d) != _plain_keys():
        return False
    device_attr = _compat.fake_device_attr()
    return all(v is None for k, v in d.items() if k not in ("fake_mode", device_attr))


def _plain_output(mode, out, base, same_storage: bool) -> bool:
    """``out`` is a plain FakeTensor of ``mode`` on ``base``'s device, strided,
    version 0, nothing set at the fake level, over ``base``'s storage or
    (``same_storage`` false) a storage of its own."""
    return (
        type(base) is ft.FakeTensor
        and type(out) is ft.FakeTensor
        and out is not base
        and out.fake_mode is mode
        and base.fake_mode is mode
        and out.layout == torch.strided
        and not out.requires_grad
        and not out.is_conj()
        and not out.is_neg()
        and not out.is_inference()
        and out._version == 0
        and (out.untyped_storage()._cdata == base.untyped_storage()._cdata) == same_storage
        and out.fake_device == base.fake_device
        and _plain_state(out)
    )


def plain_alias(mode, out, base) -> bool:
    """``out`` is what stock's uncached ``_unsafe_view`` of ``base`` returns: a plain
    FakeTensor of ``mode`` over ``base``'s storage and device, with a version
    counter of its own at 0, nothing set at the fake level."""
    return _plain_output(mode, out, base, True)


def plain_fresh(mode, out, args) -> bool:
    """``out`` is a new tensor as stock's uncached pointwise call on ``args[0]``
    (a FakeTensor) and a scalar returns it: a plain FakeTensor of ``mode`` on
    ``args[0]``'s device over a storage of its own, version 0, nothing set at the
    fake level."""
    return _plain_output(mode, out, args[0], False)


def _describe_unsafe_view(mode, func, args, kwargs, out):
    """An entry for ``_unsafe_view``, which stock caches as a view from 2.15 on and
    bypasses its cache for before ("unsafe view"), read off the output stock's
    uncached call just returned: static sizes, strides and offset over the
    input's storage, a version counter of its own (version 0). Its kernel's output
    depends on nothing but what the key holds (the input's sizes, strides, offset,
    storage size, dtype, device; the size argument), so the entry is exact for
    every call with the same key; served hits count as stock's bypasses.
    ``None`` (stock's bypass stands) for anything else."""
    if func is not torch.ops.aten._unsafe_view.default or kwargs or len(args) != 2:
        return None
    base = args[0]
    if not plain_alias(mode, out, base):
        return None
    shape, stride, offset = tuple(out.shape), out.stride(), out.storage_offset()
    if not all(type(v) is int for v in (*shape, *stride, offset)):
        return None
    return (
        False,
        [("tensor", out.dtype, shape, tuple(stride), offset, out.fake_device, False, False, 0,
          "unsafe view")],
    )


def learn(mode, func, args, kwargs, out=None, stock_hit=False):
    """Describe stock's cache entry for this (already dispatched) call.

    Returns ``None`` (nothing to record), a ``str`` reason (stock does not cache
    this call: record a negative entry), or ``(is_output_tuple, outputs)`` with each
    output ``("inplace", idx)``, ``("none",)``, ``("constant", int)``,
    ``("tensor", dtype, sizes, strides, storage_offset, device, is_conj, is_neg, view_idx)``
    or, for symbolic keys, ``("tensor_sym", synthesised_fake_tensor, view_idx)``.
    """
    _LAST_SYMBOLIC[0] = None
    captured, key = _capture_end(mode, func, args) if _CAPTURES else ({}, None)
    if func in ft._DISPATCH_META_HANDLERS or func in ft._DISPATCH_HANDLE_DIRECTLY:
        return "stock: answered before its cache"
    state = _CacheKeyState(mode.shape_env)
    if key is not None and mode.shape_env is not None:
        # Stock's key for this very call, seen while stock built or reused its
        # entry (only symbolic keys come this way); its SymInt stubs still hold
        # this call's SymInts.
        symbolic = any(type(v) is _PySymInputStub for v in key.key)
        state.shape_env = mode.shape_env
    else:
        try:
            state, key = _stock_key.cache_key(mode, func, args, kwargs)
        except ft._BypassDispatchCache as e:
            return f"stock: {e.reason}"
        symbolic = state.cache_on_shape_env()
    if symbolic:
        cache = state.shape_env.fake_tensor_cache if state.shape_env is not None else {}
    else:
        cache = ft.FakeTensorMode.cache
    entry = cache.get(key)
    if entry is None:
        return None
    if isinstance(entry, ft._DispatchCacheBypassEntry):
        if entry.reason == "unsafe view" and not symbolic:
            desc = _describe_unsafe_view(mode, func, args, kwargs, out)
            if desc is not None:
                return desc
        return f"stock: {entry.reason}"
    if symbolic:
        return _describe_symbolic(
            mode, state, key, func, args, kwargs, entry, out, stock_hit, captured
        )
    return _describe_static(func, entry)
