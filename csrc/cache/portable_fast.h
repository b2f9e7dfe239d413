// A portable record's admission and commit in C++ (csrc/cache/portable_fast.cpp):
// the internal types cache_portable.cpp keeps with each record, and the module
// functions that bind and observe them.
#pragma once

#include "cache/internal.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fastfake {
namespace cache_detail {

// A stock cache key as stock stored it in the learning ShapeEnv, to be built again
// for the same call in another ShapeEnv: the items, with each SymInt stub taking
// the serving call's argument SymNode at a slot (where stock's stub held an
// argument's SymNode) or a new SymNode with the recorded value (where it held one
// of the kernel's own), and the key's hash (equal items, equal hash).
struct KeyTemplate {
  PyObject* items = nullptr; // owned tuple; a stub's position holds None
  PyObject* hash = nullptr; // owned int: the key's `hashvalue`
  Py_hash_t hash_value = -1;
  struct Stub {
    Py_ssize_t pos = 0;
    PyObject* ty = nullptr; // owned: torch.SymInt (the stub's SymType)
    int slot = -1; // the argument SymNode's slot (KeyCtx::nodes), or -1:
    PyObject* dnode = nullptr; // owned _DeconstructedSymNode, extracted per ShapeEnv
    // dnode's fields as a recipe value (SymVal::New), made as `extract` makes
    // its SymNode where that is proven (set_stub_extract); owned
    SymVal val;
  };
  std::vector<Stub> stubs;
  void release();
};

// What static evaluation reads about one symbol of the signature's closure.
struct SigSym {
  PyObject* sym = nullptr; // owned (all owned below)
  PyObject* hint = nullptr;
  PyObject* lower = nullptr;
  PyObject* upper = nullptr;
  PyObject* rep = nullptr; // nullptr: no replacement
  bool size_like = false;
  Py_hash_t hash = -1;
};

struct FastRecord {
  std::vector<SigSym> sig;
  PyObject* axioms = nullptr; // owned frozenset of (expr, value) over the closure
  PyObject* divisible = nullptr; // owned frozenset
  PyObject* validity = nullptr; // owned: the local entry's validity
  KeyTemplate own;
  std::vector<std::pair<KeyTemplate, PyObject*>> stored; // nested entries (owned)
  struct Found {
    PyObject* key = nullptr; // owned, ShapeEnv-free
    PyObject* reason = nullptr; // owned: None for an entry, else the bypass reason
    bool on_env = true;
  };
  std::vector<Found> found;
  long long misses = 0, hits = 0;
  PyObject* bypasses = nullptr; // owned tuple of (reason, n)
  PyObject* calls = nullptr; // owned tuple of (label, n)
  PyObject* entry = nullptr; // owned: stock's own entry
  bool counted_nested = false;
  // a floor-division resimplification was pending where learned (and, flips,
  // the call's static evaluation cleared it, with nothing to resimplify)
  bool pending = false, flips = false;
  ~FastRecord();
};

// The record's fast form (fastfake.cache.portable._fast_form) read against the
// learning call's argument SymNodes; nullptr (no error set) when the record is
// left to fastfake.cache.portable.admit / commit.
std::unique_ptr<FastRecord> fast_parse(const KeyCtx& ctx, PyObject* fast);

enum class FastAdmit { Admit, Decline, Python };
// fastfake.cache.portable.admit's decision in C++: Admit with `keys` holding the
// call's own key and its nested calls' keys built for this ShapeEnv, Decline
// (counted), or Python where the state needs fastfake.cache.portable (a pending
// floor-division resimplification, a recorded miss in progress, an attribute
// this release lacks).
FastAdmit fast_admit(const KeyCtx& ctx, const FastRecord& r, std::vector<PyObject*>& keys);
// A record without a fast form: Python (counted with the admissions left to it).
FastAdmit fast_left_to_python();
// fastfake.cache.portable.commit's effects; false with a Python error set on failure.
bool fast_commit(const KeyCtx& ctx, const FastRecord& r, const std::vector<PyObject*>& keys,
                 bool store, bool count);
// Testing: called with (mode, func, args, kwargs, record, admitted, keys: the
// nested calls' and the call's own, last) on every decision made here, before
// anything is stored; false when it raised (the call then goes to stock).
bool fast_verify(PyObject* mode, PyObject* func, PyObject* args, PyObject* kwargs,
                 PyObject* record, bool admitted, const std::vector<PyObject*>& keys);
bool fast_enabled();

} // namespace cache_detail

// Module functions (csrc/module.cpp).
void portable_fast_setup(PyObject* refs, PyObject* hints_attr);
bool portable_fast_set(bool on);
void portable_fast_set_verifier(PyObject* fn);
// _DeconstructedSymNode.extract where fastfake.common.compat.stub_extract proves what
// it builds (nullptr: not proven): a stub's new SymNode is then made in C++.
void portable_fast_set_stub_extract(PyObject* fn);
// testing: the next n stub SymNodes made in C++ get the other optimized-summation flag
void portable_fast_inject_stub_fault(int n);
std::vector<std::pair<std::string, uint64_t>> portable_fast_counts();
void portable_fast_set_counts(const std::vector<std::pair<std::string, uint64_t>>& counts);
// Testing: the next n admissions in C++ skip the signature comparison (what a
// wrong admission would serve), or (commit) the next n commits skip the nested
// calls' entries and counts.
void portable_fast_inject_fault(int n, bool commit);

} // namespace fastfake
