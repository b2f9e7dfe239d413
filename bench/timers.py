"""Timers the benchmark wraps around stock's code: time inside the stock
``FakeTensorMode.__torch_dispatch__`` and inside SymNode arithmetic (outermost calls).
Used by the in-process harness and by the Inductor child processes."""
from __future__ import annotations

import threading
import time
from typing import Any

import torch  # noqa: F401  (fastfake's extension needs torch's libraries loaded first)

import fastfake
from torch._subclasses import fake_tensor as _ft


class DispatchTimer:
    """Time spent inside the stock ``FakeTensorMode.__torch_dispatch__``
    (outermost calls only; nested re-entries are not double counted).

    Use only while fastfake is uninstalled (the stock method is in place)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._local = threading.local()

    def __enter__(self) -> "DispatchTimer":
        if fastfake.is_installed():
            raise RuntimeError("DispatchTimer measures stock: call fastfake.uninstall() first")
        cls = _ft.FakeTensorMode
        self._orig = orig = cls.__dict__["__torch_dispatch__"]
        timer = self
        local = self._local

        def __torch_dispatch__(mode, func, types, args=(), kwargs=None):
            if getattr(local, "depth", 0):
                return orig(mode, func, types, args, kwargs)
            local.depth = 1
            t0 = time.perf_counter()
            try:
                return orig(mode, func, types, args, kwargs)
            finally:
                timer.seconds += time.perf_counter() - t0
                timer.calls += 1
                local.depth = 0

        __torch_dispatch__.__wrapped__ = orig  # type: ignore[attr-defined]
        cls.__torch_dispatch__ = __torch_dispatch__
        return self

    def __exit__(self, *exc: Any) -> None:
        _ft.FakeTensorMode.__torch_dispatch__ = self._orig


class SymNodeTimer:
    """Time spent in SymNode arithmetic (every ``SymNode`` magic method: ``add``,
    ``mul``, ``eq``, ``sym_max``, ...; outermost calls only), under whichever
    implementation is installed. The methods are put back exactly on exit."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._local = threading.local()
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> "SymNodeTimer":
        from torch.fx.experimental import sym_node

        cls = sym_node.SymNode
        timer = self
        local = self._local
        for name in sorted(set(sym_node.magic_methods) | set(getattr(sym_node, "unary_magic_methods", ()))):
            orig = cls.__dict__.get(name)
            if not callable(orig):
                continue
            self._saved[name] = orig

            def wrapped(*args, _orig=orig, **kwargs):
                if getattr(local, "depth", 0):
                    return _orig(*args, **kwargs)
                local.depth = 1
                t0 = time.perf_counter()
                try:
                    return _orig(*args, **kwargs)
                finally:
                    timer.seconds += time.perf_counter() - t0
                    timer.calls += 1
                    local.depth = 0

            setattr(cls, name, wrapped)
        return self

    def __exit__(self, *exc: Any) -> None:
        from torch.fx.experimental import sym_node

        for name, orig in self._saved.items():
            setattr(sym_node.SymNode, name, orig)
