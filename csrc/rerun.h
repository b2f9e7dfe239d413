// Symbolic calls stock never caches, served from what stock's kernel returned for
// the same call before (csrc/cache_rerun.cpp, fastfake/_rerun.py).
#pragma once

#include "cache_internal.h"

#include <cstddef>
#include <cstdint>
#include <utility>

namespace fastfake {

// Binds fastfake._rerun's before / learn / admit and the ops it serves.
void rerun_setup(PyObject* before, PyObject* learn, PyObject* admit, PyObject* ops);
// Turns serving and learning on or off; returns the previous setting.
bool rerun_set(bool on);
size_t rerun_size();
void rerun_clear();
// (served, declined because an input had memoised other values)
std::pair<uint64_t, uint64_t> rerun_counts();
void rerun_reset_counts();
void rerun_set_counts(uint64_t served, uint64_t declined_inputs);
// Testing only: the next n served calls leave their inputs without the values the
// kernel memoised on them (what forgetting those side effects would serve).
void rerun_inject_fault(int n);

namespace cache_detail {

// A symbolic call with a negative entry (stock bypasses its cache for it). When it
// is one of fastfake._rerun.OPS: serve it from a rerun entry, or run stock and
// learn one; *handled then says that the call was dealt with here (result or
// stock's error returned), else the caller hands it to stock.
PyObject* rerun_call(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    KeyCtx& ctx,
    bool* handled,
    bool* served);

} // namespace cache_detail
} // namespace fastfake
