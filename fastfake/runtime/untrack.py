"""fastfake's learned records kept out of the cyclic collector.

What fastfake learns during a compile is kept in many small containers: the
ShapeEnv evaluations a portable record replays (``(name, args, kwargs,
suppressed, result)`` per call), the signatures a record compares, the fields of
the SymNodes an entry rebuilds, validity tuples, SymNode templates. After a
``dynamic=True`` GPT-2 compile (zoo size, torch 2.13.0) fastfake had 27,000 more
tracked objects alive than stock, 22,500 of them tuples and 4,800 dicts, and its
first trace paid two full collections where stock's paid one: CPython runs a
full collection when the objects promoted to the oldest generation since the
last one exceed a quarter of those there, and each walks every tracked object of
the process (0.3-0.45 s after importing torch and transformers).

A container is taken out of the collector (``PyObject_GC_UnTrack``) when a table
of the extension stores it and its items are all inert (``csrc/runtime/untrack.h``):
objects of types without GC support (int, float, str, None, bool, ...), type
objects of immutable types, sympy expressions (immutable by contract), and exact
tuples and frozensets of inert items. Nothing reachable from an inert object can
come to refer to a container, so an inert container is on no reference cycle; the
collector exists only to find cycles, and loses nothing by not walking it
(CPython untracks tuples of atomic values itself, on the same argument). Lists,
dicts and other objects in a record stay tracked; the tuples inside them are
looked at. A SymNode template (a dict only the extension holds, only copied from)
is untracked where its keys and values are inert (a node made from it gets its
attributes set one by one, as the constructor sets them, and keeps them in the
object: no dict object per node).

Memory and the collector's bookkeeping only: no value of a trace passes through
it, and no object that can hold a mode, a ShapeEnv or a tensor is untracked (none
is inert). ``FASTFAKE_DISABLE=untrack`` turns it off (what was untracked stays so;
it is freed by reference counting as before). The self-test (feature
``untrack``) runs a symbolic program and must see records untracked.

Counters (``stats()``): ``untrack.tuples`` (tuples and frozensets found inert
and kept out of the collector), ``untrack.dicts`` (templates found inert and kept
out), ``untrack.left`` (tuples and frozensets looked at and left tracked: an item
was not inert). Each counts what the walk found, whether or not CPython's collector
had untracked the container first (it untracks tuples and dicts of untracked items
itself when a collection passes them): a count of the walk's own untrackings would
follow the collector's timing, and the same program would count differently from
one run to the next.
"""
from __future__ import annotations

from fastfake import _C


def available() -> bool:
    return True


def inert_expressions() -> type | None:
    """The class whose instances count as inert values: sympy's expressions."""
    import sympy

    return sympy.Basic


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py)."""
    del crosscheck  # no value passes through it
    basic = inert_expressions() if on else None
    _C.untrack_set(on and basic is not None, basic)
