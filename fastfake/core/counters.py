"""fastfake's Python-side counters, in one list: what ``stats()`` reads and
``reset_stats()`` zeroes beside the extension's own (``_C.counters()``), and what
the install-time self-test saves and puts back around its programs."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastfake import _C
from fastfake.tracing import fake_prop as _fake_prop
from fastfake.tracing import functional as _functional
from fastfake.cache import portable as _portable
from fastfake.cache import rerun as _rerun
from fastfake.stock import key as _stock_key


@dataclass(frozen=True)
class ExtensionCounts:
    """Counts the extension keeps in a name -> value map (``get()`` / ``set(map)``),
    reported in ``stats()`` as ``<prefix>.<name>``; with no prefix they are kept out
    of ``stats()`` (read through their own report) but zeroed, saved and put back
    with the counters."""

    prefix: str | None
    get: Callable[[], dict]
    set: Callable[[dict], None]

    def counters(self) -> dict[str, int]:
        if self.prefix is None:
            return {}
        return {f"{self.prefix}.{k}": v for k, v in self.get().items()}

    def reset_counters(self) -> None:
        self.set({})

    def saved_counters(self) -> dict:
        return dict(self.get())

    def restore_counters(self, saved: dict) -> None:
        self.set(saved)


#: Each has ``counters()``, ``reset_counters()``, ``saved_counters()`` and
#: ``restore_counters(saved)``.
SOURCES = (
    _functional,
    _portable,
    _rerun,
    # stock's cache keys built in C++ (fastfake/stock/key.py)
    _stock_key,
    # `.item()` repeats answered from the argument's memo (fastfake/cache/item_memo.py)
    ExtensionCounts("cache.item_memo", _C.item_memo_counts, _C.item_memo_set_counts),
    # the SymNode arithmetic memo (fastfake/symbolic/symnode_memo.py), SymNode.expr and
    # SymNode.maybe_as_int in C (fastfake/symbolic/symnode_expr.py, symnode_int.py)
    ExtensionCounts("symnode.memo", _C.symnode_memo_counts, _C.symnode_memo_set_counts),
    _fake_prop,
    ExtensionCounts("symnode.expr", _C.symnode_expr_counts, _C.symnode_expr_set_counts),
    ExtensionCounts("symnode.int", _C.symnode_int_counts, _C.symnode_int_set_counts),
    # the calls handed to stock per overload (fastfake.stock_report())
    ExtensionCounts(None, _C.stock_calls, _C.stock_calls_set),
)


def counters() -> dict[str, int]:
    out: dict[str, int] = {}
    for source in SOURCES:
        out.update(source.counters())
    return out


def reset() -> None:
    for source in SOURCES:
        source.reset_counters()


def saved() -> list:
    return [source.saved_counters() for source in SOURCES]


def restore(values: list) -> None:
    for source, value in zip(SOURCES, values):
        source.restore_counters(value)
