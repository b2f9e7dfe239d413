"""The FakeTensor snapshots of make_fx and FakeTensorProp, built in C++.

Every value ``make_fx`` traces (so every op AOTAutograd and ``torch.export``
trace) and every node ``FakeTensorProp`` propagates is stored in the graph as a
snapshot: ``torch.fx.experimental.proxy_tensor.snapshot_fake(val)`` ->
``torch._subclasses.fake_impls.fast_detach(mode, val)``, a detached alias
FakeTensor built in Python (~45 us; about a third of a repeated FakeTensorProp).
``install()`` points the name ``snapshot_fake`` calls, ``proxy_tensor.fast_detach``,
at ``fastfake._C.fast_detach`` (:func:`replacement`) (``csrc/convert/detach.cpp``), which makes the same two
dispatcher calls under the same thread-local state and finishes the object as
stock's ``FakeTensor.__new__`` does, and hands every case it does not cover to
stock's function (counted as ``detach.stock.<why>``; served ones as
``detach.fast``). ``uninstall()`` puts stock's function back, as it restores
every patched attribute.

With ``crosscheck`` every snapshot is compared with stock's (all fields, and
that both share the input's version counter).
"""
from __future__ import annotations

from fastfake import _C

#: What ``install()`` puts in place (the C++ function; tests inject faults here).
fast = _C.fast_detach


def stock_fast_detach():
    """Stock's ``fast_detach`` (``fake_impls`` keeps it; only ``proxy_tensor``'s name
    for it is patched)."""
    from torch._subclasses import fake_impls

    return fake_impls.fast_detach


def checked(fake_mode, x, include_real=False):
    """``crosscheck``: the C++ snapshot, verified against stock's."""
    from fastfake.parity.crosscheck import CrosscheckError, compare, describe

    got = fast(fake_mode, x, include_real)
    stock = stock_fast_detach()(fake_mode, x, include_real)
    diff = compare(got, stock)
    if not diff and not x.is_inference() and got._version != stock._version:
        diff = f"version: {got._version} vs {stock._version}"
    if diff:
        raise CrosscheckError(f"fastfake crosscheck: fast_detach differs from stock in {diff}; input: {describe(x)}")
    return got


def replacement(*, crosscheck: bool = False):
    """What ``proxy_tensor.fast_detach`` becomes (the install layer patches and
    restores it like every other attribute it replaces)."""
    _C.setup_detach(stock_fast_detach())
    return checked if crosscheck else fast


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): the name ``snapshot_fake``
    calls (``proxy_tensor.fast_detach``), patched or restored."""
    from torch.fx.experimental import proxy_tensor

    from fastfake.common.originals import patch

    patch(proxy_tensor, "fast_detach", replacement(crosscheck=crosscheck) if on else None)
