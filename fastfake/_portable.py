"""Symbolic result-cache entries reused in another ShapeEnv ("portable" entries).

A symbolic entry of the result cache belongs to the ShapeEnv it was learned in
(csrc/cache.cpp). Yet the same calls recur in other ShapeEnvs: Dynamo traces a
frame again from scratch when it restarts its analysis (a `dynamic=True` BERT
compile traces twice: the first attempt ends in `TensorifyScalarRestartAnalysis`),
and every compile of a process starts a new ShapeEnv whose symbols get the same
names for the same program. Each such first call costs a stock miss (1-5 ms).

An entry may serve a first call in another ShapeEnv B when stock's own call in B
would be the same computation with the same result and no effect on B. Stock's
symbolic fake kernels consult a ShapeEnv only through its static evaluation
(``ShapeEnv._maybe_evaluate_static``: the replacements, the axioms whose symbols
the expression mentions, the value ranges, hints and size-likeness of its
symbols, the divisibility facts and the pending floor-division resimplification)
and by adding to it (guards, replacements, ranges, runtime asserts, symbols). The
one change static evaluation itself makes, clearing the pending floor-division
resimplification flag, is recorded when it had nothing to resimplify and repeated
where the entry serves.
So a portable entry is recorded only when

* stock *missed* in the learning ShapeEnv A (its kernel ran; the output it
  returned is recorded as the recipe for a miss, next to the recipe of stock's
  hit), its kernel dispatched no other call (stock's cache and its counters moved
  by exactly this miss, and no call reached fastfake meanwhile), the call left A
  unchanged (:func:`fingerprint` before and after, and the signature below), and
  it involves only backed symbols without replacements;

and it serves a call in B only when

* the call's key is the same apart from the ShapeEnv (the same expressions, hints
  and SymNode sharing), no proxy tracing is visible to fake dispatch, B's
  :func:`signature` over those symbols equals A's (so every static evaluation
  stock makes in B gives A's answer, and A's added nothing), and stock's cache in
  B has no entry for the call (stock would miss).

Serving it does what stock's miss in B does: the kernel's output (rebuilt from
the miss recipe, SymNode identities included), stock's own entry stored into
B's cache under B's key (``_set_cache_key_for_shape_env``, as stock's miss does;
stock's entries hold no ShapeEnv), one miss counted for ``cache_info()``, and a
local entry in fastfake's cache for B's later calls (stock would hit those).
A view is rebuilt as stock's kernel returns it: over the viewed input's storage,
sharing its version counter (stock's hit builds one of its own).

Records hold sympy values, op overloads and stock's entries; never a ShapeEnv,
mode, SymNode or tensor.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses._fake_tensor_utils import _CacheKeyState

from . import _cache, _compat

_counts: Counter = Counter()
_NAMES = ("learned", "served", "impure", "nested", "declined.shape_env",
          "declined.stock_key", "declined.stock_has_entry")


def counters() -> dict[str, int]:
    return {f"cache.symbolic.portable.{k}": _counts[k] for k in _NAMES}


def reset_counters() -> None:
    _counts.clear()


def saved_counters() -> Counter:
    return Counter(_counts)


def restore_counters(saved: Counter) -> None:
    _counts.clear()
    _counts.update(saved)


def fingerprint(env: Any) -> tuple:
    """Sizes and version counters of everything a fake kernel can add to a ShapeEnv."""
    return (
        len(env.guards),
        env._version_counter,
        env._replacements_version_counter,
        env.num_deferred_runtime_asserts,
        len(env.var_to_range),
        len(env.axioms),
        len(env.divisible),
        len(env.size_like),
        len(_compat.backed_hints(env)),
        len(env.replacements),
        # (a new symbol of any kind also gets a value range, counted above)
        getattr(env, "unbacked_symint_counter", None),
        getattr(env, "unbacked_symfloat_counter", None),
        len(getattr(env, "pending_fresh_unbacked_symbols", ())),
    )


def signature(env: Any, symbols: tuple) -> tuple | None:
    """What static evaluation in ``env`` reads about expressions over ``symbols``
    (sorted), or None if one of them is unbacked or has a replacement."""
    hints = _compat.backed_hints(env)
    replacements = env.replacements
    ranges = env.var_to_range
    size_like = env.size_like
    per_symbol = []
    for s in symbols:
        if s in replacements or s not in hints:
            return None
        r = ranges.get(s)
        if r is None:
            return None
        per_symbol.append((s, hints[s], r.lower, r.upper, s in size_like))
    involved = set(symbols)
    axioms = frozenset(
        (k, v) for k, v in env.axioms.items() if k.free_symbols and k.free_symbols <= involved
    )
    divisible = frozenset(d for d in env.divisible if d.free_symbols <= involved)
    return (tuple(per_symbol), axioms, divisible)


def _floor_div_state(env: Any) -> tuple[bool, bool]:
    """(pending floor-division resimplification, whether it would change anything).
    The first static evaluation after a change of ``divisible`` resimplifies the
    axioms that contain a FloorDiv and clears the flag; with no such axiom only the
    flag changes."""
    pending = bool(env._resimplify_floor_div_axioms)
    if not pending:
        return False, False
    from torch.utils._sympy.functions import FloorDiv

    return True, any(k.has(FloorDiv) for k in env.axioms)


def _symbols(items) -> tuple:
    found: set = set()
    _cache._collect_symbols(items, found)
    return tuple(sorted(found, key=str))


def _stock_cache_state(env: Any) -> tuple:
    M = ft.FakeTensorMode
    return (M.cache_hits, M.cache_misses, sum(M.cache_bypasses.values()), len(M.cache),
            len(env.fake_tensor_cache))


def before(mode: Any, args: tuple, kwargs: Any) -> Any:
    """Called by C++ right before stock runs a symbolic miss: the ShapeEnv's state."""
    env = mode.shape_env
    inputs = (*args, *kwargs.values()) if kwargs else args
    symbols = _symbols(inputs)
    return (fingerprint(env), symbols, signature(env, symbols), _stock_cache_state(env),
            _floor_div_state(env))


def learn(mode: Any, func: Any, args: tuple, kwargs: Any, out: Any, state: Any) -> Any:
    """After stock missed and a symbolic entry was learned: ``(record, miss)`` if the
    call can serve other ShapeEnvs, else None. ``miss`` describes the outputs stock's
    miss returned, in ``fastfake._cache.learn``'s format."""
    fp, symbols, sig, (hits, misses, bypasses, static, held), (pending, effective) = state
    env = mode.shape_env
    last = _cache.take_last_symbolic()
    if last is None or sig is None:
        return None
    if _stock_cache_state(env) != (hits, misses + 1, bypasses, static, held + 1):
        # stock's cache saw more than this call's own miss (a kernel that
        # dispatched other calls): serving it alone would not leave stock's
        # cache as stock's miss leaves it
        _counts["nested"] += 1
        return None
    if fingerprint(env) != fp or signature(env, symbols) != sig:
        _counts["impure"] += 1
        return None
    flips = pending and not env._resimplify_floor_div_axioms
    if effective and flips:
        _counts["impure"] += 1  # the axioms were resimplified
        return None
    entry = last
    outs = out if entry.is_output_tuple else (out,)
    if not isinstance(outs, tuple) or len(outs) != len(entry.output_infos):
        return None
    described = []
    involved = set(symbols)
    for info, o in zip(entry.output_infos, outs):
        c = _cache._classify(func, info)
        if isinstance(c, str) or c[0] == "inplace":
            return None
        if c[0] == "none":
            described.append(c)
            continue
        if type(o) is not ft.FakeTensor or not _cache._plain_state(o) or o.is_inference():
            return None
        if c[1] != -1:
            # a view: stock's kernel output shares the viewed input's storage and
            # version counter (rebuilt so); anything else is not recorded
            base = args[c[1]]
            if o.untyped_storage()._cdata != base.untyped_storage()._cdata or o._version != base._version:
                return None
        found: set = set()
        _cache._collect_symbols((o,), found)
        if not found <= involved:
            return None
        described.append(("tensor_sym", o, c[1]))
    _counts["learned"] += 1
    return (symbols, sig, entry, pending, flips), (entry.is_output_tuple, described, None)


def admit(mode: Any, func: Any, args: tuple, kwargs: Any, record: tuple) -> Any:
    """A first call in another ShapeEnv: ``(validity, stock_key)`` if the recorded
    miss is what stock would do here, else None."""
    symbols, sig, _entry, pending, _flips = record
    env = mode.shape_env
    if _floor_div_state(env) != (pending, False) or signature(env, symbols) != sig:
        _counts["declined.shape_env"] += 1
        return None
    state = _CacheKeyState(env)
    try:
        key = mode._cache_key(state, func, args, kwargs or {})
    except ft._BypassDispatchCache:
        _counts["declined.stock_key"] += 1
        return None
    if not state.cache_on_shape_env() or state.shape_env is not env:
        _counts["declined.stock_key"] += 1
        return None
    if env.fake_tensor_cache.get(key) is not None:
        _counts["declined.stock_has_entry"] += 1  # stock would hit (or bypass) here
        return None
    validity = (symbols, tuple(None for _ in symbols))
    return validity, key


def commit(mode: Any, key: Any, record: tuple, store: bool) -> None:
    """The served call's stock entry, stored as stock's miss stores it (not under
    fastfake's crosscheck: stock's verifying call is that miss)."""
    _counts["served"] += 1
    if not store:
        return
    env = mode.shape_env
    ft._set_cache_key_for_shape_env(env.fake_tensor_cache, key, record[2])
    if record[4]:
        # stock's first static evaluation here clears the pending floor-division
        # resimplification, which has nothing to resimplify (admit checked)
        env._resimplify_floor_div_axioms = False


def available() -> bool:
    return _compat.portable_entries_known()


def setup(C: Any) -> None:
    C.setup_portable(before, learn, admit, commit)
