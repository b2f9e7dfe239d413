"""The functional mode's per-op dispatch in C (``functional_dispatch``).

AOTAutograd traces every op of a compile through ``FunctionalTensorMode``
(torch/_subclasses/functional_tensor.py). Stock's ``__torch_dispatch__`` is Python
from end to end: whether the op decomposes (a pytree flatten and a dispatcher query
per call; for a view or mutable op, the mode entered and left around a
``decompose`` that answers NotImplemented), whether it auto-functionalizes or has
effects, a pytree map unwrapping the arguments, a tracker lookup per argument for
view-replay annotations, the dispatch-key TLS swapped, the op called at the
Functionalize key, a pytree map wrapping the outputs and the aliasing fix-up.

``install()`` puts a method written in C (``csrc/tracing/functional_dispatch.cpp``)
at ``FunctionalTensorMode.__torch_dispatch__``. It serves a call whose every answer
is the plain one -- the exact mode class, not exporting, not pre-dispatch; Tensor,
FakeTensor and FunctionalTensor types only; an aten op that is no metadata query,
has no ``inplace_view`` tag, is not ``lift_fresh``, does not auto-functionalize,
does not decompose and has no effect registered; arguments of plain leaves in
tuples and lists; every FunctionalTensor argument up to date -- doing what stock's
method does for it, in stock's order, with stock's own ``FunctionalTensor`` class
for the outputs and stock's ``return_and_correct_aliasing`` for an op with alias
annotations. Every other call is stock's method, counted by reason. What an op's
answers depend on that cannot change (its schema, tags, namespace) is read once per
op by :func:`facts` with stock's own predicates; what can (kernels registered in
the dispatcher or ``py_kernels``, registered effects, the TLS, the modes set) is
read at every call.

Offered where the stock code it stands for is source-identical to a release it was
proven on (:data:`fastfake.common.compat.FUNCTIONAL_DISPATCH_SOURCES`), and after
the install-time self-test (feature ``functional_dispatch``).
``FASTFAKE_DISABLE=functional_dispatch`` turns it off; with ``crosscheck=True``
stock's own predicates are asked about every served call first.

Counters (``stats()``): ``functional_dispatch.served``, ``functional_dispatch.stock.<reason>``
(``mode``, ``types``, ``op``, ``decompose``, ``effects``, ``arguments``, ``sync``,
``state``), ``functional_dispatch.stock.outputs`` (served calls whose outputs stock's
pytree map wrapped).
"""
from __future__ import annotations

from typing import Any

import torch

from fastfake import _C
from fastfake.common import compat as _compat
from fastfake.common.originals import original, put, stock_or_ours

_DESCRIPTOR: list = []


def _ft():
    from torch._subclasses import functional_tensor

    return functional_tensor


def _stock_method() -> Any:
    return original(_ft().FunctionalTensorMode, "__torch_dispatch__")


def facts(func: Any) -> tuple | None:
    """What the C method needs to know of an op that cannot change: None where every
    call of it is stock's; else (stock's decompose is asked, the schema has alias
    annotations, stock's aliasing fix-up can do something, the registry name, the
    schema name, the overload name). Read with stock's own predicates (their first
    calls leave what stock's first call of the op leaves: the simple registry's entry,
    the alias-info cache)."""
    ft = _ft()
    from torch._higher_order_ops.auto_functionalize import can_auto_functionalize
    from torch._higher_order_ops.effects import has_aliasing, has_effects
    from torch.utils._python_dispatch import get_alias_info

    if type(func) is not torch._ops.OpOverload or func.namespace != "aten":
        return None
    if func in ft.FunctionalTensor.metadata_fns or torch.Tag.inplace_view in func.tags:
        return None
    if func is torch.ops.aten.lift_fresh.default or can_auto_functionalize(func):
        return None
    schema = func._schema
    if _compat.functional_dispatch_variant()["layout_2_9"]:
        # 2.9: outside export every op with a kernel is offered to decompose (the C
        # method proves it answers NotImplemented); its aliasing fix-up reads the
        # schema its own way, so it is called for every op with FunctionalTensor outputs
        return (True, bool(has_aliasing(func)), True, func._name, schema.name, schema.overload_name)
    has_effects(func)
    fast = ft._can_decompose_fast(func, False, False)
    if fast is False:
        return None
    info = get_alias_info(func)
    fix = bool(
        info.is_inplace_view_op
        or info.outs_write_aliases is not None
        or any(a.alias_set for a in info.args)
        or any(o.alias_set for o in info.outs)
    )
    return (fast is True, bool(has_aliasing(func)), fix, func._name, schema.name, schema.overload_name)


def preserve_dispatch_keys(arg: Any, outs_wrapped: Any) -> None:
    """Stock's step (2.14+) after ``aten.alias`` / ``aten.detach`` of one
    FunctionalTensor ``arg``: the outputs' FakeTensors get the input's
    ``dispatch_keys`` where it has some (a FakeTensor made from a real tensor)."""
    import torch.utils._pytree as pytree

    FunctionalTensor = _ft().FunctionalTensor
    input_unwrapped = torch._from_functional_tensor(arg.elem)
    if isinstance(input_unwrapped, torch._subclasses.FakeTensor) and input_unwrapped.dispatch_keys is not None:
        input_dispatch_keys = input_unwrapped.dispatch_keys

        def preserve(out: object) -> None:
            if isinstance(out, FunctionalTensor):
                unwrapped = torch._from_functional_tensor(out.elem)
                if isinstance(unwrapped, torch._subclasses.FakeTensor):
                    unwrapped.dispatch_keys = input_dispatch_keys

        pytree.tree_map_(preserve, outs_wrapped)


def wrap_outputs(mode: Any, outs: Any) -> Any:
    """Stock's wrapping of outputs of a structure the C method does not walk."""
    import torch.utils._pytree as pytree

    FunctionalTensor = _ft().FunctionalTensor

    def wrap(x: object) -> object:
        if isinstance(x, FunctionalTensor):
            raise AssertionError("x must not be a FunctionalTensor in wrap()")
        if isinstance(x, torch.Tensor) and torch._is_functional_tensor(x):
            return FunctionalTensor(x, mode)
        return x

    return pytree.tree_map_only(torch.Tensor, wrap, outs)


def check(mode: Any, func: Any, args: tuple, kwargs: dict | None) -> bool:
    """crosscheck: stock's own predicates say the call takes the plain path."""
    from torch._higher_order_ops.auto_functionalize import can_auto_functionalize
    from torch._higher_order_ops.effects import has_effects

    from fastfake.parity.crosscheck import CrosscheckError

    ft = _ft()
    kwargs = {} if kwargs is None else kwargs
    why = []
    layout_2_9 = _compat.functional_dispatch_variant()["layout_2_9"]
    if func in ft.FunctionalTensor.metadata_fns:
        why.append("a metadata query")
    # (2.9's _can_decompose is a closure of the method, True outside export)
    asked = True if layout_2_9 else mode._can_decompose(func, args, kwargs)
    if asked and torch._C._dispatch_has_kernel(func.name()):
        if func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
            why.append("it decomposes")
    if can_auto_functionalize(func):
        why.append("it auto-functionalizes")
    if has_effects(func, args, kwargs) if layout_2_9 else has_effects(func):
        why.append("it has effects")
    if why:
        raise CrosscheckError(f"fastfake: FunctionalTensorMode served {func} on the plain path, but: {', '.join(why)}")
    return True


def available() -> bool:
    try:
        ft = _ft()
    except ImportError:
        return False
    cls = getattr(ft, "FunctionalTensorMode", None)
    if not isinstance(cls, type):
        return False
    if not stock_or_ours(cls, "__torch_dispatch__", _DESCRIPTOR[0] if _DESCRIPTOR else None):
        return False
    if not _compat.functional_dispatch_proven():
        return False
    if _compat.functional_dispatch_variant()["layout_2_9"]:
        import weakref

        from torch._higher_order_ops import effects

        return isinstance(getattr(effects, "SIDE_EFFECTS", None), weakref.WeakKeyDictionary)
    try:
        from torch._C._dynamo.guards import set_is_in_mode_without_ignore_compile_internals  # noqa: F401
        from torch._library import simple_registry
    except ImportError:
        return False
    if not isinstance(getattr(getattr(simple_registry, "singleton", None), "_data", None), dict):
        return False
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback  # noqa: F401
        from torch._dynamo import eval_frame
    except ImportError:
        return False
    return "stance" in vars(getattr(eval_frame, "_stance", object()))


def _setup() -> Any:
    if not _DESCRIPTOR:
        ft = _ft()
        from torch.utils import _python_dispatch

        variant = _compat.functional_dispatch_variant()
        if variant["layout_2_9"]:
            # (effects in SIDE_EFFECTS; enter / exit set no flag in C; no Dynamo wrapper)
            registry, set_flag = None, None
        else:
            from torch._C._dynamo.guards import set_is_in_mode_without_ignore_compile_internals as set_flag
            from torch._library import simple_registry

            registry = simple_registry.singleton
        keys = ft.FunctionalTensor._extra_dispatch_keys
        types = ((torch.Tensor, torch._subclasses.fake_tensor.FakeTensor, ft.FunctionalTensor),
                 (torch.SymInt, torch.SymFloat, torch.SymBool), torch._ops.OpOverload)
        text = _C.setup_functional_dispatch(
            ft.FunctionalTensorMode, ft.FunctionalTensor, _stock_method(), facts, wrap_outputs,
            _python_dispatch.return_and_correct_aliasing, registry, vars(_python_dispatch),
            set_flag, torch._C.DispatchKey.Functionalize,
            torch._C.DispatchKey.CompositeImplicitAutograd, types, keys.raw_repr())
        if not variant["layout_2_9"]:
            from torch._C._dynamo.eval_frame import get_eval_frame_callback
            from torch._dynamo import eval_frame

            _C.setup_functional_dispatch_dynamo(get_eval_frame_callback, vars(eval_frame))
        bind_variant(preserve_dispatch_keys if variant["preserve_dispatch_keys"] else None)
        if text != str(keys):
            raise RuntimeError(f"fastfake: FunctionalTensor._extra_dispatch_keys read as {text}, stock's is {keys}")
        _DESCRIPTOR.append(_C.functional_dispatch_function())
    return _DESCRIPTOR[0]


def bind_variant(preserve_keys: Any) -> None:
    """Bind what the release's code adds to the plain path
    (:func:`fastfake.common.compat.functional_dispatch_variant`), with ``preserve_keys``
    as the step after alias / detach (None: none)."""
    variant = _compat.functional_dispatch_variant()
    side_effects = None
    if variant["layout_2_9"]:
        from torch._higher_order_ops import effects

        side_effects = effects.SIDE_EFFECTS
    aten = torch.ops.aten
    _C.setup_functional_dispatch_variant(preserve_keys, aten.alias.default, aten.detach.default,
                                         variant["effect_first"], side_effects, variant["layout_2_9"])


def is_installed() -> bool:
    return bool(_DESCRIPTOR) and vars(_ft().FunctionalTensorMode).get("__torch_dispatch__") is _DESCRIPTOR[0]


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the C method put at
    ``FunctionalTensorMode.__torch_dispatch__`` (on) or stock's back (off)."""
    if not on and not _DESCRIPTOR:
        return
    if on and not available():
        return
    cls = _ft().FunctionalTensorMode
    descriptor = _setup()
    if on:
        _C.set_functional_dispatch_check(check if crosscheck else None)
        _C.functional_dispatch_enable(True)
        put(cls, "__torch_dispatch__", descriptor, True)
    else:
        _C.functional_dispatch_enable(False)
        _C.set_functional_dispatch_check(None)
        _C.functional_dispatch_clear()
        put(cls, "__torch_dispatch__", descriptor, False)
