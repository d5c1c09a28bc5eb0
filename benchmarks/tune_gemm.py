"""Times the GEMM kernel over a list of tile configurations at one shape (fp16), next to
cuBLAS, to choose kernels/gemm.py's defaults. Checks each result against torch first.

    python benchmarks/tune_gemm.py [M N K]
"""
import importlib
import sys

import torch

import common

CONFIGS = [
    dict(block_M=128, block_N=128, block_K=64, num_stages=3, threads=128),
    dict(block_M=128, block_N=128, block_K=32, num_stages=6, threads=128),
    dict(block_M=128, block_N=128, block_K=32, num_stages=5, threads=128),
    dict(block_M=128, block_N=256, block_K=64, num_stages=4, threads=256),
    dict(block_M=256, block_N=128, block_K=64, num_stages=4, threads=256),
    dict(block_M=128, block_N=256, block_K=32, num_stages=8, threads=256),
    dict(block_M=128, block_N=128, block_K=64, num_stages=4, threads=128),
    dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256),
    dict(block_M=256, block_N=128, block_K=64, num_stages=3, threads=256),
]


def main() -> int:
    common.require_gpu("tune_gemm")
    M, N, K = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (4096, 4096, 4096)
    gemm = importlib.import_module("tegula.kernels.gemm")
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    ref = a.float() @ b.float()
    cublas = common.bench(lambda: torch.matmul(a, b))
    flops = 2.0 * M * N * K
    print(f"{M}x{N}x{K} on {common.device_name()}: cuBLAS {flops / cublas / 1e9:.1f} TFLOP/s")
    for cfg in CONFIGS:
        try:
            k = gemm.kernel_for(M, N, K, torch.float16, **cfg)
            c = k(a, b, a.new_empty(N))
            err = ((c.float() - ref).norm() / ref.norm()).item()
            ms = common.bench(lambda: k(a, b, a.new_empty(N)))
            print(f"  {cfg}: {flops / ms / 1e9:6.1f} TFLOP/s  {cublas / ms:.2f}x cuBLAS  rel err {err:.1e}")
        except Exception as e:  # a configuration that does not fit is reported, not fatal
            print(f"  {cfg}: failed: {str(e)[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
