"""Which ATen overloads the elementwise fast path takes, derived from torch's own
operator metadata (the ``pointwise`` tag and the schema), never from a hand list."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

# Schema argument types the C++ parser understands (csrc/fastfake.h: ArgKind).
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


def register_all(C) -> int:
    """Hand the pointwise registry to the C++ extension; returns the count."""
    reg = pointwise_registry()
    for e in reg.entries:
        C.register_elementwise(e.op, str(e.op), e.inplace, e.args)
    return len(reg.entries)
