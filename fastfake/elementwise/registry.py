"""Which ATen overloads the elementwise fast path takes, derived from torch's own
operator metadata (the ``pointwise`` tag and the schema), never from a hand list."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

# Schema argument types the C++ parser understands (csrc/common/fastfake.h: ArgKind).
ARG_KINDS = {
    "Tensor": 0,
    "Optional[Tensor]": 1,
    "number": 2,
    "Optional[number]": 3,
    "bool": 4,
    "Optional[bool]": 5,
    "int": 6,
    "Optional[int]": 7,
    "float": 8,
    "Optional[float]": 9,
    "str": 10,
    "Optional[str]": 11,
}

# Tags whose semantics are more than "compute elementwise into a new or the
# same tensor"; such overloads always take the stock path.
_EXCLUDED_TAGS = (
    "nondeterministic_seeded",
    "inplace_view",
    "dynamic_output_shape",
    "data_dependent_output",
    "view_copy",
)

@dataclass
class Entry:
    op: torch._ops.OpOverload
    inplace: bool
    # (name, ArgKind code, kwarg_only, has_default, default)
    args: list[tuple[str, int, bool, bool, object]]


@dataclass
class Registry:
    entries: list[Entry] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # overload name -> reason


def _aten_overloads():
    for name in torch._C._dispatch_get_all_op_names():
        ns, _, rest = name.partition("::")
        if ns != "aten":
            continue
        base, _, overload = rest.partition(".")
        try:
            packet = getattr(torch.ops.aten, base)
            yield getattr(packet, overload or "default")
        except (AttributeError, RuntimeError):
            continue


def classify(op: torch._ops.OpOverload) -> tuple[Entry | None, str]:
    """(entry, "") if the fast path may take `op`, else (None, reason)."""
    schema = op._schema
    tags = set(op.tags)
    for tag in _EXCLUDED_TAGS:
        if getattr(torch.Tag, tag, None) in tags:
            return None, f"tag:{tag}"
    writes = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if any(a.kwarg_only for a in writes):
        return None, "out_variant"
    if len(schema.returns) != 1 or str(schema.returns[0].type) != "Tensor":
        return None, "returns"
    inplace = False
    if writes:
        first = schema.arguments[0]
        ret = schema.returns[0]
        if (
            len(writes) != 1
            or writes[0] is not first
            or first.kwarg_only
            or ret.alias_info is None
            or not ret.alias_info.is_write
        ):
            return None, "mutation_pattern"
        inplace = True
    elif schema.returns[0].alias_info is not None:
        return None, "aliasing_return"
    if any(a.alias_info is not None and not a.alias_info.is_write for a in schema.arguments):
        return None, "aliasing_argument"
    args = []
    for a in schema.arguments:
        kind = ARG_KINDS.get(str(a.type))
        if kind is None:
            return None, f"argument_type:{a.type}"
        has_default = a.has_default_value()
        default = a.default_value if has_default else None
        if not isinstance(default, (bool, int, float, complex, str, type(None))):
            return None, f"default_type:{type(default).__name__}"
        args.append((a.name, kind, a.kwarg_only, has_default, default))
    if not any(k in (0, 1) for _, k, _, _, _ in args):
        return None, "no_tensor_argument"
    return Entry(op, inplace, args), ""


@functools.cache
def pointwise_registry() -> Registry:
    reg = Registry()
    for op in _aten_overloads():
        if torch.Tag.pointwise not in op.tags:
            continue
        entry, reason = classify(op)
        if entry is None:
            reg.skipped[str(op)] = reason
        else:
            reg.entries.append(entry)
    return reg


def pointwise_table() -> list:
    """The registry as plain data (kept with the self-test result on disk, so a
    restarted process neither walks torch's operators nor creates their overload
    objects): ``[name, inplace, [[arg, kind, kwarg_only, has_default, default]]]``
    per overload, ``name`` being ``str(op)``."""
    return [
        [str(e.op), e.inplace, [list(a) for a in e.args]]
        for e in pointwise_registry().entries
    ]


def valid_table(table) -> bool:
    """``table`` has :func:`pointwise_table`'s shape (a stored copy is checked
    before use)."""
    if not isinstance(table, list) or not table:
        return False
    kinds = set(ARG_KINDS.values())
    for row in table:
        if not (isinstance(row, list) and len(row) == 3):
            return False
        name, inplace, args = row
        if not (isinstance(name, str) and name.startswith("aten.") and type(inplace) is bool):
            return False
        if not isinstance(args, list):
            return False
        for a in args:
            if not (isinstance(a, list) and len(a) == 5):
                return False
            aname, kind, kwarg_only, has_default, default = a
            if not (isinstance(aname, str) and type(kind) is int and kind in kinds):
                return False
            if type(kwarg_only) is not bool or type(has_default) is not bool:
                return False
            if default is not None and type(default) not in (bool, int, float, str):
                return False
            if not has_default and default is not None:
                return False
        if not any(a[1] in (0, 1) for a in args):
            return False
    return True


def register_table(C, table: list) -> int:
    """Register ``table``'s overloads with the C++ extension by name (each is
    bound to its overload object when first dispatched); returns the count."""
    for name, inplace, args in table:
        C.register_elementwise(name, inplace, [tuple(a) for a in args])
    return len(table)


def register_all(C) -> int:
    """Hand the pointwise registry to the C++ extension; returns the count."""
    return register_table(C, pointwise_table())
