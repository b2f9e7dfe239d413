// The per-op result cache (csrc/cache/): its interface to dispatch and the bindings;
// its translation units share csrc/cache/internal.h.
#pragma once

#include "common/fastfake.h"

namespace fastfake {

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
