#!/usr/bin/env bash
# Builds the extension with its setup.py into DIR and runs the checks on that module:
#   setup_and_run.sh PYTHON DIR      (exits 77, a skip for CTest, without torch and tensordict)
set -euo pipefail
python="$1"
out="$2"
cd "$(dirname "${BASH_SOURCE[0]}")"
"$python" -c 'import torch, tensordict, setuptools' 2>/dev/null || { echo "skipped: no torch/tensordict"; exit 77; }
"$python" setup.py -q build_ext --build-lib "$out" --build-temp "$out/tmp"
"$python" run.py --built "$out"
