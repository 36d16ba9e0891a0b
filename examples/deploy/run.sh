#!/usr/bin/env bash
# The example as one test: Python trains and exports the policy (exit 77, a skip, without PyPI
# torch and tensordict), then the C++ program runs what it exported.
#   run.sh PYTHON TRAIN_PY DEPLOY_EXE WORK_DIR
set -euo pipefail
python="$1" script="$2" exe="$3" work="$4"
rm -rf "$work"
"$python" "$script" "$work"
exec "$exe" "$work"
