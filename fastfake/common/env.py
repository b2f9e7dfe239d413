"""The environment switches fastfake reads (``FASTFAKE_*``): one rule for what
counts as set."""
from __future__ import annotations

import os


def flag(name: str) -> bool:
    """``name`` is set to 1, true, yes or on (any case)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def cache_root() -> str | None:
    """fastfake's cache directory: ``FASTFAKE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/fastfake``, else ``~/.cache/fastfake`` (beside torch's
    ``~/.cache/torch``); None when there is none to use."""
    root = os.environ.get("FASTFAKE_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME")
        if not base:
            home = os.path.expanduser("~")
            if not os.path.isabs(home):
                return None
            base = os.path.join(home, ".cache")
        root = os.path.join(base, "fastfake")
    return os.path.abspath(root)
