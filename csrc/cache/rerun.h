// Symbolic calls stock never caches, served from what stock's kernel returned for
// the same call before (csrc/cache/rerun.cpp, fastfake/cache/rerun.py).
#pragma once

#include "cache/internal.h"

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

namespace fastfake {

// Binds fastfake.cache.rerun's before / learn / admit, the ops it serves and its scalar
// ops (a call with a FakeTensor and a SymFloat, which stock never caches).
void rerun_setup(PyObject* before, PyObject* learn, PyObject* admit, PyObject* ops, PyObject* scalar_ops);
// Turns serving and learning on or off; returns the previous setting.
bool rerun_set(bool on);
// The same for the scalar ops.
bool rerun_scalar_set(bool on);
size_t rerun_size();
void rerun_clear();
// (served, declined because the inputs' memoised values could not be read, served
// scalar calls, served calls (either kind) in a ShapeEnv other than the learning one)
std::tuple<uint64_t, uint64_t, uint64_t, uint64_t> rerun_counts();
void rerun_reset_counts();
void rerun_set_counts(uint64_t served, uint64_t declined_inputs, uint64_t served_scalar, uint64_t other_env);
// Testing only: the next n served calls (of `_unsafe_view`, or of the scalar ops)
// leave their inputs without the values the kernel memoised on them (what
// forgetting those side effects would serve).
void rerun_inject_fault(int n, bool scalar);

namespace cache_detail {

// Whether a SymFloat argument of `func` may enter its key (a scalar op, serving on).
bool rerun_scalar_op(PyObject* func);

// A symbolic call with a negative entry (stock bypasses its cache for it). When it
// is one of fastfake.cache.rerun.OPS, or a call of one of its SCALAR_OPS whose key holds
// a SymFloat (such a key never enters the result cache): serve it from a rerun entry, or run stock and
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
