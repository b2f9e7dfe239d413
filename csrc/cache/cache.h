// The per-op result cache (csrc/cache/): its interface to dispatch and the bindings;
// its translation units share csrc/cache/internal.h.
#pragma once

#include "common/fastfake.h"
#include "common/keys.h"

namespace fastfake {

namespace cache_detail {
// The part of every key that is global state: the op, the default dtype and
// dispatch key, inference mode, proxy tracing, the ShapeEnv's settings
// (csrc/cache/keys.cpp; the elementwise signatures start with it too). False: not
// keyable here, the call is stock's.
bool global_key(PyObject* mode, PyObject* func, Key& key);
} // namespace cache_detail

// Same contract as try_elementwise; *served: rebuilt from a cache entry.
PyObject* try_cache(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs,
    bool* handled,
    bool* served);
void cache_clear();
// Recipe of a synthesised symbolic output (storage size if `fresh`, derived
// values, version) and building one from sizes / strides / offset + recipe.
PyObject* synth_recipe(PyObject* synth, bool fresh);
PyObject* synth_build(PyObject* mode, PyObject* dtype, PyObject* device, PyObject* sizes,
                      PyObject* strides, PyObject* offset, PyObject* base, PyObject* recipe);
size_t cache_size();
size_t cache_bytes();

} // namespace fastfake
