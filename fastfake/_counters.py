"""fastfake's Python-side counters, in one list: what ``stats()`` reads and
``reset_stats()`` zeroes beside the extension's own (``_C.counters()``), and what
the install-time self-test saves and puts back around its programs."""
from __future__ import annotations

from . import _fake_prop, _functional, _portable, _rerun, _symnode, _symnode_expr, _symnode_int

#: Each has ``counters()``, ``reset_counters()``, ``saved_counters()`` and
#: ``restore_counters(saved)``.
SOURCES = (_functional, _portable, _rerun, _symnode, _fake_prop, _symnode_expr, _symnode_int)


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
