"""The first call of a shipped kernel in a new Python process, as a user meets it:

- cold: an empty TEGULA_CACHE_DIR, so the frontend, the passes, NVRTC and the module load
  all run. Target for the attention forward: <= 500 ms.
- disk-cache hit: a first process fills a temporary TEGULA_CACHE_DIR, a second one makes
  the same call and is timed. Target for every kernel: <= 5 ms (a hit neither parses nor
  lowers the program: see python/tegula/jit_index.py).

What is timed, inside the child (interpreter start, `import torch`, `import tegula` and
the CUDA context are not): on a GPU, the entry point's first call until it returns (the
JIT's work and the launch; the kernel runs asynchronously), and beside it the time until
a synchronise (the kernel's own run, about 1 ms for the attention case, included); without
one, the kernel's specialisation for sm_90a and its cubin (the compile-only path). The cold
attention case is run again with TEGULA_LOG=compile, and its per-stage lines are printed
under the table (where the time goes).

    python benchmarks/bench_compile.py        # OUT=dir also writes dir/bench_compile.json
"""
import json
import os
import subprocess
import sys
import tempfile

import common

COLD_TARGET_MS = {"flash_attention": 500.0}
HIT_TARGET_MS = 5.0
TIMEOUT_S = 300
KERNELS = ("rms_norm", "matmul", "flash_attention", "flash_decode")

# Runs in the child: argv[1] = the kernel's name.
SNIPPET = r"""
import importlib, json, os, sys, time
import torch
import tegula
from tegula import env as tegula_env

tegula_env.native()   # loading the compiled core belongs to the import
name = sys.argv[1]
gpu = torch.cuda.is_available()
K = importlib.import_module("tegula.kernels")
fa = importlib.import_module("tegula.kernels.flash_attention")
gemm = importlib.import_module("tegula.kernels.gemm")
rms = importlib.import_module("tegula.kernels.rmsnorm")
fd = importlib.import_module("tegula.kernels.flash_decoding")
if gpu:
    torch.cuda.init()
    h = dict(dtype=torch.float16, device="cuda")
    inputs = {
        "rms_norm": lambda: (torch.randn(8, 4096, **h), torch.ones(4096, **h)),
        "matmul": lambda: (torch.randn(4096, 4096, **h), torch.randn(4096, 4096, **h)),
        "flash_attention": lambda: (torch.randn(2, 4096, 32, 128, **h),) * 3,
        "flash_decode": lambda: (torch.randn(8, 32, 128, **h), torch.randn(8, 4096, 8, 128, **h),
                                 torch.randn(8, 4096, 8, 128, **h),
                                 torch.full((8,), 4096, dtype=torch.int32, device="cuda")),
    }[name]()
    call = {"rms_norm": K.rms_norm, "matmul": K.matmul, "flash_decode": K.flash_decode,
            "flash_attention": lambda q, k, v: fa.flash_attention(q, k, v, causal=True)}[name]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    call(*inputs)
    host = time.perf_counter()
    torch.cuda.synchronize()
    path = "gpu: the entry point's first call"
    print("RESULT " + json.dumps({"path": path, "ms": 1e3 * (host - t0), "synced_ms": 1e3 * (time.perf_counter() - t0)}))
    sys.exit(0)
else:
    os.environ.setdefault("TEGULA_TARGET", "sm_90a")
    make = {
        "rms_norm": lambda: rms.kernel_for(4096, torch.float16, 1e-6),
        "matmul": lambda: gemm.kernel_for(4096, 4096, 4096, torch.float16, sms=132),
        "flash_attention": lambda: fa.kernel_for(2, 32, 32, 4096, 4096, 128, True, 0, "bshd", "float16", None),
        "flash_decode": lambda: fd.kernels_for(8, 32, 8, 4096, 128, 16, "float16", None)[0],
    }[name]
    t0 = time.perf_counter()
    make().cubin()
    path = "compile-only sm_90a, to cubin"
print("RESULT " + json.dumps({"path": path, "ms": 1e3 * (time.perf_counter() - t0)}))
"""


def run_child(name: str, env_updates: dict) -> dict:
    """Runs SNIPPET in a new interpreter; its result (and stderr), or {"error": ...}."""
    env = dict(os.environ)
    env.pop("TEGULA_DISABLE_CACHE", None)
    env.pop("TEGULA_LOG", None)
    env.update(env_updates)
    try:
        proc = subprocess.run([sys.executable, "-c", SNIPPET, name], env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), "stderr": proc.stderr}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)[:400]}


def _row(name, case, result, target_ms):
    row = {"kernel": name, "case": case, "target": f"<={target_ms:g} ms" if target_ms else "-"}
    if "error" in result:
        row.update(error=result["error"], status="ERROR")
        return row
    row.update(ms=result["ms"], synced_ms=result.get("synced_ms"), path=result["path"])
    row["status"] = common.status(result["ms"] <= target_ms) if target_ms else "-"
    return row


def main() -> int:
    rows, log = [], ""
    for name in KERNELS:
        with tempfile.TemporaryDirectory(prefix="tegula-bench-cache-") as cache_dir:
            cold = run_child(name, {"TEGULA_CACHE_DIR": cache_dir})
            hit = cold if "error" in cold else run_child(name, {"TEGULA_CACHE_DIR": cache_dir})
        rows.append(_row(name, "cold, new process", cold, COLD_TARGET_MS.get(name)))
        rows.append(_row(name, "disk-cache hit, new process", hit, HIT_TARGET_MS))
    with tempfile.TemporaryDirectory(prefix="tegula-bench-log-") as cache_dir:
        logged = run_child("flash_attention", {"TEGULA_CACHE_DIR": cache_dir, "TEGULA_LOG": "compile"})
        log = logged.get("stderr", logged.get("error", ""))
    common.write_json("compile", rows)
    columns = [("kernel", "kernel", "s"), ("case", "case", "s"), ("call ms", "ms", ".1f"),
               ("call + sync ms", "synced_ms", ".1f"), ("target", "target", "s"),
               ("status", "status", "s")]
    path = next((r["path"] for r in rows if "path" in r), "-")
    common.print_table("First call in a new process (float16), DSL to cubin to launch", rows, columns=columns,
                       notes=[f"timed path: {path}; imports and CUDA start-up excluded",
                              "where the cold attention compile goes (TEGULA_LOG=compile):"]
                       + ["  " + line for line in log.strip().splitlines()[-30:]])
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
