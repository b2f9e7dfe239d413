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
        "installed torch. Build it against the installed torch with\n"
        "    pip install --no-build-isolation .\n"
        "or, in a source checkout,\n"
        "    python setup.py build_ext --inplace\n"
        f"(original error: {e})"
    ) from e

def _check_build() -> None:
    built = _C.built_for().split(".")[:2]
    running = torch.__version__.split("+")[0].split(".")[:2]
    if built != running:
        raise ImportError(
            f"fastfake's C++ extension was built against torch {_C.built_for()}, but torch "
            f"{torch.__version__} is installed; rebuild it against this torch "
            "(pip install --no-build-isolation . , or python setup.py build_ext --inplace)"
        )


_check_build()

from fastfake.parity.crosscheck import CrosscheckError
from fastfake.core.install import (
    SUPPORTED_TORCH_VERSIONS,
    cache_clear,
    enabled,
    install,
    is_installed,
    selftest_report,
    uninstall,
)
from fastfake.core.stats import elementwise_report, reset_stats, stats, stock_report

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
    "selftest_report",
    "stats",
    "stock_report",
    "uninstall",
]
