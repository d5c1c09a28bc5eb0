"""The projections of a Llama-3-8B layer, Tegula's GEMM against cuBLAS, bf16: what
`tegula.integrations.transformers.apply(model, gemm="auto")` decides from.

Each product is x (M, K) @ Wᵀ with W an nn.Linear weight (N, K) read in place:
`tegula.kernels.matmul(x, w.t())` against `torch.nn.functional.linear(x, w)`. M = 8, 16,
64 are decode steps of that many sequences (Tegula runs them split-K), M = 8192 a prefill
of 8 x 1024 tokens. Also the fused gate/up product with its SwiGLU epilogue
(`tegula.kernels.gated_mlp.swiglu_linear`, where present) against cuBLAS's product of the
concatenated weight followed by torch's silu(g) * u.

    python benchmarks/bench_model_gemm.py [--rows 8,64,8192]
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import common

HIDDEN, INTER, HEADS_DIM, KV_DIM = 4096, 14336, 4096, 1024
PROJECTIONS = [("q/o proj", HEADS_DIM, HIDDEN), ("k/v proj", KV_DIM, HIDDEN),
               ("gate+up proj", 2 * INTER, HIDDEN), ("down proj", HIDDEN, INTER)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="8,16,64,8192", help="M values, comma-separated")
    args = p.parse_args(argv)
    common.require_gpu("bench_model_gemm")
    from tegula.kernels import matmul

    try:
        from tegula.kernels.gated_mlp import swiglu_linear
    except ImportError:
        swiglu_linear = None
    dtype = torch.bfloat16
    rows = []
    for m in (int(v) for v in args.rows.split(",")):
        for name, n, k in PROJECTIONS:
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
            ref = F.linear(x.float(), w.float())
            out = matmul(x, w.t())
            err = ((out.float() - ref).norm() / ref.norm()).item()
            ours = common.bench(lambda: matmul(x, w.t()))
            cublas = common.bench(lambda: F.linear(x, w))
            tflops = 2 * m * n * k / ours / 1e9
            rows.append((f"M={m} {name} {n}x{k}", ours, cublas, cublas / ours, tflops, err))
            if name == "gate+up proj" and swiglu_linear is not None:
                inter = n // 2

                def torch_mlp():
                    h = F.linear(x, w)
                    return F.silu(h[:, :inter]) * h[:, inter:]

                r = torch_mlp().float()
                o = swiglu_linear(x, w)
                err = ((o.float() - r).norm() / r.norm()).item()
                ours = common.bench(lambda: swiglu_linear(x, w))
                base = common.bench(torch_mlp)
                rows.append((f"M={m} gate+up+SwiGLU fused", ours, base, base / ours, 2 * m * n * k / ours / 1e9, err))
    print(f"\nLlama-3-8B projections, bf16, on {common.device_name()}: Tegula vs cuBLAS (ratio > 1: Tegula faster)")
    print(f"{'case':<40}{'ours ms':>10}{'cuBLAS ms':>11}{'ratio':>8}{'TF/s':>8}{'rel err':>10}")
    for case, ours, cub, ratio, tf, err in rows:
        print(f"{case:<40}{ours:>10.4f}{cub:>11.4f}{ratio:>8.2f}{tf:>8.1f}{err:>10.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
