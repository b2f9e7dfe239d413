"""The environment switches fastfake reads (``FASTFAKE_*``): one rule for what
counts as set."""
from __future__ import annotations

import os


def flag(name: str) -> bool:
    """``name`` is set to 1, true, yes or on (any case)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
