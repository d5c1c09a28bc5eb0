#!/usr/bin/env bash
# The test command, the one CI runs (through .ci/run) and README gives:
#   1. scripts/setup_env.sh: installs what is missing, builds the extension (develop mode);
#   2. the C++ tests: cmake + ctest in build/;
#   3. the Python tests: pytest tests/python (tests marked gpu skip without a GPU).
# Every suite runs even when an earlier one failed; the exit status is nonzero if any did.
# pytest's summary line is the last thing printed when everything passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python || command -v python3)}
jobs=$(nproc 2>/dev/null || echo 2)

bash scripts/setup_env.sh || { echo "test.sh: setup_env.sh failed"; exit 1; }

echo "== C++ tests (cmake + ctest in build/)"
mkdir -p build
cpp_status=ok
if ! cmake -S . -B build >build/cmake-configure.log 2>&1; then
  cat build/cmake-configure.log
  cpp_status="FAILED (cmake configure)"
elif ! cmake --build build -j "$jobs"; then
  cpp_status="FAILED (build)"
elif ! ctest --test-dir build --output-on-failure -j "$jobs"; then
  cpp_status="FAILED (ctest)"
fi
echo "== C++ tests: $cpp_status"

echo "== Python tests (pytest tests/python)"
"$PY" -m pytest tests/python -q
py_rc=$?
if ((py_rc == 5)); then
  echo "test.sh: pytest collected no tests"  # nothing ran, which is no failure of the code
  py_rc=0
fi

if [[ $cpp_status != ok || $py_rc != 0 ]]; then
  echo "test.sh: FAILED: C++ tests: $cpp_status; Python tests: exit code $py_rc"
  exit 1
fi
