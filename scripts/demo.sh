#!/usr/bin/env bash
# Installs what is missing (scripts/setup_env.sh), then runs the demo: compiles the shipped
# kernels, prints the generated CUDA source of one, and with a GPU present runs them,
# checks them against torch and times them. Extra arguments go to `python -m tegula demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python || command -v python3)}
bash scripts/setup_env.sh
exec "$PY" -m tegula demo "$@"
