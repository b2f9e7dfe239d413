"""The result cache's Python half: reading stock's own cache entry after a miss.

The C++ cache (csrc/cache.cpp) keys calls itself but never decides on its own what
an op returns or whether it may be cached: after the stock path has run a call,
:func:`learn` looks up the entry stock's dispatch cache made for it and describes
it to C++. Stock's bypass rules (data-dependent or dynamic output shapes,
in-place views, non-builtin ops, constants, ...) therefore apply unchanged.
"""
from __future__ import annotations

import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses._fake_tensor_utils import _CacheKeyState


def learn(mode, func, args, kwargs):
    """Describe stock's cache entry for this (already dispatched) call.

    Returns ``None`` (nothing to record), a ``str`` reason (stock does not cache
    this call: record a negative entry), or ``(is_output_tuple, outputs)`` with each
    output ``("inplace", idx)``, ``("none",)`` or
    ``("tensor", dtype, sizes, strides, storage_offset, device, is_conj, is_neg, view_idx)``.
    """
    if func in ft._DISPATCH_META_HANDLERS or func in ft._DISPATCH_HANDLE_DIRECTLY:
        return "stock: answered before its cache"
    state = _CacheKeyState(mode.shape_env)
    try:
        key = mode._cache_key(state, func, args, kwargs or {})
    except ft._BypassDispatchCache as e:
        return f"stock: {e.reason}"
    if state.cache_on_shape_env():
        return "symbolic"
    entry = ft.FakeTensorMode.cache.get(key)
    if entry is None:
        return None
    if isinstance(entry, ft._DispatchCacheBypassEntry):
        return f"stock: {entry.reason}"
    outputs = []
    for info in entry.output_infos:
        if info.inplace_idx is not None:
            outputs.append(("inplace", info.inplace_idx))
            continue
        m = info.metadata
        if m is None and info.view_idx is None:
            if info.constant_value is not None:
                return "constant output"
            outputs.append(("none",))
            continue
        if m is None or m.layout != torch.strided or m.requires_grad or m.is_quantized:
            return "output kind"
        ints = (*m.shape, *m.stride, m.storage_offset)
        if not all(type(v) is int for v in ints):
            return "symbolic output"
        view_idx = -1
        if func.is_view:
            if info.view_idx is None:
                return "view without base"
            view_idx = info.view_idx
        outputs.append(
            ("tensor", m.dtype, tuple(m.shape), tuple(m.stride), m.storage_offset,
             m.device, m.is_conj, m.is_neg, view_idx)
        )
    return (entry.is_output_tuple, outputs)
