// SymNode.maybe_as_int in C (csrc/symbolic/symnode_int.cpp, fastfake/symbolic/symnode_int.py).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds the SymNode class served exactly and stock's function (for anything else).
void symnode_int_setup(PyObject* symnode_type, PyObject* stock);
// What SymNode.maybe_as_int becomes: a method (an instancemethod over a C
// function taking the node). New reference.
PyObject* symnode_int_method();
// `node.maybe_as_int()` where that is this C function (installed on the exact
// SymNode class, not shadowed on the instance): its result (a new reference),
// or nullptr -- with a Python error if it raised, without one if the call
// would go elsewhere (the caller then calls it as c10 does).
PyObject* symnode_int_direct(PyObject* node);
// crosscheck: check(node, served) after every served call (None: off).
void symnode_int_set_check(PyObject* check);
std::map<std::string, uint64_t> symnode_int_counts();
void symnode_int_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls whose answer is an int answer None.
void symnode_int_inject_fault(int n);

} // namespace fastfake
