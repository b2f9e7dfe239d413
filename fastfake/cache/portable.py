"""Symbolic result-cache entries reused in another ShapeEnv ("portable" entries).

A symbolic entry of the result cache belongs to the ShapeEnv it was learned in
(csrc/cache/cache.cpp). Yet the same calls recur in other ShapeEnvs: Dynamo traces a
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
  hit), the call left A unchanged (:func:`fingerprint` before and after, and the
  signature below), and it involves only backed symbols (a replaced symbol
  brings in its replacement closure, whose replacements the signature holds);
* if the kernel dispatched other calls (a Python decomposition: ``view`` ->
  ``prims.collapse_view``, ``native_layer_norm`` -> ``var_mean`` -> ``prims.var``,
  ...), every key stock's cache code built for them is known (:func:`key_logger`
  wraps ``FakeTensorMode._cache_key`` and logs the keys ``_cached_dispatch_impl``
  builds, and the reasons of those it could not build), nothing went into stock's
  ShapeEnv-free cache, and the counts add up: one miss per entry stored, one hit
  per logged key found with an entry, one bypass per negative entry stored or
  found and per key not built, and nothing else (a call fastfake answered from its
  own cache inside the kernel has no logged key: not recorded). The record holds
  the stored entries in order and the keys found (ShapeEnv-free), the counts and
  the calls counted by ``torch.utils._stats`` ("nested" records);

and it serves a call in B only when

* the call's key is the same apart from the ShapeEnv (the same expressions, hints
  and SymNode sharing), no proxy tracing is visible to fake dispatch, B's
  :func:`signature` over those symbols equals A's (so every static evaluation
  stock makes in B gives A's answer, and A's added nothing), and stock's cache in
  B has no entry for the call (stock would miss) and, for a nested record, none
  for the keys A stored and an entry of the same kind (an entry / a negative one
  with the same reason) for each key A found. Then stock's kernel in B makes the
  same nested calls with value-equal keys (the same expressions and hints, by the
  signature), and each finds what it found in A, call by call.

Serving it does what stock's miss in B does: the kernel's output (rebuilt from
the miss recipe, SymNode identities included), stock's own entry stored into
B's cache under B's key (``_set_cache_key_for_shape_env``, as stock's miss does;
stock's entries hold no ShapeEnv), one miss counted for ``cache_info()``, and a
local entry in fastfake's cache for B's later calls (stock would hit those). A
nested record also stores the nested calls' entries first, in A's order, under
their recorded keys (stripped of their ShapeEnv, as stock stores every key), and
adds their misses, bypasses and ``simple_call_counter`` counts.
A view is rebuilt as stock's kernel returns it: over the viewed input's storage,
sharing its version counter (stock's hit builds one of its own).

Records hold sympy values, op overloads, stock's entries and stripped keys; never
a ShapeEnv, mode, SymNode or tensor.
"""
from __future__ import annotations

import itertools
import sys
from collections import Counter
from typing import Any

import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses._fake_tensor_utils import (
    _DeconstructedSymNode,
    _DeconstructedSymType,
    _InputBackref,
    _PySymInputStub,
)
from torch.fx.experimental.sym_node import SymNode

from torch.utils import _stats as torch_stats

from fastfake.cache import learn as _cache
from fastfake.cache import facts as _facts
from fastfake.common import compat as _compat
from fastfake.parity import evals as _evals
from fastfake.cache import free_symbols as _free_symbols
from fastfake.stock import cache as _stock_cache
from fastfake.stock import key as _stock_key

_counts: Counter = Counter()
_NAMES = ("learned", "learned_nested", "served", "served_nested", "impure", "nested",
          "declined.shape_env", "declined.stock_key", "declined.stock_has_entry",
          "declined.stock_lacks_entry", "declined.suppression", "declined.replay", "output_type",
          "unreplayable", "replayed_calls")


def counters() -> dict[str, int]:
    from fastfake import _C

    refused, declined = _C.portable_memo_counts()
    # (first calls admitted or declined in C++, csrc/cache/portable_fast.cpp, count
    # under the same names; "admitted_python": those left to admit() here)
    fast = dict(_C.portable_fast_counts())
    out = {f"cache.symbolic.portable.{k}": _counts[k] + fast.get(k, 0) for k in _NAMES}
    out["cache.symbolic.portable.admitted_python"] = fast.get("python", 0)
    # (counted by the extension: the derived values -- numel, contiguity -- the
    # arguments had memoised; csrc/cache/portable.cpp)
    out["cache.symbolic.portable.input_memo"] = refused
    out["cache.symbolic.portable.declined.input_memo"] = declined
    return out


def reset_counters() -> None:
    from fastfake import _C

    _counts.clear()
    _C.portable_set_memo_counts(0, 0)
    _C.portable_fast_set_counts([])


def saved_counters() -> tuple:
    from fastfake import _C

    return Counter(_counts), _C.portable_memo_counts(), _C.portable_fast_counts()


def restore_counters(saved: tuple) -> None:
    from fastfake import _C

    _counts.clear()
    _counts.update(saved[0])
    _C.portable_set_memo_counts(*saved[1])
    _C.portable_fast_set_counts(saved[2])


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


def replacement_closure(env: Any, symbols: tuple) -> tuple:
    """``symbols`` and, transitively, the symbols of their replacements (sorted):
    static evaluation of an expression over ``symbols`` reads the replacements'
    symbols too."""
    replacements = env.replacements
    out: set = set()
    todo = list(symbols)
    while todo:
        s = todo.pop()
        if s not in out:
            out.add(s)
            r = replacements.get(s)
            if r is not None:
                todo.extend(_free_symbols.of(r))
    return _free_symbols.ordered(out)


def signature(env: Any, symbols: tuple) -> tuple | None:
    """What static evaluation in ``env`` reads about expressions over ``symbols``
    (sorted), or None if one of them is unbacked or specialised (replaced by a
    number: stock then treats its SymInts as that number in keys and outputs,
    which a recipe read off a SymInt output would not): over the symbols'
    replacement closure (static evaluation of an expression reads its symbols'
    replacements, and theirs), each symbol's hint, value range, size-likeness and
    replacement; the axioms and divisibility facts over the closure."""
    hints = _compat.backed_hints(env)
    for s in symbols:
        if s not in hints:
            return None  # (before the closure: unbacked symbols are common and never served)
    symbols = replacement_closure(env, symbols)
    replacements = env.replacements
    ranges = env.var_to_range
    size_like = env.size_like
    per_symbol = []
    for s in symbols:
        if s not in hints:
            return None
        r = ranges.get(s)
        if r is None:
            return None
        rep = replacements.get(s)
        if rep is not None and not _free_symbols.of(rep):
            return None
        per_symbol.append((s, hints[s], r.lower, r.upper, s in size_like, rep))
    # (filtered incrementally: both grow with every guard of the program)
    return (tuple(per_symbol), _facts.axioms(env, symbols), _facts.divisible(env, symbols))


def signature_symbols(sig: tuple) -> tuple:
    """The symbols a :func:`signature` covers: the replacement closure it was taken
    over (sorted)."""
    return tuple(entry[0] for entry in sig[0])


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
    return _free_symbols.ordered(found)


def _stock_cache_state(env: Any) -> tuple:
    """Stock's cache counters (served calls' pending counts moved in first), the
    sizes of its two caches, and the calls ``torch.utils._stats.count`` counted."""
    _stock_cache.flush()
    M = ft.FakeTensorMode
    return (M.cache_hits, M.cache_misses, dict(M.cache_bypasses), len(M.cache),
            len(env.fake_tensor_cache), dict(torch_stats.simple_call_counter))


def before(mode: Any, args: tuple, kwargs: Any) -> Any:
    """Called by C++ right before stock runs a symbolic miss: the ShapeEnv's state."""
    env = mode.shape_env
    inputs = (*args, *kwargs.values()) if kwargs else args
    symbols = _symbols(inputs)
    sig = signature(env, symbols)
    if sig is None:
        # an unbacked or specialised symbol: never recorded, so nothing more to
        # snapshot (C++ then does not call learn(); data-dependent programs make
        # thousands of such misses)
        return None
    return (fingerprint(env), symbols, sig, _stock_cache_state(env),
            _floor_div_state(env), _Frame(), bool(env._suppress_guards_tls()))


# What ``torch.utils._stats.count`` counts stock's ``FakeTensorMode.__torch_dispatch__``
# under (csrc/dispatch/dispatch.cpp counts a served call under the same label).
DISPATCH_LABEL = "FakeTensorMode.__torch_dispatch__"


def _detached_key(key: Any) -> tuple | None:
    """The items of a stock key (stored, or built for a lookup) with each SymInt
    stub's SymNode replaced by a ShapeEnv-free ``_DeconstructedSymNode`` (stock's
    stored keys still hold the SymNode, and with it the ShapeEnv; a record must
    not), or None if the key holds anything else that refers to a SymNode."""
    out = []
    for v in key.key:
        if type(v) is _PySymInputStub:
            val = v.value
            if type(val) is _DeconstructedSymType:
                node = val.node
                if isinstance(node, SymNode):
                    node = _DeconstructedSymNode.from_node(node)
                out.append((val.ty, node))
                continue
            if type(val) is _InputBackref:
                out.append(v)
                continue
            if isinstance(val, torch.types.py_sym_types):  # a lookup key, not stored
                out.append((type(val), _DeconstructedSymNode.from_node(val.node)))
                continue
            return None
        if isinstance(v, (SymNode, *torch.types.py_sym_types)) or (
            isinstance(v, (tuple, list)) and _detached_key(_Items(v)) is None
        ):
            return None
        out.append(v)
    return tuple(out)


class _Items:
    __slots__ = ("key",)

    def __init__(self, items: Any) -> None:
        self.key = items


def _bound_key(items: tuple, env: Any) -> Any:
    """A key as stock stores it in ``env`` (each SymInt stub holding a SymNode of
    ``env`` with the recorded expression, hint and constant); with ``env`` None, the
    stubs hold the ShapeEnv-free ``_DeconstructedSymNode``s themselves: such a key
    hashes and compares as the key stock builds for the same call in any ShapeEnv
    (stubs compare by ``_value_eq`` / ``_value_hash``), so it looks that key up in
    any ShapeEnv's cache."""
    out = []
    for v in items:
        if type(v) is tuple and len(v) == 2 and type(v[1]) is _DeconstructedSymNode:
            v = _PySymInputStub(_DeconstructedSymType(v[0], v[1] if env is None else v[1].extract(env)))
        out.append(v)
    return ft._DispatchCacheKey(tuple(out))


def _delta(after: dict, before: dict) -> tuple | None:
    """What was added per name (sorted), or None if something went down."""
    out = []
    for k, v in after.items():
        d = v - before.get(k, 0)
        if d < 0:
            return None
        if d:
            out.append((k, d))
    if any(k not in after for k in before):
        return None
    return tuple(sorted(out))


# Keys stock's ``_cached_dispatch_impl`` built while a symbolic miss of fastfake's
# is being recorded: (key, None, on the ShapeEnv) or (None, reason it could not be
# built, False). One _Frame per miss in progress (held by the snapshot C++ keeps
# for the miss; closed by learn(), or when C++ drops the snapshot without learning);
# the log is emptied when none is open.
_KEY_LOG: list = []
_OPEN = [0]


class _Frame:
    __slots__ = ("start", "open", "eval_frame", "evals")

    def __init__(self) -> None:
        self.start = len(_KEY_LOG)
        self.open = True
        _OPEN[0] += 1
        # (the ShapeEnv evaluations stock's kernel makes: fastfake.parity.evals)
        self.eval_frame = _evals.Frame()
        self.evals: list = []

    def close(self) -> list:
        """The log since this frame opened (empty if it was closed already); the
        evaluations logged since then go to ``self.evals``."""
        if not self.open:
            return []
        self.open = False
        logged = _KEY_LOG[self.start:]
        self.evals = self.eval_frame.stop()
        _OPEN[0] -= 1
        if _OPEN[0] <= 0:
            _OPEN[0] = 0
            _KEY_LOG.clear()
        return logged

    def __del__(self) -> None:
        self.close()


def key_logger(original: Any, after: Any = None) -> Any:
    """``FakeTensorMode._cache_key`` logging, while a miss is recorded, the keys
    stock's cache code builds (called from ``_cached_dispatch_impl``; fastfake's
    own key computations are not logged), and handing each key stock's cache code
    builds to ``after(mode, state, func, key)`` (the learned-record store,
    fastfake/store/records.py). Otherwise the original, unchanged."""
    from fastfake.common.originals import original as _original

    cached_code = _original(ft.FakeTensorMode, "_cached_dispatch_impl").__code__
    getframe = sys._getframe

    def _cache_key(self, state, func, args, kwargs):
        if getframe(1).f_code is not cached_code:
            return original(self, state, func, args, kwargs)
        if not _OPEN[0]:
            key = original(self, state, func, args, kwargs)
        else:
            try:
                key = original(self, state, func, args, kwargs)
            except ft._BypassDispatchCache as e:
                _KEY_LOG.append((None, e.reason, False))
                raise
            _KEY_LOG.append((key, None, state.cache_on_shape_env()))
        if after is not None:
            after(self, state, func, key)
        return key

    _cache_key.__wrapped__ = original  # type: ignore[attr-defined]
    _cache_key.__qualname__ = original.__qualname__
    _cache_key.__doc__ = original.__doc__
    return _cache_key


def _nested(env: Any, state: tuple, entry: Any, logged: list, stored_keys: list) -> tuple | None:
    """What the nested calls of stock's miss did, as ``(stored, found, misses, hits,
    bypasses, calls)`` (``()`` for a kernel that dispatched nothing and counted
    nothing but its own call), or None if it cannot be replayed (the module's
    docstring says when). ``stored_keys`` receives the keys of the nested entries
    stock stored, as it stored them (for :func:`_fast_form`)."""
    hits, misses, bypasses, static, held, calls = state
    now = _stock_cache_state(env)
    if now[3] != static or not logged or logged[0][0] is None:
        return None
    added = now[4] - held
    cache = env.fake_tensor_cache
    if added < 1 or added > len(cache):
        return None
    stored = list(itertools.islice(reversed(cache.items()), added))[::-1]
    if stored[-1][1] is not entry or stored[-1][0] is not logged[0][0]:
        return None  # the last entry stored is not this call's own
    stored_ids = {id(k) for k, _ in stored}
    bypass_want: Counter = Counter()
    found = []
    found_hits = 0
    for key, reason, on_env in logged[1:]:
        if key is None:
            bypass_want[reason] += 1  # its key could not be built
            continue
        if id(key) in stored_ids:
            continue
        # found: in this ShapeEnv's cache, or in the ShapeEnv-free one (a call
        # without symbols: what it found there stays for later ShapeEnvs, unless
        # that cache is cleared, which admit() checks)
        e = (cache if on_env else ft.FakeTensorMode.cache).get(key)
        items = _detached_key(key) if e is not None else None
        if items is None:
            return None
        if isinstance(e, ft._DispatchCacheBypassEntry):
            bypass_want[e.reason] += 1
            found.append((items, e.reason, on_env))
        else:
            found_hits += 1
            found.append((items, None, on_env))
    nested_stored = []
    for k, e in stored[:-1]:
        if isinstance(e, ft._DispatchCacheBypassEntry):
            bypass_want[e.reason] += 1
        items = _detached_key(k)
        if items is None:
            return None
        nested_stored.append((items, e))
        stored_keys.append(k)
    nested_misses = now[1] - misses - 1
    bypass_delta = _delta(now[2], bypasses)
    # (stock's own count of this call is in there: the call itself is counted
    # where it is served)
    calls = {**calls, DISPATCH_LABEL: calls.get(DISPATCH_LABEL, 0) + 1}
    calls_delta = _delta(now[5], calls)
    if bypass_delta is None or calls_delta is None:
        return None
    positive = sum(not isinstance(e, ft._DispatchCacheBypassEntry) for _, e in nested_stored)
    if (
        now[0] - hits != found_hits
        or nested_misses != positive
        or bypass_delta != tuple(sorted(bypass_want.items()))
    ):
        return None  # a call answered without stock's cache code (or counted otherwise)
    if not nested_stored and not found and not bypass_delta and not calls_delta:
        return ()
    return (tuple(nested_stored), tuple(found), nested_misses, found_hits, bypass_delta, calls_delta)


def learn(mode: Any, func: Any, args: tuple, kwargs: Any, out: Any, state: Any) -> Any:
    """After stock missed and a symbolic entry was learned: ``(record, miss, fast)``
    if the call can serve other ShapeEnvs, else None. ``miss`` describes the outputs
    stock's miss returned, in ``fastfake.cache.learn.learn``'s format; ``fast`` is
    :func:`_fast_form`'s (or None)."""
    fp, symbols, sig, stock_state, (pending, effective), frame, ambient = state
    logged = frame.close()
    env = mode.shape_env
    last = _cache.take_last_symbolic()
    if last is None or sig is None:
        return None
    # the evaluations the kernel made, replayed where the record serves
    calls = _evals.portable_log(env, frame.evals)
    if calls is None:
        _counts["unreplayable"] += 1
        return None
    stored_keys: list = []
    nested = _nested(env, stock_state, last, logged, stored_keys)
    if nested is None:
        # a nested call was answered from a cache (or went where a replay cannot
        # follow): serving the call alone would not do what stock's miss does
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
    if entry.is_output_tuple and type(out) is not tuple:
        # a Python decomposition's named tuple (``return_types.var_mean``): the
        # recipe rebuilds a plain tuple, as stock's hit does
        _counts["output_type"] += 1
        return None
    described = []
    involved = set(signature_symbols(sig))
    for info, o in zip(entry.output_infos, outs):
        c = _cache._classify(func, info)
        if isinstance(c, str) or c[0] in ("inplace", "constant"):
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
    if nested and (nested[0] or nested[1] or nested[4]):
        _counts["learned_nested"] += 1  # with nested calls' entries, lookups or bypasses
    record = (symbols, sig, entry, pending, flips, nested, calls, ambient)
    fast = _fast_form(sig, pending, flips, logged[0][0], entry, nested, stored_keys)
    return record, (entry.is_output_tuple, described, None), fast


def _fast_form(sig: tuple, pending: bool, flips: bool, own_key: Any, entry: Any, nested: tuple,
               stored_keys: list) -> tuple:
    """What the extension needs to admit and commit a record itself
    (csrc/cache/portable_fast.cpp), the same decisions and effects as
    :func:`admit` and :func:`commit`: the signature's parts, the local entry's
    validity, the keys stock stored in the learning ShapeEnv (the call's own and
    its nested calls', as stock stored them: the extension turns each into a
    template whose SymInt stubs take the serving call's argument SymNodes, or a
    new SymNode with the recorded value where stock's nested call had one of its
    own, and drops them), ShapeEnv-free keys for the lookups the nested calls
    made, the counts, stock's own entry, and the floor-division resimplification
    state (pending where learned; cleared by the call)."""
    if nested:
        _stored, found, misses, hits, bypasses, calls = nested
        stored = tuple(zip(stored_keys, (e for _, e in _stored)))
        found = tuple((_bound_key(items, None), reason, on_env) for items, reason, on_env in found)
    else:
        stored, found, misses, hits, bypasses, calls = (), (), 0, 0, (), ()
    validity = (signature_symbols(sig), tuple(e[5] for e in sig[0]))
    counted_nested = bool(nested and (nested[0] or nested[1] or nested[4]))
    return (sig[0], sig[1], sig[2], validity, own_key, stored, found, misses, hits,
            bypasses, calls, entry, counted_nested, pending, flips)


def admit(mode: Any, func: Any, args: tuple, kwargs: Any, record: tuple) -> Any:
    """A first call in another ShapeEnv: ``(validity, stock_key)`` if the recorded
    miss is what stock would do here, else None."""
    symbols, sig, _entry, pending, _flips, nested = record[:6]
    env = mode.shape_env
    if _floor_div_state(env) != (pending, False) or signature(env, symbols) != sig:
        _counts["declined.shape_env"] += 1
        return None
    if nested and (nested[0] or nested[1]):
        cache = env.fake_tensor_cache
        keys = [_bound_key(items, env) for items, _ in nested[0]]
        if any(k in cache for k in keys):
            _counts["declined.stock_has_entry"] += 1  # a nested call would hit here
            return None
        for items, reason, on_env in nested[1]:
            e = (cache if on_env else ft.FakeTensorMode.cache).get(_bound_key(items, env))
            if e is None or (
                reason != e.reason if isinstance(e, ft._DispatchCacheBypassEntry) else reason is not None
            ):
                _counts["declined.stock_lacks_entry"] += 1  # a nested call would miss here
                return None
        nested = (tuple(zip(keys, (e for _, e in nested[0]))), *nested[1:])
    try:
        key, on_env = _stock_key.key_only(mode, func, args, kwargs)
    except ft._BypassDispatchCache:
        _counts["declined.stock_key"] += 1
        return None
    if not on_env:
        _counts["declined.stock_key"] += 1
        return None
    if env.fake_tensor_cache.get(key) is not None:
        _counts["declined.stock_has_entry"] += 1  # stock would hit (or bypass) here
        return None
    if not replay(mode, record):
        return None
    # (the local entry for this ShapeEnv's later calls stays valid while the
    # closure's replacements are those the signature compared)
    validity = (signature_symbols(sig), tuple(e[5] for e in sig[0]))
    return validity, (key, nested)


def replay(mode: Any, record: tuple) -> bool:
    """Before a record serves: the ShapeEnv evaluations stock's kernel made where
    it was learned, made here (fastfake.parity.evals), so that this ShapeEnv's
    evaluation caches -- and any guard they lead to -- end as stock's kernel
    leaves them. False (counted) if the call must go to stock: another guard
    suppression than where it was learned, or a result that differs."""
    return _evals.replay_record(mode.shape_env, record[6], record[7], _counts)


def commit(mode: Any, keys: Any, record: tuple, store: bool, count: bool = True) -> None:
    """The served call's stock entry (after its nested calls' entries), stored as
    stock's miss stores it, and the nested calls' counts added when stock's
    counters count served calls (``count``); none of it under fastfake's
    crosscheck (``store`` false: stock's verifying call is that miss)."""
    key, nested = keys  # (admit bound the nested keys to this ShapeEnv)
    _counts["served"] += 1
    if nested and (nested[0] or nested[1] or nested[4]):
        _counts["served_nested"] += 1
    if not store:
        return
    env = mode.shape_env
    if nested:
        entries, _found, misses, hits, bypasses, calls = nested
        cache = env.fake_tensor_cache
        for k, e in entries:
            ft._set_cache_key_for_shape_env(cache, k, e)
        if count:
            M = ft.FakeTensorMode
            M.cache_misses += misses
            M.cache_hits += hits
            for reason, n in bypasses:
                M.cache_bypasses[reason] += n
        if _OPEN[0]:
            # (inside the kernel of a miss being recorded: what this replay found,
            # as stock's nested calls would have looked it up)
            for items, reason, on_env in _found:
                _KEY_LOG.append((_bound_key(items, env), None, on_env))
        counter = torch_stats.simple_call_counter
        for label, n in calls:
            counter[label] = counter.get(label, 0) + n
    ft._set_cache_key_for_shape_env(env.fake_tensor_cache, key, record[2])
    if record[4]:
        # stock's first static evaluation here clears the pending floor-division
        # resimplification, which has nothing to resimplify (admit checked)
        env._resimplify_floor_div_axioms = False


def available() -> bool:
    return _compat.portable_entries_known()


def log_hit(mode: Any, func: Any, args: tuple, kwargs: Any) -> None:
    """A call fastfake's result cache answers inside the kernel of a miss being
    recorded: log stock's key for it, as stock's own lookup would have (an entry of
    stock's is there: fastfake learned it from stock)."""
    if not _OPEN[0]:
        return
    try:
        key, on_env = _stock_key.key_only(mode, func, args, kwargs)
    except ft._BypassDispatchCache as e:
        _KEY_LOG.append((None, e.reason, False))
        return
    _KEY_LOG.append((key, None, on_env))


def setup(C: Any) -> None:
    C.setup_portable(before, learn, admit, commit, log_hit, replay)
    C.setup_portable_fast(
        (_PySymInputStub, _DeconstructedSymType, ft._DispatchCacheKey, ft._DispatchCacheBypassEntry,
         _DeconstructedSymNode.from_node, _facts.match, ft.FakeTensorMode, _KEY_LOG, _OPEN),
        _compat.backed_hints_attr(),
    )
    # (the new SymNodes of stock's keys a served first call stores, made in C++
    # where `_DeconstructedSymNode.extract` is proven to be SymNode's constructor)
    C.set_stub_extract(_compat.stub_extract())


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): records served in other ShapeEnvs."""
    from fastfake import _C

    _C.set_portable(on)
