// SymNode binary arithmetic memoised on the operands' expressions
// (csrc/symbolic/symnode_memo.cpp, fastfake/symbolic/symnode_memo.py).
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Binds what the memo reads on every call: the SymNode class, stock's
// METHOD_TO_OPERATOR table, sympy's global parameters, the module dict holding
// torch._logging's GET_DTRACE_STRUCTURED flag and the loggers whose debug output
// the served path would skip.
void symnode_memo_setup(
    PyObject* symnode_type,
    PyObject* method_to_operator,
    PyObject* sympy_parameters,
    PyObject* logging_internal_dict,
    PyObject* loggers);
// A method object for SymNode.<attr> that serves `method` from the memo and calls
// `stock` (stock's own SymNode.<attr>) otherwise. New reference.
PyObject* symnode_memo_hook(PyObject* method, PyObject* stock);
// Serve and learn; returns the previous setting. Off keeps the entries.
bool symnode_memo_set(bool on);
// crosscheck: check(method, served, stock, self, other) after every served call
// (None: off).
void symnode_memo_set_check(PyObject* check);
size_t symnode_memo_size();
// The bound (entries; the memo is emptied when a new entry would pass it); returns
// the previous one.
size_t symnode_memo_set_max(size_t n);
void symnode_memo_clear();
std::map<std::string, uint64_t> symnode_memo_counts();
void symnode_memo_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served calls get the other optimized-summation flag.
void symnode_memo_inject_fault(int n);

} // namespace fastfake
