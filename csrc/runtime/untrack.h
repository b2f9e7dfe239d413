// fastfake's learned records kept out of the cyclic collector
// (fastfake/runtime/untrack.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// On (with sympy.Basic, whose instances count as inert values) or off (nothing
// is untracked from then on; what was untracked stays so). The table's hook.
void untrack_set(bool on, PyObject* sympy_basic);
bool untrack_on();

// A value about to be held in one of fastfake's tables: every exact tuple and
// frozenset in it whose items are all inert is taken out of the collector
// (PyObject_GC_UnTrack). Descends through tuples, frozensets, lists and dicts,
// into nothing else. Returns whether `o` is inert itself. Needs the GIL; never
// sets an error.
//
// Inert: an object of a type without GC support (int, float, str, bytes, None,
// bool, ...), a type object of an immutable type, a sympy expression (sympy.Basic:
// immutable by contract), or an exact tuple or frozenset of inert items. Nothing
// reachable from an inert object can ever refer to a container, so an inert
// container is on no reference cycle, and the collector, which exists only to
// find cycles, loses nothing by not walking it (CPython untracks tuples of
// atomic values itself, on the same argument).
bool untrack_inert(PyObject* o);

// A dict only fastfake holds, that nothing ever inserts into and that is only
// read (a SymNode template, csrc/cache/rebuild.cpp): untracked where its keys
// and values are inert.
void untrack_owned_dict(PyObject* d);

std::map<std::string, uint64_t> untrack_counts();
void untrack_set_counts(const std::map<std::string, uint64_t>& counts);

} // namespace fastfake
