"""The ShapeEnv evaluations a stock kernel makes, recorded and replayed.

Stock's ShapeEnv memoises its evaluations in caches whose contents are part of
its behaviour:

* ``_inner_evaluate_expr`` (under ``evaluate_expr``) is an ``lru_cache(256)``
  shared by every ShapeEnv of the process: a hit skips the evaluation, and with
  it the guard a miss could add again;
* ``_maybe_evaluate_static`` and ``simplify`` are ``_lru_cache``s: cleared only
  when the calling ShapeEnv's version counter differs from the last caller's.
  Adding a guard (its axioms), refining a value range or marking a symbol
  size-like does not move that counter, so an answer cached before such a change
  is kept: a cached "not statically known" makes a later ``evaluate_expr`` add a
  guard that a fresh evaluation finds already implied.

So which guards a trace ends with depends on which evaluations ran when: a call
served without running stock's kernel must still make the evaluations the
kernel would have made, in the same order and under the same guard suppression,
or a later evaluation in that ShapeEnv can find another cache state and add
another guard (seen: the kernel's contiguity check cached ``Ne(s, Max(1,
s//2))`` as unknown, and stock's later ``set_meta`` guarded on it; served without
the kernel, the later evaluation found it implied; docs/shape-env-parity.md).

While fastfake records a stock miss (fastfake.cache.portable's learning frame), the
three entry points are wrapped and every outermost call on a ShapeEnv is logged
with its arguments, its guard suppression and its result. A record that serves
another ShapeEnv carries the log and :func:`replay` makes the same calls there
through stock's own methods: the caches, and any guard they lead to, end as
stock's kernel leaves them. The results are hint-determined for the backed
symbols records are made of; a replay whose result differs from the recorded
one declines the call (stock computes it).

The wrappers are on the class only while a learning frame is open.
"""
from __future__ import annotations

import functools
from typing import Any

from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import ShapeEnv

#: the ShapeEnv methods whose calls are logged: the outermost entries into its
#: evaluation caches that code outside ShapeEnv makes
NAMES = ("evaluate_expr", "_maybe_evaluate_static", "simplify")

_RAISED = object()

# (ShapeEnv, name, args, kwargs, guards suppressed, result) per outermost call
_LOG: list = []
_DEPTH = [0]
_ACTIVE = [0]
_ORIGINALS: dict[str, Any] = {}
_FAULT = [0]  # testing: replays that skip their calls


def _wrapper(name: str, original: Any) -> Any:
    suppressed = ShapeEnv._suppress_guards_tls

    @functools.wraps(original)
    def logged(self, *args, **kwargs):
        if _DEPTH[0]:
            return original(self, *args, **kwargs)
        _DEPTH[0] = 1
        try:
            r = original(self, *args, **kwargs)
        except BaseException:
            _LOG.append((self, name, args, kwargs, suppressed(), _RAISED))
            raise
        finally:
            _DEPTH[0] = 0
        _LOG.append((self, name, args, kwargs, suppressed(), r))
        return r

    for attr in ("cache_clear", "cache_info"):
        if hasattr(original, attr):
            setattr(logged, attr, getattr(original, attr))
    return logged


def start() -> int:
    """A learning frame opens: log from here (the returned position)."""
    if _ACTIVE[0] == 0:
        for name in NAMES:
            original = ShapeEnv.__dict__.get(name)
            if original is None:
                continue
            _ORIGINALS[name] = original
            setattr(ShapeEnv, name, _wrapper(name, original))
    _ACTIVE[0] += 1
    return len(_LOG)


def stop(start_at: int) -> list:
    """A learning frame closes: what was logged since ``start_at``."""
    logged = _LOG[start_at:]
    _ACTIVE[0] -= 1
    if _ACTIVE[0] <= 0:
        _ACTIVE[0] = 0
        for name, original in _ORIGINALS.items():
            setattr(ShapeEnv, name, original)
        _ORIGINALS.clear()
        _LOG.clear()
    return logged


class Frame:
    """Logs from its creation until :meth:`stop` (or until it is dropped)."""

    __slots__ = ("at", "open")

    def __init__(self) -> None:
        self.at = start()
        self.open = True

    def stop(self) -> list:
        if not self.open:
            return []
        self.open = False
        return stop(self.at)

    def __del__(self) -> None:
        self.stop()


def portable_log(env: Any, logged: list) -> tuple | None:
    """The calls a record replays, without the ShapeEnv: ``(name, args, kwargs,
    suppressed, result)`` each; None if one cannot be replayed elsewhere (another
    ShapeEnv's call, a call that raised, an FX node argument of translation
    validation)."""
    out = []
    for e, name, args, kwargs, sup, r in logged:
        if e is not env or r is _RAISED:
            return None
        if any(isinstance(a, Node) for a in (*args, *kwargs.values())):
            return None  # (translation validation's FX node of that ShapeEnv's graph)
        out.append((name, args, tuple(sorted(kwargs.items())), sup, r))
    return tuple(out)


def replay(env: Any, calls: tuple) -> bool:
    """Make ``calls`` on ``env`` through stock's own methods; False if a result
    differs from the recorded one (the caller then lets stock compute the call)."""
    if _FAULT[0] > 0:
        _FAULT[0] -= 1
        return True
    for name, args, kwargs, sup, want in calls:
        method = getattr(env, name)
        if sup:
            with env.suppress_guards():
                got = method(*args, **dict(kwargs))
        else:
            got = method(*args, **dict(kwargs))
        if got != want:
            return False
    return True


def replay_record(env: Any, calls: tuple, ambient: bool, counts: Any) -> bool:
    """Before a record serves in ``env``: its calls replayed (``counts``, the
    record's module's Counter, gains ``replayed_calls``); False if the call must go
    to stock instead, counted under the reason: "declined.suppression" (not under
    the guard suppression it was learned under) or "declined.replay" (a result
    differs)."""
    if bool(env._suppress_guards_tls()) != ambient:
        counts["declined.suppression"] += 1
        return False
    if calls and not replay(env, calls):
        counts["declined.replay"] += 1
        return False
    counts["replayed_calls"] += len(calls)
    mark_served(env)
    return True


_SERVED = [0]


def mark_served(env: Any) -> None:
    """A portable record is about to serve in ``env`` after its replay (read by the
    crosscheck of that call)."""
    _SERVED[0] = id(env)


def take_served(env: Any) -> bool:
    r = env is not None and _SERVED[0] == id(env)
    _SERVED[0] = 0
    return r


def inject_fault(n: int) -> None:
    """Testing: the next ``n`` replays make no calls (a served call then skips the
    evaluations stock's kernel makes, as fastfake did before replays)."""
    _FAULT[0] = n
