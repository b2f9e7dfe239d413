// Code objects read for the self-test store's key and the proven-source digests
// (csrc/common/code_digest.cpp; fastfake/core/selftest_store.py: module_digest,
// fastfake/common/compat.py: code spans).
#pragma once

#include <Python.h>

namespace fastfake {

// New reference to the bytes selftest_store.module_digest hashes for `module`: a
// record per function, method, property part and class of the module and per
// module-level and class-level scalar, in sorted name order (every variable part
// tagged and length-prefixed, so two different walks give two different
// streams); `volatile_` (a frozenset of names, "attr" or "Class.attr") names
// scalars left out. A function's record holds its code object whole: bytecode,
// file name, first line, names, variable names and constants (nested code
// objects included). nullptr with a Python error set on failure (what a getattr
// of a held object raises, but for AttributeError; sorted()'s TypeError for keys
// it cannot order; str.encode()'s for text that is not UTF-8).
PyObject* module_code_stream(PyObject* module, PyObject* volatile_);

// New reference to the stream of one value that is the same in every process (no
// addresses, no hash-seeded orders): None, bools, strs and bytes themselves; other
// numbers (and subclasses of str and bytes) by their repr; code objects as above;
// tuples and lists item by item; sets with their items' streams sorted; anything
// else, or anything deeper than four levels, by its type's name.
PyObject* stable_stream(PyObject* v);

// New reference to the last source line any instruction of `code` (or of the code
// objects among its constants, recursively) spans: the largest end line of
// co_positions(), at least co_firstlineno (fastfake/common/compat.py's code spans).
PyObject* last_code_line(PyObject* code);

} // namespace fastfake
