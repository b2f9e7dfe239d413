// Repeats of `.item()` on a FakeTensor that holds its item memo (csrc/cache/item_memo.cpp,
// fastfake/cache/item_memo.py).
#pragma once

#include "cache/internal.h"

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds the op (aten._local_scalar_dense.default), stock's bypass reason for it
// ("data dependent output") and fastfake.cache.item_memo.eligible.
void item_memo_setup(PyObject* op, PyObject* reason, PyObject* eligible);
// Turns serving and learning on or off; returns the previous setting.
bool item_memo_set(bool on);
std::map<std::string, uint64_t> item_memo_counts();
void item_memo_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls read the raw memo attribute, skipping
// stock's staleness check (a memo kept across an in-place update or a new epoch).
void item_memo_inject_fault(int n);

namespace cache_detail {

// Entry::item_memo: what a negative static entry says about memo repeats.
enum ItemMemo : uint8_t { kNotItem = 0, kCandidate = 1, kProven = 2 };

// For an entry learned from stock's description `desc` of the call `func`:
// kCandidate if it is the op with stock's data-dependent bypass, else kNotItem.
uint8_t item_memo_candidate(PyObject* func, PyObject* desc);

// A static call with a negative entry whose item_memo is not kNotItem: serve it
// from the argument's memo (kProven), or run stock and prove the entry from what
// stock returned (kCandidate). *handled says the call was dealt with here (result
// or stock's error returned), else the caller hands it to stock.
PyObject* item_memo_call(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    const Key& key,
    uint8_t state,
    bool* handled,
    bool* served);

} // namespace cache_detail
} // namespace fastfake
