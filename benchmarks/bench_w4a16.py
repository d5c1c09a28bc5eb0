"""w4a16_gemm (tegula.kernels.dequant_gemm) against the bf16/fp16 torch.matmul a user would
run without quantization, at Llama-3-8B's MLP shapes: N x K = 14336 x 4096 (gate/up) and
4096 x 14336 (down), M = 1, 8, 16 tokens (the decode path) and a few prefill M.

Per row (a decode shape gets a row for each decode pipeline: "mma", the default, cp.async
and mma.sync; "legacy", cp.async and wgmma on sm_90a; "auto", TMA with a producer
warpgroup and wgmma): our time, torch.matmul(x, Wᵀ)'s time for the same shape with W in
x's dtype, "% copy" = the packed weight bytes (N K / 2) streamed per second against a 1 GiB
device-to-device copy on the same GPU (common.copy_bandwidth_gbs), the ratio torch / ours,
and "read ms": torch reading the packed bytes once (a sum), the floor of any kernel that
streams them at this size ("% read" = that floor over our time). Targets (decode rows
only): >= 3.0x torch and >= 80% of copy bandwidth. Every output is first compared with
torch in float32 from the dequantized weight (relative error <= 1e-2 bf16, 2e-3 fp16, else
WRONG). One process, medians of CUDA-event timings with L2 flushed and left clean before
each call (common.clean_l2_bench: a decode step finds L2 full of what the kernel before
it read), the same inputs for every column.

"kernel ms" is the same call timed by its kernels' own device time (CUPTI, launch gaps
and host time excluded): where it is well below "ours ms", the call's time is not the
kernels' (host overhead past the L2 flush, or the gap between a split-K call's two
kernels).

--sweep times decode tile configurations (block_N, block_K = the bytes a stage loads,
chunk_K = the columns one dequantize-and-mma pass takes, num_stages, threads, K slices
(the rule's count, half and twice it), post_scale on/off, the three pipelines) at each shape with M <= 64 (the decode program forced
past M = 16, to see where it still beats the prefill path), the default first, for
choosing DECODE_CONFIG, the split rule and DECODE_MAX_M on the GPU at hand.
--prefill-sweep times the prefill path's two modes ("dequant": dequantize W to x's dtype,
then tegula.kernels.gemm's matmul; "fused": prefill_program) and fused tiles.

    python benchmarks/bench_w4a16.py                       # int4, group 128, bf16
    python benchmarks/bench_w4a16.py --format fp4_e8m0 --format int4_zeros --dtype float16
    python benchmarks/bench_w4a16.py --sweep --m 1 --shape 4096x14336   # one shape a run (~3 min)
    python benchmarks/bench_w4a16.py --prefill-sweep --m 64 --m 512
    python benchmarks/bench_w4a16.py --dry-run             # no GPU: cases and the programs chosen

OUT=dir also writes dir/bench_w4a16.json (and dir/bench_w4a16_sweep.json).
"""
import argparse
import importlib
import itertools
import sys

import torch

import common

SHAPES = ((14336, 4096), (4096, 14336))
DECODE_M = (1, 8, 16)
PREFILL_M = (64, 512)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
# format -> (weight_format, group_size)
FORMATS = {"int4": ("int4", 128), "int4_zeros": ("int4", 128), "fp4_e8m0": ("fp4", 32), "fp4_e4m3": ("fp4", 16)}
MIN_RATIO, MIN_PCT_COPY = 3.0, 80.0


def dg():
    return importlib.import_module("tegula.kernels.dequant_gemm")


def make_inputs(M, N, K, fmt, dtype):
    """x (M, K), the quantized weight and its bf16/fp16 dequantized copy for torch's column."""
    D = dg()
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((M, K), generator=gen, device="cuda").to(dtype)
    w = (torch.randn((N, K), generator=gen, device="cuda") * K ** -0.5).to(dtype)
    weight_format, group = FORMATS[fmt]
    zeros = None
    if weight_format == "int4":
        q, scales, zeros = D.quantize_int4(w, group, symmetric=(fmt == "int4"))
    else:
        q, scales = D.quantize_fp4(w, group, fmt.split("_")[1])
    w_deq = D.dequantize(q, scales, zeros, group, weight_format)
    return x, q, scales, zeros, group, weight_format, w_deq


def tile_text(M, N, K, dtype, group, weight_format, scales, zeros, **config):
    """The program and tile w4a16_gemm picks (or config forces) for this call."""
    D = dg()
    path = config.get("path") or ("decode" if M <= D.DECODE_MAX_M else "prefill")
    config = {k: v for k, v in config.items() if k != "path"}
    if path == "decode":
        kind = D.scale_kind(scales, weight_format, dtype) if scales is not None else (
            "dtype" if weight_format == "int4" else "e8m0")
        zero_dtype = None if zeros is None else D.dtype_name(zeros.dtype)
        cfg, splits, pipeline = D.decode_tile(M, N, K, dtype, group, weight_format, kind, zero_dtype, sms(), **config)
        post = cfg.get("post_scale")
        return (f"decode {cfg['block_N']}x{cfg['block_K']}/{cfg['chunk_K']} s{cfg['num_stages']} "
                f"t{cfg['threads']} {pipeline}" + (f" split-K x{splits}" if splits > 1 else "")
                + ("" if post is None else f" post_scale={post}"))
    if (config.get("prefill_mode") or D.PREFILL_MODE) == "dequant":
        deq = dict(D.DEQUANT_CONFIG, **{k[8:]: v for k, v in config.items() if k.startswith("dequant_")})
        return f"dequant {deq['block_N']}x{deq['block_K']} t{deq['threads']} + gemm.matmul"
    cfg = dict(D.prefill_config(M), **{k: v for k, v in config.items() if k != "prefill_mode"})
    splits = cfg.get("splits") or D.prefill_splits(M, N, K, sms(), cfg["block_M"], cfg["block_N"], cfg["block_K"])
    return (f"prefill {cfg['block_M']}x{cfg['block_N']}x{cfg['block_K']} s{cfg['num_stages']} t{cfg['threads']}"
            + (f" split-K x{splits}" if splits > 1 else ""))


def sms():
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132


def measure(M, N, K, fmt, dtype, **config):
    D = dg()
    x, q, scales, zeros, group, weight_format, w_deq = make_inputs(M, N, K, fmt, dtype)
    w_torch = w_deq.to(dtype)                      # torch's column: the unquantized-size weight
    ref = x.float() @ w_deq.t()
    ours = lambda: D.w4a16_gemm_with_config(x, q, scales, zeros, group, weight_format, **config)  # noqa: E731
    err, error = common.run_ours(ours, lambda: ref)
    ours_ms = None if error else common.clean_l2_bench(ours)
    kernel_ms = None if error else kernel_time(ours)
    torch_ms = common.clean_l2_bench(lambda: torch.matmul(x, w_torch.t()))
    decode = M <= D.DECODE_MAX_M
    row = common.memory_row(f"{fmt} {M}x{N}x{K}", N * K // 2, ours_ms, torch_ms,
                            min_ratio=MIN_RATIO if decode else None, min_pct_copy=MIN_PCT_COPY if decode else None,
                            err=err, tol=TOL[dtype], error=error)
    row["tile"] = tile_text(M, N, K, dtype, group, weight_format, scales, zeros, **config)
    row["config"] = config
    row["kernel_ms"] = kernel_ms
    if decode and ours_ms is not None:
        row["read_ms"] = read_floor_ms(q)
        row["pct_read"] = 100 * row["read_ms"] / ours_ms
    return row


_READ = {}


def read_floor_ms(q):
    """The time torch takes to read the packed weight's bytes once (a sum of them seen as
    float32), timed as our call is (L2 clean): the floor a kernel streaming those bytes
    meets at this size, start-up and the DRAM pipeline's fill included."""
    if q.numel() not in _READ:
        words = q.view(torch.uint8).reshape(-1)[: q.numel() // 4 * 4].view(torch.float32)
        _READ[q.numel()] = common.clean_l2_bench(lambda: words.sum())
    return _READ[q.numel()]


def kernel_time(fn):
    """Mean device time of the kernels fn launches (CUPTI), None where it cannot be taken."""
    try:
        from tegula.profiler import do_bench
        return float(do_bench(fn, warmup=10, rep=50, backend="cupti", return_mode="mean"))
    except Exception:  # the event time stands without it
        return None


def sweep_configs():
    """Decode tiles to try: the default first, then a grid on the three pipelines, each
    with the split rule's count and with half and twice it."""
    out = [dict(), dict(post_scale=False), dict(pipeline="legacy"), dict(pipeline="auto")]
    # (block_N, block_K, chunk_K, num_stages, threads): the old 128-column stage first, then
    # stages of 256 and 512 columns (128 and 256 contiguous bytes a weight row; "auto" with
    # 512 falls back to cp.async: X's box would pass TMA's 256 elements)
    tiles = [(64, 256, 128, 3, 128), (64, 256, 128, 4, 128), (64, 128, 128, 6, 128), (64, 256, 256, 4, 128),
             (128, 256, 128, 3, 256), (128, 256, 128, 4, 256), (128, 128, 128, 6, 256), (128, 512, 128, 2, 256)]
    for pipeline, (bn, bk, ck, stages, threads), scale in itertools.product(("mma", "legacy", "auto"), tiles,
                                                                             (1.0, 0.5, 2.0)):
        if threads == 256 and pipeline != "mma":    # two wgmma warpgroups: refused (decode_program)
            continue
        out.append(dict(block_N=bn, block_K=bk, chunk_K=ck, num_stages=stages, threads=threads, split_scale=scale,
                        pipeline=pipeline))
    return out


def prefill_sweep_configs():
    """Prefill variants: the default mode first, the other mode, dequant tiles, fused tiles."""
    out = [dict(), dict(prefill_mode="fused"), dict(prefill_mode="dequant")]
    for bn, bk, threads in [(32, 256, 256), (64, 256, 256), (16, 512, 256), (32, 512, 128)]:
        out.append(dict(prefill_mode="dequant", dequant_block_N=bn, dequant_block_K=bk, dequant_threads=threads))
    for bm, bn, bk, stages, threads in [(128, 128, 64, 3, 128), (128, 128, 64, 4, 256), (64, 128, 64, 4, 128),
                                        (128, 256, 64, 3, 256)]:
        out.append(dict(prefill_mode="fused", block_M=bm, block_N=bn, block_K=bk, num_stages=stages, threads=threads))
    return out


def prefill_sweep(M, N, K, fmt, dtype):
    rows = []
    for i, cfg in enumerate(prefill_sweep_configs()):
        try:
            row = measure(M, N, K, fmt, dtype, path="prefill", **cfg)
        except Exception as exc:  # a variant that does not compile is reported, not fatal
            row = {"case": f"{fmt} {M}x{N}x{K}", "config": cfg, "status": "ERROR",
                   "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        if i == 0:
            row["tile"] = row.get("tile", "") + " (default)"
        rows.append(row)
        torch.cuda.empty_cache()
    timed = [r for r in rows if r.get("ours_ms") is not None]
    if timed:
        min(timed, key=lambda r: r["ours_ms"])["tile"] += "  <- fastest"
    return rows


def sweep(M, N, K, fmt, dtype):
    D = dg()
    rows = []
    for i, cfg in enumerate(sweep_configs()):
        cfg = dict(cfg)
        scale = cfg.pop("split_scale", None)
        if scale is not None:
            rule = D.decode_splits(N, K, sms(), cfg["block_N"], cfg["block_K"])
            steps = -(-K // cfg["block_K"])
            want = max(1, min(steps, round(rule * scale)))
            cfg["splits"] = -(-steps // -(-steps // want))      # no slice empty
            if scale != 1.0 and cfg["splits"] == rule:
                continue
        try:
            row = measure(M, N, K, fmt, dtype, path="decode", **cfg)
        except Exception as exc:  # a tile that does not compile is reported, not fatal
            row = {"case": f"{fmt} {M}x{N}x{K}", "config": cfg, "status": "ERROR",
                   "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        if i == 0:
            row["tile"] = row.get("tile", "") + " (default)"
        rows.append(row)
    timed = [r for r in rows if r.get("ours_ms") is not None]
    if timed:
        best = min(timed, key=lambda r: r["ours_ms"])
        best["tile"] = best.get("tile", "") + "  <- fastest"
    return rows


COLUMNS = [("case", "case", "s"), ("tile", "tile", "s")] + [c for c in common.MEMORY_COLUMNS if c[1] != "roofline"] \
    + [("kernel ms", "kernel_ms", ".4f"), ("read ms", "read_ms", ".4f"), ("% read", "pct_read", ".1f"),
       ("rel err", "rel_err", ".1e")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, action="append", help="token counts (default: 1 8 16 and 64 512)")
    p.add_argument("--format", action="append", choices=sorted(FORMATS), help="weight formats (default int4)")
    p.add_argument("--shape", action="append", help="N x K, e.g. 4096x14336 (default: both MLP shapes)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--pipeline", action="append", choices=("mma", "legacy", "auto"),
                   help="decode pipelines to time (default: all three, a row each)")
    p.add_argument("--sweep", action="store_true", help="time decode tiles instead of the default rows")
    p.add_argument("--prefill-sweep", action="store_true",
                   help="time the prefill modes and tiles (M > 16) instead of the default rows")
    p.add_argument("--dry-run", action="store_true", help="print the cases and programs; needs no GPU")
    args = p.parse_args(argv)
    dtype = DTYPES[args.dtype]
    ms_list = args.m or ([*DECODE_M] if args.sweep else [*PREFILL_M] if args.prefill_sweep
                         else [*DECODE_M, *PREFILL_M])
    formats = args.format or ["int4"]
    shapes = [tuple(int(v) for v in text.lower().split("x")) for text in args.shape] if args.shape else SHAPES
    cases = [(M, N, K, fmt) for fmt in formats for (N, K) in shapes for M in ms_list]
    if args.dry_run:
        for M, N, K, fmt in cases:
            weight_format, group = FORMATS[fmt]
            print(f"{fmt} {M}x{N}x{K}: {tile_text(M, N, K, dtype, group, weight_format, None, None)}")
        return 0
    common.require_gpu("bench_w4a16.py")
    if args.prefill_sweep:
        rows = [r for M, N, K, fmt in cases if M > dg().DECODE_MAX_M for r in prefill_sweep(M, N, K, fmt, dtype)]
        common.print_table(f"w4a16_gemm prefill sweep ({args.dtype})", rows, COLUMNS)
        common.write_json("w4a16_prefill_sweep", rows, dtype=args.dtype)
        return common.exit_status(rows)
    if args.sweep:
        rows = [r for M, N, K, fmt in cases if M <= dg().DECODE_PROGRAM_MAX_M for r in sweep(M, N, K, fmt, dtype)]
        common.print_table(f"w4a16_gemm decode tile sweep ({args.dtype})", rows, COLUMNS)
        common.write_json("w4a16_sweep", rows, dtype=args.dtype)
        return common.exit_status(rows)
    rows = []
    for M, N, K, fmt in cases:
        decode = M <= dg().DECODE_MAX_M
        for pipeline in (args.pipeline or dg().PIPELINES) if decode else (None,):
            rows.append(measure(M, N, K, fmt, dtype, **({"pipeline": pipeline} if pipeline else {})))
            torch.cuda.empty_cache()
    common.print_table(f"w4a16_gemm vs torch.matmul {args.dtype} ({args.dtype} weights)", rows, COLUMNS,
                       notes=["% copy and GB/s count the packed weight bytes N*K/2 only",
                              "read ms: torch reading those bytes once (a sum), L2 clean as for every column; "
                              "% read: that floor over our time",
                              f"targets for M <= 16: >= {MIN_RATIO}x torch, >= {MIN_PCT_COPY:.0f}% copy"])
    common.write_json("w4a16", rows, dtype=args.dtype)
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
