"""Scaled FP8 GEMM (kernels/scaled_gemm.py) against torch._scaled_mm (cuBLASLt) and the bf16
torch.matmul (cuBLAS) of the same shape: times, TFLOP/s and ratios; rows as JSON
($OUT/bench_fp8_gemm.json) when OUT is set.

Per shape (tokens M x out N x in K, a (M, K) and the weight b (N, K) in float8_e4m3fn, a
bfloat16 output), one process, median CUDA-event times with L2 flushed (common.bench):

    ours tensor   fp8_gemm with per-tensor scales        vs torch._scaled_mm(a, b.t(), per tensor)
    ours row      fp8_gemm with per-row scales           vs torch._scaled_mm rowwise (where torch has it)
    ours block    fp8_gemm with DeepSeek-V3 block scales vs the per-tensor torch._scaled_mm
    bf16          torch.matmul of bf16 operands of the shape

`smm` is torch._scaled_mm with its default accumulation (use_fast_accum=False: cuBLASLt
promotes the fp8 sums, as our block kind does); `smm fast` with use_fast_accum=True (the
whole K summed on the tensor cores, as our tensor and row kinds do). Targets: per tensor
>= 1.0x smm at 4096³ and 8192³; block >= 0.9x the per-tensor smm at DeepSeek-V3's shapes.
For every row the relative error against float64 of ours and of the per-tensor smm is
printed (block scales and per-tensor scales quantise the same values differently; the
error is each one's against its own dequantised operands).

Knobs, for sweeping the tiles (kernel_for's config keys: block_M, block_N, block_K,
num_stages, threads, panel_size, promote, pair, splits); several configs separated by ";"
are each timed in the same process, the torch baselines once per shape:

    python benchmarks/bench_fp8_gemm.py
    python benchmarks/bench_fp8_gemm.py --kinds block --shapes 4096x7168x2048 --config num_stages=4,block_N=128
    python benchmarks/bench_fp8_gemm.py --kinds block --groups deepseek --config "plan;pair=0,num_stages=5"
    TEGULA_FP8_CONFIG="block_M=128,block_N=256,num_stages=3" python benchmarks/bench_fp8_gemm.py --kinds tensor
"""
import argparse
import importlib
import os
import sys

import torch

import common

SHAPES = {
    "square": [(4096, 4096, 4096), (8192, 8192, 8192)],
    "deepseek": [(4096, 7168, 2048), (4096, 2112, 7168), (4096, 24576, 1536), (4096, 7168, 16384)],
    "decode": [(16, 7168, 2048), (64, 24576, 1536)],
}
TARGETS = {("tensor", "square"): 1.0, ("block", "deepseek"): 0.9}


def parse_config(text):
    """"block_N=128,num_stages=4" -> {"block_N": 128, "num_stages": 4}."""
    config = {}
    for item in filter(None, (text or "").split(",")):
        key, _, value = item.partition("=")
        config[key.strip()] = int(value)
    return config


def parse_configs(text):
    """"plan;pair=0,num_stages=5" -> [{}, {"pair": 0, "num_stages": 5}] ("plan" or "": the
    planned tile unchanged)."""
    parts = [part.strip() for part in (text or "").split(";") if part.strip()]
    return [{} if part == "plan" else parse_config(part) for part in parts] or [{}]


def label(config):
    return ",".join(f"{k}={v}" for k, v in config.items()) or "plan"


def quantise(x, rows, cols, dtype=torch.float8_e4m3fn):
    """x (R, C) in fp8 with one float32 scale per rows x cols block (zero padding past the edge)."""
    R, C = x.shape
    p = torch.zeros(-(-R // rows) * rows, -(-C // cols) * cols, device=x.device)
    p[:R, :C] = x
    v = p.view(p.shape[0] // rows, rows, p.shape[1] // cols, cols)
    s = v.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-4) / torch.finfo(dtype).max
    return (v / s).to(dtype).view_as(p)[:R, :C].contiguous(), s.view(s.shape[0], s.shape[2]).contiguous()


def operands(M, N, K, kind):
    x = torch.randn(M, K, device="cuda")
    w = torch.randn(N, K, device="cuda") * 0.05
    rows_a, cols_a, rows_b, cols_b = {"tensor": (M, K, N, K), "row": (1, K, 1, K), "block": (1, 128, 128, 128)}[kind]
    a, sa = quantise(x, rows_a, cols_a)
    b, sb = quantise(w, rows_b, cols_b)
    if kind == "tensor":
        sa, sb = sa.reshape(()), sb.reshape(())
    elif kind == "row":
        sa, sb = sa.reshape(M, 1), sb.reshape(1, N)
    return a, b, sa, sb


def reference(a, b, sa, sb, kind):
    M, K = a.shape
    N = b.shape[0]
    if kind == "block":
        ga = sa.repeat_interleave(128, 1)[:, :K]
        gb = sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:N, :K]
    else:
        ga, gb = sa.reshape(-1, 1) if sa.numel() > 1 else sa, sb.reshape(-1, 1) if sb.numel() > 1 else sb
    return (a.double() * ga.double()) @ (b.double() * gb.double()).T


def scaled_mm(a, b, sa, sb, fast=False):
    return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)


def try_bench(fn):
    """(ms, None) or (None, the error's first line)."""
    try:
        fn()
        torch.cuda.synchronize()
        return common.bench(fn), None
    except Exception as exc:  # reported in the row
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def tflops(M, N, K, ms):
    return None if ms is None else 2 * M * N * K / (ms * 1e-3) / 1e12


def run_case(sg, M, N, K, kind, group, config, baselines=None):
    """One row; `baselines`: a dict kept across the configs of one shape and kind, so that
    the torch baselines are timed once."""
    a, b, sa, sb = operands(M, N, K, kind) if baselines is None or "operands" not in baselines \
        else baselines["operands"]
    if baselines is not None:
        baselines["operands"] = (a, b, sa, sb)
    row = {"case": f"{kind} {M}x{N}x{K} [{label(config)}]", "kind": kind, "M": M, "N": N, "K": K,
           "config": config}
    ours = lambda: sg.fp8_gemm_with_config(a, b, sa, sb, out_dtype="bfloat16", **config)  # noqa: E731
    ref = reference(a, b, sa, sb, kind)
    try:
        row["ours_err"] = common.rel_err(ours(), ref)
    except Exception as exc:  # the baselines are still timed
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    row["ours_ms"], _ = try_bench(ours) if not row.get("error") else (None, None)
    keys = ("smm_ms", "smm_fast_ms", "smm_err", "smm_note", "smm_row_ms", "smm_row_note", "bf16_ms")
    if baselines is not None and "smm_ms" in baselines:
        row.update({key: baselines[key] for key in keys if key in baselines})
    else:
        # The per-tensor torch baseline of the same shape (for the block kind its own quantisation).
        ta, tb, tsa, tsb = (a, b, sa, sb) if kind == "tensor" else operands(M, N, K, "tensor")
        row["smm_ms"], smm_error = try_bench(lambda: scaled_mm(ta, tb, tsa, tsb))
        row["smm_fast_ms"], _ = try_bench(lambda: scaled_mm(ta, tb, tsa, tsb, fast=True))
        if smm_error is None:
            row["smm_err"] = common.rel_err(scaled_mm(ta, tb, tsa, tsb), reference(ta, tb, tsa, tsb, "tensor"))
        else:
            row["smm_note"] = smm_error
        if kind == "row":
            row["smm_row_ms"], row["smm_row_note"] = try_bench(lambda: scaled_mm(a, b, sa, sb))
        xa, xb = a.to(torch.bfloat16), b.to(torch.bfloat16)
        row["bf16_ms"], _ = try_bench(lambda: torch.matmul(xa, xb.t()))
        if baselines is not None:
            baselines.update({key: row[key] for key in keys if key in row})
    for key in ("ours", "smm", "smm_fast", "smm_row", "bf16"):
        row[f"{key}_tflops"] = tflops(M, N, K, row.get(f"{key}_ms"))
    if row["ours_ms"]:
        for key in ("smm", "smm_fast", "smm_row", "bf16"):
            if row.get(f"{key}_ms"):
                row[f"vs_{key}"] = row[f"{key}_ms"] / row["ours_ms"]
    target = TARGETS.get((kind, group))
    row["target"] = f">={target:g}x smm" if target else "-"
    tol = 2e-2   # bf16 output plus fp8 sums: a wrong kernel is far past this
    if row.get("error"):
        row["status"] = "ERROR"
    elif not row.get("ours_err", float("inf")) <= tol:
        row["status"] = "WRONG"
    elif target and row.get("vs_smm"):
        row["status"] = common.status(row["vs_smm"] >= target)
    else:
        row["status"] = "-"
    return row


COLUMNS = [("case", "case", "s"), ("ours ms", "ours_ms", ".4f"), ("TFLOP/s", "ours_tflops", ".0f"),
           ("smm ms", "smm_ms", ".4f"), ("smm TF", "smm_tflops", ".0f"), ("smm fast TF", "smm_fast_tflops", ".0f"),
           ("smm row TF", "smm_row_tflops", ".0f"), ("bf16 TF", "bf16_tflops", ".0f"),
           ("vs smm", "vs_smm", ".2f"), ("vs fast", "vs_smm_fast", ".2f"), ("vs row", "vs_smm_row", ".2f"),
           ("vs bf16", "vs_bf16", ".2f"), ("err ours", "ours_err", ".1e"), ("err smm", "smm_err", ".1e"),
           ("target", "target", "s"), ("status", "status", "s")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="tensor,row,block", help="comma-separated: tensor,row,block")
    parser.add_argument("--groups", default="square,deepseek,decode", help=f"comma-separated of {tuple(SHAPES)}")
    parser.add_argument("--shapes", default="", help="MxNxK,... instead of the groups")
    parser.add_argument("--config", default=os.environ.get("TEGULA_FP8_CONFIG", ""),
                        help="kernel_for overrides, key=int,...; several separated by ';' (or $TEGULA_FP8_CONFIG)")
    args = parser.parse_args(argv)
    configs = parse_configs(args.config)
    kinds = [k for k in args.kinds.split(",") if k]
    if args.shapes:
        cases = [("custom", tuple(int(v) for v in s.split("x"))) for s in args.shapes.split(",") if s]
    else:
        cases = [(g, shape) for g in args.groups.split(",") if g for shape in SHAPES[g]]
    common.require_gpu("bench_fp8_gemm")
    if torch.cuda.get_device_capability() < (8, 9):
        print("bench_fp8_gemm: skipped, 8-bit tensor cores need sm_89 or newer")
        return 0
    sg = importlib.import_module("tegula.kernels.scaled_gemm")
    torch.manual_seed(0)
    rows = []
    for group, (M, N, K) in cases:
        for kind in kinds:
            baselines = {}
            for config in configs:
                r = run_case(sg, M, N, K, kind, group, config, baselines)
                rows.append(r)
                print(f"  {r['case']}: ours {r.get('ours_ms')} ms, smm {r.get('smm_ms')} ms, {r['status']}",
                      flush=True)
    common.print_table("Scaled FP8 GEMM (bf16 out) vs torch._scaled_mm and bf16 cuBLAS", rows, COLUMNS,
                       notes=[f"config overrides: {'; '.join(label(c) for c in configs)}",
                              "smm: torch._scaled_mm per tensor (use_fast_accum=False); fast: use_fast_accum=True",
                              "err: relative Frobenius error vs float64 of the dequantised operands"])
    common.write_json("fp8_gemm", rows, config=configs if len(configs) > 1 else configs[0])
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
