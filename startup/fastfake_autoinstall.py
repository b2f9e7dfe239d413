"""``FASTFAKE=1``: fastfake installed in a program whose command line cannot change.

``fastfake.pth`` (installed into site-packages beside this module) runs at
interpreter start and, only where ``FASTFAKE`` is 1 / true / yes / on, calls
:func:`arm`. Nothing is imported then: :func:`arm` puts a finder on ``sys.meta_path``
that waits for the program's own ``import torch`` and, once torch has finished
importing, calls ``fastfake.install()``. A program that never imports torch pays
nothing; one that does pays what ``import fastfake; fastfake.install()`` costs.

If the install fails (a torch fastfake was not built for, say), the program runs on
stock PyTorch and the reason is logged on the ``fastfake`` logger; it never stops the
program. This module imports nothing but the standard library until torch is
imported.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys

_armed = False


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader that finds ``torch`` so that
    ``fastfake.install()`` runs right after torch's own module code."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _install()

        loader.exec_module = exec_module
        return spec


def _install() -> None:
    try:
        import fastfake

        fastfake.install()
    except Exception as e:  # the program runs on stock PyTorch
        logging.getLogger("fastfake").warning("FASTFAKE=1: fastfake.install() failed, running stock: %s", e)


def arm() -> None:
    """Install fastfake when torch is imported (now, if it already is)."""
    global _armed
    if _armed:
        return
    _armed = True
    if "torch" in sys.modules:
        _install()
    else:
        sys.meta_path.insert(0, _AfterTorch())
