"""AOTAutograd's FunctionalTensor wrappers over symbolic fakes: stock's storage size,
memoised per ShapeEnv.

Every op AOTAutograd traces under functionalization wraps its fake output in a
``FunctionalTensor`` (``torch._subclasses.functional_tensor``), whose ``__new__``
calls ``torch.Tensor._make_wrapper_subclass(cls, sizes, strides, offset, ...)``
with 13 positional arguments. With SymInt sizes, up to torch 2.14 that C++ call
recomputes the wrapper's storage size with ``computeStorageNbytes``: per
dimension a size-oblivious ``size == 0`` test, a subtraction, a multiplication and
an addition of SymInts, each a Python ``SymNode`` operation (~260 µs for a 3-d
tensor, more under proxy tracing; ~15 % of a ``dynamic=True`` BERT compile).

The result depends only on the sizes' / strides' / offset's expressions (after
the ShapeEnv's replacements) and hints and the dtype's item size, as long as
computing it changed nothing in the ShapeEnv. So the first wrapper of each such
key is built by stock, which computes the size; its storage size (raw expression,
hint, summation flag) is remembered for that ShapeEnv if the ShapeEnv's guards,
replacements, deferred runtime asserts, ranges and axioms are unchanged by it;
later wrappers of the same key pass a fresh SymNode with those fields as
``storage_size`` (the argument torch 2.15's own ``FunctionalTensor.__new__``
passes), so C++ skips the arithmetic. Torch 2.15 passes ``storage_size`` itself
(14 arguments): such calls, other classes, keyword calls, static shapes, unbacked
sizes, translation validation and structured tracing (which logs every SymNode
operation) all go to stock unchanged.

Only wrappers built while no proxy tracing is active are served: that is
AOTAutograd's first pass over the program (collecting input / output metadata
under functionalization, about half of the wrappers of a compile). Under proxy
tracing every SymNode operation of stock's computation is recorded by the tracer
(lazily built FX nodes, whose names are numbered; a storage size that simplifies
to a bare symbol even replaces that symbol's entry in the tracer's
expression table), so skipping it would change the graph. Torch 2.15 itself passes
the wrapper's storage size, so its graphs no longer carry that arithmetic either.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

#: Per ShapeEnv, at most this many remembered storage sizes (then the memo of that
#: ShapeEnv starts again empty; counted as ``functional.storage.reset``).
MAX_ENTRIES_PER_SHAPE_ENV = 8192

_counts = {
    "functional.storage.hit": 0,
    "functional.storage.learned": 0,
    "functional.storage.changed_shape_env": 0,
    "functional.storage.stock": 0,
    "functional.storage.proxy_tracing": 0,
    "functional.storage.reset": 0,
    "functional.storage.crosschecked": 0,
}

_NOT_INT = object()


class _State:
    original: Any = None  # torch._C.TensorBase._make_wrapper_subclass
    functional_tensor: type | None = None
    sym_node: type | None = None
    memo: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
    logging_internal: Any = None
    get_proxy_mode: Any = None
    crosscheck = False


def counters() -> dict[str, int]:
    return dict(_counts)


def reset_counters() -> None:
    for k in _counts:
        _counts[k] = 0


def set_counters(values: dict[str, int]) -> None:
    _counts.update(values)


def clear() -> None:
    """Forget every remembered storage size (``fastfake.cache_clear()``)."""
    _State.memo = weakref.WeakKeyDictionary()


def _setup() -> None:
    if _State.original is not None:
        return
    from torch._subclasses.functional_tensor import FunctionalTensor
    from torch.fx.experimental.sym_node import SymNode

    _State.original = torch._C.TensorBase._make_wrapper_subclass
    _State.functional_tensor = FunctionalTensor
    _State.sym_node = SymNode
    _State.logging_internal = torch._logging._internal
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    _State.get_proxy_mode = get_proxy_mode


def _key_part(x: Any, key: list, env_box: list) -> bool:
    """Append what ``x`` (int or SymInt) contributes to the key; False if the
    value is one this memo does not handle."""
    tx = type(x)
    if tx is int:
        key.append(x)
        return True
    if tx is not torch.SymInt:
        return False
    node = x.node
    env = node.shape_env
    if env_box[0] is None:
        env_box[0] = env
    elif env is not env_box[0]:
        return False
    hint = node._hint
    if type(hint) is not int:
        return False
    key.append((node.expr, hint))
    return True


def _env_state(env: Any) -> tuple:
    return (
        len(env.guards),
        env.num_deferred_runtime_asserts,
        len(env.replacements),
        getattr(env, "_replacements_version_counter", None),
        len(env.var_to_range),
        len(env.axioms),
    )


def make_wrapper_subclass(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``torch.Tensor._make_wrapper_subclass`` while fastfake is installed."""
    original = _State.original
    if cls is not _State.functional_tensor or kwargs or len(args) != 13:
        return original(cls, *args, **kwargs)
    sizes, strides, offset = args[0], args[1], args[2]
    if strides is None or offset is None:
        return original(cls, *args)
    key: list = [args[4]]
    env_box: list = [None]
    for x in sizes:
        if not _key_part(x, key, env_box):
            return original(cls, *args)
    key.append(None)
    for x in strides:
        if not _key_part(x, key, env_box):
            return original(cls, *args)
    key.append(None)
    if not _key_part(offset, key, env_box):
        return original(cls, *args)
    env = env_box[0]
    if env is None:  # static: plain int arithmetic in C++
        return original(cls, *args)
    if env._translation_validation_enabled or _State.logging_internal.GET_DTRACE_STRUCTURED:
        _counts["functional.storage.stock"] += 1
        return original(cls, *args)
    if _State.get_proxy_mode() is not None:
        _counts["functional.storage.proxy_tracing"] += 1
        return original(cls, *args)
    key_t = tuple(key)
    memo = _State.memo.get(env)
    if memo is not None:
        hit = memo.get(key_t)
        if hit is not None:
            _counts["functional.storage.hit"] += 1
            expr, hint, summation, fx_node = hit
            if expr is _NOT_INT:
                size: Any = hint
            else:
                size = torch.SymInt(
                    _State.sym_node(expr, env, int, hint, fx_node=fx_node, optimized_summation=summation)
                )
            if _State.crosscheck:
                _crosscheck(original(cls, *args), size, args)
            return original(cls, *args, size)
    before = _env_state(env)
    out = original(cls, *args)
    if _env_state(env) != before:
        _counts["functional.storage.changed_shape_env"] += 1
        return out
    nbytes = out.untyped_storage().nbytes()
    if type(nbytes) is int:
        value = (_NOT_INT, nbytes, False, None)
    elif type(nbytes) is torch.SymInt:
        node = nbytes.node
        if (
            node.shape_env is not env
            or node.constant is not None
            or isinstance(node.fx_node, torch.fx.Node)
            or node.pytype is not int
            or type(node._hint) is not int
        ):
            _counts["functional.storage.stock"] += 1
            return out
        value = (node._expr, node._hint, node._optimized_summation, node.fx_node)
    else:
        _counts["functional.storage.stock"] += 1
        return out
    if memo is None:
        memo = _State.memo[env] = {}
    elif len(memo) >= MAX_ENTRIES_PER_SHAPE_ENV:
        memo.clear()
        _counts["functional.storage.reset"] += 1
    memo[key_t] = value
    _counts["functional.storage.learned"] += 1
    return out


def _fields(v: Any) -> tuple:
    if type(v) is torch.SymInt:
        n = v.node
        return (str(n._expr), n._hint, n.pytype, n.constant, n._optimized_summation)
    return (v,)


def _crosscheck(stock_out: torch.Tensor, size: Any, args: tuple) -> None:
    from ._crosscheck import CrosscheckError

    _counts["functional.storage.crosschecked"] += 1
    want = _fields(stock_out.untyped_storage().nbytes())
    got = _fields(size)
    if want != got:
        raise CrosscheckError(
            f"fastfake: FunctionalTensor storage size differs from stock's for sizes "
            f"{tuple(args[0])}, strides {tuple(args[1])}, offset {args[2]}, {args[4]}: "
            f"stock {want}, fastfake {got}"
        )


def install(crosscheck: bool = False) -> None:
    _State.crosscheck = crosscheck
    _setup()
    current = torch.Tensor.__dict__.get("_make_wrapper_subclass")
    if current is None:
        torch.Tensor._make_wrapper_subclass = staticmethod(make_wrapper_subclass)


def uninstall() -> None:
    current = torch.Tensor.__dict__.get("_make_wrapper_subclass")
    if isinstance(current, staticmethod) and current.__func__ is make_wrapper_subclass:
        del torch.Tensor._make_wrapper_subclass


def is_installed() -> bool:
    current = torch.Tensor.__dict__.get("_make_wrapper_subclass")
    return isinstance(current, staticmethod) and current.__func__ is make_wrapper_subclass
