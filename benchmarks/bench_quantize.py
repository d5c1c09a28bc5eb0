"""FP8 activation quantization (tegula.kernels.fp8_quantization) against torch.compile of the
module's torch formula (`quantize_fp8_reference`, and for the fused norm the formula on
F.rms_norm in float32), bfloat16 input, e4m3fn output: per token, per 128-column group
(DeepGEMM's activations), per group with UE8M0 scales, and RMSNorm fused with per-group
quantization, at M = 4096 and 16384 tokens x K = 2048, 4096, 7168 and decode sizes.

Memory-bound: bytes = read x (and the weight), write q and the scales; "% copy" is that
rate against a 1 GiB device-to-device copy on the same GPU. Target: >= 90 % of copy at the
large sizes (decode sizes are launch-bound: no target). Every result of ours is first
compared with the formula (q bytes and scales exactly for quantize; for the fused norm the
scales to 1e-6 relative, else WRONG). One process, median CUDA-event timings with L2 flushed.

"size copy %" sets the same rate against a device-to-device copy moving the same bytes,
timed the same way: at 25 MB the launch, the tail of the grid and the write-back of the
flush's dirty L2 lines weigh on any kernel, so that column is the floor this size allows.

--tile RxE (repeatable) times the kernels alone (outputs allocated once) with the tiling
replaced by R rows a block x E elements a thread (fp8_quantization.apply_tile; per group
with K a multiple of the group, a row is one group), one row of the table per tile, beside
the default plan's row. A tile a shape cannot take is reported as n/a in its row.

    python benchmarks/bench_quantize.py
    python benchmarks/bench_quantize.py --shape 4096x7168 --mode group --no-compile
    python benchmarks/bench_quantize.py --mode group-ue8m0 --mode group --no-compile \
        --tile 32x16 --tile 64x16 --tile 32x32 --tile 64x32 --tile 128x32 --tile 16x8

OUT=dir also writes dir/bench_quantize.json.
"""
import argparse
import sys

import torch

import common

SHAPES = [(m, k) for m in (4096, 16384) for k in (2048, 4096, 7168)] + [(1, 7168), (16, 7168)]
MODES = {  # name: (fused norm, group_size, ue8m0)
    "token": (False, None, False),
    "group": (False, 128, False),
    "group-ue8m0": (False, 128, True),
    "norm-group": (True, 128, False),
}
EPS = 1e-6


def check(ours, ref, fused):
    """None when ours equals the formula (see the module note), else what differs."""
    (q, s), (rq, rs) = ours, ref
    nan = rq.float().isnan()
    if fused:
        if not torch.allclose(s, rs, rtol=1e-6, atol=0, equal_nan=True):
            return "scales differ from the formula"
        return None
    if not torch.equal(q.view(torch.uint8)[~nan], rq.view(torch.uint8)[~nan]):
        return "q differs from the formula"
    if not torch.equal(s, rs):
        return "scales differ from the formula"
    return None


def same_size_copy_ms(nbytes):
    """ms of a device-to-device copy that reads and writes nbytes in all."""
    src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return common.bench(lambda: dst.copy_(src))


def measure_tile(shape, mode, tile):
    """One tile of the sweep: the kernels alone into outputs allocated once."""
    from tegula.kernels import fp8_quantization as FQ

    fused, group, ue8m0 = MODES[mode]
    m, k = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, generator=gen, device="cuda").bfloat16()
    w = (1 + 0.1 * torch.randn(k, generator=gen, device="cuda")).bfloat16()
    groups = 1 if group is None else -(-k // group)
    nbytes = x.numel() * 2 + x.numel() + m * groups * 4 + (k * 2 if fused else 0)
    row = {"case": f"{mode} {m}x{k} tile {tile[0]}x{tile[1]}", "bytes": nbytes, "error": None, "target": "-"}
    q, s = FQ._empty_outputs(x, group, "float8_e4m3fn")
    try:
        if fused:
            launches = FQ.rms_norm_quantize_fp8_launches("bench", x, w, q, s, EPS, group, "float8_e4m3fn", ue8m0, tile)
            ref = FQ.rms_norm_quantize_fp8_reference(x, w, EPS, group, "float8_e4m3fn", ue8m0)
        else:
            launches = FQ.quantize_fp8_launches("bench", x, q, s, group, "float8_e4m3fn", ue8m0, tile)
            ref = FQ.quantize_fp8_reference(x, group, "float8_e4m3fn", ue8m0)

        def ours():
            for kernel, args in launches:
                kernel(*args)

        ours()
        torch.cuda.synchronize()
        row["error"] = check((q, s), ref, fused)
    except Exception as exc:  # reported in the table and the JSON
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if row["error"] is None:
        row["ours_ms"] = common.bench(ours)
        row["ours_gbs"] = common.gbs(nbytes, row["ours_ms"])
        row["pct_copy"] = 100 * row["ours_gbs"] / common.copy_bandwidth_gbs()
        row["status"] = "-"
    elif row["error"].startswith("ValueError: apply_tile"):
        row["status"] = "n/a"   # a tile this shape cannot take: reported, not a failure
    else:
        row["status"] = "WRONG" if "differ" in row["error"] else "ERROR"
    del x, w, q, s
    torch.cuda.empty_cache()
    return row


def measure(shape, mode, compile_baseline):
    from tegula.kernels import fp8_quantization as FQ

    fused, group, ue8m0 = MODES[mode]
    m, k = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, generator=gen, device="cuda").bfloat16()
    w = (1 + 0.1 * torch.randn(k, generator=gen, device="cuda")).bfloat16()
    groups = 1 if group is None else -(-k // group)
    nbytes = x.numel() * 2 + x.numel() + m * groups * 4 + (k * 2 if fused else 0)
    if fused:
        ours = lambda: FQ.rms_norm_quantize_fp8(x, w, EPS, group, "float8_e4m3fn", ue8m0)  # noqa: E731
        ref_fn, args = FQ.rms_norm_quantize_fp8_reference, (x, w, EPS, group, "float8_e4m3fn", ue8m0)
    else:
        ours = lambda: FQ.quantize_fp8(x, group, "float8_e4m3fn", ue8m0)  # noqa: E731
        ref_fn, args = FQ.quantize_fp8_reference, (x, group, "float8_e4m3fn", ue8m0)
    row = {"case": f"{mode} {m}x{k}", "bytes": nbytes, "error": None}
    try:
        result = ours()
        torch.cuda.synchronize()
        row["error"] = check(result, ref_fn(*args), fused)
    except Exception as exc:  # reported in the table and the JSON
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if row["error"] is None:
        row["ours_ms"] = common.bench(ours)
        row["ours_gbs"] = common.gbs(nbytes, row["ours_ms"])
        row["pct_copy"] = 100 * row["ours_gbs"] / common.copy_bandwidth_gbs()
        row["size_copy_ms"] = same_size_copy_ms(nbytes)
        row["pct_size_copy"] = 100 * row["size_copy_ms"] / row["ours_ms"]
    eager_ms, compile_ms, compile_error = common.time_baseline(lambda *a: ref_fn(*a), args, compile_baseline)
    row.update(eager_ms=eager_ms, compile_ms=compile_ms, compile_error=compile_error)
    base = compile_ms if compile_ms is not None else eager_ms
    if row.get("ours_ms"):
        row["vs_compile"] = base / row["ours_ms"]
    large = m >= 4096
    row["target"] = ">=90% copy" if large else "-"
    if row["error"]:
        row["status"] = "WRONG" if "differ" in row["error"] else "ERROR"
    else:
        row["status"] = common.status(row["pct_copy"] >= 90) if large else "-"
    del x, w
    torch.cuda.empty_cache()
    return row


COLUMNS = [
    ("case", "case", "s"), ("ours ms", "ours_ms", ".4f"), ("ours GB/s", "ours_gbs", ".0f"),
    ("% copy", "pct_copy", ".1f"), ("size copy %", "pct_size_copy", ".1f"),
    ("eager ms", "eager_ms", ".4f"), ("compile ms", "compile_ms", ".4f"), ("vs compile", "vs_compile", ".2f"),
    ("target", "target", "s"), ("status", "status", "s"),
]


def parse_shape(text):
    try:
        m, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is MxK (4096x7168), got {text!r}") from None
    return m, k


def parse_tile(text):
    try:
        rows, per_thread = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a tile is RxE (rows a block x elements a thread, 64x32), got {text!r}") \
            from None
    return rows, per_thread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=parse_shape, action="append", help="MxK tokens x hidden size; repeatable")
    parser.add_argument("--mode", choices=tuple(MODES), action="append", help="default: all; repeatable")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    parser.add_argument("--tile", type=parse_tile, action="append",
                        help="RxE: also time the kernels with R rows a block x E elements a thread; repeatable")
    args = parser.parse_args()
    common.require_gpu("bench_quantize")
    rows = []
    for mode in args.mode or MODES:
        for shape in args.shape or SHAPES:
            rows.append(measure(shape, mode, not args.no_compile))
            rows += [measure_tile(shape, mode, tile) for tile in args.tile or ()]
    notes = [r["compile_error"] for r in rows if r.get("compile_error")][:1]
    common.print_table("FP8 activation quantization, bfloat16 -> e4m3fn (vs compile: torch.compile of the formula)",
                       rows, COLUMNS, notes)
    common.write_json("quantize", rows, copy_gbs=common.copy_bandwidth_gbs())
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
