"""crosscheck=True: recompute every fast result with the stock path and compare."""
from __future__ import annotations

import optree
import torch

from fastfake import _C


class CrosscheckError(AssertionError):
    """A fast result differs from stock's. The message names the op, the inputs'
    metadata and the differing field."""


def describe(x: object) -> str:
    if isinstance(x, torch.Tensor):
        try:
            dev = x.fake_device  # type: ignore[attr-defined]
        except AttributeError:
            dev = x.device
        return (
            f"{type(x).__name__}(size={tuple(x.shape)}, stride={x.stride()}, "
            f"dtype={x.dtype}, device={dev})"
        )
    return repr(x)


def compare(fast: object, stock: object) -> str:
    """Empty string if identical, else a description of the first differing field."""
    fl, fs = optree.tree_flatten(fast, none_is_leaf=True)
    sl, ss = optree.tree_flatten(stock, none_is_leaf=True)
    if fs != ss:
        return f"structure: {fs} vs {ss}"
    for i, (a, b) in enumerate(zip(fl, sl)):
        diff = _C.compare(a, b)
        if diff:
            return diff if len(fl) == 1 else f"output {i}: {diff}"
    return ""


def shape_env_snapshot(env) -> tuple:
    """What a fake call can add to a ShapeEnv, to tell afterwards what it added."""
    return (
        len(env.guards),
        dict(env.replacements),
        dict(env.var_to_range),
        {k: len(v) for k, v in env.deferred_runtime_asserts.items()},
        set(env.divisible),
        set(env.size_like),
    )


def shape_env_delta(env, snap: tuple) -> list[str]:
    """What was added to ``env`` since ``snap`` (guards by expression)."""
    n, repl, ranges, asserts, divisible, size_like = snap
    out = [f"guard {g.expr}" for g in env.guards[n:]]
    out += [f"replacement {k} -> {v}" for k, v in env.replacements.items() if repl.get(k) != v]
    out += [f"range of {k}: {ranges.get(k)} -> {v}" for k, v in env.var_to_range.items() if ranges.get(k) != v]
    out += [f"runtime assert {r.expr}" for k, v in env.deferred_runtime_asserts.items()
            for r in v[asserts.get(k, 0):]]
    out += [f"divisible {d}" for d in env.divisible - divisible]
    out += [f"size-like {s}" for s in env.size_like - size_like]
    return out


def _inner_misses(env) -> int:
    info = getattr(type(env)._inner_evaluate_expr, "cache_info", None)
    return info().misses if info is not None else 0


def check(mode, func, types, args, kwargs, fast) -> bool:
    """Called by the C++ fast path after each fast result when crosscheck is on.

    Stock's verifying call runs on the ShapeEnv the fast path left. The fast path
    must already have done to it whatever stock's call does: stock's call may add
    no guard, replacement, value range, runtime assert, divisibility or size-like
    fact; and after a served first call that replayed the evaluations of stock's
    kernel (fastfake.parity.evals), stock's kernel must find every evaluation it makes
    already made (none misses ShapeEnv's evaluation cache), or a later evaluation
    could find another cache state than stock's and add another guard."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fastfake.parity import evals as _evals

    env = getattr(mode, "shape_env", None)
    replayed = _evals.take_served(env)
    snap = shape_env_snapshot(env) if env is not None else None
    misses = _inner_misses(env) if replayed else 0
    at = _evals.start() if replayed else None
    try:
        stock = FakeTensorMode.dispatch(mode, func, types, args, kwargs or {})
    finally:
        made = _evals.stop(at) if at is not None else []
    added = shape_env_delta(env, snap) if env is not None else []
    if replayed and _inner_misses(env) != misses:
        exprs = [str(a[2][0]) for a in made if a[1] == "evaluate_expr" and a[2]]
        added.append(f"evaluations the fast path did not make (among: {', '.join(exprs[:6])})")
    diff = "" if fast is stock else compare(fast, stock)
    if diff or added:
        inputs = ", ".join(describe(a) for a in args)
        if kwargs:
            inputs += ", " + ", ".join(f"{k}={describe(v)}" for k, v in kwargs.items())
        what = diff or "the ShapeEnv: stock's call added " + "; ".join(added[:8])
        raise CrosscheckError(
            f"fastfake crosscheck: {func} differs from stock in {what}; inputs: ({inputs})"
        )
    return True
