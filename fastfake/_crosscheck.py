"""crosscheck=True: recompute every fast result with the stock path and compare."""
from __future__ import annotations

import optree
import torch

from . import _C


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


def check(mode, func, types, args, kwargs, fast) -> bool:
    """Called by the C++ fast path after each fast result when crosscheck is on."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    stock = FakeTensorMode.dispatch(mode, func, types, args, kwargs or {})
    if fast is stock:
        return True
    diff = compare(fast, stock)
    if diff:
        inputs = ", ".join(describe(a) for a in args)
        if kwargs:
            inputs += ", " + ", ".join(f"{k}={describe(v)}" for k, v in kwargs.items())
        raise CrosscheckError(
            f"fastfake crosscheck: {func} differs from stock in {diff}; inputs: ({inputs})"
        )
    return True
