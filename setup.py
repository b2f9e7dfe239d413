"""Build and install fastfake: `pip install --no-build-isolation .`

The C++ extension is compiled against the torch that is already installed (one
of fastfake.common.compat.SUPPORTED_TORCH_VERSIONS), so the build must not be isolated
from it, and the package requires exactly that torch release.
"""
import glob
import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
import torch
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def version() -> str:
    ns: dict = {}
    with open(os.path.join(ROOT, "fastfake", "_version.py")) as f:
        exec(f.read(), ns)
    return ns["__version__"]


# csrc/<subsystem>/*.cpp and csrc/module.cpp; headers are included by their path
# from csrc/ ("cache/internal.h").
sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True))
headers = sorted(glob.glob(os.path.join("csrc", "**", "*.h"), recursive=True))


# No debug information unless asked for (FASTFAKE_DEBUG_INFO=1): Python's own flags
# carry -g, which nearly doubles each file's compile time (torch's headers are
# instantiated in every file) for line tables nobody reads; profilers still see
# the functions by the symbol table.
DEBUG_INFO = ["-g"] if os.environ.get("FASTFAKE_DEBUG_INFO") == "1" else ["-g0"]


class build_py_with_startup(build_py):
    """Also put startup/fastfake.pth and its module at the top of site-packages:
    FASTFAKE=1 then installs fastfake when a program imports torch
    (startup/fastfake_autoinstall.py)."""

    def run(self):
        super().run()
        for name in ("fastfake.pth", "fastfake_autoinstall.py"):
            self.copy_file(os.path.join(ROOT, "startup", name), os.path.join(self.build_lib, name))


setup(
    name="fastfake",
    version=version(),
    description="Drop-in C++ accelerator for PyTorch FakeTensorMode propagation",
    packages=find_packages(include=["fastfake", "fastfake.*"]),
    package_data={"fastfake": ["_C.pyi", "py.typed"]},
    ext_modules=[
        CppExtension(
            name="fastfake._C",
            sources=sources,
            depends=headers,
            include_dirs=[os.path.join(ROOT, "csrc")],
            extra_compile_args=["-O2", "-fvisibility=hidden", "-Wno-unused-parameter", *DEBUG_INFO],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True), "build_py": build_py_with_startup},
    python_requires=">=3.10",
    # The extension is ABI-bound to the torch it was compiled against.
    install_requires=[f"torch=={torch.__version__.split('+')[0]}", "optree", "numpy"],
    zip_safe=False,
)
