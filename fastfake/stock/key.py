"""Stock's dispatch-cache key, built in C++ (csrc/stock/key.cpp).

fastfake needs the key stock's ``FakeTensorMode._cache_key`` builds for a call
wherever it reads stock's cache (learning an entry, fastfake/cache/learn.py) or writes
into it (a first call served from another ShapeEnv's record stores the entry
stock's miss would, fastfake/cache/portable.py). Stock builds it in Python, which is
most of the cost of a served first call. :func:`cache_key` builds the same key in
C++ (each SymInt still converted by stock's own ``_CacheKeyState.convert_sym_int``)
and asks stock for anything the builder leaves to it.

The builder lays the key out as the releases fastfake knows do. :func:`prove`
runs at ``install()`` and compares its keys with stock's over a set of calls --
static and symbolic tensors, views, shared and derived SymNodes, SymInt, list,
dtype, device, layout, memory-format, float, bool, None and keyword arguments --
item by item (value, type and which items are the same SymNode), together with
the ShapeEnv-side state the conversion leaves (``sym_node_lookup``,
``known_symbols``); on any difference the builder stays off and every key is
stock's (``stats()``: ``stock_key.disabled``).
"""
from __future__ import annotations

from typing import Any

import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses._fake_tensor_utils import _CacheKeyState, _InputBackref, _PySymInputStub

from fastfake import _C
from fastfake.common import compat as _compat

_state = {"proved": None, "why": ""}
_TYPES = (ft._DispatchCacheKey, _PySymInputStub, _InputBackref, torch.Size)


def cache_key(mode: Any, func: Any, args: tuple, kwargs: Any) -> tuple[Any, Any]:
    """``(state, key)`` as ``state = _CacheKeyState(mode.shape_env);
    key = mode._cache_key(state, func, args, kwargs)`` gives them (raising stock's
    ``_BypassDispatchCache`` where stock does)."""
    kwargs = kwargs or {}
    state = _CacheKeyState(mode.shape_env)
    key = _C.stock_cache_key(mode, state, func, args, kwargs)
    if key is None:
        state = _CacheKeyState(mode.shape_env)
        key = mode._cache_key(state, func, args, kwargs)
    return state, key


def key_only(mode: Any, func: Any, args: tuple, kwargs: Any) -> tuple[Any, bool]:
    """``(key, state.cache_on_shape_env())`` of :func:`cache_key`, for a caller that
    needs no key state: the builder then converts the SymInts itself (reading each
    SymNode's ``expr`` as stock does, not collecting the symbols that only stock's
    own entry validation reads)."""
    kwargs = kwargs or {}
    r = _C.stock_cache_key(mode, None, func, args, kwargs)
    if r is not None:
        return r
    state = _CacheKeyState(mode.shape_env)
    key = mode._cache_key(state, func, args, kwargs)
    return key, state.cache_on_shape_env()


def counters() -> dict[str, int]:
    built, fallback = _C.stock_key_counts()
    return {
        "stock_key.built": built,
        "stock_key.fallback": fallback,
        "stock_key.disabled": int(_state["proved"] is False),
    }


def reset_counters() -> None:
    _C.stock_key_set_counts(0, 0)


def saved_counters() -> tuple:
    return _C.stock_key_counts()


def restore_counters(saved: tuple) -> None:
    _C.stock_key_set_counts(*saved)


def _items(key: Any, state: Any) -> list:
    """The key's items for comparison: SymInt stubs as (stub, the SymNode's position
    among the distinct SymNodes), everything else as (type, value)."""
    nodes: dict[int, int] = {}
    out = []
    for v in key.key:
        if type(v) is _PySymInputStub and isinstance(v.value, torch.SymInt):
            pos = nodes.setdefault(id(v.value.node), len(nodes))
            out.append(("stub", pos, str(v.value.node.expr), v.value.node.hint))
        else:
            out.append((type(v), v))
    lookup = sorted(state.sym_node_lookup.values())
    return [out, lookup, sorted(map(str, state.known_symbols)), state.shape_env is not None]


def _calls(mode: Any) -> list:
    """(func, args, kwargs) covering every kind of item the builder lays out."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    aten = torch.ops.aten

    def sym(*shape: int) -> torch.Tensor:
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
        return mode.from_tensor(torch.empty(*shape), symbolic_context=ctx)

    # (real tensors made outside the mode: under it torch.empty is already fake,
    # and from_tensor returns it as it is)
    x = sym(3, 4)
    s = mode.from_tensor(torch.empty(2, 5, dtype=torch.float16), static_shapes=True)
    r = mode.from_tensor(torch.empty(6, requires_grad=True), static_shapes=True)
    b = mode.from_tensor(torch.empty(2, 3, 4, dtype=torch.bool))
    with mode:
        y = aten.neg(x)  # x's SymNodes
        t = aten.t(x)  # a view, strides swapped
        n = x.shape[0] * 2  # a derived SymNode
        v = s[:, 1:]  # a static view with an offset, not contiguous
    return [
        (aten.mul.Tensor, (x, y), {}),
        (aten.add.Tensor, (x, t), {"alpha": 2}),
        (aten.view.default, (y, [n, x.shape[1] // 2]), {}),
        (aten.expand.default, (x, [2, x.shape[0], -1]), {"implicit": False}),
        (aten.mul.Tensor, (s, 1.5), {}),
        (aten.add.Tensor, (v, True), {}),
        (aten.sum.dim_IntList, (b, [0, -1], True), {"dtype": torch.int64}),
        (aten.empty.memory_format, ([2, x.shape[1]],),
         {"dtype": torch.float32, "layout": torch.strided, "device": torch.device("cpu"),
          "pin_memory": None, "memory_format": torch.contiguous_format}),
        (aten.clone.default, (r,), {"memory_format": torch.preserve_format}),
        (aten.cat.default, ((x, y), 0), {}),
        (aten.sym_size.int, (x, 0), {}),
    ]


def prove() -> tuple[bool, str]:
    """Compare the builder's keys with stock's (see the module docstring)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = ft.FakeTensorMode(shape_env=ShapeEnv())
    built = 0
    calls = _calls(mode)
    for func, args, kwargs in calls:
        state = _CacheKeyState(mode.shape_env)
        try:
            ours = _C.stock_cache_key(mode, state, func, args, kwargs)
            bare = _C.stock_cache_key(mode, None, func, args, kwargs)
        except Exception as e:  # noqa: BLE001 -- any error disproves it
            return False, f"{func}: {type(e).__name__}: {e}"
        theirs_state = _CacheKeyState(mode.shape_env)
        try:
            theirs = mode._cache_key(theirs_state, func, args, kwargs)
        except ft._BypassDispatchCache as e:
            if ours is not None:
                return False, f"{func}: stock bypasses ({e.reason}), the builder built a key"
            continue
        if ours is None or bare is None:
            if (ours is None) != (bare is None):
                return False, f"{func}: built with a key state or without, not both"
            continue
        built += 1
        if ours != theirs or hash(ours) != hash(theirs):
            return False, f"{func}: keys differ: {ours.key} vs {theirs.key}"
        a, b = _items(ours, state), _items(theirs, theirs_state)
        if a != b:
            return False, f"{func}: key items differ: {a} vs {b}"
        if (bare[0] != theirs or hash(bare[0]) != hash(theirs)
                or _items(bare[0], theirs_state)[0] != b[0]
                or bare[1] != theirs_state.cache_on_shape_env()):
            return False, f"{func}: keys built without a key state differ: {bare} vs {theirs.key}"
    symbolic = sum(isinstance(a, torch.Tensor) and a._has_symbolic_sizes_strides for c in calls for a in c[1])
    if built < len(calls) or symbolic < 8:
        return False, f"the builder built {built} of {len(calls)} keys ({symbolic} symbolic arguments)"
    return True, ""


def _setup(on: bool) -> None:
    head = _compat.stock_key_head()
    _C.setup_stock_key(*_TYPES, head == 6, on and head is not None)


def prove_once(known: list | None = None) -> bool:
    """Prove the builder (once per process; its counters left as they were), or
    take ``known``, ``[proven, why not]``: the proof's result kept with the
    self-test's for this unchanged installation (fastfake/core/selftest_store.py)."""
    if _state["proved"] is None and known is not None:
        _state["proved"], _state["why"] = bool(known[0]), str(known[1])
    if _state["proved"] is None:
        saved = saved_counters()
        if _compat.stock_key_head() is None:
            ok, why = False, "stock's key starts with items the builder does not know"
        else:
            _setup(True)
            try:
                ok, why = prove()
            finally:
                _setup(False)
                restore_counters(saved)
        _state["proved"], _state["why"] = ok, why
        if not ok:
            import logging

            logging.getLogger("fastfake").warning(
                "fastfake: stock's cache keys are left to stock here (%s)", why
            )
    return bool(_state["proved"])


def enable(on: bool) -> None:
    """Turn the builder on (if proven) or off."""
    _setup(on and prove_once())


def why_disabled() -> str:
    return _state["why"]


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the builder on where proven."""
    enable(on)
