"""``python -m tensordict_cpp --includedir | --cmakedir | --version``: where pip put the C++
library, for build scripts (``cmake -Dtensordict_DIR=$(python -m tensordict_cpp --cmakedir)``)."""

import argparse
import sys

import tensordict_cpp


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tensordict_cpp", description=__doc__)
    ap.add_argument("--includedir", action="store_true", help="the folder holding tensordict/tensordict.hpp")
    ap.add_argument("--cmakedir", action="store_true", help="the folder of the CMake package (tensordict_DIR)")
    ap.add_argument("--version", action="store_true", help="the installed version")
    a = ap.parse_args(argv)
    if not (a.includedir or a.cmakedir or a.version):
        ap.print_help()
        return 1
    try:
        if a.version:
            print(tensordict_cpp.__version__)
        if a.includedir:
            print(tensordict_cpp.get_include())
        if a.cmakedir:
            print(tensordict_cpp.get_cmake_dir())
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
