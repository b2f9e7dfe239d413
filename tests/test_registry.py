"""The pointwise registry (fastfake/elementwise/registry.py) handed to the extension by name:
each registration is bound to its overload object the first time one with that
name is dispatched, overload objects of other names are remembered (bounded), and
the table kept on disk with the self-test result (tests/test_selftest_store.py)
must be exactly what torch's operator metadata gives."""
from __future__ import annotations

import json
import random

import pytest
import torch

import fastfake
import parity
from fastfake import _C
from fastfake.elementwise import registry as _registry

aten = torch.ops.aten

NOT_POINTWISE = [
    aten.mm.default, aten.view.default, aten.t.default, aten.sum.dim_IntList,
    aten.mean.dim, aten._softmax.default, aten.cat.default, aten.expand.default,
]


@pytest.fixture(autouse=True)
def _registered_again():
    """Each test leaves the registry as install() leaves it."""
    yield
    _C._set_not_pointwise_max(8192)
    _C.clear_elementwise()
    _registry.register_all(_C)


def _overload(name: str):
    ns, base, overload = name.split(".", 2)
    return getattr(getattr(getattr(torch.ops, ns), base), overload)


def test_every_registry_entry_binds_and_no_other_op():
    fastfake.install()
    reg = _registry.pointwise_registry()
    assert set(_C.elementwise_report()) == {str(e.op) for e in reg.entries}
    for e in reg.entries:
        assert _C.is_elementwise_registered(e.op), str(e.op)
    skipped = [n for n in reg.skipped if n.startswith("aten.")]
    assert skipped, "torch's registry has pointwise overloads fastfake does not take"
    for name in skipped:
        assert not _C.is_elementwise_registered(_overload(name)), name
    for op in NOT_POINTWISE:
        assert not _C.is_elementwise_registered(op), str(op)
    sizes = _C._elementwise_sizes()
    assert sizes["bound"] == len(reg.entries) and sizes["pending"] == 0


def test_table_is_the_registry_as_data():
    table = _registry.pointwise_table()
    assert _registry.valid_table(table)
    assert json.loads(json.dumps(table)) == table  # kept as JSON unchanged
    reg = _registry.pointwise_registry()
    assert [row[0] for row in table] == [str(e.op) for e in reg.entries]
    for row, e in zip(table, reg.entries):
        assert row[1] == e.inplace and [tuple(a) for a in row[2]] == e.args
    _C.clear_elementwise()
    assert _C._elementwise_sizes() == {"bound": 0, "pending": 0, "not_pointwise": 0,
                                       "not_pointwise_max": 8192}
    assert _registry.register_table(_C, json.loads(json.dumps(table))) == len(table)
    assert _C._elementwise_sizes()["pending"] == len(table)
    assert set(_C.elementwise_report()) == {row[0] for row in table}


def _bad_tables():
    good = _registry.pointwise_table()
    row = good[0]
    yield "empty", []
    yield "not a list", {"rows": good}
    yield "short row", [row[:2]]
    yield "name not aten", [["prims.add.default", row[1], row[2]]]
    yield "name not str", [[1, row[1], row[2]]]
    yield "inplace not bool", [[row[0], 1, row[2]]]
    yield "args not list", [[row[0], row[1], "x"]]
    yield "arg short", [[row[0], row[1], [a[:4] for a in row[2]]]]
    yield "kind unknown", [[row[0], row[1], [[a[0], 99, *a[2:]] for a in row[2]]]]
    yield "kind bool", [[row[0], row[1], [[a[0], True, *a[2:]] for a in row[2]]]]
    yield "kwarg_only int", [[row[0], row[1], [[a[0], a[1], 0, *a[3:]] for a in row[2]]]]
    yield "default of a list", [[row[0], row[1], [[*a[:3], True, [1]] for a in row[2]]]]
    yield "default without has_default", [[row[0], row[1], [[*a[:3], False, 1] for a in row[2]]]]
    yield "no tensor argument", [[row[0], row[1], [["x", 6, False, False, None]]]]
    yield "one bad row of many", good[:-1] + [[good[-1][0], "yes", good[-1][2]]]


@pytest.mark.parametrize("why,table", list(_bad_tables()), ids=lambda v: v if isinstance(v, str) else "")
def test_ill_formed_tables_are_refused(why, table):
    assert not _registry.valid_table(table), why


def test_remembered_other_ops_are_bounded_and_forgotten_on_registration():
    _C.clear_elementwise()
    _registry.register_all(_C)
    n = _C._elementwise_sizes()["pending"]
    assert _C._set_not_pointwise_max(3) == 8192
    for op in NOT_POINTWISE:
        assert not _C.is_elementwise_registered(op)
    assert _C._elementwise_sizes()["not_pointwise"] == 3  # the bound holds
    assert _C.is_elementwise_registered(aten.add.Tensor)
    assert _C._elementwise_sizes()["bound"] == 1 and _C._elementwise_sizes()["pending"] == n - 1
    # a new registration of a bound name replaces it and empties the remembered set
    row = next(r for r in _registry.pointwise_table() if r[0] == "aten.add.Tensor")
    _registry.register_table(_C, [row])
    sizes = _C._elementwise_sizes()
    assert (sizes["bound"], sizes["pending"], sizes["not_pointwise"]) == (0, n, 0)
    # an op of another name remembered, then registered under its name: taken
    assert not _C.is_elementwise_registered(aten.mm.default)
    _C.register_elementwise("aten.mm.default", False, [("self", 0, False, False, None),
                                                       ("mat2", 0, False, False, None)])
    assert _C.is_elementwise_registered(aten.mm.default)
    _C.clear_elementwise()
    assert not _C.is_elementwise_registered(aten.add.Tensor)
    assert _C._elementwise_sizes()["not_pointwise"] == 0  # empty registry: nothing remembered


# Calls for the random sequence: (name, fn, inputs(mode, rng) -> tuple)
def _f(mode, shape, dtype=torch.float32):
    return mode.from_tensor(torch.empty(shape, dtype=dtype))


def _shape(rng):
    return rng.choice([(4, 3), (1, 3), (2, 1, 3), (0, 3), ()])


def _dtype(rng):
    return rng.choice([torch.float32, torch.int64, torch.bool, torch.float16])


CALLS = [
    ("add", lambda a, b: a + b, lambda m, r: (_f(m, _shape(r), _dtype(r)), _f(m, _shape(r), _dtype(r)))),
    ("mul scalar", lambda a: a * 2.5, lambda m, r: (_f(m, _shape(r), _dtype(r)),)),
    ("sigmoid", torch.sigmoid, lambda m, r: (_f(m, _shape(r), _dtype(r)),)),
    ("neg", torch.neg, lambda m, r: (_f(m, _shape(r), _dtype(r)),)),
    ("add_", lambda a, b: a.add_(b), lambda m, r: (_f(m, (4, 3)), _f(m, _shape(r)))),
    ("where", torch.where, lambda m, r: (_f(m, _shape(r), torch.bool), _f(m, _shape(r)), _f(m, _shape(r)))),
    ("div floor", lambda a, b: torch.div(a, b, rounding_mode="floor"),
     lambda m, r: (_f(m, _shape(r), torch.int64), _f(m, _shape(r)))),
    ("mm", torch.mm, lambda m, r: (_f(m, (4, 3)), _f(m, (3, r.choice([2, 4]))))),
    ("t", torch.t, lambda m, r: (_f(m, (4, 3)),)),
    ("sum", lambda a: a.sum(0), lambda m, r: (_f(m, (4, 3)),)),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_sequence_of_calls_and_registrations(seed):
    """Calls of registered and other ops interleaved with re-registrations of one
    name, of the whole table (from its JSON copy), and a lowered bound: every
    result equals stock's, and the fast path keeps serving."""
    rng = random.Random(seed)
    table = _registry.pointwise_table()
    rows = {r[0]: r for r in table}
    served = mismatched = 0
    for step in range(400):
        roll = rng.random()
        if roll < 0.05:
            _C.clear_elementwise()
            _registry.register_table(_C, json.loads(json.dumps(table)))
        elif roll < 0.12:
            name = rng.choice(["aten.add.Tensor", "aten.sigmoid.default", "aten.add_.Tensor",
                               "aten.where.self", "aten.mul.Tensor"])
            _registry.register_table(_C, [rows[name]])
        elif roll < 0.15:
            _C._set_not_pointwise_max(rng.choice([0, 1, 8192]))
        name, fn, make = rng.choice(CALLS)
        inputs_seed = rng.random()
        both = parity.run_both(fn, lambda m: make(m, random.Random(inputs_seed)), stock_runs=1, fast_runs=1)
        parity.assert_parity(both, f"seed {seed} step {step} {name}")
        served += both.fast[0].stats["elementwise.hit"]
        mismatched += both.fast[0].stats["elementwise.reject.rule_mismatch"]
    assert served > 0, "the elementwise path never served"
    # a binding that gave an overload another's registration would be caught by the
    # admission's comparison with stock: no answer differs, but it shows here
    assert mismatched == 0
