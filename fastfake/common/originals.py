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


def patch(owner: object, name: str, replacement: object | None) -> None:
    """Put ``replacement`` at ``owner.<name>`` (a class or a module), or, with None,
    the original back; the original is recorded first."""
    first = original(owner, name)  # type: ignore[arg-type]
    current = owner.__dict__.get(name)
    if replacement is None:
        if current is not first:
            setattr(owner, name, first)
    elif current is first or type(current) is not type(replacement):
        setattr(owner, name, replacement)


def put(owner: object, name: str, ours: object, on: bool) -> None:
    """fastfake's object at ``owner.<name>`` (on: recorded the original first), or,
    off, the original back where fastfake's object is the one there (another patch
    made since is left alone)."""
    first = original(owner, name)  # type: ignore[arg-type]
    current = owner.__dict__.get(name)
    if on:
        if current is not ours:
            setattr(owner, name, ours)
    elif current is ours:
        setattr(owner, name, first)


def stock_or_ours(owner: object, name: str, ours: object | None) -> bool:
    """``owner.<name>`` is there and is the original (recorded now if it was not
    yet) or fastfake's own object ``ours`` (None: not made yet): what a hook may
    replace or take back; anything else is another patch, left alone."""
    current = owner.__dict__.get(name)
    if current is None:
        return False
    return current is original(owner, name) or (ours is not None and current is ours)  # type: ignore[arg-type]
