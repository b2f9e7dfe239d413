"""A ShapeEnv's axioms and divisibility facts over a set of symbols, kept up to date
incrementally.

:func:`fastfake.cache.portable.signature` compares, before and after every symbolic
miss it may learn from, the ShapeEnv's axioms (``env.axioms``, a dict of implied
relations) and divisibility facts (``env.divisible``, a set) whose free symbols
lie in the call's symbol closure. Both grow with every guard a program makes, so
filtering them afresh on every miss costs time proportional to the program so far
(a long symbolic program made fastfake slower than stock this way).

Here each ShapeEnv keeps a snapshot of the two collections and, per symbol
closure, the filtered result. A lookup first compares the live collections with
the snapshot (C-level dict / set equality: stored hashes, identity first, no
sympy code); if they are unchanged the stored result is returned (the same
frozenset object, so that comparing it with a signature taken earlier is an
identity check). If the live collection only grew (the snapshot's items are all
still there, with the same values) only the new items are filtered and added. Any
other change (an axiom removed, a value changed, ``divisible`` replaced by a
smaller set) rebuilds from scratch. The result is always what filtering the live
collection would give: the test ``tests/test_facts.py`` compares the two over long
random sequences of growth, removal and replacement.

The facts in the results are interned (one object per value across ShapeEnvs), so
that comparing a signature recorded in one ShapeEnv with another's costs no sympy
comparison; the C++ admission of portable records asks :func:`match`.

Nothing here keeps a ShapeEnv alive (the table is weakly keyed); it holds sympy
expressions only, and each ShapeEnv's entry is bounded in closures, the interned
facts in number."""
from __future__ import annotations

import weakref
from typing import Any

from . import free_symbols as _free_symbols

#: Closures remembered per ShapeEnv and collection (cleared past this).
MAX_CLOSURES = 256


class _Facts:
    """One collection of one ShapeEnv: the snapshot and the filtered results."""

    __slots__ = ("snapshot", "results")

    def __init__(self) -> None:
        self.snapshot: Any = None
        self.results: dict[tuple, frozenset] = {}


class _EnvFacts:
    __slots__ = ("axioms", "divisible")

    def __init__(self) -> None:
        self.axioms = _Facts()
        self.divisible = _Facts()


_TABLE: "weakref.WeakKeyDictionary[Any, _EnvFacts]" = weakref.WeakKeyDictionary()


def _state(env: Any) -> _EnvFacts:
    st = _TABLE.get(env)
    if st is None:
        st = _TABLE[env] = _EnvFacts()
    return st


#: One object per value (sympy equality) for every fact a result holds, so that two
#: ShapeEnvs' equal facts are the same objects: comparing a signature taken in one
#: ShapeEnv with another's is then C-level (stored hashes, identity), not sympy's
#: recursive ``__eq__`` per fact. Only speed depends on it: emptied when full, the
#: comparisons are by value as before.
_CANON: dict = {}
MAX_CANON = 1 << 16


def _canon(e: Any) -> Any:
    found = _CANON.get(e)
    if found is not None:
        return found
    if len(_CANON) >= MAX_CANON:
        _CANON.clear()
    _CANON[e] = e
    return e


def _axioms_over(items, involved: frozenset) -> frozenset:
    of = _free_symbols.of
    return frozenset((_canon(k), v) for k, v in items if (fs := of(k)) and fs <= involved)


def _divisible_over(items, involved: frozenset) -> frozenset:
    of = _free_symbols.of
    return frozenset(_canon(d) for d in items if of(d) <= involved)


class _Kind:
    """How one collection is copied, checked for growth, and filtered."""

    def __init__(self, copy, grown, new, items, over) -> None:
        self.copy = copy  # live -> snapshot
        self.grown = grown  # (snapshot, live) -> every snapshot item still in live
        self.new = new  # (snapshot, live) -> the items live added
        self.items = items  # snapshot -> its items, as the filter takes them
        self.over = over  # (items, involved) -> the filtered frozenset


_AXIOMS = _Kind(
    dict,
    lambda snap, live: snap.items() <= live.items(),
    lambda snap, live: [(k, live[k]) for k in live.keys() - snap.keys()],
    dict.items,
    _axioms_over,
)
_DIVISIBLE = _Kind(
    frozenset,
    lambda snap, live: snap <= live,
    lambda snap, live: live - snap,
    lambda snap: snap,
    _divisible_over,
)


def _lookup(facts: _Facts, kind: _Kind, live, symbols: tuple) -> frozenset:
    snap = facts.snapshot
    results = facts.results
    if snap is not None and len(snap) == len(live) and snap == live:
        found = results.get(symbols)
        if found is not None:
            return found  # unchanged
    elif snap is not None and len(snap) < len(live) and kind.grown(snap, live):
        # grown: only the new items are filtered
        new = kind.new(snap, live)
        facts.snapshot = kind.copy(live)
        for key, old in results.items():
            add = kind.over(new, frozenset(key))
            if add:
                results[key] = old | add
        found = results.get(symbols)
        if found is not None:
            return found
    else:
        facts.snapshot = kind.copy(live)
        results.clear()
    if len(results) >= MAX_CLOSURES:
        results.clear()
    found = results[symbols] = kind.over(kind.items(facts.snapshot), frozenset(symbols))
    return found


def axioms(env: Any, symbols: tuple) -> frozenset:
    """``frozenset((k, v) for k, v in env.axioms.items() if k has free symbols,
    all in symbols)``."""
    return _lookup(_state(env).axioms, _AXIOMS, env.axioms, symbols)


def divisible(env: Any, symbols: tuple) -> frozenset:
    """``frozenset(d for d in env.divisible if d's free symbols are all in symbols)``."""
    return _lookup(_state(env).divisible, _DIVISIBLE, env.divisible, symbols)


def match(env: Any, symbols: tuple, axioms_then: frozenset, divisible_then: frozenset) -> bool:
    """Whether ``env``'s facts over ``symbols`` are those a signature recorded
    (the C++ admission of portable records asks this: csrc/cache/portable_fast.cpp)."""
    return axioms(env, symbols) == axioms_then and divisible(env, symbols) == divisible_then


def clear() -> None:
    _TABLE.clear()
    _CANON.clear()


def size() -> int:
    return len(_TABLE)
