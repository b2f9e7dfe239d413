"""Repeats of ``.item()`` on a FakeTensor that holds its item memo.

Stock never caches ``aten._local_scalar_dense`` (a data-dependent result:
"data dependent output"), so every ``.item()`` on a fake tensor pays stock's whole
dispatch (its cache key, the negative entry's lookup, one counted bypass, then
``_dispatch_impl`` down to the op's fake implementation, ~0.2 ms). That
implementation's first line answers a repeat from the tensor's ``item_memo``: the
unbacked SymInt / SymFloat / SymBool the first call created, which FakeTensor's
memo descriptor drops after an in-place update of the tensor or in a new epoch of
its mode. Dynamo and AOTAutograd ask ``.item()`` of the same tensorified Python
scalars again and again (140 repeats in a ``dynamic=True`` BERT compile).

The extension (``csrc/cache/item_memo.cpp``) serves such a repeat from a negative static
entry of the result cache that was learned from stock's bypass with that reason
for that op, once stock itself was seen to answer a call under the same key with
the memo object (no hit, no miss, exactly one bypass, nothing else dispatched).
It then returns the memo read through the descriptor, as stock reads it, and
counts stock's bypass, when the argument is the mode's own FakeTensor without a
constant, there are no keyword arguments, and :func:`eligible` finds nothing
stock's dispatch consults before that fake implementation.

Counters: ``cache.item_memo.{served,learned,declined.no_memo,declined.mode_state,
declined.arguments}``.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

import torch

from fastfake import _C
from fastfake.common import compat as _compat

#: The op, and the reason stock gives for never caching it.
OP = torch.ops.aten._local_scalar_dense.default
REASON = "data dependent output"


def eligible(mode: Any) -> bool:
    """None of what stock's ``_dispatch_impl`` consults before the op's fake
    implementation applies: real-tensor propagation on the mode, a custom-op
    profile in Dynamo's config, a Python decomposition or a registered fake kernel
    for the op."""
    if mode.propagate_real_tensors:
        return False
    config = sys.modules.get("torch._dynamo.config")
    if config is None or getattr(config, "_custom_ops_profile", None) is not None:
        return False
    decompositions, registry = _tables()
    if OP in decompositions:
        return False
    return not registry.find(OP.name()).fake_impl.kernel


@functools.cache
def _tables() -> tuple:
    """Stock's decomposition table and custom-op registry (module-level objects,
    mutated in place; imported once instead of on every served call)."""
    from torch._decomp import decomposition_table
    from torch._library.simple_registry import singleton

    return decomposition_table, singleton


@functools.cache
def available() -> bool:
    """Stock's fake implementation of the op answers from ``arg.item_memo`` first,
    and its cache refuses the op with :data:`REASON`."""
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    try:
        impl = _compat.code_span_text(fake_impls.local_scalar_dense)
        validate = _compat.code_span_text(FakeTensorMode._validate_cache_key)
    except (OSError, TypeError, AttributeError):
        return False
    lines = [ln.strip() for ln in impl.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    first = next((i for i, ln in enumerate(lines) if ln.startswith(("if ", "return "))), None)
    return (
        first is not None
        and lines[first : first + 2] == ["if (r := arg.item_memo) is not None:", "return r"]
        and isinstance(inspect.getattr_static(FakeTensor, "item_memo", None), ft_descriptor())
        and f'"{REASON}"' in validate
    )


def ft_descriptor() -> type:
    from torch._subclasses.fake_tensor import SymNumberMemoDescriptor

    return SymNumberMemoDescriptor


def setup() -> None:
    _C.setup_item_memo(OP, REASON, eligible)


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): ``.item()`` repeats."""
    _C.set_item_memo(on)
