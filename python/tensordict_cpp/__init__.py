"""Python helpers of tensordict-cpp.

- Where pip put the C++ library (as pybind11 tells it): ``get_include()``, the folder that holds
  ``tensordict/tensordict.hpp``, for ``torch.utils.cpp_extension`` (``include_dirs``); and
  ``get_cmake_dir()``, the folder of its CMake package (``-Dtensordict_DIR=...``). The same
  from a shell: ``python -m tensordict_cpp --includedir`` / ``--cmakedir``.
- What Python needs so that C++ programs built on the library can run what Python exported
  (``register_export_types``, ``aoti_package``; see docs/deploy.md). These import torch and
  tensordict on first use only.
"""

import os as _os

_HERE = _os.path.dirname(_os.path.abspath(__file__))
_EXPORTS = ("SERIALIZED_TENSORDICT", "aoti_package", "register_export_types")


def _installed(*parts):
    path = _os.path.join(_HERE, *parts)
    if not _os.path.isdir(path):
        raise FileNotFoundError(
            f"{path} does not exist: tensordict_cpp is imported from the source tree, not from a pip "
            "install (`pip install .` in the repository installs the headers and the CMake package)")
    return path


def get_include():
    """The folder holding ``tensordict/tensordict.hpp``, for a compiler's ``-I``."""
    return _installed("include")


def get_cmake_dir():
    """The folder of the CMake package: ``-Dtensordict_DIR=<this>`` for ``find_package(tensordict)``."""
    return _installed("share", "cmake", "tensordict")


def __getattr__(name):
    if name in _EXPORTS:
        from . import export

        return getattr(export, name)
    raise AttributeError(f"module 'tensordict_cpp' has no attribute {name!r}")


try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("tensordict-cpp")
except Exception:  # not installed by pip: the source tree
    __version__ = "0+source"

__all__ = ["get_include", "get_cmake_dir", "__version__", *_EXPORTS]
