"""Counters: fastfake.stats() / fastfake.reset_stats()."""
from __future__ import annotations

from fastfake import _C
from fastfake.core import counters as _counters


def stats() -> dict[str, int]:
    """All counters as a flat ``{dotted.name: count}`` dict.

    ``dispatch.total`` counts calls into the installed ``__torch_dispatch__``,
    ``dispatch.stock`` those handed to stock; ``elementwise.hit`` results built in
    C++, ``elementwise.admit`` first calls of a new signature (served by stock and
    used to verify the rules), ``elementwise.reject.*`` signatures that always go to
    stock, and ``elementwise.fallback.<reason>`` calls that went to stock and why.
    After the first ``install()``, ``selftest.failed.<feature>`` is 1 for a feature
    the install-time self-test turned off and ``selftest.idle.<feature>`` 1 for one
    that passed without serving any of its programs itself. ``symnode.memo.*``
    count the SymNode binary ops served from the memo (fastfake/symbolic/symnode_memo.py),
    ``fake_prop.*`` the FakeTensorProp nodes run without the interpreter's wrappers
    (fastfake/tracing/fake_prop.py), ``symnode.expr.*`` the ``SymNode.expr`` reads served in
    C (fastfake/symbolic/symnode_expr.py), ``symnode.int.*`` the ``SymNode.maybe_as_int``
    calls served in C (fastfake/symbolic/symnode_int.py).
    """
    out = {name: int(value) for name, value in _C.counters()}
    out.update(_counters.counters())
    from fastfake.core.install import _State

    report = _State.selftest
    if report is not None:
        for feature, ok in report.passed.items():
            out[f"selftest.failed.{feature}"] = int(not ok)
            out[f"selftest.idle.{feature}"] = int(ok and report.served.get(feature, 0) == 0)
    return out


def reset_stats() -> None:
    """Set every counter back to zero."""
    _C.reset_counters()
    _counters.reset()


def stock_report() -> dict[str, dict[str, int]]:
    """Per overload (``str(op)``), the calls handed to stock since the last
    ``reset_stats()``: ``outermost`` (no stock call of the thread in progress: what a
    trace pays stock for) and ``nested`` (dispatched by stock's own kernels), most
    outermost calls first. Their sum over all overloads is ``stats()["dispatch.stock"]``.
    At most 4,096 names; past that, calls count under ``"other"``."""
    rows = sorted(_C.stock_calls().items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
    return {name: {"outermost": o, "nested": n} for name, (o, n) in rows}


def elementwise_report() -> dict[str, dict]:
    """Per registered pointwise overload: learned signatures (admitted / rejected),
    fast hits, and the last field in which no stride rule reproduced stock."""
    return _C.elementwise_report()
