"""The benchmark zoo's small models for tests: built once per process."""
from __future__ import annotations

from bench.models import MODELS

_built: dict[str, tuple] = {}


def small_model(name: str) -> tuple:
    """(model, inputs) of the zoo model ``name`` at size ``small``, built once."""
    if name not in _built:
        _built[name] = MODELS[name].create("small")
    return _built[name]
