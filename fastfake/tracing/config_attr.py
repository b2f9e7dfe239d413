"""Reads of torch's configuration modules in C (``config_attr``).

``torch._dynamo.config``, ``torch._functorch.config``, ``torch._inductor.config``,
``torch.fx.experimental._config`` ... are modules of a class (``ConfigModule``,
torch/utils/_config_module.py) that answers a setting's read from Python: the
module's own lookup fails and formats an ``AttributeError``, then stock's
``__getattr__`` finds the entry in the module's ``_config`` table and returns the
value in force (~1.1 us a read). Dynamo reads its config at every bytecode
instruction it traces, AOTAutograd and the fake-tensor code at every op: 29,000 to
47,000 reads in a first compile of a zoo model.

``install()`` gives ``ConfigModule`` a ``__getattribute__`` written in C
(``csrc/tracing/config_attr.cpp``): a plain entry -- not hidden, not deprecated, not
an alias, no justknob, an immutable default when no override, environment value or
context value is in force -- is answered as stock's ``__getattr__`` answers it, field
by field in stock's order (the override is read from the current context); every
other read, and every name the class or the module's dict has, goes to
``module.__getattribute__`` and then to stock's ``__getattr__``, as without fastfake.
``uninstall()`` removes the attribute (the class inherits the module type's again).

Offered where stock's ``__getattr__``, ``_warn_if_deprecated``, ``_get_alias_val``,
``_get_alias_module_and_name`` and ``_IMMUTABLE_CONFIG_TYPES`` are source-identical to
those it was proven on (:data:`fastfake.common.compat.CONFIG_ATTR_SOURCES`),
``_ConfigEntry`` has the fields it reads and keeps the override in a ``ContextVar``,
and ``ConfigModule`` defines no ``__getattribute__`` of its own; and after the
install-time self-test (feature ``config_attr``). ``FASTFAKE_DISABLE=config_attr``
turns it off; with ``crosscheck=True`` every served read is compared with stock's
``__getattr__`` on the same module and name.

Counters (``stats()``): ``config_attr.served``, ``config_attr.stock`` (reads handed
to the module's own lookup: names it has, and settings stock's ``__getattr__`` answers).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from fastfake import _C
from fastfake.common import compat as _compat

#: _ConfigEntry's fields the C function reads
FIELDS = ("hide", "deprecated", "alias", "env_value_force", "user_override", "env_value_default", "justknob",
          "default")

_DESCRIPTOR: list = []


def _module():
    from torch.utils import _config_module

    return _config_module


def available() -> bool:
    try:
        cm = _module()
    except ImportError:
        return False
    cls = getattr(cm, "ConfigModule", None)
    entry = getattr(cm, "_ConfigEntry", None)
    if not isinstance(cls, type) or not isinstance(entry, type):
        return False
    own = vars(cls).get("__getattribute__")
    if own is not None and (not _DESCRIPTOR or own is not _DESCRIPTOR[0]):
        return False
    if not dataclasses.is_dataclass(entry) or not set(FIELDS) <= {f.name for f in dataclasses.fields(entry)}:
        return False
    if getattr(cm, "_IMMUTABLE_CONFIG_TYPES", None) != (int, float, bool, type(None), str, tuple):
        return False
    return _compat.config_attr_proven()


def _setup() -> Any:
    if not _DESCRIPTOR:
        cm = _module()
        cls = cm.ConfigModule
        _C.setup_config_attr(cls, cm._ConfigEntry, cm._UNSET_SENTINEL, vars(cls)["__getattr__"],
                             vars(cls)["_warn_if_deprecated"], vars(cls)["_get_alias_val"])
        _DESCRIPTOR.append(_C.config_attr_descriptor())
    return _DESCRIPTOR[0]


def stock_read(module: Any, name: str) -> Any:
    """What stock answers for ``module.<name>``: its ``__getattr__``, called as the
    module's own lookup failing would call it."""
    cls = _module().ConfigModule
    return vars(cls)["__getattr__"](module, name)


def check(module: Any, name: str, served: Any) -> bool:
    """crosscheck: stock's ``__getattr__`` on the same module and name answers the
    same object."""
    from fastfake.parity.crosscheck import CrosscheckError

    want = stock_read(module, name)
    if want is not served:
        raise CrosscheckError(
            f"fastfake: {module.__name__}.{name} read {served!r} where stock's ConfigModule.__getattr__ "
            f"answers {want!r}"
        )
    return True


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): ``ConfigModule.__getattribute__``
    set (on) or removed (off)."""
    if not on and not _DESCRIPTOR:
        return
    if on and not available():
        return
    cls = _module().ConfigModule
    descriptor = _setup()
    if on:
        _C.set_config_attr_check(check if crosscheck else None)
        _C.config_attr_enable(True)
        if vars(cls).get("__getattribute__") is not descriptor:
            cls.__getattribute__ = descriptor
    else:
        _C.config_attr_enable(False)
        _C.set_config_attr_check(None)
        if vars(cls).get("__getattribute__") is descriptor:
            del cls.__getattribute__
