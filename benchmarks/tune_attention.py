"""Times flash_attention over a list of tile configurations on the issue's three forward
cases (fp16, BHSD), next to SDPA's flash backend, to choose kernels/flash_attention.py's
defaults. Checks each result against SDPA first.

    python benchmarks/tune_attention.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import common
from tegula.kernels.flash_attention import flash_attention

CASES = [(2, 32, 4096, 128, False), (2, 32, 4096, 128, True), (2, 16, 4096, 64, True),
         (2, 16, 2048, 128, True),  # the demo's case, a few hundred blocks
         (2, 16, 4096, 256, False)]
# (block_M, block_N, threads, num_stages) per head dim.
CONFIGS = {
    128: [(128, 64, 128, 2), (128, 128, 256, 2), (128, 128, 256, 3), (128, 64, 256, 2), (128, 128, 128, 2)],
    64: [(64, 128, 128, 2), (128, 128, 256, 2), (128, 64, 128, 2), (128, 128, 128, 2), (128, 128, 256, 3)],
    256: [(64, 64, 128, 2), (128, 64, 256, 2), (128, 64, 256, 1), (64, 64, 128, 3)],
}


def main() -> int:
    common.require_gpu("tune_attention")
    print(f"flash_attention tiles on {common.device_name()}")
    for B, H, S, D, causal in CASES:
        q, k, v = (torch.randn(B, H, S, D, device="cuda").half() for _ in range(3))
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
            flash = common.bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                cudnn = common.bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        except RuntimeError:
            cudnn = float("nan")
        print(f"B{B} H{H} S{S} D{D} causal={causal}: SDPA flash {flops / flash / 1e9:.0f} TFLOP/s, "
              f"cuDNN {flops / cudnn / 1e9:.0f} TFLOP/s")
        for bm, bn, threads, stages in CONFIGS[D]:
            cfg = dict(block_M=bm, block_N=bn, threads=threads, num_stages=stages)
            try:
                out = flash_attention(q, k, v, causal=causal, layout="bhsd", **cfg)
                err = ((out.float() - ref).norm() / ref.norm()).item()
                t = common.bench(lambda: flash_attention(q, k, v, causal=causal, layout="bhsd", **cfg))
                print(f"  {cfg}: {flops / t / 1e9:6.1f} TFLOP/s  {flash / t:.2f}x flash  {cudnn / t:.2f}x cuDNN  rel err {err:.1e}")
            except Exception as e:  # a tile that does not compile or fit is reported, not fatal
                print(f"  {cfg}: failed: {str(e).splitlines()[0][:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
