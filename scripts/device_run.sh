#!/usr/bin/env bash
# The one script for the GPU machine, which has no network. Before a run, on the machine
# with network: `bash scripts/prepare_device_deps.sh` (puts the nlohmann/json headers in
# the git-ignored .deps/), and carry `.deps` to the GPU machine with the working tree.
#
# Steps, all logged to one file, $OUT/device_run.log (build/device-logs/ when OUT is unset;
# one file because only a few files come back from $OUT, and benchmarks write their own):
#   build     pip install --no-build-isolation --no-deps -e .   (nothing from the network)
#   ctest     the C++ tests (cmake + ctest in build/)
#   pytest    pytest tests/python -m gpu
#   bench_*   every benchmarks/bench_*.py, one step each (each stopped after $BENCH_TIMEOUT s, 300)
# then a summary table, also in summary.txt. Exit status: nonzero when any step failed.
#   bash scripts/device_run.sh              # everything
#   bash scripts/device_run.sh -k softmax   # extra arguments go to pytest
#   PART=tests bash scripts/device_run.sh   # build, ctest, pytest and demo only
#   PART=bench bash scripts/device_run.sh   # build and the benchmarks only
# (the two halves fit the GPU machine's 10-minute limit per command)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python || command -v python3)}
LOG_DIR=${OUT:-build/device-logs}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/device_run.log
: >"$LOG"
jobs=$(nproc 2>/dev/null || echo 8)
export MAX_JOBS=${MAX_JOBS:-$jobs} PIP_ROOT_USER_ACTION=ignore PYTHONUNBUFFERED=1

rows=()
# run_step NAME COMMAND...: runs the command, tees its output into the log, records a row.
run_step() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "=== $name: $*" | tee -a "$LOG"
  "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  ((rc > 128)) && echo "$name: killed by signal $((rc - 128)) ($(kill -l $((rc - 128))))" | tee -a "$LOG"
  rows+=("$name|$( ((rc == 0)) && echo ok || echo "FAILED ($rc)")|$((SECONDS - t0))")
  return "$rc"
}
skip_step() { rows+=("$1|skipped: $2|0"); echo "=== $1: skipped: $2" | tee -a "$LOG"; }

describe_machine() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available())"
  command -v nvcc >/dev/null && nvcc --version | tail -1
}

build_extension() {
  if [[ ! -f .deps/nlohmann/json.hpp && ! -f /usr/include/nlohmann/json.hpp ]]; then
    echo "nlohmann/json.hpp missing: run scripts/prepare_device_deps.sh and carry .deps"
  fi
  "$PY" -m pip install --disable-pip-version-check --no-index --no-build-isolation --no-deps -e .
}

cpp_tests() {
  cmake -S . -B build && cmake --build build -j "$jobs" &&
    ctest --test-dir build --output-on-failure -j "$jobs"
}

gpu_tests() {
  "$PY" -m pytest tests/python -m gpu -q "$@"
  local rc=$?
  ((rc == 5)) && { echo "no test marked gpu was collected"; return 0; }
  return "$rc"
}

run_step machine describe_machine
built=1
run_step build build_extension || built=0
PART=${PART:-all}
if [[ $PART != bench ]]; then
  if command -v cmake >/dev/null; then run_step ctest cpp_tests; else skip_step ctest "no cmake"; fi
fi
if ((built)); then
  if [[ $PART != bench ]]; then
    run_step pytest gpu_tests "$@"
    run_step demo timeout "${BENCH_TIMEOUT:-300}" "$PY" -m tegula demo --rows 8192
  fi
  for bench in benchmarks/bench_*.py; do
    [[ $PART == tests ]] && break
    [[ -e $bench ]] || break
    run_step "$(basename "$bench" .py)" timeout "${BENCH_TIMEOUT:-300}" "$PY" "$bench"
  done
else
  skip_step pytest "the build failed"
  skip_step benchmarks "the build failed"
fi

failed=0
{
  echo
  echo "=== summary (full log: $LOG)"
  printf '%-28s %-22s %8s\n' step result seconds
  for row in "${rows[@]}"; do
    IFS='|' read -r name result secs <<<"$row"
    printf '%-28s %-22s %8s\n' "$name" "$result" "$secs"
  done
} | tee "$LOG_DIR/summary.txt" | tee -a "$LOG"
for row in "${rows[@]}"; do
  result=$(cut -d'|' -f2 <<<"$row")
  [[ $result == ok || $result == skipped* ]] || failed=1
done
exit "$failed"
