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

Under proxy tracing (AOTAutograd's actual trace, about half of the wrappers of a
compile) the tracer records every SymNode operation of stock's computation (an FX
node, built lazily or at once, whose name is numbered; a result that is a bare
symbol also takes over that symbol's entry in the tracer's expression table), so
skipping the operations would change the graph. There the first wrapper of a key
records stock's operations and later ones replay them into the tracer (see the
section "Under proxy tracing" below). Torch 2.15 itself passes the wrapper's
storage size, so its graphs no longer carry that arithmetic at all.
"""
from __future__ import annotations

import operator
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
    "functional.storage.recorded": 0,
    "functional.storage.replayed": 0,
    "functional.storage.reset": 0,
    "functional.storage.crosschecked": 0,
}

class _State:
    original: Any = None  # torch._C.TensorBase._make_wrapper_subclass
    functional_tensor: type | None = None
    sym_node: type | None = None
    memo: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
    logging_internal: Any = None
    get_proxy_mode: Any = None
    crosscheck = False
    sym_register: Any = None  # stock's _sym_register (None: none on this release)
    proxy_tensor_dict: dict = {}


def counters() -> dict[str, int]:
    return dict(_counts)


def reset_counters() -> None:
    for k in _counts:
        _counts[k] = 0


def saved_counters() -> dict[str, int]:
    return dict(_counts)


def restore_counters(values: dict[str, int]) -> None:
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
    from fastfake.common import compat as _compat

    _State.sym_register = _compat.proxy_sym_register()
    from torch.fx.experimental import proxy_tensor

    # (a replay registers through whatever proxy_tensor._sym_register is now, as
    # stock's __sym_dispatch__ does: fastfake's C one where sym_register is on)
    _State.proxy_tensor_dict = vars(proxy_tensor)


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


def _node_fields(out: Any, env: Any) -> tuple | None:
    """What rebuilds ``out`` (a SymInt / SymBool / SymFloat stock computed) as a
    fresh object of the same type: its type and SymNode fields; None if its node
    is one a rebuild would not reproduce (another ShapeEnv, an FX node of
    translation validation, a hint that is not a plain value)."""
    node = out.node
    if (
        node.shape_env is not env
        or isinstance(node.fx_node, torch.fx.Node)
        or type(node._hint) is not node.pytype
    ):
        return None
    return (type(out), node._expr, node.pytype, node._hint, node.constant, node.fx_node,
            node._optimized_summation)


def _build(fields: tuple, env: Any) -> Any:
    tout, expr, pytype, hint, constant, fx_node, summation = fields
    return tout(_State.sym_node(expr, env, pytype, hint, constant=constant, fx_node=fx_node,
                                optimized_summation=summation))


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
    key_t = tuple(key)
    proxy_mode = _State.get_proxy_mode()
    if proxy_mode is not None:
        return _traced(cls, args, env, key_t, proxy_mode)
    memo = _State.memo.get(env)
    if memo is not None:
        hit = memo.get(key_t)
        if hit is not None:
            _counts["functional.storage.hit"] += 1
            size = hit if type(hit) is int else _build(hit, env)
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
        value: Any = nbytes
    elif type(nbytes) is torch.SymInt and nbytes.node.constant is None:
        value = _node_fields(nbytes, env)
    else:
        value = None
    if value is None:
        _counts["functional.storage.stock"] += 1
        return out
    _remember(env, memo, key_t, value)
    _counts["functional.storage.learned"] += 1
    return out


# ---------------------------------------------------------------------------
# Under proxy tracing: stock's SymNode operations, replayed from a tape.
#
# There every SymNode operation of computeStorageNbytes goes through the proxy
# mode's ``__sym_dispatch__``: the multiplication-by-one peephole returns an
# argument, anything else computes its result with tracing off and registers it
# with the tracer (``_sym_register``: a lazily built FX node, and for a result
# that is a bare symbol, that symbol's entry in the tracer's expression table).
# The first wrapper of a key records, by intercepting ``__sym_dispatch__`` of
# the active mode while stock computes, each operation: the function, its
# arguments (literals, the call's own size / stride / offset SymNodes by
# position, or earlier results) and the result's SymNode fields or "argument k".
# Later wrappers of that key replay it: fresh SymNodes with the recorded fields,
# registered with the current tracer through the same ``_sym_register`` in the
# same order, with the same argument objects' nodes -- so the tracer ends up
# holding what stock's computation leaves there, without the sympy arithmetic.
# The key also says which positions share one SymNode object (a replay must use
# the same node wherever stock's computation did).
# ---------------------------------------------------------------------------

# The operations computeStorageNbytes performs. Their results depend only on the
# operands' expressions; a tape with anything else (say ``mod``, which reads the
# ShapeEnv's value ranges) is not kept.
_TAPE_FUNCS = frozenset((operator.add, operator.sub, operator.mul, operator.eq))

_ARG = 0  # result is argument k of the operation (multiplication by one)
_NEW = 1  # result is a new SymNode / SymBool with recorded fields
_LIT = 2  # result is a Python constant


def _positions(args: tuple) -> list:
    return [*args[0], *args[1], args[2]]


def _sharing(values: list) -> tuple:
    first: dict[int, int] = {}
    out = []
    for i, v in enumerate(values):
        if type(v) is torch.SymInt:
            out.append(first.setdefault(id(v.node), i))
        else:
            out.append(-1)
    return tuple(out)


class _Recorder:
    """Stands in for the proxy mode's ``__sym_dispatch__`` while stock computes."""

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.calls: list = []

    def __call__(self, func, types, args, kwargs):
        out = type(self.mode).__sym_dispatch__(self.mode, func, types, args, kwargs)
        self.calls.append((func, args, kwargs, out))
        return out


def _ref(v: Any, refs: dict) -> Any:
    if type(v) in (int, bool, float):
        return (_LIT, v)
    if type(v) in (torch.SymInt, torch.SymBool, torch.SymFloat):
        return refs.get(id(v.node))
    return None


def _tape(calls: list, values: list, env: Any, nbytes: Any) -> tuple | None:
    """The recorded operations as a replayable tape, or None if any is one the
    replay does not reproduce."""
    refs: dict[int, tuple] = {}
    for i, v in enumerate(values):
        if type(v) is torch.SymInt:
            refs.setdefault(id(v.node), ("in", i))
    steps = []
    for j, (func, args, kwargs, out) in enumerate(calls):
        if kwargs or not isinstance(args, tuple) or func not in _TAPE_FUNCS:
            return None
        arefs = tuple(_ref(a, refs) for a in args)
        if any(r is None for r in arefs):
            return None
        k = next((k for k, a in enumerate(args) if out is a), None)
        if k is not None:
            steps.append((func, arefs, _ARG, k))
            if type(out) in (torch.SymInt, torch.SymBool, torch.SymFloat):
                refs.setdefault(id(out.node), arefs[k])
            continue
        tout = type(out)
        if tout in (int, bool, float):
            steps.append((func, arefs, _LIT, out))
            continue
        if tout not in (torch.SymInt, torch.SymBool, torch.SymFloat) or id(out.node) in refs:
            return None
        fields = _node_fields(out, env)
        if fields is None:
            return None
        steps.append((func, arefs, _NEW, fields))
        refs[id(out.node)] = ("step", j)
    if type(nbytes) is int:
        result: Any = (_LIT, nbytes)
    else:
        result = refs.get(id(nbytes.node))
        if result is None or result[0] != "step" or steps[result[1]][2] != _NEW:
            return None
    return tuple(steps), result


def _replay(tape: tuple, values: list, env: Any, tracer: Any) -> Any:
    steps, result = tape
    register = _State.proxy_tensor_dict["_sym_register"]
    outs: list = []

    def get(r):
        kind, v = r
        if kind == "in":
            return values[v]
        if kind == "step":
            return outs[v]
        return v  # _LIT

    for func, arefs, how, what in steps:
        args = tuple(get(r) for r in arefs)
        if how == _ARG:
            outs.append(args[what])
            continue
        if how == _LIT:
            outs.append(what)
            continue
        out = _build(what, env)
        register(tracer, func, args, out)
        outs.append(out)
    return get(result) if result[0] != "step" else outs[result[1]]


def _traced(cls: type, args: tuple, env: Any, key_t: tuple, proxy_mode: Any) -> Any:
    original = _State.original
    tracer = getattr(proxy_mode, "tracer", None)
    if (
        _State.sym_register is None
        or _State.crosscheck  # a replay and stock's own computation would both register
        or tracer is None
        or "__sym_dispatch__" in vars(proxy_mode)
    ):
        _counts["functional.storage.proxy_tracing"] += 1
        return original(cls, *args)
    values = _positions(args)
    tkey = ("traced", key_t, _sharing(values))
    memo = _State.memo.get(env)
    if memo is not None:
        tape = memo.get(tkey)
        if tape is not None:
            _counts["functional.storage.replayed"] += 1
            size = _replay(tape, values, env, tracer)
            return original(cls, *args, size)
    recorder = _Recorder(proxy_mode)
    before = _env_state(env)
    proxy_mode.__sym_dispatch__ = recorder
    try:
        out = original(cls, *args)
    finally:
        del proxy_mode.__sym_dispatch__
    if _env_state(env) != before:
        _counts["functional.storage.changed_shape_env"] += 1
        return out
    tape = _tape(recorder.calls, values, env, out.untyped_storage().nbytes())
    if tape is None:
        _counts["functional.storage.stock"] += 1
        return out
    _remember(env, memo, tkey, tape)
    _counts["functional.storage.recorded"] += 1
    return out


def _remember(env: Any, memo: dict | None, key: tuple, value: Any) -> None:
    if memo is None:
        memo = _State.memo[env] = {}
    elif len(memo) >= MAX_ENTRIES_PER_SHAPE_ENV:
        memo.clear()
        _counts["functional.storage.reset"] += 1
    memo[key] = value


def _size_fields(v: Any) -> tuple:
    if type(v) is torch.SymInt:
        n = v.node
        return (str(n._expr), n._hint, n.pytype, n.constant, n._optimized_summation)
    return (v,)


def _crosscheck(stock_out: torch.Tensor, size: Any, args: tuple) -> None:
    from fastfake.parity.crosscheck import CrosscheckError

    _counts["functional.storage.crosschecked"] += 1
    want = _size_fields(stock_out.untyped_storage().nbytes())
    got = _size_fields(size)
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


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py)."""
    if on:
        install(crosscheck=crosscheck)
    else:
        uninstall()
