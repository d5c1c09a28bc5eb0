"""The tensor-parallel MLP's two communicating products on two GPUs, overlapped
(tegula.integrations.distributed) against NCCL then the GEMM, one after the other:

    torchrun --standalone --nproc_per_node=2 benchmarks/bench_overlap.py

Llama-3-70B's MLP (hidden 8192, intermediate 28672), 4096 tokens, bf16, sequence-parallel
around the MLP:
- all-gather + column-parallel gate/up product: each rank holds 4096 / world rows of the
  input, gathers all of them and multiplies by its (8192, 2 * 28672 / world) shard;
- row-parallel down product + reduce-scatter: (4096, 28672 / world) @ (28672 / world, 8192)
  partial sums, reduce-scattered by rows.

Each case is timed on every rank as the median of CUDA-event timings (both ranks run the
same loop; rank 0 prints). The baseline is NCCL's collective then cuBLAS (torch.matmul), and
its two parts alone; the bound an overlap can reach is (collective + GEMM) / max(collective,
GEMM). Target: >= 1.15x the baseline.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TARGET = 1.15


def _line_up():
    dist.barrier()
    torch.cuda.synchronize()


def timed(fn, warmup=3, repeat=20):
    """Median ms of fn() on this rank, both ranks starting each call together."""
    return common.synced_event_ms(fn, repeat, warmup=warmup, before=_line_up)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--intermediate", type=int, default=28672)
    p.add_argument("--chunks", default="2,4,8")
    args = p.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if not torch.cuda.is_available() or torch.cuda.device_count() < world or world < 2:
        print("bench_overlap: skipped, needs torchrun with 2+ ranks and a GPU each")
        return 0
    from tegula.integrations.distributed import all_gather_matmul, matmul_reduce_scatter

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    h, inter, tokens = args.hidden, args.intermediate, args.tokens
    bf = dict(dtype=torch.bfloat16, device=device)
    g = torch.Generator(device=device).manual_seed(rank)
    x_shard = torch.randn(tokens // world, h, generator=g, **bf)
    w_up = torch.randn(h, 2 * inter // world, generator=g, **bf) * h ** -0.5
    act = torch.randn(tokens, inter // world, generator=g, **bf)
    w_down = torch.randn(inter // world, h, generator=g, **bf) * inter ** -0.5
    gathered = torch.empty(tokens, h, **bf)
    rs_out = torch.empty(tokens // world, h, **bf)

    def ag_nccl():
        dist.all_gather_into_tensor(gathered, x_shard)

    def ag_gemm():
        return gathered @ w_up

    def rs_gemm():
        return act @ w_down

    partial = rs_gemm()

    def rs_nccl():
        dist.reduce_scatter_tensor(rs_out, partial)

    group_name = dist.group.WORLD.group_name

    def torch_fused_ag():
        return torch.ops.symm_mem.fused_all_gather_matmul(x_shard, [w_up], 0, group_name)

    rows = []
    chunk_counts = [int(c) for c in args.chunks.split(",")]
    ag_variants = [(f"{c} pieces, {gname} GEMM, {tname}",
                    (lambda c=c, m=m, t=t: all_gather_matmul(x_shard, w_up, chunks=c, matmul=m, transport=t)))
                   for t, tname in (("copy", "copy engines"), ("nccl", "NCCL")) for m, gname in
                   (("torch", "cuBLAS"), ("tegula", "Tegula")) for c in chunk_counts]
    ag_variants.append(("torch's fused_all_gather_matmul (symmetric memory)", torch_fused_ag))
    rs_variants = [(f"{c} pieces, {gname} GEMM, NCCL",
                    (lambda c=c, m=m: matmul_reduce_scatter(act, w_down, chunks=c, matmul=m)))
                   for m, gname in (("torch", "cuBLAS"), ("tegula", "Tegula")) for c in chunk_counts]
    for name, coll, gemm, base, variants in (
            ("all-gather + gate/up GEMM", ag_nccl, ag_gemm, lambda: (ag_nccl(), ag_gemm()), ag_variants),
            ("down GEMM + reduce-scatter", rs_nccl, rs_gemm, lambda: (rs_gemm(), rs_nccl()), rs_variants)):
        t_coll, t_gemm, t_base = timed(coll), timed(gemm), timed(base)
        bound = (t_coll + t_gemm) / max(t_coll, t_gemm)
        rows.append({"case": f"{name}: NCCL then cuBLAS", "ms": t_base, "coll": t_coll, "gemm": t_gemm,
                     "ratio": 1.0, "bound": bound})
        for label, fn in variants:
            try:
                ms = timed(fn)
            except Exception as e:   # noqa: BLE001 - a variant this torch lacks is reported in its row
                rows.append({"case": f"{name}: {label}", "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            rows.append({"case": f"{name}: {label}", "ms": ms, "ratio": t_base / ms, "bound": bound,
                         "target": f">= {TARGET}x", "status": common.status(t_base / ms >= TARGET)})
    if rank == 0:
        common.print_table(f"tensor-parallel MLP products, {tokens} tokens, hidden {h}, intermediate {inter}, "
                           f"{world} ranks", rows, columns=[
                               ("case", "case", "s"), ("ms", "ms", ".3f"), ("NCCL ms", "coll", ".3f"),
                               ("GEMM ms", "gemm", ".3f"), ("vs baseline", "ratio", ".3f"),
                               ("overlap bound", "bound", ".3f"), ("target", "target", "s"),
                               ("status", "status", "s")],
                           notes=["overlap bound: (collective + GEMM) / max(collective, GEMM), the most any "
                                  "overlap of the two can give"])
        common.write_json("overlap", rows, world=world)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
