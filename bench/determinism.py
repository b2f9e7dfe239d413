"""Stock's own process-to-process differences, pinned the same way in both worlds.

A comparison of two worlds (a stock process and a fastfake process: the whole
traces of ``tests/wholetrace.py``, the graphs of ``bench --check-graphs``) assumes
that stock gives the same answer in two processes. Where stock iterates something in
an order that depends on object addresses, it does not, and a difference between the
worlds then says nothing about fastfake.

One such place is known. torch 2.9's ``torch.fx.passes.shape_prop.
_extract_tensor_metadata`` (which ``make_fx`` calls on every traced tensor, for
``meta["tensor_meta"]``) loops over a **set** of the three memory formats, and
``torch.memory_format`` objects hash by address. When ``channels_last`` comes before
``contiguous_format`` in a process, ``is_channels_last_contiguous_2d`` runs on a
tensor that ``contiguous_format`` would have claimed first, and its ``guard_or_false``
on a backed size adds a guard (for instance ``Ne(s49 - 1, 1)``, and with it four
axioms) that the other order never asks for. The same program then has one guard
in one stock process and two in the next. Later releases loop over a tuple in the
order ``contiguous_format, channels_last, channels_last_3d``.

:func:`pin` rebinds the function, in ``shape_prop`` and in every loaded module that
imported it by name, to the same code with the set written as that tuple. It is a
no-op (returns ``False``) where the source has no such set. It changes nothing that
fastfake reads or proves; it is called in each compared world, stock and fastfake
alike, before anything is traced.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap

_SET = re.compile(r"memory_formats = \{(?P<body>[^{}]*)\}")


def pinned_source(src: str) -> str | None:
    """``src`` with the memory-format set written as a tuple, or None if it has none."""
    new, n = _SET.subn(lambda m: f"memory_formats = ({m.group('body')})", src)
    return new if n == 1 else None


def pin() -> bool:
    """Make stock's ``_extract_tensor_metadata`` walk the memory formats in a fixed
    order (see the module docstring). True if it was rebound (or already was)."""
    from torch.fx.passes import shape_prop

    orig = shape_prop._extract_tensor_metadata
    if getattr(orig, "_pinned_order", False):
        return True
    try:
        src = textwrap.dedent(inspect.getsource(orig))
    except (OSError, TypeError):
        return False
    new_src = pinned_source(src)
    if new_src is None:
        return False
    ns: dict = {}
    exec(compile(new_src, inspect.getsourcefile(orig) or "<shape_prop>", "exec"), shape_prop.__dict__, ns)
    fn = ns[orig.__name__]
    fn.__defaults__, fn.__kwdefaults__ = orig.__defaults__, orig.__kwdefaults__
    fn.__doc__, fn.__qualname__, fn.__module__ = orig.__doc__, orig.__qualname__, orig.__module__
    fn._pinned_order = True  # type: ignore[attr-defined]
    fn._original = orig  # type: ignore[attr-defined]
    _rebind(orig, fn)
    return True


def unpin() -> None:
    """Put stock's function back wherever :func:`pin` rebound it."""
    from torch.fx.passes import shape_prop

    fn = shape_prop._extract_tensor_metadata
    orig = getattr(fn, "_original", None)
    if orig is not None:
        _rebind(fn, orig)


def _rebind(old, new) -> None:
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)  # not getattr(mod, name): lazy modules would load
        if isinstance(d, dict) and d.get("_extract_tensor_metadata") is old:
            d["_extract_tensor_metadata"] = new
