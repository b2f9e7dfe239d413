"""``FASTFAKE_DISABLE``: the off switches of the accelerations, in one scheme.

* ``FASTFAKE_DISABLE=1`` (or ``all``, ``true``, ``yes``, ``on``): ``install()`` does
  nothing (logged).
* ``FASTFAKE_DISABLE=portable,rerun``: those accelerations stay off; a name is an
  acceleration's name or one of its aliases (``python -m fastfake accelerations``
  lists them, from fastfake/core/accelerations.py). An unknown name is reported
  once, with the names there are.
* ``FASTFAKE_ENABLE=store_symbolic``: an acceleration that is off unless named here
  (``opt_in`` in the table).
* ``FASTFAKE_NO_<X>=1``, the switches before this scheme, are honoured for this
  release (each acceleration's ``legacy`` field) and reported once as deprecated.

Read at every ``install()``, so a changed environment takes effect on the next one.
"""
from __future__ import annotations

import logging
import os
import re

from fastfake.common.env import flag
from fastfake.core.accelerations import ACCELERATIONS, NAMES, Acceleration

log = logging.getLogger("fastfake")

ALL = frozenset({"1", "all", "true", "yes", "on"})
#: values that switch nothing off
NONE = frozenset({"0", "false", "no", "off", "none"})
_reported: set[str] = set()


def raw() -> str:
    return os.environ.get("FASTFAKE_DISABLE", "")


def names() -> frozenset[str]:
    """The names ``FASTFAKE_DISABLE`` holds (comma- or space-separated, any case)."""
    return frozenset(n for n in re.split(r"[,\s]+", raw().strip().lower()) if n and n not in NONE)


def disabled_all() -> bool:
    return bool(names() & ALL)


def disabled(acc: Acceleration) -> bool:
    """``acc`` is switched off, by its name, an alias, or its legacy variable."""
    return bool(names() & set(acc.names)) or bool(acc.legacy and flag(acc.legacy))


def enabled(acc: Acceleration) -> bool:
    """An opt-in acceleration (``opt_in``) is named by ``FASTFAKE_ENABLE`` (names as
    for ``FASTFAKE_DISABLE``); every other one is enabled."""
    if not acc.opt_in:
        return True
    wanted = {n for n in re.split(r"[,\s]+", os.environ.get("FASTFAKE_ENABLE", "").strip().lower()) if n}
    return bool(wanted & set(acc.names))


def unknown() -> list[str]:
    return sorted(names() - set(NAMES) - ALL)


def legacy_set() -> list[Acceleration]:
    return [a for a in ACCELERATIONS if a.legacy and flag(a.legacy)]


def check() -> None:
    """Report, once each, an unknown name and a deprecated variable."""
    bad = [n for n in unknown() if n not in _reported]
    if bad:
        _reported.update(bad)
        log.warning(
            "fastfake: FASTFAKE_DISABLE names no acceleration %s; the names are: %s",
            ", ".join(repr(n) for n in bad),
            ", ".join(sorted(NAMES)),
        )
    for acc in legacy_set():
        if acc.legacy not in _reported:
            _reported.add(acc.legacy)
            log.warning(
                "fastfake: %s is deprecated and will be removed in the next release; use FASTFAKE_DISABLE=%s",
                acc.legacy,
                acc.name,
            )
