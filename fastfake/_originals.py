"""The original objects of the attributes fastfake patches.

Each is recorded the first time it is patched (``uninstall()`` puts the identical
object back); modules that need stock's own function while fastfake's is in place
read it here. Imports nothing of fastfake.
"""
from __future__ import annotations

#: (class, attribute name) -> the object that was there before fastfake patched it
ORIGINALS: dict[tuple[type, str], object] = {}


def original(cls: type, name: str) -> object:
    """The attribute as stock defines it, recorded now if it was not yet."""
    key = (cls, name)
    if key not in ORIGINALS:
        ORIGINALS[key] = cls.__dict__[name]
    return ORIGINALS[key]
