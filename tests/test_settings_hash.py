"""A new ShapeEnv's settings hashed from their fields (csrc/cache_keys.cpp).

Stock's cache key holds ``shape_env.settings``, a frozen dataclass; fastfake's key
holds its hash. Each ShapeEnv has its own settings object, so the first call in a
new ShapeEnv hashed it through the dataclass's Python ``__hash__``. Where that
``__hash__`` is proven to be ``hash((self.f1, ..., self.fn))``
(``fastfake._compat.settings_hash_fields``), a settings object whose fields are the
same objects as the last hashed one's reuses its hash. The hash must be
``hash(settings)`` over long random sequences of settings, and a wrong field list
or another ``__hash__`` must not go unnoticed."""
from __future__ import annotations

import random

import pytest
from torch.fx.experimental.symbolic_shapes import ShapeEnv, ShapeEnvSettings

import fastfake
from fastfake import _C, _compat

FLAGS = ("allow_scalar_outputs", "allow_dynamic_output_shape_ops", "assume_static_by_default",
         "specialize_zero_one", "duck_shape", "prefer_deferred_runtime_asserts_over_guards", "trace_asserts")


@pytest.fixture
def installed():
    fastfake.install()
    try:
        yield
    finally:
        _C.set_settings_hash(*_compat.settings_hash_fields())
        fastfake.uninstall()


def _settings(rng: random.Random):
    # (mostly the default settings, as a compile's ShapeEnvs have them)
    flags = {} if rng.random() < 0.5 else {f: rng.random() < 0.5 for f in rng.sample(FLAGS, rng.randint(1, 3))}
    return ShapeEnv(**flags).settings


def _mismatches(seed: int, steps: int) -> int:
    rng = random.Random(seed)
    return sum(_C._settings_hash(s) != hash(s) for s in (_settings(rng) for _ in range(steps)))


def test_proven_on_this_release():
    cls, fn, fields = _compat.settings_hash_fields()
    assert cls is ShapeEnvSettings and fn is vars(ShapeEnvSettings)["__hash__"]
    assert set(fields) == set(FLAGS)


@pytest.mark.parametrize("seed", range(3))
def test_hash_is_stocks_over_random_settings(installed, seed):
    assert _mismatches(seed, 300) == 0


def test_a_wrong_field_list_is_caught(installed):
    cls, fn, fields = _compat.settings_hash_fields()
    _C.set_settings_hash(cls, fn, [f for f in fields if f != "duck_shape"])
    assert _mismatches(0, 300) > 0


def test_another_hash_is_called(installed, monkeypatch):
    """The class's ``__hash__`` replaced after the proof: it is called."""
    monkeypatch.setattr(ShapeEnvSettings, "__hash__", lambda self: 42)
    assert _C._settings_hash(ShapeEnv().settings) == 42
    assert _compat.settings_hash_fields() == (None, None, ())
