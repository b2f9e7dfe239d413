// torch.utils._pytree's tree_map_only / tree_map / tree_leaves / tree_iter in C, for the
// call sites fastfake/tracing/pytree.py points at them (csrc/tracing/pytree.cpp).
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds stock's objects: the registry (SUPPORTED_NODES), the NodeDefs of tuple,
// list and dict it holds at setup (a call whose registry holds others goes to
// stock), and stock's three functions (for every call the C path does not take).
void pytree_setup(PyObject* supported_nodes, PyObject* tuple_def, PyObject* list_def, PyObject* dict_def,
                  PyObject* stock_map_only, PyObject* stock_map, PyObject* stock_leaves, PyObject* stock_iter);
// FX's immutable_list and immutable_dict and their registry entries, flattened as
// list and dict by tree_leaves / tree_iter while the registry holds those entries
// (None, None: not offered).
void pytree_setup_fx(PyObject* list_type, PyObject* dict_type, PyObject* list_def, PyObject* dict_def);
// (tree_map_only, tree_map, tree_leaves, tree_iter) as C functions. New reference.
PyObject* pytree_functions();
// crosscheck: check(tree, value, leaves_only) after every served call, `value`
// being the list of leaves (tree_leaves) or the mapped tree (None: off).
void pytree_set_check(PyObject* check);
std::map<std::string, uint64_t> pytree_counts();
void pytree_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls build a list where stock builds a tuple.
void pytree_inject_fault(int n);

} // namespace fastfake
