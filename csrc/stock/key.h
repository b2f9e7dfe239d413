// Stock's own dispatch-cache key built in C++ (csrc/stock/key.cpp,
// fastfake/stock/key.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <utility>

namespace fastfake {

// Binds `_DispatchCacheKey`, `_PySymInputStub`, `_InputBackref` and `torch.Size`;
// `tracing_item`: the key's head holds whether proxy tracing is on (the release's
// layout, fastfake.common.compat); `on` turns the builder on (after fastfake.stock.key
// proved it against stock's keys).
void stock_key_setup(
    PyObject* key_type,
    PyObject* stub_type,
    PyObject* backref_type,
    PyObject* size_type,
    bool tracing_item,
    bool on);
bool stock_key_on();
// `FakeTensorMode._cache_key(state, func, args, kwargs)` as stock builds it (a new
// reference), None where it is left to stock (the caller then asks stock with a
// fresh state), or nullptr with a Python error. With `state` None the SymInts are
// converted here, without a key state, and the result is `(key, whether it holds
// a SymNode)`.
PyObject* stock_key_build(PyObject* mode, PyObject* state, PyObject* func, PyObject* args, PyObject* kwargs);
// (keys built, calls left to stock)
std::pair<uint64_t, uint64_t> stock_key_counts();
void stock_key_set_counts(uint64_t built, uint64_t fallback);

} // namespace fastfake
