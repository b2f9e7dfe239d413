"""The FakeTensor snapshots of make_fx and FakeTensorProp, built in C++.

Every value ``make_fx`` traces (so every op AOTAutograd and ``torch.export``
trace) and every node ``FakeTensorProp`` propagates is stored in the graph as a
snapshot: ``torch.fx.experimental.proxy_tensor.snapshot_fake(val)`` ->
``torch._subclasses.fake_impls.fast_detach(mode, val)``, a detached alias
FakeTensor built in Python (~45 us; about a third of a repeated FakeTensorProp).
``install()`` points the name ``snapshot_fake`` calls, ``proxy_tensor.fast_detach``,
at ``fastfake._C.fast_detach`` (``csrc/detach.cpp``), which makes the same two
dispatcher calls under the same thread-local state and finishes the object as
stock's ``FakeTensor.__new__`` does, and hands every case it does not cover to
stock's function (counted as ``detach.stock.<why>``; served ones as
``detach.fast``). ``uninstall()`` puts stock's function back.

With ``crosscheck`` every snapshot is compared with stock's (all fields, and
that both share the input's version counter).
"""
from __future__ import annotations

from . import _C

_state: dict[str, object] = {}

#: What ``install()`` puts in place (the C++ function; tests inject faults here).
fast = _C.fast_detach


def _module():
    from torch.fx.experimental import proxy_tensor

    return proxy_tensor


def stock_fast_detach():
    """Stock's ``fast_detach`` (the object ``proxy_tensor`` held before any install)."""
    if "stock" not in _state:
        _state["stock"] = _module().__dict__["fast_detach"]
    return _state["stock"]


def checked(fake_mode, x, include_real=False):
    """``crosscheck``: the C++ snapshot, verified against stock's."""
    from ._crosscheck import CrosscheckError, compare, describe

    got = fast(fake_mode, x, include_real)
    stock = stock_fast_detach()(fake_mode, x, include_real)
    diff = compare(got, stock)
    if not diff and not x.is_inference() and got._version != stock._version:
        diff = f"version: {got._version} vs {stock._version}"
    if diff:
        raise CrosscheckError(f"fastfake crosscheck: fast_detach differs from stock in {diff}; input: {describe(x)}")
    return got


def install(*, crosscheck: bool = False) -> None:
    stock = stock_fast_detach()
    _C.setup_detach(stock)
    _module().fast_detach = checked if crosscheck else fast


def uninstall() -> None:
    if "stock" in _state:
        mod = _module()
        if mod.__dict__.get("fast_detach") is not _state["stock"]:
            mod.fast_detach = _state["stock"]


def installed() -> bool:
    return "stock" in _state and _module().__dict__.get("fast_detach") is not _state["stock"]
