// Calls handed to stock's FakeTensorMode.__torch_dispatch__, per overload
// (csrc/stock/calls.cpp; fastfake.stock_report()).
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace fastfake {

// Stock's FakeTensorMode.__torch_dispatch__ for a call fastfake does not serve
// (counted dispatch.stock, and per overload below). New reference or nullptr.
PyObject* call_stock_dispatch(
    PyObject* mode,
    PyObject* func,
    PyObject* types,
    PyObject* args,
    PyObject* kwargs);

// Around every call handed to stock: counts it for `func` as outermost (no stock
// call of this thread in progress) or nested, and tracks the nesting.
void stock_call_begin(PyObject* func);
void stock_call_end();

// name (str(func)) -> (outermost, nested); names past the bound count as "other".
std::map<std::string, std::pair<uint64_t, uint64_t>> stock_calls();
void stock_calls_set(const std::map<std::string, std::pair<uint64_t, uint64_t>>& calls);
// Testing: the bound on distinct names; returns the previous one.
size_t stock_calls_set_max(size_t n);

} // namespace fastfake
