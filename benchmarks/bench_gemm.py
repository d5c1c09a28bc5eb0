"""GEMM (fp16 in, fp32 accumulate) against torch.matmul (cuBLAS), TFLOP/s and ratio, with a
PNG plot of the sweep ($OUT/bench_gemm.png when OUT is set). `ours` is tegula's matmul()
as a user calls it (wgmma on sm_90a, any operand padding included); the mma.sync column is
the same entry held to mma.sync, for the two large square shapes.

    python benchmarks/bench_gemm.py
"""
import importlib
import json
import os
import sys

import torch

import common

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4097, 4095, 4096), (127, 1000, 333), (16, 4096, 4096)]
TARGETS = {(4096, 4096, 4096): ">=0.70x cuBLAS", (8192, 8192, 8192): ">=0.70x cuBLAS",
           (4097, 4095, 4096): ">=2x cuBLAS"}


def main() -> int:
    common.require_gpu("bench_gemm")
    gemm = importlib.import_module("tegula.kernels.gemm")
    rows = []
    for M, N, K in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, generator=g, device="cuda").half()
        b = torch.randn(K, N, generator=g, device="cuda").half()
        ours = common.bench(lambda: gemm.matmul(a, b))
        theirs = common.bench(lambda: torch.matmul(a, b))
        flops = 2.0 * M * N * K
        ratio = theirs / ours
        mma = float("nan")
        if M == N == K:
            k_mma = gemm.kernel_for(M, N, K, a.dtype, mma_sync=True)
            dummy = a.new_empty(N)
            mma = flops / common.bench(lambda: k_mma(a, b, dummy)) / 1e9
        target = TARGETS.get((M, N, K), "-")
        ok = None
        if target.startswith(">=0.70x"):
            ok = ratio >= 0.70
        elif target.startswith(">=2x"):
            ok = ratio >= 2.0
        rows.append({"shape": f"{M}x{N}x{K}", "ours_ms": ours, "torch_ms": theirs,
                     "ours_tflops": flops / ours / 1e9, "torch_tflops": flops / theirs / 1e9,
                     "vs_cublas": ratio, "mma_sync_tflops": mma, "target": target, "status": "-" if ok is None else common.status(ok)})
    columns = [("shape", "shape", "s"), ("ours ms", "ours_ms", ".4f"), ("torch ms", "torch_ms", ".4f"),
               ("ours TFLOP/s", "ours_tflops", ".1f"), ("cuBLAS TFLOP/s", "torch_tflops", ".1f"),
               ("vs cuBLAS", "vs_cublas", ".2f"), ("mma.sync TFLOP/s", "mma_sync_tflops", ".1f"),
               ("target", "target", "s"), ("status", "status", "s")]
    common.print_table("GEMM fp16 -> fp32 accumulate (tegula matmul vs cuBLAS)", rows, columns)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gemm.json"), "w") as f:
            json.dump(rows, f, indent=1)
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            x = range(len(rows))
            plt.figure(figsize=(8, 4))
            plt.bar([i - 0.2 for i in x], [r["ours_tflops"] for r in rows], 0.4, label="tegula")
            plt.bar([i + 0.2 for i in x], [r["torch_tflops"] for r in rows], 0.4, label="torch.matmul")
            plt.xticks(list(x), [r["shape"] for r in rows], rotation=20)
            plt.ylabel("TFLOP/s")
            plt.legend()
            plt.tight_layout()
            plt.savefig(os.path.join(out, "bench_gemm.png"))
        except Exception as e:  # the table is the result; the plot is a convenience
            print("no plot:", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
