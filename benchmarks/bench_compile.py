"""Compile time of the RMSNorm kernel, DSL to cubin, each case in a fresh Python process:

- cold: the kernel cache disabled (TEGULA_DISABLE_CACHE=1, and an empty TEGULA_CACHE_DIR
  besides), so the frontend, the passes, NVRTC and the module load all run. Target ≤ 0.5 s.
  The same process then compiles a second hidden size: the cost once one-time set-up
  (loading NVRTC, its first invocation) is paid.
- disk-cache hit: a first process fills a temporary TEGULA_CACHE_DIR, a second one makes
  the same call and is timed. Target ≤ 10 ms.

What is timed, inside the child process (interpreter start, `import torch`, `import
tegula` and the CUDA context are not): on a GPU, the jit specialisation call plus the
first launch and a synchronise, so the time covers compilation whether the kernel object
builds its cubin at construction or on first call; without a GPU, `tegula.compile(func,
target="sm_90a")` (the frontend and the passes) and the lowered kernel's `compile()`
(NVRTC to a cubin), the compile-only path.

    python benchmarks/bench_compile.py        # OUT=dir also writes dir/bench_compile.json
"""
import json
import os
import subprocess
import sys
import tempfile

import common

HIDDEN = 4096
SECOND_HIDDEN = 1024
COLD_TARGET_MS = 500.0
HIT_TARGET_MS = 10.0
TIMEOUT_S = 300

# Runs in the child: argv = hidden sizes to compile, in order, in this one process.
SNIPPET = r"""
import json, os, sys, time
import torch
import tegula
from tegula.kernels import rmsnorm
from tegula.kernels._common import plan_rows

from tegula import env as tegula_env

# tegula loads its compiled core on first use; that belongs to the import, not the compile.
tegula_env.native()
if os.environ.get("TEGULA_DISABLE_CACHE") == "1":
    # Also through the API, in case the variable is read only at a later start-up step;
    # the empty TEGULA_CACHE_DIR keeps the run cold either way.
    tegula_env.set_cache_enabled(False)

gpu = torch.cuda.is_available()
path = "gpu: specialise + first launch"
if gpu:
    torch.cuda.init()
    torch.empty(1, device="cuda")
timings = []
for n in map(int, sys.argv[1:]):
    if gpu:
        x = torch.randn(4, n, device="cuda", dtype=torch.float16)
        w = torch.ones(n, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        kernel = rmsnorm.kernel_for(n, torch.float16, 1e-6)
        t1 = time.perf_counter()
        kernel(x, w, y)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
    else:
        plan = plan_rows(n, 2)
        t0 = time.perf_counter()
        func = rmsnorm.rms_norm_program(n, "float16", 1e-6, False, plan.blk_m, plan.threads,
                                        plan.n_pad)
        t1 = time.perf_counter()
        kernel = tegula.compile(func, target="sm_90a")
        # JITKernel lowers at construction and runs NVRTC at its first launch; without a
        # GPU the lowered kernel's compile() makes the cubin (through the cache) instead.
        lowered = getattr(kernel, "_lowered", None)
        if lowered is not None and hasattr(lowered, "compile"):
            lowered.compile()
            path = "compile-only sm_90a, to cubin"
        else:
            kernel.get_kernel_source()
            path = "compile-only sm_90a, to CUDA source"
        t2 = time.perf_counter()
    timings.append({"hidden": n, "specialise_ms": 1e3 * (t1 - t0), "build_ms": 1e3 * (t2 - t1),
                    "total_ms": 1e3 * (t2 - t0)})
print("RESULT " + json.dumps({"path": path, "timings": timings}))
"""


def run_child(env_updates: dict, hidden_sizes) -> dict:
    """Runs SNIPPET in a new interpreter; its result, or {"error": ...}."""
    env = dict(os.environ)
    env.pop("TEGULA_DISABLE_CACHE", None)
    env.update(env_updates)
    cmd = [sys.executable, "-c", SNIPPET, *map(str, hidden_sizes)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)[:400]}


def _row(case, result, index, target_ms):
    row = {"case": case, "target": f"<={target_ms:g} ms" if target_ms else "-"}
    if "error" in result:
        row.update(error=result["error"], status="ERROR")
        return row
    timing = result["timings"][index]
    row.update(timing, path=result["path"])
    row["status"] = common.status(timing["total_ms"] <= target_ms) if target_ms else "-"
    return row


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tegula-bench-cold-") as cold_dir:
        cold = run_child({"TEGULA_DISABLE_CACHE": "1", "TEGULA_CACHE_DIR": cold_dir},
                         [HIDDEN, SECOND_HIDDEN])
    with tempfile.TemporaryDirectory(prefix="tegula-bench-cache-") as cache_dir:
        fill = run_child({"TEGULA_CACHE_DIR": cache_dir}, [HIDDEN])
        hit = fill if "error" in fill else run_child({"TEGULA_CACHE_DIR": cache_dir}, [HIDDEN])
    rows = [
        _row(f"cold compile, N={HIDDEN}, new process", cold, 0, COLD_TARGET_MS),
        _row(f"cold compile, N={SECOND_HIDDEN}, same process", cold, 1, None),
        _row(f"disk-cache hit, N={HIDDEN}, new process", hit, 0, HIT_TARGET_MS),
    ]
    common.write_json("compile", rows)
    columns = [("case", "case", "s"), ("specialise ms", "specialise_ms", ".1f"),
               ("build + first run ms", "build_ms", ".1f"), ("total ms", "total_ms", ".1f"),
               ("target", "target", "s"), ("status", "status", "s")]
    path = next((r["path"] for r in rows if "path" in r), "-")
    common.print_table("Compile time of rms_norm (float16), DSL to cubin", rows, columns=columns,
                       notes=[f"timed path: {path}; imports and CUDA start-up excluded"])
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
