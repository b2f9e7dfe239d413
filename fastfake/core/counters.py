"""fastfake's Python-side counters, from the table of accelerations (each entry's
``counts``): what ``stats()`` reads and ``reset_stats()`` zeroes beside the extension's
own (``_C.counters()``), and what the install-time self-test saves and puts back
around its programs."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from fastfake import _C
from fastfake.core import accelerations as _accelerations


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


def _source(a: _accelerations.Acceleration):
    """The counter source an acceleration's ``counts`` field names."""
    if a.counts.startswith("ext:"):
        get, _, put = a.counts[len("ext:"):].partition(",")
        return ExtensionCounts(a.counters.rstrip("."), getattr(_C, get), getattr(_C, put))
    return importlib.import_module(a.counts)


def _sources() -> tuple:
    out: list = []
    seen: set = set()
    for a in _accelerations.ACCELERATIONS:
        if a.counts and a.counts not in seen:  # (two entries may share a module's counters)
            seen.add(a.counts)
            out.append(_source(a))
    # not an acceleration's: the calls handed to stock per overload (fastfake.stock_report())
    out.append(ExtensionCounts(None, _C.stock_calls, _C.stock_calls_set))
    return tuple(out)


#: From the table of accelerations (each entry's ``counts``), in table order. Each has
#: ``counters()``, ``reset_counters()``, ``saved_counters()`` and ``restore_counters(saved)``.
SOURCES = _sources()


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
