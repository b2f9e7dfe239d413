"""Differential parity helpers: stock FakeTensorMode vs FakeTensorMode with fastfake.

This module is deliberately independent of fastfake's own comparison code
(``fastfake.parity.crosscheck.compare`` / ``fastfake._C.compare``): everything is read
back through public / semi-public torch APIs, so a bug in fastfake's comparator
cannot hide a bug in its fast path.

Typical use::

    both = run_both(lambda a, b: torch.add(a, b),
                    lambda mode: (mode.from_tensor(x), mode.from_tensor(y)))
    assert_parity(both)           # stock vs every fastfake run, field by field
    assert both.fast[1].stats["elementwise.hit"] == 1   # 2nd call served in C++

``run_both`` runs the recipe once (or more) under stock and, by default, twice
under fastfake: the first fastfake call with a new signature is *admitted* (stock
serves it and fastfake learns), the second is served by the C++ fast path.
Every run gets a fresh mode and fresh inputs made from the same recipe.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any

import optree
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import fastfake
from fastfake.common import compat as _compat

#: The release the expectations of these tests were written on (cases that depend on
#: what stock itself raises or accepts are checked strictly there).
PRIMARY_RELEASE = "2.13.0"

#: Tests of the symbolic result cache: it is off on releases whose ShapeEnv has no
#: replacement counter (torch 2.9); every symbolic call goes to stock there.
requires_symbolic_cache = pytest.mark.skipif(
    not _compat.shape_env_counts_replacements(),
    reason=f"the symbolic result cache is off on torch {_compat.torch_release()} "
    "(no ShapeEnv replacement counter; symbolic calls go to stock)",
)

__all__ = [
    "Both",
    "DispatchRecorder",
    "Outcome",
    "assert_parity",
    "assert_same_outcome",
    "check",
    "describe_value",
    "diff_outcomes",
    "aliasing",
    "counters_with_prefix",
    "diff_aliasing",
    "fast_path_counters",
    "run_both",
    "run_once",
]


# ---------------------------------------------------------------------------
# Normalisation of a result into comparable plain data
# ---------------------------------------------------------------------------


def _norm_num(x: Any) -> Any:
    """ints as ints, SymInt/SymFloat/SymBool as ('sym', type, str(expr), hint, ...)."""
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        node = x.node
        expr = getattr(node, "expr", None)
        if node.is_nested_int() if hasattr(node, "is_nested_int") else False:  # pragma: no cover
            return ("sym", type(x).__name__, str(node))
        if expr is None:  # pragma: no cover - constant sym node
            return ("sym", type(x).__name__, repr(x))
        # the fields a SymNode built by fastfake (cache rebuild, SymNode memo) must
        # share with stock's: hint (type and value), pytype, optimized-summation flag
        return (
            "sym",
            type(x).__name__,
            str(expr),
            repr(getattr(node, "_hint", None)),
            type(getattr(node, "_hint", None)).__name__,
            getattr(getattr(node, "pytype", None), "__name__", None),
            getattr(node, "_optimized_summation", None),
        )
    return x


def error_outcome(exc: BaseException) -> tuple[str, str, str]:
    """An exception as comparable data: type and message, without what differs
    between two runs of the same call (object addresses; the caller's traceback
    torch 2.9 appends to argument-parsing errors as "Python error details")."""
    msg = re.sub(r"0x[0-9a-f]+", "0x?", str(exc)).split("Python error details")[0]
    return ("error", type(exc).__name__, msg)


def outcome(fn: Callable[[], Any]) -> tuple:
    """``("ok", fn())``, or stock-comparable ``error_outcome`` of what it raised."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared with stock's
        return error_outcome(e)


def symbolic_fake(mode: Any, *shape: int) -> torch.Tensor:
    """A fake tensor of ``mode`` with every dimension a fresh symbol."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
    return mode.from_tensor(torch.empty(*shape), symbolic_context=ctx)


def _plain(v: Any) -> Any:
    """A comparable, mode-independent description of a non-tensor value."""
    if v is None or isinstance(v, (bool, str)):
        return (type(v).__name__, v)
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _norm_num(v)
    if isinstance(v, float):
        # NaN != NaN: compare floats by their repr (also distinguishes -0.0)
        return ("float", repr(v))
    if isinstance(v, complex):
        return ("complex", repr(v))
    if isinstance(v, int):
        return (type(v).__name__, v)
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(v).__name__, str(v))
    if isinstance(v, torch.Size):
        return ("Size", tuple(_norm_num(s) for s in v))
    return (type(v).__qualname__, "<opaque>")


def tensor_meta(t: torch.Tensor, own_mode: Any = None) -> dict[str, Any]:
    """Every field the parity check compares for one tensor (call outside any mode)."""
    m: dict[str, Any] = {}
    m["type"] = f"{type(t).__module__}.{type(t).__qualname__}"
    m["sizes"] = tuple(_norm_num(s) for s in t.size())
    m["dim"] = t.dim()
    m["layout"] = str(t.layout)
    if t.layout == torch.strided:
        m["strides"] = tuple(_norm_num(s) for s in t.stride())
        m["storage_offset"] = _norm_num(t.storage_offset())
        m["storage_nbytes"] = _norm_num(t.untyped_storage().nbytes())
    m["dtype"] = str(t.dtype)
    m["device"] = str(t.device)  # outside kernel invocation: the fake device
    if isinstance(t, FakeTensor):
        m["fake_device"] = str(t.fake_device)
        m["fake_mode_is_own"] = own_mode is None or t.fake_mode is own_mode
    m["requires_grad"] = t.requires_grad
    m["is_leaf"] = t.is_leaf
    m["grad_fn"] = type(t.grad_fn).__name__ if t.grad_fn is not None else None
    m["is_conj"] = t.is_conj()
    m["is_neg"] = t.is_neg()
    m["is_inference"] = t.is_inference()
    m["is_view"] = t._is_view()
    m["dispatch_keys"] = str(torch._C._dispatch_keys(t))
    # inference tensors have no version counter (reading it raises)
    m["version"] = None if t.is_inference() else t._version
    d = t.__dict__
    m["dict_keys"] = list(d.keys())
    vals = {}
    for k, v in d.items():
        if k == "fake_mode":
            vals[k] = type(v).__qualname__
        elif k == _compat.fake_device_attr():
            vals[k] = str(v)
        elif isinstance(v, torch.Tensor):
            vals[k] = ("tensor", str(v.dtype), tuple(_norm_num(s) for s in v.shape))
        else:
            vals[k] = _plain(v)
    m["dict_values"] = vals
    return m


def describe_value(value: Any, inputs: list[Any], own_mode: Any = None) -> dict[str, Any]:
    """Plain-data description of a (pytree) result, including which outputs *are*
    which input objects (in-place / out= identity)."""
    leaves, spec = optree.tree_flatten(value, none_is_leaf=True)
    desc = {"treespec": str(spec), "leaves": []}
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            ident = [i for i, x in enumerate(inputs) if x is leaf]
            desc["leaves"].append(("tensor", ident, tensor_meta(leaf, own_mode)))
        else:
            desc["leaves"].append(("value", _plain(leaf)))
    return desc


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    fast: bool
    ok: bool
    value: Any = None
    exc: BaseException | None = None
    inputs: list[Any] = dataclasses.field(default_factory=list)  # flattened args, after the call
    mode: Any = None
    stats: dict[str, int] = dataclasses.field(default_factory=dict)  # fastfake counters of this run
    calls: list[tuple[Any, bool, bool]] = dataclasses.field(default_factory=list)  # recorder
    desc: dict[str, Any] | None = None  # filled lazily

    def error(self) -> tuple[str, str] | None:
        """(exception type, message). The message without what differs between
        call paths and runs but is not part of the error: the C++ backtrace some
        c10 errors append, and object addresses."""
        if self.ok:
            return None
        msg = str(self.exc).split("\nException raised from ", 1)[0]
        msg = re.sub(r"0x[0-9a-fA-F]+", "0x?", msg)
        return (f"{type(self.exc).__module__}.{type(self.exc).__qualname__}", msg)

    def describe(self) -> dict[str, Any]:
        if self.desc is None:
            if self.ok:
                out = describe_value(self.value, self.inputs, self.mode)
            else:
                out = {"error": self.error()}
            # inputs after the call: in-place ops change their metadata / version
            out["inputs_after"] = describe_value(self.inputs, [], self.mode)["leaves"]
            self.desc = out
        return self.desc


@dataclasses.dataclass
class Both:
    stock: list[Outcome]
    fast: list[Outcome]


HIT_COUNTERS: tuple[str, ...] = ("elementwise.hit",)


def _hits(names: tuple[str, ...] = HIT_COUNTERS) -> int:
    """Sum of the named fastfake counters (default: ``elementwise.hit``)."""
    counters = dict(fastfake._C.counters())
    return sum(counters[n] for n in names)


class DispatchRecorder:
    """Wraps whatever ``FakeTensorMode.__torch_dispatch__`` currently is (stock or
    fastfake's C-level one) and records the *top-level* calls as
    ``(func, completed_without_error, served_by_fast_path)``. Nested calls made
    by stock while handling a call (decompositions, python refs) are not recorded.
    A call counts as served when one of ``hit_counters`` moved during it."""

    def __init__(self, hit_counters: tuple[str, ...] = HIT_COUNTERS) -> None:
        self.calls: list[tuple[Any, bool, bool]] = []
        self._depth = 0
        self._hit_counters = tuple(hit_counters)

    @contextlib.contextmanager
    def installed(self):
        cls = FakeTensorMode
        had = "__torch_dispatch__" in cls.__dict__
        current = cls.__dict__.get("__torch_dispatch__")
        inner = current
        recorder = self

        def recording_dispatch(mode, func, *rest):
            top = recorder._depth == 0
            recorder._depth += 1
            hits_before = _hits(recorder._hit_counters) if top else 0
            ok = False
            try:
                r = inner.__get__(mode, cls)(func, *rest)
                ok = True
                return r
            finally:
                recorder._depth -= 1
                if top:
                    hit = _hits(recorder._hit_counters) > hits_before
                    recorder.calls.append((func, ok, hit))

        cls.__torch_dispatch__ = recording_dispatch
        try:
            yield self
        finally:
            if had:
                cls.__torch_dispatch__ = current
            else:  # pragma: no cover
                del cls.__torch_dispatch__


def _call(fn: Callable[..., Any], args: tuple) -> tuple[bool, Any, BaseException | None]:
    try:
        return True, fn(*args), None
    except Exception as e:  # noqa: BLE001 - any error is part of the outcome
        return False, None, e


def run_once(
    fn: Callable[..., Any],
    make_inputs: Callable[[Any], tuple],
    *,
    fast: bool,
    mode_factory: Callable[[], Any] = FakeTensorMode,
    record: bool = False,
    clear_stock_cache: bool = True,
    hit_counters: tuple[str, ...] = HIT_COUNTERS,
) -> Outcome:
    """Run ``fn(*make_inputs(mode))`` inside a fresh mode, with fastfake installed
    (``fast=True``) or uninstalled. Leaves fastfake uninstalled."""
    fastfake.uninstall()
    if clear_stock_cache:
        # Stock's FakeTensorMode dispatch cache is class-level and history
        # dependent: e.g. an in-place op that resizes `self` (clamp_ with a
        # larger tensor bound) resizes on a cache miss but not on a cache hit.
        # Every run starts from an empty stock cache so that all runs see the same
        # history and are comparable. Cleared while uninstalled: stock's own
        # cache_clear, which leaves fastfake's learned entries for the next run
        # (installed, FakeTensorMode.cache_clear() clears those too).
        FakeTensorMode.cache_clear()
    if fast:
        fastfake.install()
    recorder = DispatchRecorder(hit_counters) if record else None
    try:
        mode = mode_factory()
        with mode:
            args = tuple(make_inputs(mode))
        fastfake.reset_stats()
        with contextlib.ExitStack() as stack:
            if recorder is not None:
                stack.enter_context(recorder.installed())
            with mode:
                ok, value, exc = _call(fn, args)
        stats = fastfake.stats()
    finally:
        fastfake.uninstall()
    inputs, _ = optree.tree_flatten(list(args), none_is_leaf=True)
    return Outcome(
        fast=fast,
        ok=ok,
        value=value,
        exc=exc,
        inputs=inputs,
        mode=mode,
        stats=stats,
        calls=recorder.calls if recorder is not None else [],
    )


def run_both(
    fn: Callable[..., Any],
    make_inputs: Callable[[Any], tuple],
    *,
    mode_factory: Callable[[], Any] = FakeTensorMode,
    stock_runs: int = 1,
    fast_runs: int = 2,
    record: bool = False,
    clear_stock_cache: bool = True,
    hit_counters: tuple[str, ...] = HIT_COUNTERS,
) -> Both:
    """Run ``fn`` ``stock_runs`` times in fresh stock FakeTensorModes (fastfake
    uninstalled) and ``fast_runs`` times in fresh FakeTensorModes with fastfake
    installed; inputs are made inside each mode by ``make_inputs(mode)``.
    ``Outcome.stats`` of each fastfake run holds the counters of that run only.
    With ``record=True`` a top-level call counts as served when one of
    ``hit_counters`` moved during it."""
    stock = [
        run_once(fn, make_inputs, fast=False, mode_factory=mode_factory, record=record,
                 clear_stock_cache=clear_stock_cache, hit_counters=hit_counters)
        for _ in range(stock_runs)
    ]
    fast = [
        run_once(fn, make_inputs, fast=True, mode_factory=mode_factory, record=record,
                 clear_stock_cache=clear_stock_cache, hit_counters=hit_counters)
        for _ in range(fast_runs)
    ]
    return Both(stock, fast)


# ---------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a.keys()) != list(b.keys()):
            out.append(f"{path}: keys {list(a.keys())} vs {list(b.keys())}")
        for k in a.keys() & b.keys():
            _diff(a[k], b[k], f"{path}.{k}", out)
        return
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} vs {len(b)}: {a!r} vs {b!r}")
            return
        # leaf tuples (sizes, strides) are reported whole
        if all(not isinstance(x, (dict, list, tuple)) for x in a + b) if isinstance(a, tuple) else False:
            if a != b:
                out.append(f"{path}: {a!r} vs {b!r}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
        return
    if type(a) is not type(b) or a != b:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return
        out.append(f"{path}: {a!r} (stock) vs {b!r} (fastfake)")


def diff_outcomes(stock: Outcome, fast: Outcome) -> list[str]:
    """Differences between two outcomes ([] if identical)."""
    out: list[str] = []
    _diff(stock.describe(), fast.describe(), "result", out)
    return out


def assert_same_outcome(
    stock: Outcome, fast: Outcome, context: str = "", *, with_aliasing: bool = False
) -> None:
    diffs = diff_outcomes(stock, fast)
    if with_aliasing:
        diffs += diff_aliasing(stock, fast)
    if diffs:
        raise AssertionError(
            f"fastfake differs from stock{(' (' + context + ')') if context else ''}:\n  "
            + "\n  ".join(diffs[:20])
        )


def assert_parity(both: Both, context: str = "", *, with_aliasing: bool = False) -> None:
    """Every stock run agrees with the first; every fastfake run agrees with stock.
    ``with_aliasing=True`` also compares storage sharing and ``._base`` (:func:`aliasing`)."""
    ref = both.stock[0]
    for i, s in enumerate(both.stock[1:], 1):
        assert_same_outcome(ref, s, f"{context} stock run {i} vs stock run 0 (test harness)",
                            with_aliasing=with_aliasing)
    for i, f in enumerate(both.fast):
        s = both.stock[min(i, len(both.stock) - 1)]
        assert_same_outcome(s, f, f"{context} fastfake run {i}", with_aliasing=with_aliasing)


def check(
    fn: Callable[..., Any],
    make_inputs: Callable[[Any], tuple],
    *,
    expect_hit: bool | None = None,
    context: str = "",
    **kw: Any,
) -> Both:
    """run_both + assert_parity; with ``expect_hit=True`` also asserts that the
    last fastfake run was served (at least partly) by the C++ fast path, with
    ``False`` that it was not."""
    both = run_both(fn, make_inputs, **kw)
    assert_parity(both, context)
    if expect_hit is not None:
        hits = both.fast[-1].stats["elementwise.hit"]
        assert (hits > 0) == expect_hit, (
            f"{context}: expected fast-path hit={expect_hit}, stats of last run: "
            f"{ {k: v for k, v in both.fast[-1].stats.items() if v} }"
        )
    return both


def fast_path_counters(stats: dict[str, int]) -> dict[str, int]:
    """The non-zero elementwise.* counters of a stats() dict."""
    return counters_with_prefix(stats, "elementwise.")


def counters_with_prefix(stats: dict[str, int], prefix: str) -> dict[str, int]:
    """The non-zero counters of a stats() dict whose name starts with ``prefix``."""
    return {k: v for k, v in stats.items() if k.startswith(prefix) and v}


# ---------------------------------------------------------------------------
# Aliasing (not part of describe(): opt-in, see diff_aliasing)
# ---------------------------------------------------------------------------


def aliasing(outcome: Outcome) -> dict[str, Any]:
    """Which tensors of one outcome share a storage, and what each ``._base`` is.

    Tensors are the inputs (flattened args, after the call) followed by the output
    leaves. Storages are numbered by first appearance (compared by
    ``untyped_storage()._cdata``, i.e. the StorageImpl), so the description is
    independent of addresses and comparable between runs. ``_base`` is named as
    ``("input", i)`` / ``("output", j)`` when it *is* one of those objects, else by
    its storage number."""
    outs = optree.tree_leaves(outcome.value, none_is_leaf=True) if outcome.ok else []
    tensors = [("input", i, x) for i, x in enumerate(outcome.inputs) if isinstance(x, torch.Tensor)]
    tensors += [("output", j, x) for j, x in enumerate(outs) if isinstance(x, torch.Tensor)]
    ids: dict[int, int] = {}

    def storage_no(t: torch.Tensor) -> Any:
        if t.layout != torch.strided:
            return None
        return ids.setdefault(t.untyped_storage()._cdata, len(ids))

    def name_of(b: torch.Tensor | None) -> Any:
        if b is None:
            return None
        for kind, i, x in tensors:
            if x is b:
                return (kind, i)
        return ("other", storage_no(b))

    storage = {f"{kind}{i}": storage_no(x) for kind, i, x in tensors}
    base = {f"{kind}{i}": name_of(x._base) for kind, i, x in tensors}
    return {"storage": storage, "base": base}


def diff_aliasing(stock: Outcome, fast: Outcome) -> list[str]:
    """Differences in storage sharing / ``._base`` between two outcomes."""
    out: list[str] = []
    _diff(aliasing(stock), aliasing(fast), "aliasing", out)
    return out


def forget_signatures() -> None:
    """Make fastfake forget every learned (admitted / rejected) signature, so the
    next call of each case is an admission again. Uses fastfake's public testing
    hooks (clear + re-register the same pointwise registry)."""
    from fastfake.elementwise import registry as _registry

    fastfake._C.clear_elementwise()
    _registry.register_all(fastfake._C)


# ---------------------------------------------------------------------------
# Symbolic shapes: SymNode identity and raw values, ShapeEnv state
# ---------------------------------------------------------------------------


def _int_likes(t: torch.Tensor) -> list[Any]:
    return [*t.shape, *t.stride(), t.storage_offset(), t.untyped_storage().nbytes()]


def sym_structure(outcome: Outcome) -> dict[str, Any]:
    """Every int-like of the outputs (sizes, strides, offset, storage nbytes) as
    ``("in", k)`` when its SymNode *is* the k-th distinct SymNode of the inputs
    (FX graph building tracks SymNodes by identity), else by its raw value
    ``(str(node._expr), node._hint, node.constant)``; plain ints as themselves."""
    nodes: dict[int, int] = {}
    for x in outcome.inputs:
        if isinstance(x, torch.Tensor) and x.layout == torch.strided:
            vals = _int_likes(x)
        elif isinstance(x, torch.SymInt):
            vals = [x]
        else:
            continue
        for v in vals:
            if isinstance(v, torch.SymInt):
                nodes.setdefault(id(v.node), len(nodes))

    def one(v: Any) -> Any:
        if isinstance(v, torch.SymInt):
            k = nodes.get(id(v.node))
            if k is not None:
                return ("in", k)
            return ("new", str(v.node._expr), v.node._hint, v.node.constant)
        return v

    outs = optree.tree_leaves(outcome.value, none_is_leaf=True) if outcome.ok else []
    return {
        f"output{j}": [one(v) for v in _int_likes(t)]
        for j, t in enumerate(outs)
        if isinstance(t, torch.Tensor) and t.layout == torch.strided
    }


def shape_env_state(outcome: Outcome) -> dict[str, Any]:
    """Guards (in order), ranges, replacements and deferred runtime asserts."""
    return shape_env_fields(outcome.mode.shape_env)


def shape_env_fields(env: Any) -> dict[str, Any]:
    """shape_env_state() of a ShapeEnv itself."""
    return {
        "guards": [str(g.expr) for g in env.guards],
        "var_to_range": {str(k): str(v) for k, v in env.var_to_range.items()},
        "replacements": {str(k): str(v) for k, v in env.replacements.items()},
        "deferred_runtime_asserts": {
            str(k): [str(r.expr) for r in v] for k, v in env.deferred_runtime_asserts.items()
        },
    }


def assert_symbolic_parity(both: Both, context: str = "", *, with_aliasing: bool = True) -> None:
    """assert_parity plus SymNode identity / raw values and the ShapeEnv state."""
    assert_parity(both, context, with_aliasing=with_aliasing)
    ref = both.stock[0]
    for i, f in enumerate(both.fast):
        for name, get in (("SymNode structure", sym_structure), ("ShapeEnv state", shape_env_state)):
            a, b = get(ref), get(f)
            if a != b:
                out: list[str] = []
                _diff(a, b, name, out)
                raise AssertionError(
                    f"fastfake differs from stock ({context} fastfake run {i}) in {name}:\n  "
                    + "\n  ".join(out[:20])
                )


def clear_shape_env_lru_caches() -> None:
    """Clear torch's own lru caches on ShapeEnv methods, which keep a dead ShapeEnv
    alive until evicted (only those: on 2.14+ Dynamo's polyfill registry is
    lru-cached too, and clearing it breaks later compiles)."""
    import functools
    import gc
    import warnings

    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated module attributes seen by the scan
        for o in gc.get_objects():
            if isinstance(o, functools._lru_cache_wrapper) and getattr(o, "__module__", "").startswith(
                "torch.fx.experimental"
            ):
                o.cache_clear()
    gc.collect()
