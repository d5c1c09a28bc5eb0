"""Tile sweep for the backward GEMMs of a decode-shaped product (M tokens x N x K): dB =
aᵀ @ dC is an outer product over few tokens (inner extent M), dA = dC @ bᵀ a split-K
candidate. Each candidate against cuBLAS on the same transposed views, one process.

    python benchmarks/tune_gemm_backward.py [M N K]
"""
import importlib
import sys

import torch

import common

gemm = importlib.import_module("tegula.kernels.gemm")

TILES = [dict(block_M=bm, block_N=bn, block_K=64, num_stages=st, threads=th)
         for bm, bn, th in ((128, 128, 128), (128, 256, 256), (64, 256, 128), (128, 128, 256), (256, 128, 256))
         for st in (1, 2)]


def main():
    common.require_gpu("tune_gemm_backward")
    M, N, K = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (64, 4096, 4096)
    h = dict(dtype=torch.float16, device="cuda")
    a, dc = torch.randn(M, K, **h), torch.randn(M, N, **h)
    bias = torch.empty(N, **h)
    ref = torch.matmul(a.t(), dc)
    cublas = common.bench(lambda: torch.matmul(a.t(), dc))
    print(f"dB = aᵀ dC, ({K} x {M}) @ ({M} x {N}) on {torch.cuda.get_device_name()}: cuBLAS {cublas * 1e3:.1f} us")
    rows = []
    for tile in TILES:
        try:
            kernel = gemm.kernel_for(K, N, M, a.dtype, sms=gemm.sm_count(a.device), splits=1, trans_a=True, **tile)
            out = kernel(a, dc, bias)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ms = common.bench(lambda: kernel(a, dc, bias))
            rows.append((ms, tile, err))
        except Exception as exc:  # noqa: BLE001 - a tile that does not compile is reported, not fatal
            print(f"  {tile}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
    for ms, tile, err in sorted(rows, key=lambda r: r[0]):
        print(f"  {ms * 1e3:7.1f} us  {cublas / ms:5.2f}x cuBLAS  err {err:.1e}  {tile}")


if __name__ == "__main__":
    main()
