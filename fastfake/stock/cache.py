"""Stock's dispatch-cache statistics and clearing, with fastfake installed.

``FakeTensorMode.cache_info()`` is read by tools, compile-time metrics and
PyTorch's own tests; a call fastfake serves never reaches stock's counters. The
extension counts each served call as stock's cache would have (a result-cache hit
is a hit; an elementwise result a hit if stock's cache would hold that exact call,
else a miss and one more entry: ``csrc/stock/counts.cpp``), and the patched
classmethods here add those counts in:

A call whose real tensor arguments fastfake converted (``allow_non_fake_inputs``)
counts as stock's "non-fake tensor" bypass when served.

* ``cache_info()`` moves the pending counts into ``FakeTensorMode.cache_hits`` /
  ``cache_misses`` (so code reading those attributes afterwards sees them too) and
  reports the entries stock's cache would hold for served elementwise calls in
  ``size``;
* ``cache_clear()`` runs stock's, then drops fastfake's result cache and the
  record of the calls stock's cache would hold (learned elementwise rules stay:
  they are proven rules, not cached results).

Pending counts are also moved in by ``uninstall()`` and at interpreter exit (before
stock's own ``dump_cache_stats`` logs them). Bypasses are counted by stock itself:
every call fastfake does not serve goes through stock's cache code.

Limits: the record of served calls starts empty at each ``install()``, so a call
stock ran itself before (while fastfake was uninstalled) and fastfake now serves
counts as a miss where stock would hit; the record is bounded like the result
cache, and a call forgotten when it overflows counts as a miss again.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
from collections.abc import Iterator

from fastfake import _C
from fastfake.tracing import functional as _functional


def flush() -> None:
    """Move the counts of served calls into stock's class counters."""
    hits, misses, non_fake, unsafe_view, sym_scalar = _C.take_stock_counts()
    if hits or misses or non_fake or unsafe_view or sym_scalar:
        from torch._subclasses.fake_tensor import FakeTensorMode

        FakeTensorMode.cache_hits += hits
        FakeTensorMode.cache_misses += misses
        if non_fake:
            FakeTensorMode.cache_bypasses["non-fake tensor"] += non_fake
        if unsafe_view:
            FakeTensorMode.cache_bypasses["unsafe view"] += unsafe_view
        if sym_scalar:
            FakeTensorMode.cache_bypasses["symbolic shape"] += sym_scalar


def detach() -> None:
    """At uninstall(): move the pending counts in, and forget the calls stock's
    cache would hold (from here on stock runs alone and holds only what it ran)."""
    flush()
    _C.stock_cache_cleared()


def make_cache_info(original: classmethod) -> classmethod:
    stock = original.__func__

    def cache_info(cls):
        flush()
        info = stock(cls)
        extra = _C.stock_cache_extra_entries()
        if extra:
            if hasattr(info, "_replace"):
                info = info._replace(size=info.size + extra)
            else:
                info = dataclasses.replace(info, size=info.size + extra)
        return info

    cache_info.__doc__ = stock.__doc__
    cache_info.__qualname__ = stock.__qualname__
    cache_info.__wrapped__ = stock  # type: ignore[attr-defined]
    return classmethod(cache_info)


def make_cache_clear(original: classmethod) -> classmethod:
    stock = original.__func__

    def cache_clear(cls) -> None:
        stock(cls)
        _C.stock_cache_cleared()
        _C.cache_clear()
        _functional.clear()

    cache_clear.__doc__ = stock.__doc__
    cache_clear.__qualname__ = stock.__qualname__
    cache_clear.__wrapped__ = stock  # type: ignore[attr-defined]
    return classmethod(cache_clear)


@contextlib.contextmanager
def not_counted() -> Iterator[None]:
    """Served calls inside are not counted (the install-time self-test, whose
    stock cache entries and counters are put back afterwards)."""
    was = _C.set_stock_counting(False)
    try:
        yield
    finally:
        _C.set_stock_counting(was)


@contextlib.contextmanager
def stock_state_preserved() -> Iterator[None]:
    """Put stock's class-level dispatch cache and its counters back afterwards."""
    from torch._subclasses.fake_tensor import FakeTensorMode as M

    cache_keys = set(M.cache)
    counters = {k: getattr(M, k) for k in ("cache_hits", "cache_misses")}
    bypasses = dict(M.cache_bypasses)
    try:
        yield
    finally:
        for k in [k for k in M.cache if k not in cache_keys]:
            del M.cache[k]
        for k, v in counters.items():
            setattr(M, k, v)
        M.cache_bypasses.clear()
        M.cache_bypasses.update(bypasses)


_exit_flush_registered = False


def flush_at_exit() -> None:
    """Register flush() at interpreter exit; call after torch's fake_tensor module
    is imported so that it runs before stock's dump_cache_stats (atexit is LIFO)."""
    global _exit_flush_registered
    if not _exit_flush_registered:
        atexit.register(flush)
        _exit_flush_registered = True
