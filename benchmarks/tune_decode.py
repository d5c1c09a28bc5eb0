"""Times the split-K decode GEMM (M <= 64) over slice counts and tiles at the issue's two
decode shapes (fp16), next to cuBLAS and to the device's copy bandwidth, to choose
kernels/gemm.py's SPLIT_K_CONFIG and slice rule. Checks each result against torch first.

    python benchmarks/tune_decode.py
"""
import importlib

import torch

import common

SHAPES = [(16, 4096, 4096), (64, 8192, 8192)]
SPLITS = [4, 8, 16]
TILES = [dict(block_N=128, block_K=64, num_stages=4), dict(block_N=128, block_K=128, num_stages=4),
         dict(block_N=256, block_K=64, num_stages=4), dict(block_N=64, block_K=128, num_stages=6),
         dict(block_N=256, block_K=128, num_stages=3)]


def main() -> int:
    common.require_gpu("tune_decode")
    gemm = importlib.import_module("tegula.kernels.gemm")
    bw = common.copy_bandwidth_gbs()
    print(f"split-K decode GEMM on {common.device_name()} (copy bandwidth {bw:.0f} GB/s)")
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda").half()
        b = torch.randn(K, N, device="cuda").half()
        ref = a.float() @ b.float()
        cublas = common.bench(lambda: torch.matmul(a, b))
        print(f"{M}x{N}x{K}: cuBLAS {cublas * 1e3:.1f} us, B at {2 * K * N / cublas / 1e6 / bw * 100:.0f}% copy")
        for splits in SPLITS:
            for tile in TILES:
                cfg = dict(tile, splits=splits)
                try:
                    k = gemm.kernel_for(M, N, K, a.dtype, **cfg)
                    dummy = a.new_empty(N)
                    out = k(a, b, dummy)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    t = common.bench(lambda: k(a, b, dummy))
                    print(f"  {cfg}: {t * 1e3:6.1f} us  {cublas / t:.2f}x cuBLAS  B at "
                          f"{2 * K * N / t / 1e6 / bw * 100:.0f}% copy  rel err {err:.1e}")
                except Exception as e:  # a tile that does not compile or fit is reported, not fatal
                    print(f"  {cfg}: failed: {str(e).splitlines()[0][:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
