"""A ShapeEnv's settings in the result cache's key (csrc/cache/keys.cpp,
``settings_bits``).

Stock's cache key holds the ShapeEnv's ``ShapeEnvSettings`` object, compared by its
dataclass ``__eq__``. Where ``fastfake.common.compat.settings_fields`` proves that
``__eq__`` and ``__hash__`` read nothing but the fields, the result cache's key
holds the fields' bits (every field a bool) instead of the object's hash: equal
bits must mean equal settings, different settings must never share an entry or a
portable record, and anything unproven (another class, a field that is not a bool,
a method patched after setup) must go back to the hash."""
from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, ShapeEnvSettings

import fastfake
from fastfake import _C
from fastfake.common import compat as _compat
from parity import symbolic_fake, tensor_meta

FIELDS = [f.name for f in dataclasses.fields(ShapeEnvSettings)]


def _settings(bits: int) -> ShapeEnvSettings:
    return ShapeEnvSettings(**{n: bool(bits >> i & 1) for i, n in enumerate(FIELDS)})


def test_proven_on_this_release():
    proof = _compat.settings_fields(ShapeEnvSettings)
    assert proof is not None
    names, eq, h = proof
    assert list(names) == FIELDS
    assert eq is vars(ShapeEnvSettings)["__eq__"] and h is vars(ShapeEnvSettings)["__hash__"]


def test_bits_are_equality(installed):
    """Over every combination of the fields: equal keys iff equal settings (and
    then equal hashes, as stock's dict needs)."""
    combos = [_settings(b) for b in range(1 << len(FIELDS))]
    keys = [_C._settings_key(s) for s in combos]
    assert all(k >= 0 for k in keys)
    rng = random.Random(0)
    pairs = list(itertools.combinations(range(len(combos)), 2))
    for i, j in rng.sample(pairs, 2000) + [(i, i) for i in range(len(combos))]:
        a, b = combos[i], _settings(j if i != j else i)
        assert (keys[i] == _C._settings_key(b)) == (a == b), (a, b)
        if a == b:
            assert hash(a) == hash(b)
    # a ShapeEnv's own settings
    assert _C._settings_key(ShapeEnv().settings) == _C._settings_key(ShapeEnv().settings)
    assert _C._settings_key(ShapeEnv().settings) != _C._settings_key(ShapeEnv(duck_shape=False).settings)


def test_unproven_goes_to_the_hash(installed):
    # a field that is not a bool
    odd = ShapeEnvSettings(**{n: 1 for n in FIELDS})
    assert odd == _settings((1 << len(FIELDS)) - 1)  # (1 == True: equal to stock)
    assert _C._settings_key(odd) == -1
    # another class
    assert _C._settings_key(object()) == -1

    @dataclasses.dataclass(frozen=True)
    class Mine:
        a: bool

    assert _C._settings_key(Mine(True)) == -1


def test_proof_refuses_other_methods():
    @dataclasses.dataclass(frozen=True)
    class ById:
        a: bool

        def __eq__(self, other):
            return id(self) == id(other)

        def __hash__(self):
            return id(self)

    @dataclasses.dataclass(frozen=True)
    class Extra:
        a: bool
        b: bool = dataclasses.field(default=False, compare=False)

    @dataclasses.dataclass(frozen=True)
    class Plain:
        a: bool

    assert _compat.settings_fields(ById) is None
    assert _compat.settings_fields(Plain) is not None
    # (a field left out of the comparison is still read: the key is finer)
    assert _compat.settings_fields(Extra)[0] == ("a", "b")
    assert _compat.settings_fields(int) is None


def test_patched_method_goes_to_the_hash(installed):
    s = ShapeEnv().settings
    assert _C._settings_key(s) >= 0
    eq = vars(ShapeEnvSettings)["__eq__"]
    ShapeEnvSettings.__eq__ = lambda self, other: eq(self, other)
    try:
        assert _C._settings_key(s) == -1
    finally:
        ShapeEnvSettings.__eq__ = eq
    assert _C._settings_key(s) >= 0
    # (the method attribute access finds: removed from the class, the base's)
    h = vars(ShapeEnvSettings)["__hash__"]
    del ShapeEnvSettings.__hash__
    try:
        assert _C._settings_key(s) == -1
    finally:
        ShapeEnvSettings.__hash__ = h
    assert _C._settings_key(s) >= 0


def _first_mul(env: ShapeEnv):
    mode = FakeTensorMode(shape_env=env)
    x = symbolic_fake(mode, 4, 8)
    with mode:
        y = torch.ops.aten.neg.default(x)
        out = torch.ops.aten.mul.Tensor(x, y)
    return tensor_meta(out, mode)


def _served() -> int:
    return fastfake.stats().get("cache.symbolic.portable.served", 0)


def _run(sequence: list[dict]) -> tuple[list, list[int]]:
    metas, served = [], []
    for kw in sequence:
        before = _served() if fastfake.is_installed() else 0
        metas.append(_first_mul(ShapeEnv(**kw)))
        served.append((_served() if fastfake.is_installed() else 0) - before)
    return metas, served


SEQUENCE = [{}, {}, {"trace_asserts": True}, {"trace_asserts": True}, {}, {"allow_scalar_outputs": False}, {}]


def _check(metas, served, stock):
    assert metas == stock
    # nothing learned under other settings serves a first call
    seen = set()
    for kw, n in zip(SEQUENCE, served):
        key = tuple(sorted(kw.items()))
        if key not in seen:
            assert n == 0, (kw, served)
        seen.add(key)
    assert sum(served) > 0, served


@pytest.mark.skipif(not _compat.portable_entries_known(), reason="no portable entries on this release")
def test_other_settings_are_not_served():
    """First calls in new ShapeEnvs, alternating settings: each is served only from
    what a ShapeEnv with equal settings learned, and equals stock's."""
    stock, _ = _run(SEQUENCE)
    fastfake.install()
    try:
        fastfake.cache_clear()  # (nothing learned by the tests before)
        fastfake.reset_stats()
        metas, served = _run(SEQUENCE)
        _check(metas, served, stock)
        # the test can fail: a key that leaves out the field that differs serves
        # the other settings' record
        names, eq, h = _compat.settings_fields(ShapeEnvSettings)
        _C.set_settings_fields(ShapeEnvSettings, [n for n in names if n != "trace_asserts"], eq, h)
        try:
            _, wrong = _run([{"trace_asserts": False}, {"trace_asserts": True}])
            assert wrong[1] > 0, wrong
        finally:
            _C.set_settings_fields(ShapeEnvSettings, names, eq, h)
    finally:
        fastfake.uninstall()


def test_settings_read_as_stock_reads_them():
    """The key reads ``shape_env.settings`` as stock's attribute access does: a
    ShapeEnv whose class has a data descriptor ``settings`` is keyed by what the
    descriptor returns, not by an instance-dict entry of the same name."""

    class Env(ShapeEnv):
        @property
        def settings(self):
            return self._own_settings

        @settings.setter
        def settings(self, value):
            self._own_settings = value

    stock, _ = _run(SEQUENCE[:2])
    fastfake.install()
    try:
        fastfake.cache_clear()  # (nothing learned by the tests before)
        fastfake.reset_stats()
        _run([{}])  # learns under the default settings
        env = Env()
        vars(env)["settings"] = ShapeEnv().settings  # (what a dict read would find)
        env.settings = ShapeEnv(trace_asserts=True).settings
        before = _served()
        meta = _first_mul(env)
        assert _served() == before, "served from the default settings' record"
        assert meta == stock[0]
    finally:
        fastfake.uninstall()
