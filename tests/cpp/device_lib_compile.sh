#!/usr/bin/env bash
# Compile-only check of the device library (kernels/include/tegula) with nvcc for every
# architecture we ship kernels for. Needs the CUDA toolkit, not a GPU.
#   tests/cpp/device_lib_compile.sh              all targets: sm_80 sm_90a sm_100a
#   tests/cpp/device_lib_compile.sh sm_90a       only those named
#   tests/cpp/device_lib_compile.sh --run        also build the numeric checks as a
#                                                program and run them (needs an sm_90+
#                                                GPU; RUN_ARCH overrides sm_90a)
# Prints OK or FAIL per step, with the compiler log on failure; exits 1 if any failed.
set -u

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
source="$root/tests/cpp/device_lib_instantiate.cu"
run=0
targets=()
for arg in "$@"; do
  if [ "$arg" = "--run" ]; then run=1; else targets+=("$arg"); fi
done
[ ${#targets[@]} -eq 0 ] && targets=(sm_80 sm_90a sm_100a)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

failed=0
step() {  # step NAME LOG COMMAND...: run the command, report OK/FAIL under NAME
  local name="$1" log="$2"
  shift 2
  if "$@" >"$log" 2>&1; then
    echo "OK   $name"
  else
    echo "FAIL $name"
    head -n 80 "$log"
    failed=1
    return 1
  fi
}

# -Werror all-warnings: a warning in a header is a warning in every generated kernel.
flags=(-std=c++17 -I "$root/kernels/include" -Werror all-warnings)
for arch in "${targets[@]}"; do
  step "$arch" "$work/$arch.log" "$nvcc" "${flags[@]}" -arch="$arch" -c "$source" -o "$work/$arch.o"
done

if [ $run -eq 1 ]; then
  arch="${RUN_ARCH:-sm_90a}"
  step "build checks ($arch)" "$work/run-build.log" \
    "$nvcc" "${flags[@]}" -arch="$arch" -DTEGULA_DEVICE_LIB_RUN "$source" -o "$work/checks"
  [ -x "$work/checks" ] && step "run checks" "$work/run.log" "$work/checks" && cat "$work/run.log"
fi
exit $failed
