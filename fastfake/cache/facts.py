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

Nothing here keeps a ShapeEnv alive (the table is weakly keyed); it holds sympy
expressions only, and each ShapeEnv's entry is bounded in closures."""
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


def _axioms_over(items, involved: frozenset) -> frozenset:
    of = _free_symbols.of
    return frozenset((k, v) for k, v in items if (fs := of(k)) and fs <= involved)


def _divisible_over(items, involved: frozenset) -> frozenset:
    of = _free_symbols.of
    return frozenset(d for d in items if of(d) <= involved)


def axioms(env: Any, symbols: tuple) -> frozenset:
    """``frozenset((k, v) for k, v in env.axioms.items() if k has free symbols,
    all in symbols)``."""
    live = env.axioms
    facts = _state(env).axioms
    snap = facts.snapshot
    if snap is not None and len(snap) == len(live) and snap == live:
        found = facts.results.get(symbols)
        if found is not None:
            return found
    elif snap is not None and len(snap) < len(live) and snap.items() <= live.items():
        # grown: only the new items are filtered
        new = [(k, live[k]) for k in live.keys() - snap.keys()]
        facts.snapshot = dict(live)
        results = facts.results
        for key, old in results.items():
            add = _axioms_over(new, frozenset(key))
            if add:
                results[key] = old | add
        found = results.get(symbols)
        if found is not None:
            return found
    else:
        facts.snapshot = dict(live)
        facts.results.clear()
    if len(facts.results) >= MAX_CLOSURES:
        facts.results.clear()
    found = facts.results[symbols] = _axioms_over(facts.snapshot.items(), frozenset(symbols))
    return found


def divisible(env: Any, symbols: tuple) -> frozenset:
    """``frozenset(d for d in env.divisible if d's free symbols are all in symbols)``."""
    live = env.divisible
    facts = _state(env).divisible
    snap = facts.snapshot
    if snap is not None and len(snap) == len(live) and snap == live:
        found = facts.results.get(symbols)
        if found is not None:
            return found
    elif snap is not None and len(snap) < len(live) and snap <= live:
        new = live - snap
        facts.snapshot = frozenset(live)
        results = facts.results
        for key, old in results.items():
            add = _divisible_over(new, frozenset(key))
            if add:
                results[key] = old | add
        found = results.get(symbols)
        if found is not None:
            return found
    else:
        facts.snapshot = frozenset(live)
        facts.results.clear()
    if len(facts.results) >= MAX_CLOSURES:
        facts.results.clear()
    found = facts.results[symbols] = _divisible_over(facts.snapshot, frozenset(symbols))
    return found


def clear() -> None:
    _TABLE.clear()


def size() -> int:
    return len(_TABLE)
