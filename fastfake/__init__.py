"""fastfake: a drop-in C++ accelerator for PyTorch's FakeTensorMode.

    import fastfake
    fastfake.install()        # the same programs now trace faster, with identical results

Every fast result is identical to what stock ``FakeTensorMode`` produces; whatever
fastfake cannot prove it handles goes to the stock path, and ``fastfake.stats()``
counts why.
"""
from ._version import __version__

import torch  # noqa: F401  (loads libc10/libtorch, which fastfake._C links against)

try:
    from . import _C  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by hand
    raise ImportError(
        "fastfake's C++ extension (fastfake._C) is not built or does not match the "
        "installed torch. Build it against torch==2.13.0 with\n"
        "    pip install --no-build-isolation .\n"
        "or, in a source checkout,\n"
        "    python setup.py build_ext --inplace\n"
        f"(original error: {e})"
    ) from e

from ._crosscheck import CrosscheckError
from ._install import (
    SUPPORTED_TORCH_VERSIONS,
    cache_clear,
    enabled,
    install,
    is_installed,
    uninstall,
)
from ._stats import elementwise_report, reset_stats, stats

__all__ = [
    "__version__",
    "CrosscheckError",
    "cache_clear",
    "SUPPORTED_TORCH_VERSIONS",
    "enabled",
    "elementwise_report",
    "install",
    "is_installed",
    "reset_stats",
    "stats",
    "uninstall",
]
