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
#   memcheck, racecheck, synccheck   compute-sanitizer over scripts/sanitize_kernels.py (one
#             small and one ragged call of every shipped and language-feature kernel)
#   fuzz_gpu  scripts/fuzz_gpu.py: $FUZZ_COUNT (2000) generated programs run on the GPU and
#             compared with tegula.testing.reference; failing programs under $OUT/fuzz
# then a summary table, also in summary.txt. Exit status: nonzero when any step failed.
#   bash scripts/device_run.sh              # everything
#   bash scripts/device_run.sh -k softmax   # extra arguments go to pytest
#   PART=tests bash scripts/device_run.sh   # build, ctest, pytest and demo only (SKIP_CTEST=1: no ctest)
#   PART=bench bash scripts/device_run.sh   # build and the benchmarks only
#   PART=check bash scripts/device_run.sh   # build and the sanitizers only
#   PART=fuzz bash scripts/device_run.sh    # build and the GPU fuzzer only
# (each part fits the GPU machine's 10-minute limit per command)
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

# A step's one-line result (sanitizer error count, fuzz counts), appended to its row.
NOTE=$LOG_DIR/step-note.txt
with_note() {
  local note
  note=$(cat "$NOTE" 2>/dev/null)
  [[ -n $note ]] && rows[-1]="${rows[-1]%|*} ($note)|${rows[-1]##*|}"
  return 0
}

# sanitize TOOL: compute-sanitizer's TOOL over every kernel; the row shows its error count.
sanitize() {
  local tool=$1 out rc
  out=$(compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 20 "$PY" scripts/sanitize_kernels.py 2>&1)
  rc=$?
  echo "$out"
  grep -o 'ERROR SUMMARY: [0-9]* error[s]*' <<<"$out" | tail -1 >"$NOTE"  # run_step's pipe is a subshell
  return "$rc"
}

fuzz_gpu() {
  local out rc
  out=$("$PY" scripts/fuzz_gpu.py --count "${FUZZ_COUNT:-2000}" --out "$LOG_DIR/fuzz" 2>&1)
  rc=$?
  echo "$out"
  grep -o 'programs=.*' <<<"$out" | tail -1 >"$NOTE"
  return "$rc"
}

run_step machine describe_machine
built=1
run_step build build_extension || built=0
PART=${PART:-all}
if [[ $PART == all || $PART == tests ]]; then
  if [[ -n ${SKIP_CTEST:-} ]]; then skip_step ctest "SKIP_CTEST set"
  elif command -v cmake >/dev/null; then run_step ctest cpp_tests; else skip_step ctest "no cmake"; fi
fi
if ((built)); then
  if [[ $PART == all || $PART == tests ]]; then
    run_step pytest gpu_tests "$@"
    run_step demo timeout "${BENCH_TIMEOUT:-300}" "$PY" -m tegula demo --rows 8192
  fi
  if [[ $PART == all || $PART == check ]]; then
    for tool in memcheck racecheck synccheck; do
      : >"$NOTE"
      run_step "$tool" sanitize "$tool"
      with_note
    done
  fi
  if [[ $PART == all || $PART == fuzz ]]; then
    : >"$NOTE"
    run_step fuzz_gpu fuzz_gpu
    with_note
  fi
  for bench in benchmarks/bench_*.py; do
    [[ $PART == all || $PART == bench ]] || break
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
  printf '%-28s %-44s %8s\n' step result seconds
  for row in "${rows[@]}"; do
    IFS='|' read -r name result secs <<<"$row"
    printf '%-28s %-44s %8s\n' "$name" "$result" "$secs"
  done
} | tee "$LOG_DIR/summary.txt" | tee -a "$LOG"
for row in "${rows[@]}"; do
  result=$(cut -d'|' -f2 <<<"$row")
  [[ $result == ok* || $result == skipped* ]] || failed=1
done
exit "$failed"
