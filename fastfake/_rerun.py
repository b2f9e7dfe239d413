"""Symbolic calls stock never caches, served from what stock's kernel returned
for the same call before ("rerun" entries).

Stock refuses to cache some calls and reruns their kernel every time. On 2.13 and
2.14 ``aten._unsafe_view`` is one ("unsafe view"): under symbolic shapes its
kernel is a Python decomposition (``prims.split_dim`` and a stride computation in
SymNode arithmetic) costing ~1.5 ms per call, and matmul-heavy models without
biases (T5-, Llama-style) call it hundreds of times per compile with the same few
keys. fastfake's result cache keeps a negative entry for such a call, so each
repeat went to stock.

A repeat is served from the output stock's kernel returned for an earlier call
with the same key in the same ShapeEnv when that earlier call is proven to be a
pure function of the key and the ShapeEnv state its static evaluation reads. An
entry is recorded only from a stock call that

* found stock's negative entry already there (so stock's cache, apart from its
  counters, did not move: its ShapeEnv cache and its static cache kept their
  sizes; its counters moved by exactly one "unsafe view" bypass and ``h`` hits of
  the calls its kernel dispatched, no miss, and no entry fastfake counts for
  stock appeared);
* left the ShapeEnv unchanged (:func:`fastfake._portable.fingerprint` and the
  :func:`fastfake._portable.signature` of the involved symbols, every one backed
  without a replacement; no pending floor-division resimplification before or
  after);
* returned a plain FakeTensor over its input's storage with a version counter of
  its own (``_unsafe_view`` is not a view), whose symbols are the inputs'.

What the kernel computed on its input tensors (it asks for ``numel``, which a
symbolic tensor memoises) is recorded by the extension next to the output, and a
repeat is served only when the input has memoised exactly what the recorded
call's input had; then the same values are seeded into it.

A repeat is served when the key is equal (the same expressions, hints and SymNode
sharing, the same ShapeEnv), no proxy tracing is visible to fake dispatch, no real
tensors were converted for the call, and the ShapeEnv's signature over the
involved symbols equals the recorded one (checked in full whenever the cheap
:func:`stamp` moved). Serving counts what stock's call counts: one "unsafe view"
bypass and ``h`` hits.

Records hold sympy values; never a ShapeEnv, mode, SymNode or tensor.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch._subclasses import fake_tensor as ft

from . import _C, _cache, _portable, _stock_cache

_counts: Counter = Counter()
# (served and declined.inputs are counted by the extension)
_NAMES = ("learned", "impure", "nested", "declined.shape_env", "declined.output")
#: the ops served this way, with the bypass reason stock counts for them
#: (the extension counts a served call as one "unsafe view" bypass, the only reason
#: it keeps a pending count for: setup() refuses any other)
OPS = {torch.ops.aten._unsafe_view.default: "unsafe view"}


def counters() -> dict[str, int]:
    out = {f"cache.symbolic.rerun.{k}": _counts[k] for k in _NAMES}
    served, declined_inputs = _C.rerun_counts()
    out["cache.symbolic.rerun.served"] = served
    out["cache.symbolic.rerun.declined.inputs"] = declined_inputs
    return out


def reset_counters() -> None:
    _counts.clear()
    _C.rerun_reset_counts()


def saved_counters() -> tuple:
    return dict(_counts), _C.rerun_counts()


def restore_counters(saved: tuple) -> None:
    counts, (served, declined_inputs) = saved
    _counts.clear()
    _counts.update(counts)
    _C.rerun_set_counts(served, declined_inputs)


def _stock_state(env: Any) -> tuple:
    M = ft.FakeTensorMode
    return (M.cache_hits, M.cache_misses, dict(M.cache_bypasses), len(M.cache),
            len(env.fake_tensor_cache), _C.stock_cache_extra_entries())


def stamp(env: Any, symbols: tuple) -> tuple:
    """Cheap: the ShapeEnv's fingerprint and the ranges and size-likeness of the
    involved symbols. A ShapeEnv whose stamp did not move since a full check has
    the same signature (axioms, divisibility and replacements change only with
    guards, runtime asserts, divisibility facts or replacements, all counted)."""
    ranges = env.var_to_range
    size_like = env.size_like
    per = []
    for s in symbols:
        r = ranges.get(s)
        per.append((None, None, False) if r is None else (r.lower, r.upper, s in size_like))
    return (_portable.fingerprint(env), tuple(per))


def before(mode: Any, func: Any, args: tuple, kwargs: Any) -> Any:
    """Called by C++ right before stock reruns a call of ``OPS``."""
    if func not in OPS or kwargs:
        return None
    env = mode.shape_env
    if env is None or env._resimplify_floor_div_axioms:
        return None
    _stock_cache.flush()  # fastfake's pending counts: nested calls it serves count
    symbols = _portable._symbols(args)
    sig = _portable.signature(env, symbols)
    if sig is None:
        return None
    return (_portable.fingerprint(env), symbols, sig, _stock_state(env))


def learn(mode: Any, func: Any, args: tuple, kwargs: Any, out: Any, state: Any) -> Any:
    """After stock reran the call: ``(record, description)`` or None."""
    fp, symbols, sig, (hits, misses, bypasses, static, held, extra) = state
    env = mode.shape_env
    _stock_cache.flush()
    h2, m2, b2, s2, e2, x2 = _stock_state(env)
    reason = OPS[func]
    expected = dict(bypasses)
    expected[reason] = expected.get(reason, 0) + 1
    if (m2, s2, e2, x2) != (misses, static, held, extra) or h2 < hits or {
        k: v for k, v in b2.items() if v
    } != {k: v for k, v in expected.items() if v}:
        _counts["nested"] += 1
        return None
    if (
        _portable.fingerprint(env) != fp
        or env._resimplify_floor_div_axioms
        or _portable.signature(env, symbols) != sig
    ):
        _counts["impure"] += 1
        return None
    if not _cache.plain_alias(mode, out, args[0]):
        _counts["declined.output"] += 1
        return None
    found: set = set()
    _cache._collect_symbols((out,), found)
    if not found <= set(symbols):
        _counts["declined.output"] += 1
        return None
    _counts["learned"] += 1
    record = (symbols, sig, [stamp(env, symbols)], h2 - hits)
    return record, (False, [("tensor_sym", out, 0)], None)


def admit(mode: Any, record: tuple) -> bool:
    """Whether stock's rerun here would be the recorded call."""
    symbols, sig, last, _hits = record
    env = mode.shape_env
    if env._resimplify_floor_div_axioms:
        _counts["declined.shape_env"] += 1
        return False
    st = stamp(env, symbols)
    if st == last[0]:
        return True
    if _portable.signature(env, symbols) != sig:
        _counts["declined.shape_env"] += 1
        return False
    last[0] = st
    return True


def setup(C: Any) -> None:
    if set(OPS.values()) != {"unsafe view"}:
        raise RuntimeError(f"fastfake._rerun: the extension counts only 'unsafe view' bypasses: {OPS}")
    C.setup_rerun(before, learn, admit, tuple(OPS))
