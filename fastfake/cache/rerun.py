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
with the same key when that earlier call is proven to be a pure function of the
key and the ShapeEnv state its static evaluation reads. An entry is recorded only
from a stock call that

* found stock's negative entry already there (so stock's cache, apart from its
  counters, did not move: its ShapeEnv cache and its static cache kept their
  sizes; its counters moved by exactly one "unsafe view" bypass and ``h`` hits of
  the calls its kernel dispatched, no miss, and no entry fastfake counts for
  stock appeared);
* left the ShapeEnv unchanged (:func:`fastfake.cache.portable.fingerprint` and the
  signature of the involved symbols, every one backed: for each symbol of their
  replacement closure (a replaced symbol brings in the symbols it is replaced by)
  its hint, replacement, range and size-likeness, and the axioms and divisibility
  facts over them; no pending floor-division resimplification before or after);
* returned a plain FakeTensor over its input's storage with a version counter of
  its own (``_unsafe_view`` is not a view), whose symbols are the inputs'.

What the kernel computed on its input tensors (it asks for ``numel``, which a
symbolic tensor memoises) is recorded by the extension next to the output, and a
repeat is served only when the input has memoised exactly what the recorded
call's input had; then the same values are seeded into it.

A repeat is served when the key is equal (the same expressions, hints and SymNode
sharing), no proxy tracing is visible to fake dispatch, no real tensors were
converted for the call, and the ShapeEnv's signature over the involved symbols
equals the recorded one (checked in full whenever the cheap :func:`stamp` moved,
and always in a ShapeEnv other than the one last checked). Serving counts what
stock's call counts: one "unsafe view" bypass and ``h`` hits.

In another ShapeEnv (Dynamo restarts its analysis in a new one, and each compile
of a process starts one, whose symbols get the same names for the same program)
the argument is the portable entries' (:mod:`fastfake.cache.portable`): stock's kernel
consults a ShapeEnv only through static evaluation, which reads nothing but the
signature, so an equal signature gives the same computation. Only the scalar ops'
records whose kernel made no call stock's cache saw (``h == 0``) serve there: stock
stores nothing for such a call (its key raises the bypass), while an
``_unsafe_view`` call stores stock's negative entry in the ShapeEnv's cache (which
a new ShapeEnv may lack), and a nested call that hit in the learning ShapeEnv could
miss, and store an entry, in another.

Calls with a SymFloat argument ("scalar ops", :data:`SCALAR_OPS`). Stock never
caches a call with a SymFloat argument ("symbolic shape") and runs its kernel every
time. Under ``dynamic=True`` Dynamo makes float module attributes SymFloats, so
``hidden * rsqrt(variance + eps)`` of every RMSNorm layer (T5-, Llama-style) is
such a call, repeated by each pass over the graph. For ``add`` / ``sub`` / ``mul``
/ ``div`` with a FakeTensor and a SymFloat (no keyword arguments) the key holds the
SymFloat's value id (its expression, hint and type), and the same rules apply,
with these differences: stock's counters move by one "symbolic shape" bypass; the
output is a new plain FakeTensor of the mode (storage of its own, version 0) whose
symbols are the tensor's; and the record also holds what static evaluation reads
about the SymFloat's symbols (hint, replacement, range), so a repeat is served only
while those are unchanged. Self-test feature ``cache_rerun_scalar``; counted as
``cache.symbolic.rerun.served_scalar``; ``FASTFAKE_DISABLE=cache_rerun_scalar`` turns it off.

Records hold sympy values; never a ShapeEnv, mode, SymNode or tensor.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch._subclasses import fake_tensor as ft

from fastfake import _C
from fastfake.cache import learn as _cache
from fastfake.common import compat as _compat
from fastfake.parity import evals as _evals
from fastfake.cache import free_symbols as _free_symbols
from fastfake.cache import portable as _portable
from fastfake.stock import cache as _stock_cache

_counts: Counter = Counter()
# (served, served_scalar, served_other_env and declined.inputs are counted by the extension)
_NAMES = ("learned", "learned_scalar", "impure", "nested", "declined.shape_env", "declined.output",
          "declined.suppression", "declined.replay", "unreplayable", "replayed_calls")
#: the ops served this way, with the bypass reason stock counts for them
#: (the extension counts a served call as one "unsafe view" bypass, the only reason
#: it keeps a pending count for: setup() refuses any other)
OPS = {torch.ops.aten._unsafe_view.default: "unsafe view"}
#: ops whose calls with a FakeTensor and a SymFloat are served this way; stock's
#: bypass reason for a SymFloat argument (the extension keeps a pending count for
#: this reason only: setup() checks it is the one stock raises)
SCALAR_OPS = (
    torch.ops.aten.add.Tensor,
    torch.ops.aten.sub.Tensor,
    torch.ops.aten.mul.Tensor,
    torch.ops.aten.div.Tensor,
)
SCALAR_REASON = "symbolic shape"


def counters() -> dict[str, int]:
    out = {f"cache.symbolic.rerun.{k}": _counts[k] for k in _NAMES}
    served, declined_inputs, served_scalar, other_env = _C.rerun_counts()
    out["cache.symbolic.rerun.served"] = served
    out["cache.symbolic.rerun.served_scalar"] = served_scalar
    out["cache.symbolic.rerun.served_other_env"] = other_env
    out["cache.symbolic.rerun.declined.inputs"] = declined_inputs
    return out


def reset_counters() -> None:
    _counts.clear()
    _C.rerun_reset_counts()


def saved_counters() -> tuple:
    return dict(_counts), _C.rerun_counts()


def restore_counters(saved: tuple) -> None:
    counts, (served, declined_inputs, served_scalar, other_env) = saved
    _counts.clear()
    _counts.update(counts)
    _C.rerun_set_counts(served, declined_inputs, served_scalar, other_env)


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


def _scalar_signature(env: Any, symbols: tuple) -> tuple:
    """What static evaluation reads about a SymFloat's symbols: hint, replacement,
    range (any of them may be unbacked or specialised; the tensor's may not)."""
    hints = _compat.backed_hints(env)
    ranges = env.var_to_range
    out = []
    for s in symbols:
        r = ranges.get(s)
        out.append((s, hints.get(s), env.replacements.get(s),
                    None if r is None else (r.lower, r.upper), s in env.size_like))
    return tuple(out)


def _full_signature(env: Any, symbols: tuple, scalar_symbols: tuple) -> tuple | None:
    """The tensors' symbols' signature over their replacement closure
    (:func:`fastfake.cache.portable.signature`), and the SymFloat's."""
    sig = _portable.signature(env, symbols)
    if sig is None:
        return None
    if not scalar_symbols:
        return sig
    return (sig, _scalar_signature(env, _portable.replacement_closure(env, scalar_symbols)))


def _tensor_signature(sig: tuple, scalar_symbols: tuple) -> tuple:
    """The tensors' part of a :func:`_full_signature`."""
    return sig[0] if scalar_symbols else sig


def _stamp_all(env: Any, sig: tuple, scalar_symbols: tuple) -> tuple:
    """:func:`stamp` over the symbols ``sig`` covers (the tensors' replacement
    closure, then the SymFloat's): while the fingerprint in the stamp stays, so do
    the replacements, and with them the closure the signature was taken over."""
    symbols = _portable.signature_symbols(_tensor_signature(sig, scalar_symbols))
    if scalar_symbols:
        symbols += tuple(entry[0] for entry in sig[1])
    return stamp(env, symbols)


def _scalar_symbols(func: Any, args: tuple, kwargs: Any) -> tuple | None:
    """The SymFloat's symbols of a scalar op's call, ``()`` for an op of OPS, None
    for anything else."""
    if func in OPS:
        return () if not kwargs else None
    if (
        func not in SCALAR_OPS
        or kwargs
        or len(args) != 2
        or type(args[0]) is not ft.FakeTensor
        or type(args[1]) is not torch.SymFloat
    ):
        return None
    # `_expr`, not `expr`: stock's key raises its bypass at the SymFloat without
    # reading it (reading `expr` would apply replacements)
    return _free_symbols.ordered(_free_symbols.of(args[1].node._expr))


def before(mode: Any, func: Any, args: tuple, kwargs: Any) -> Any:
    """Called by C++ right before stock reruns a call of ``OPS`` or ``SCALAR_OPS``."""
    scalar_symbols = _scalar_symbols(func, args, kwargs)
    if scalar_symbols is None:
        return None
    env = mode.shape_env
    if env is None or env._resimplify_floor_div_axioms:
        return None
    _stock_cache.flush()  # fastfake's pending counts: nested calls it serves count
    symbols = _portable._symbols(args[:1] if func not in OPS else args)
    sig = _full_signature(env, symbols, scalar_symbols)
    if sig is None:
        return None
    return (_portable.fingerprint(env), (symbols, scalar_symbols), sig, _stock_state(env),
            _evals.Frame(), bool(env._suppress_guards_tls()))


def learn(mode: Any, func: Any, args: tuple, kwargs: Any, out: Any, state: Any) -> Any:
    """After stock reran the call: ``(record, description)`` or None."""
    fp, (symbols, scalar_symbols), sig, (hits, misses, bypasses, static, held, extra), frame, ambient = state
    env = mode.shape_env
    # the ShapeEnv evaluations stock's kernel made: a served repeat makes them too
    # (stock reruns the kernel every time; fastfake.parity.evals)
    calls = _evals.portable_log(env, frame.stop())
    if calls is None:
        _counts["unreplayable"] += 1
        return None
    _stock_cache.flush()
    h2, m2, b2, s2, e2, x2 = _stock_state(env)
    scalar = func not in OPS
    reason = SCALAR_REASON if scalar else OPS[func]
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
        or _full_signature(env, symbols, scalar_symbols) != sig
    ):
        _counts["impure"] += 1
        return None
    if not (_cache.plain_fresh(mode, out, args) if scalar else _cache.plain_alias(mode, out, args[0])):
        _counts["declined.output"] += 1
        return None
    found: set = set()
    _cache._collect_symbols((out,), found)
    if not found <= set(_portable.signature_symbols(_tensor_signature(sig, scalar_symbols))):
        _counts["declined.output"] += 1
        return None
    _counts["learned_scalar" if scalar else "learned"] += 1
    record = ((symbols, scalar_symbols), sig, [_stamp_all(env, sig, scalar_symbols)], h2 - hits, calls, ambient)
    return record, (False, [("tensor_sym", out, -1 if scalar else 0)], None)


def admit(mode: Any, record: tuple, same_env: bool) -> bool:
    """Whether stock's rerun here would be the recorded call. ``same_env``: the
    record's stamp was taken in this ShapeEnv (else, in another ShapeEnv whose
    symbols have the same names, the signature is compared in full: stock's kernel
    reads nothing else of a ShapeEnv, so equal signatures give the same call)."""
    (symbols, scalar_symbols), sig, last, _hits = record[:4]
    env = mode.shape_env
    if env._resimplify_floor_div_axioms:
        _counts["declined.shape_env"] += 1
        return False
    st = _stamp_all(env, sig, scalar_symbols)
    if not (same_env and st == last[0]):
        if _full_signature(env, symbols, scalar_symbols) != sig:
            _counts["declined.shape_env"] += 1
            return False
        last[0] = st
    # (the evaluations stock's rerun makes, made here: fastfake.parity.evals)
    return _evals.replay_record(env, record[4], record[5], _counts)


def stock_reason_for_symfloat() -> str | None:
    """The bypass reason stock's cache key raises for a SymFloat argument (checked
    on a tiny call), or None if it does not bypass."""
    import sympy
    from torch.fx.experimental.sym_node import SymNode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    mode = ft.FakeTensorMode(shape_env=env)
    try:
        # (a SymFloat of a backed symbol, as Dynamo's float inputs are, made without
        # the ShapeEnv: creating an unbacked one records a stack summary, whose
        # first use imports torch.export and Inductor, half a second at install())
        f = torch.SymFloat(SymNode(sympy.Symbol("zf0"), env, float, 1.5))
        with mode:
            x = torch.empty(2)
        mode._cache_key(ft._CacheKeyState(env), torch.ops.aten.add.Tensor, (x, f), {})
    except ft._BypassDispatchCache as e:
        return e.reason
    except Exception:
        return None
    return None


def setup(C: Any) -> None:
    if set(OPS.values()) != {"unsafe view"}:
        raise RuntimeError(f"fastfake.cache.rerun: the extension counts only 'unsafe view' bypasses: {OPS}")
    C.setup_rerun(before, learn, admit, tuple(OPS), SCALAR_OPS, torch.SymFloat)


def scalar_available() -> bool:
    """Stock bypasses its cache for a SymFloat argument with the reason the
    extension counts for a served call."""
    if _State.scalar_available is None:
        _State.scalar_available = stock_reason_for_symfloat() == SCALAR_REASON
    return _State.scalar_available


class _State:
    scalar_available: bool | None = None


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): repeats of calls stock reruns."""
    from fastfake import _C

    _C.set_rerun(on)


def apply_scalar(on: bool, crosscheck: bool = False) -> None:
    """The table's hook: pointwise repeats with a SymFloat argument."""
    from fastfake import _C

    _C.set_rerun_scalar(on)
