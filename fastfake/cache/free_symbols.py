"""Free symbols of sympy expressions, memoised.

The symbolic hooks ask for the free symbols of the same expressions again and
again: the inputs' sizes and storage sizes, and every axiom of the ShapeEnv for
each signature (``_portable.signature`` filters the axioms over the involved
symbols). sympy recomputes ``Basic.free_symbols`` recursively on every access.
An expression never changes, so its free symbols are a pure function of it. The
memo is keyed by the expression's identity, not its value: a structurally equal
expression from another ShapeEnv would make every lookup run sympy's Python
``__eq__``. It holds the expression (so its id is not reused while memoised), is
bounded, and holds sympy values only: no ShapeEnv, SymNode or tensor."""
from __future__ import annotations

import operator
from typing import Any, Iterable

_MEMO: dict[int, tuple[Any, frozenset]] = {}
_MAX = 1 << 16


def of(expr: Any) -> frozenset:
    """``frozenset(expr.free_symbols)``."""
    found = _MEMO.get(id(expr))
    if found is not None and found[0] is expr:
        return found[1]
    if len(_MEMO) >= _MAX:
        _MEMO.clear()
    symbols = frozenset(expr.free_symbols)
    _MEMO[id(expr)] = (expr, symbols)
    return symbols


_NAME = operator.attrgetter("name")


def ordered(symbols: Iterable) -> tuple:
    """``symbols`` sorted by name (``str`` of a Symbol is its name, but goes
    through sympy's printer)."""
    return tuple(sorted(symbols, key=_NAME))


def clear() -> None:
    _MEMO.clear()


def size() -> int:
    return len(_MEMO)
