"""Build and install fastfake: `pip install --no-build-isolation .`

The C++ extension is compiled against the torch that is already installed (one
of fastfake._compat.SUPPORTED_TORCH_VERSIONS), so the build must not be isolated
from it, and the package requires exactly that torch release.
"""
import glob
import os

from setuptools import find_packages, setup
import torch
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def version() -> str:
    ns: dict = {}
    with open(os.path.join(ROOT, "fastfake", "_version.py")) as f:
        exec(f.read(), ns)
    return ns["__version__"]


sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))
headers = sorted(glob.glob(os.path.join("csrc", "*.h")))

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
            extra_compile_args=["-O2", "-fvisibility=hidden", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.10",
    # The extension is ABI-bound to the torch it was compiled against.
    install_requires=[f"torch=={torch.__version__.split('+')[0]}", "optree", "numpy"],
    zip_safe=False,
)
