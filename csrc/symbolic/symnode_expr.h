// SymNode.expr as a C-level descriptor (csrc/symbolic/symnode_expr.cpp,
// fastfake/symbolic/symnode_memo.py).
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace fastfake {

// Which release's `expr` the descriptor computes (fastfake/symbolic/symnode_memo.py picks it
// from the stock property's source):
//   IsNumber  2.13: a Python int or `_expr.is_number` -> `_expr` itself
//   IsNumberClass  2.14: `_expr.is_Number` instead of `is_number`
//   IsNumberOrBoolAtom  2.15: also `_expr.is_Boolean and _expr.is_Atom`
// then, for all three, the replacement-version cache of `_expr_cache` /
// `_expr_ver` and `shape_env.replace(_expr)`.
enum class ExprRule : int { IsNumber = 1, IsNumberClass = 2, IsNumberOrBoolAtom = 3 };

// Binds the SymNode class the descriptor serves exactly (subclasses go to stock).
void symnode_expr_setup(PyObject* symnode_type);
// A descriptor for SymNode.expr that computes `rule` and hands class access,
// setting, deleting and non-exact SymNodes to `stock` (the stock property).
// New reference.
PyObject* symnode_expr_descriptor(PyObject* stock, int rule);
// crosscheck: check(node, served) after every served read (None: off).
void symnode_expr_set_check(PyObject* check);
// `expr.is_number` as a truth value (1 / 0, -1 with the exception set),
// memoised on the expression's identity: 2.13's constant test, and the test of
// SymNode.maybe_as_int on every release (csrc/symbolic/symnode_int.cpp).
int symnode_is_number(PyObject* expr);
// The `is_number` memo: entries, bound, clearing.
size_t symnode_expr_memo_size();
size_t symnode_expr_set_max(size_t n);
void symnode_expr_clear();
std::map<std::string, uint64_t> symnode_expr_counts();
void symnode_expr_set_counts(const std::map<std::string, uint64_t>& counts);
// Testing only: the next n served reads skip the replacement (answer `_expr`).
void symnode_expr_inject_fault(int n);

} // namespace fastfake
