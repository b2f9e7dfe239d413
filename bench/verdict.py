"""The benchmark's "never slower than stock" rule, as a function of numbers.

A row is **slower** when fastfake's median time exceeds stock's median by more than
the noise of the row's repetitions::

    noise  = max(FLOOR, spread(stock), spread(fastfake))
    spread(xs) = (max(xs) - min(xs)) / median(xs)      # 0 for a single repetition
    slower = median(fastfake) > median(stock) * (1 + noise)

FLOOR is 3 %: with one repetition (no spread to measure) or very tight
repetitions, fastfake may still be up to 3 % above stock before the row fails.
The times are whatever the row's main metric is (CPU seconds for fresh-process
rows, the trace time for in-process rows).
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

FLOOR = 0.03


def spread(xs: Sequence[float]) -> float:
    """Relative spread of repetitions: (max - min) / median; 0 for fewer than two."""
    if len(xs) < 2:
        return 0.0
    med = statistics.median(xs)
    return (max(xs) - min(xs)) / med if med > 0 else 0.0


def never_slower(stock: Sequence[float], fastfake: Sequence[float], *, floor: float = FLOOR) -> dict:
    """The rule above on two lists of repetition times. Returns ``slower`` (bool),
    both medians, ``noise`` (the relative margin allowed) and ``limit`` (the
    fastfake median above which the row is slower). Raises ValueError on an empty
    list."""
    if not stock or not fastfake:
        raise ValueError("never_slower needs at least one repetition of each implementation")
    ms, mf = statistics.median(stock), statistics.median(fastfake)
    noise = max(floor, spread(stock), spread(fastfake))
    limit = ms * (1.0 + noise)
    return {"slower": mf > limit, "stock_median": ms, "fastfake_median": mf, "noise": noise, "limit": limit,
            "ratio": ms / mf if mf > 0 else None}


def check_rows(rows: list[dict], *, allow_slower: bool = False) -> list[dict]:
    """Apply :func:`never_slower` to every row that has repetitions of both
    implementations (``row["runs"][impl]`` entries with ``"seconds"``); sets
    ``row["never_slower"]`` (the rule's result) and ``row["verdict"]`` ("ok",
    "FAIL", or "slower (allowed)" under ``allow_slower``). Returns the slower rows."""
    slower = []
    for row in rows:
        runs = row.get("runs") or {}
        s = [r["seconds"] for r in runs.get("stock", []) if r.get("seconds") is not None]
        f = [r["seconds"] for r in runs.get("fastfake", []) if r.get("seconds") is not None]
        if not s or not f:
            continue
        res = never_slower(s, f)
        row["never_slower"] = res
        if res["slower"]:
            row["verdict"] = "slower (allowed)" if allow_slower else "FAIL"
            slower.append(row)
        else:
            row["verdict"] = "ok"
    return slower
