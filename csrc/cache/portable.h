// Symbolic result-cache entries reused in another ShapeEnv (csrc/cache/portable.cpp,
// fastfake/cache/portable.py): the extension's module functions for them.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace fastfake {

// Binds fastfake.cache.portable's before / learn / admit / commit.
void portable_setup(
    PyObject* before,
    PyObject* learn,
    PyObject* admit,
    PyObject* commit,
    PyObject* log_hit,
    PyObject* replay);
// The store's records (fastfake/store/symbolic.py): `loader` is called once, at
// the first symbolic miss after it is set (None: not at all); export hands over the
// records learned since the last export as (key, value-id positions, hit recipe,
// miss recipe, masks, seeds, record) tuples (csrc/cache/entry_io.cpp's forms);
// import takes (key, hit, miss, masks, seeds, record) tuples whose key holds this
// process's op id and value ids, and returns how many it added.
void portable_set_loader(PyObject* loader);
// fn(record, keys) -> the fast form of a record read from disk, once admitted in
// Python and committed (keys: what the commit stored); None: not built.
void portable_set_fast_for(PyObject* fn);
// First calls served from records the store read (import), and its setter.
uint64_t portable_disk_served();
void portable_set_disk_served(uint64_t n);
PyObject* portable_export();
int portable_import(PyObject* items);
// Turns serving and learning on or off; returns the previous setting.
bool portable_set(bool on);
// While a symbolic miss is being recorded (its kernel running in stock), every call
// it dispatches must leave its stock key in fastfake.cache.portable's log: stock's cache
// code logs its own; a hit of fastfake's result cache there logs stock's key for it
// (portable_log_hit); its elementwise path and the negative entries' shortcuts
// (reruns, item memos) leave the calls to stock; a first call served from another
// ShapeEnv's record logs what its replay found.
void portable_recording_begin();
// A hit of the result cache inside a recorded kernel: log stock's key for the call.
void portable_log_hit(PyObject* mode, PyObject* func, PyObject* args, PyObject* kwargs);
void portable_recording_end();
bool portable_recording();
size_t portable_size();
// (recorded calls refused because the kernel memoised on, or returned, an
// argument's derived values; first calls declined because the arguments had
// memoised other derived values than where the call was recorded)
std::pair<uint64_t, uint64_t> portable_memo_counts();
void portable_set_memo_counts(uint64_t refused, uint64_t declined);
void portable_clear();
// Testing only: the next n served calls are rebuilt from the recipe of stock's hit
// instead of its miss (what a mix-up of the two recipes would serve).
void portable_inject_fault(int n);

} // namespace fastfake
