"""Packs the headers (include/tensordict) and a CMake package for the pip layout into the
tensordict_cpp Python package, so that `pip install .` (or a wheel built from the repository)
gives C++ builds what they need: `python -m tensordict_cpp --includedir` / `--cmakedir`."""
import os
import re
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(tensordict VERSION (\d+)\.(\d+)\.(\d+)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt: no `project(tensordict VERSION x.y.z`")
    return m.groups()


VERSION_FILE = """# The version of tensordict-cpp as pip installed it: compatible with a request of the same
# major.minor version and no newer patch (as CMake's SameMinorVersion).
set(PACKAGE_VERSION "{v}")
if(PACKAGE_FIND_VERSION_RANGE)
  if(PACKAGE_VERSION VERSION_GREATER_EQUAL PACKAGE_FIND_VERSION_MIN AND
     ((PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "INCLUDE" AND PACKAGE_VERSION VERSION_LESS_EQUAL PACKAGE_FIND_VERSION_MAX) OR
      (PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "EXCLUDE" AND PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION_MAX)))
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
  else()
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  endif()
elseif(PACKAGE_FIND_VERSION)
  if(PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION OR
     NOT "${{PACKAGE_FIND_VERSION_MAJOR}}.${{PACKAGE_FIND_VERSION_MINOR}}" STREQUAL "{major}.{minor}")
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  else()
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
    if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
      set(PACKAGE_VERSION_EXACT TRUE)
    endif()
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
"""


class BuildWithHeaders(build_py):
    """build_py, plus the headers and the CMake package copied into the package."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "tensordict_cpp")
        include = os.path.join(pkg, "include", "tensordict")
        if os.path.exists(include):
            shutil.rmtree(include)
        shutil.copytree(os.path.join(ROOT, "include", "tensordict"), include)
        cmake = os.path.join(pkg, "share", "cmake", "tensordict")
        os.makedirs(cmake, exist_ok=True)
        shutil.copy(os.path.join(ROOT, "cmake", "tensordictPipConfig.cmake"), os.path.join(cmake, "tensordictConfig.cmake"))
        shutil.copy(os.path.join(ROOT, "cmake", "tensordictTorchWheel.cmake"), cmake)
        shutil.copy(os.path.join(ROOT, "cmake", "tensordictMujoco.cmake"), cmake)
        major, minor, patch = version()
        with open(os.path.join(cmake, "tensordictConfigVersion.cmake"), "w") as f:
            f.write(VERSION_FILE.format(v=f"{major}.{minor}.{patch}", major=major, minor=minor))


setup(
    version=".".join(version()),
    packages=["tensordict_cpp"],
    package_dir={"": "python"},
    cmdclass={"build_py": BuildWithHeaders},
    zip_safe=False,
    # setuptools' scratch folder, outside the source tree (whose build* folders are CMake's).
    options={"build": {"build_base": os.path.join(tempfile.gettempdir(), "tensordict-cpp-setuptools")},
             "egg_info": {"egg_base": tempfile.gettempdir()}},
)
