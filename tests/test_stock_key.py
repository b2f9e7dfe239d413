"""Stock's dispatch-cache key built in C++ (csrc/stock/key.cpp, fastfake/stock/key.py).

Every key the builder makes must be stock's ``FakeTensorMode._cache_key`` for the
same call: equal and equally hashed, item by item of the same type, with the
SymInt stubs on the same SymNodes, and the key state (``sym_node_lookup``,
``known_symbols``, ``shape_env``) left as stock's leaves it. Checked over random
calls in one mode and ShapeEnv (the builder keeps a default-device string across
calls), under changed global state, and for the calls it must leave to stock.
"""
from __future__ import annotations

import random

import pytest
import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses._fake_tensor_utils import _CacheKeyState
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import fastfake
from fastfake import _C
from fastfake.stock import key as _stock_key

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _builder_on():
    fastfake.install()
    assert _C.stock_key_on()
    yield
    fastfake.uninstall()


def _sym(mode, *shape, dtype=torch.float32):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
    return mode.from_tensor(torch.empty(*shape, dtype=dtype), symbolic_context=ctx)


def _both(mode, func, args, kwargs):
    """(builder's (state, key) or None, stock's (state, key) or its bypass reason)."""
    state = _CacheKeyState(mode.shape_env)
    ours = _C.stock_cache_key(mode, state, func, args, kwargs)
    bare = _C.stock_cache_key(mode, None, func, args, kwargs)
    assert (ours is None) == (bare is None)
    theirs_state = _CacheKeyState(mode.shape_env)
    try:
        theirs = (theirs_state, mode._cache_key(theirs_state, func, args, kwargs))
    except ft._BypassDispatchCache as e:
        theirs = e.reason
    if bare is not None and not isinstance(theirs, str):
        # built without a key state: the same key, and whether it holds a SymNode
        key, on_env = bare
        assert key == theirs[1] and hash(key) == hash(theirs[1])
        assert _stock_key._items(key, theirs_state)[0] == _stock_key._items(theirs[1], theirs_state)[0]
        assert on_env == theirs_state.cache_on_shape_env()
    return (None if ours is None else (state, ours)), theirs


def _assert_same(ours, theirs, what):
    assert not isinstance(theirs, str), f"{what}: stock bypasses ({theirs}), the builder built a key"
    (s1, k1), (s2, k2) = ours, theirs
    assert k1 == k2 and hash(k1) == hash(k2), what
    assert _stock_key._items(k1, s1) == _stock_key._items(k2, s2), what
    assert s1.shape_env is s2.shape_env, what


def _pool(mode, rng):
    """Tensors of one mode: static and symbolic, views, offsets, flags."""
    # (real tensors made outside the mode: under it from_tensor returns a fake
    # torch.empty as it is, static)
    x = _sym(mode, 3, 4)
    h = _sym(mode, 2, 3, 5, dtype=torch.float16)
    s = mode.from_tensor(torch.empty(4, 6), static_shapes=True)
    c = mode.from_tensor(torch.empty(3, dtype=torch.complex64))
    out = [
        x,
        h,
        s,
        mode.from_tensor(torch.empty(2, 3, requires_grad=True)),
        mode.from_tensor(torch.empty(5, dtype=torch.int64), static_shapes=True),
        mode.from_tensor(torch.empty(())),
    ]
    with mode:
        out += [aten.neg(x), aten.t(x), x[1:], aten.view(x, [x.shape[0] * x.shape[1]]),
                s[:, 2:], aten._conj(c), aten.transpose(h, 0, 2)]
    assert x._has_symbolic_sizes_strides
    rng.shuffle(out)
    return out, x


def _value(rng, tensors, x, depth=0):
    kind = rng.randrange(12 if depth < 2 else 9)
    if kind < 3:
        return rng.choice(tensors)
    if kind == 3:
        return rng.choice([x.shape[0], x.shape[1], x.shape[0] + 1, x.shape[1] * 2])
    if kind == 4:
        return rng.choice([0, 1, -1, 7, 2**40])
    if kind == 5:
        return rng.choice([1.5, -0.0, float("inf"), True, False, None])
    if kind == 6:
        return rng.choice([torch.float32, torch.int8, torch.device("cpu"), torch.strided,
                           torch.contiguous_format, torch.channels_last, "mean", torch.Size([2, 3])])
    if kind == 7:
        return torch.Size([x.shape[0], 4])
    if kind == 8:
        return []
    if kind == 9:
        return [_value(rng, tensors, x, depth + 1) for _ in range(rng.randrange(1, 4))]
    if kind == 10:
        return tuple(_value(rng, tensors, x, depth + 1) for _ in range(rng.randrange(1, 4)))
    return {"k": _value(rng, tensors, x, depth + 1), "j": 3}


@pytest.mark.parametrize("seed", range(3))
def test_random_calls_match_stocks_keys(seed):
    """Random argument structures (the key does not run the op, so any structure
    is a valid question), many calls per mode and ShapeEnv, several modes."""
    rng = random.Random(seed)
    funcs = [aten.add.Tensor, aten.mul.Tensor, aten.cat.default, aten.view.default,
             aten.sum.dim_IntList, aten.empty.memory_format, aten.clone.default]
    built = stock_only = symbolic = 0
    for _ in range(4):
        mode = ft.FakeTensorMode(shape_env=ShapeEnv())
        tensors, x = _pool(mode, rng)
        for step in range(150):
            func = rng.choice(funcs)
            args = tuple(_value(rng, tensors, x) for _ in range(rng.randrange(0, 4)))
            kwargs = {f"a{i}": _value(rng, tensors, x) for i in range(rng.randrange(0, 3))}
            ours, theirs = _both(mode, func, args, kwargs)
            what = f"seed {seed} step {step}: {func} {args} {kwargs}"
            if ours is None:
                stock_only += 1
                continue
            built += 1
            symbolic += ours[0].cache_on_shape_env()
            _assert_same(ours, theirs, what)
    # (most structures are built here; 4-d static tensors, channels-last and the
    # like go to stock)
    assert built > 400 and symbolic > 200 and stock_only > 0, (built, symbolic, stock_only)


def test_global_state_is_read_per_call():
    """Default dtype, inference mode and a ShapeEnv's settings are read on each
    call."""
    mode = ft.FakeTensorMode(shape_env=ShapeEnv())
    x = _sym(mode, 3, 4)
    call = (aten.add.Tensor, (x, 1.0), {})
    ours, theirs = _both(mode, *call)
    _assert_same(ours, theirs, "default")
    keys = [ours[1]]
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ours, theirs = _both(mode, *call)
        _assert_same(ours, theirs, "float64")
        keys.append(ours[1])
    finally:
        torch.set_default_dtype(prev)
    with torch.inference_mode():
        ours, theirs = _both(mode, *call)
        _assert_same(ours, theirs, "inference")
        keys.append(ours[1])
    other = ft.FakeTensorMode(shape_env=ShapeEnv(specialize_zero_one=False))
    y = _sym(other, 3, 4)
    ours, theirs = _both(other, aten.add.Tensor, (y, 1.0), {})
    _assert_same(ours, theirs, "settings")
    keys.append(ours[1])
    assert len({k for k in keys}) == len(keys)  # each one a different key


def test_left_to_stock():
    """What the builder does not lay out goes to stock, which builds the key or
    raises its bypass; ``cache_key`` gives stock's answer either way."""
    mode = ft.FakeTensorMode(shape_env=ShapeEnv())
    other = ft.FakeTensorMode()
    x = _sym(mode, 3, 4)
    four_d = mode.from_tensor(torch.empty(2, 3, 4, 5), static_shapes=True)
    real = torch.empty(2)
    cases = [
        ((x, real), "non-fake tensor"),
        ((x, other.from_tensor(torch.empty(2))), "not our fake"),
        ((x, x.shape[0] * 1.0), "symbolic shape"),  # a SymFloat
        ((x, lambda: 0), "function argument"),
        ((four_d, 1), None),  # stock's channels-last test: stock builds it
    ]
    for args, reason in cases:
        state = _CacheKeyState(mode.shape_env)
        assert _C.stock_cache_key(mode, state, aten.add.Tensor, args, {}) is None, args
        assert _C.stock_cache_key(mode, None, aten.add.Tensor, args, {}) is None, args
        if reason is None:
            state, key = _stock_key.cache_key(mode, aten.add.Tensor, args, {})
            assert key == mode._cache_key(_CacheKeyState(mode.shape_env), aten.add.Tensor, args, {})
        else:
            with pytest.raises(ft._BypassDispatchCache) as e:
                _stock_key.cache_key(mode, aten.add.Tensor, args, {})
            assert e.value.reason == reason


def test_counted_and_stored_key_is_found_by_stock():
    """A key the builder made, stored as stock stores it, is the one stock's own
    lookup finds (its hit)."""
    fastfake.reset_stats()
    mode = ft.FakeTensorMode(shape_env=ShapeEnv())
    x = _sym(mode, 3, 4)
    state, key = _stock_key.cache_key(mode, aten.neg.default, (x,), {})
    assert fastfake.stats()["stock_key.built"] == 1
    ft._set_cache_key_for_shape_env(mode.shape_env.fake_tensor_cache, key, ft._DispatchCacheBypassEntry("x"))
    found = mode._cache_key(_CacheKeyState(mode.shape_env), aten.neg.default, (x,), {})
    assert mode.shape_env.fake_tensor_cache.get(found) is not None


def test_unproven_builder_stays_off(monkeypatch):
    """A release whose keys the builder does not reproduce: off, warned, counted,
    and every key is stock's."""
    fastfake.install()  # the self-test's report, with the proof kept in it
    fastfake.uninstall()
    from fastfake.core import install as _install

    monkeypatch.delitem(_install._State.selftest.proofs, "stock_key", raising=False)
    monkeypatch.setitem(_stock_key._state, "proved", None)
    monkeypatch.setattr(_stock_key, "prove", lambda: (False, "keys differ (test)"))
    fastfake.install()
    try:
        assert not _C.stock_key_on()
        assert fastfake.stats()["stock_key.disabled"] == 1
        mode = ft.FakeTensorMode(shape_env=ShapeEnv())
        x = _sym(mode, 3, 4)
        fastfake.reset_stats()
        _stock_key.cache_key(mode, aten.neg.default, (x,), {})
        assert fastfake.stats()["stock_key.built"] == 0
    finally:
        fastfake.uninstall()
        monkeypatch.setitem(_stock_key._state, "proved", None)


def test_prove_fails_on_a_wrong_layout(monkeypatch):
    """prove() can fail: a builder whose key differs from stock's is caught."""
    real = _C.stock_cache_key

    def wrong(mode, state, func, args, kwargs):
        r = real(mode, state, func, args, kwargs)
        if r is None:
            return None
        if state is None:  # (key, holds a SymNode)
            return r
        return ft._DispatchCacheKey(r.key[:-1])

    monkeypatch.setattr(_C, "stock_cache_key", wrong)
    ok, why = _stock_key.prove()
    assert not ok and "keys differ" in why, why

    def wrong_bare(mode, state, func, args, kwargs):
        r = real(mode, state, func, args, kwargs)
        return r if r is None or state is not None else (r[0], not r[1])

    monkeypatch.setattr(_C, "stock_cache_key", wrong_bare)
    ok, why = _stock_key.prove()
    assert not ok and "without a key state" in why, why


def test_head_layout_of_this_release():
    """The key's head is read off stock's own key (6 items since the proxy-tracing
    flag came in, 5 on 2.9); a builder told the other layout is caught by prove()."""
    from fastfake.common import compat as _compat

    head = _compat.stock_key_head()
    assert head in (5, 6)
    try:
        _C.setup_stock_key(*_stock_key._TYPES, head != 6, True)
        ok, why = _stock_key.prove()
        assert not ok and "differ" in why, why
    finally:
        _stock_key.enable(True)
    assert _C.stock_key_on()
