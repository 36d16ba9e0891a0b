#!/usr/bin/env bash
# The example as one test: Python trains and saves the model (exit 77, a skip, without PyPI torch
# and safetensors), then the C++ program loads it and compares the logits.
#   run.sh PYTHON TRAIN_PY FROM_PYTHON_EXE WORK_DIR
set -euo pipefail
python="$1" script="$2" exe="$3" work="$4"
rm -rf "$work"
"$python" "$script" "$work"  # 77 (skip) passes through set -e as the test's exit status
exec "$exe" "$work"
