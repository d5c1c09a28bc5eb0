"""MLA decode (tegula.kernels.mla_decode) beside an eager torch implementation, one
process, same inputs; median of CUDA-event timings of whole calls (the entry point's host
work included), and the GPU time of the program's two kernels alone (torch's profiler,
summed per call: what a CUDA-graph decode loop pays). FLOPs count 2·h_q·S·(576+512) per
sequence; bytes count the KV cache read once. "roofline" is tegula.tools.Analyzer's view of
the whole call: the program's FLOPs and DRAM bytes counted from its lowered IR, the share of
the binding roof (this GPU's peaks, the copy bandwidth measured here) and which roof binds.

A second table sets the FP8 cache (float8_e4m3fn, kv_scale = amax / 448) beside the 16-bit
one at the same shapes: the program's GPU time for each (torch's profiler, as above), the
speed-up fp16/fp8 (target: >= 1.5 in the memory-bound case, a 16-head shard; >= 1.0 at
128 heads), the FP8 program's % of copy bandwidth on the bytes it reads (the cache once,
one byte an element), and its error against float32 attention over the dequantized cache.

    python benchmarks/bench_mla.py            # both tables
    python benchmarks/bench_mla.py --fp8      # the FP8 table only

Knobs of the FP8 program, for sweeps (they set tegula.kernels.mla_decode.FP8_TUNING; the
16-bit column is always the shipped 16-bit program):

    --block-n 32|64          keys a block (default: 32 for 16 or 32 heads, 64 above)
    --stages N               8-bit pipeline stages (default: as many as let two blocks share a SM)
    --splits auto|balanced|default|N   splits of the sequence (default auto: balanced waves
                             for 16 or 32 heads, the 16-bit program's choice above)
    --convert cvt|bits       how the 8-bit block becomes q's dtype (default cvt): the dtype
                             conversion, or exact integer bit moves and one multiply
    --heads 16,128           only the cases with these head counts
"""
import importlib
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from tegula.kernels.mla_decode import mla_decode


def torch_mla(q, kv, lens, scale):
    s = torch.einsum("bhd,bsd->bhs", q.float(), kv.float()) * scale
    pos = torch.arange(kv.shape[1], device=q.device)
    s = s.masked_fill(pos[None, None, :] >= lens[:, None, None], -math.inf)
    return torch.einsum("bhs,bsd->bhd", torch.softmax(s, dim=-1), kv[..., :512].float()).to(q.dtype)


def median_ms(fn, iters=50):
    for _ in range(5):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def kernel_us(fn, calls=20):
    """GPU time of the kernels one call launches, from torch's profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages() if "mla_decode" in e.key)
    return total / calls


def copy_bandwidth():
    x = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() / (median_ms(lambda: y.copy_(x)) * 1e-3)


def roofline(q, kv, lens, table, ms, copy_gbs, kv_scale=None):
    """The Analyzer's cell for one timed call of mla_decode (the kernel it launches)."""
    from tegula.kernels._common import sm_count
    from tegula.tools.analyzer import Analyzer

    mod = importlib.import_module("tegula.kernels.mla_decode")
    B, H, _ = q.shape
    paged = table is not None
    width = table.shape[1] if paged else 0
    max_len = width * mod.PAGE if paged else kv.shape[1]
    args = (q, kv, table if paged else torch.zeros((B, 1), dtype=torch.int32, device=q.device), lens)
    fp8 = kv.dtype == torch.float8_e4m3fn
    if fp8:
        args += (1.0 if kv_scale is None else float(kv_scale),)
    try:
        splits = (mod.fp8_num_split if fp8 else mod.default_num_split)(B, H, max_len, sms=sm_count(q.device))
        dtype_name = "float16" if q.dtype == torch.float16 else "bfloat16"
        kernel = mod.kernel_for(B, H, kv.shape[0] if paged else kv.shape[1], splits, paged, width,
                                dtype_name, None,
                                mod.FP8 if fp8 else None,
                                (*mod.fp8_config(H)[:2], mod.fp8_convert(dtype_name)) if fp8 else None)
        r = Analyzer(kernel, *args).calculate(time_ms=ms, copy_bandwidth=copy_gbs)
    except Exception as exc:  # the times stand without it
        return f"n/a ({type(exc).__name__})"
    return f"{100 * r.peak_fraction:.0f}% {'bw' if r.bound == 'memory' else 'compute'} ({r.bound})"


def paged_copy(kv, seed=0):
    """The cache as pages in a shuffled order and the block table that finds them."""
    B, S, W = kv.shape
    pages = kv.reshape(B * S // 64, 64, W)
    perm = torch.randperm(B * S // 64, device=kv.device, generator=torch.Generator(device=kv.device).manual_seed(seed))
    shuffled = torch.empty_like(pages)
    shuffled[perm] = pages
    return shuffled, perm.reshape(B, S // 64).to(torch.int32)


def option(name, default=None):
    """The value after --name on the command line, or default."""
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else default


def set_fp8_tuning():
    """FP8_TUNING from --block-n, --stages, --splits and --convert; returns it, for the table's
    title."""
    mod = importlib.import_module("tegula.kernels.mla_decode")
    tuning = {}
    if option("--block-n"):
        tuning["block_N"] = int(option("--block-n"))
    if option("--stages"):
        tuning["num_stages"] = int(option("--stages"))
    if option("--convert"):
        tuning["convert"] = option("--convert")
    splits = option("--splits")
    if splits:
        tuning["num_split"] = int(splits) if splits.isdigit() else splits
    mod.FP8_TUNING.clear()
    mod.FP8_TUNING.update(tuning)
    mod.kernel_for.cache_clear()
    return tuning


def fp8_table(bw):
    mod = importlib.import_module("tegula.kernels.mla_decode")
    tuning = set_fp8_tuning()
    print(f"\nFP8 cache (float8_e4m3fn, per-tensor scale) beside the 16-bit cache; kernel GPU time "
          f"(profiler), copy bandwidth {bw / 1e9:.0f} GB/s; FP8 tuning {tuning or 'default'}")
    # %copy: each program's bytes read (the cache once: 1 byte an element for fp8, 2 for the
    # 16-bit cache) a second, as a share of the copy bandwidth.
    print(f"{'case':28} {'16-bit ms':>10} {'fp8 ms':>9} {'16b/fp8':>8} {'fp8 GB/s':>9} {'fp8 %copy':>9} "
          f"{'16b %copy':>9} {'fp8 call ms':>11} {'bN/st/splits':>12} {'err':>8}  roofline (fp8)")
    f16, bf16 = torch.float16, torch.bfloat16
    cases = [(64, 16, 4096, False, f16), (64, 16, 8192, False, f16), (64, 16, 4096, True, f16),
             (64, 16, 8192, True, f16), (64, 16, 4096, False, bf16), (64, 16, 8192, True, bf16),
             (64, 128, 4096, False, f16), (64, 128, 8192, False, f16), (64, 128, 4096, False, bf16),
             (128, 128, 8192, True, f16), (1, 16, 32768, False, f16), (4, 16, 32768, True, bf16)]
    heads = option("--heads")
    if heads:
        cases = [c for c in cases if c[1] in {int(h) for h in heads.split(",")}]
    for B, H, S, paged, dtype in cases:
        q = torch.randn(B, H, 576, device="cuda", dtype=dtype)
        kv = torch.randn(B, S, 576, device="cuda", dtype=torch.float32)
        kv_scale = float(kv.abs().max()) / 448
        kv8 = (kv / kv_scale).to(torch.float8_e4m3fn)
        del kv
        kv16 = (kv8.to(torch.float32) * kv_scale).to(dtype)  # the same values, in 16 bits
        lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
        if paged:
            cache8, table = paged_copy(kv8)
            cache16, _ = paged_copy(kv16)
        else:
            cache8, cache16, table = kv8, kv16, None
        run8 = lambda: mla_decode(q, cache8, lens, block_table=table, kv_scale=kv_scale)  # noqa: E731
        run16 = lambda: mla_decode(q, cache16, lens, block_table=table)  # noqa: E731
        out = run8()
        err = float("nan")
        if B * H * S <= 64 * 128 * 4096:
            ref = torch_mla(q.float(), kv8.float() * kv_scale, lens, 1 / math.sqrt(576))
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        t16 = kernel_us(run16) / 1e3
        t8 = kernel_us(run8) / 1e3
        call8 = median_ms(run8)
        bytes8, bytes16 = B * S * 576, B * S * 576 * 2
        name = f"B{B} h{H} S{S} {'paged' if paged else 'contig'} {'bf16' if dtype == bf16 else 'f16'}"
        block_N, stages, _ = mod.fp8_config(H)
        config = f"{block_N}/{stages}/{mod.fp8_num_split(B, H, S, sms=common_sms())}"
        print(f"{name:28} {t16:10.4f} {t8:9.4f} {t16 / t8:8.2f} {bytes8 / t8 / 1e6:9.0f} "
              f"{100 * bytes8 / t8 / 1e-3 / bw:9.1f} {100 * bytes16 / t16 / 1e-3 / bw:9.1f} {call8:11.4f} "
              f"{config:>12} {err:8.1e}  {roofline(q, cache8, lens, table, call8, bw / 1e9, kv_scale)}")


def common_sms():
    from tegula.kernels._common import sm_count

    return sm_count(torch.device("cuda"))


def main():
    common.require_gpu("bench_mla.py")
    dev = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    print(f"device: {dev}; copy bandwidth {bw / 1e9:.0f} GB/s")
    if "--fp8" in sys.argv[1:]:
        fp8_table(bw)
        return
    print(f"{'case':34} {'tegula ms':>10} {'TFLOP/s':>8} {'GB/s':>7} {'%copy':>6} {'kernels ms':>10} {'TFLOP/s':>8} "
          f"{'%copy':>6} {'torch ms':>9} {'vs torch':>8}  roofline")
    cases = [(64, 128, 4096, False), (64, 128, 8192, False), (128, 128, 4096, False), (128, 128, 8192, False),
             (64, 128, 8192, True), (128, 128, 8192, True), (1, 16, 32768, False), (1, 16, 32768, True)]
    for B, H, S, paged in cases:
        dtype = torch.float16
        q = torch.randn(B, H, 576, device="cuda", dtype=dtype)
        kv = torch.randn(B, S, 576, device="cuda", dtype=dtype)
        lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
        scale = 1 / math.sqrt(576)
        if paged:
            pages = kv.reshape(B * S // 64, 64, 576)
            perm = torch.randperm(B * S // 64, device="cuda")
            shuffled = torch.empty_like(pages)
            shuffled[perm] = pages
            table = perm.reshape(B, S // 64).to(torch.int32)
            run = lambda: mla_decode(q, shuffled, lens, block_table=table)  # noqa: E731
            cache, pages_table = shuffled, table
        else:
            run = lambda: mla_decode(q, kv, lens)  # noqa: E731
            cache, pages_table = kv, None
        out = run()
        ref = torch_mla(q, kv, lens, scale) if B * H * S <= 128 * 128 * 8192 else None
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item() if ref is not None else float("nan")
        t = median_ms(run)
        tk = kernel_us(run) / 1e3
        tt = median_ms(lambda: torch_mla(q, kv, lens, scale), iters=10)
        flops = 2 * B * H * S * (576 + 512)
        bytes_ = B * S * 576 * 2
        name = f"B{B} h{H} S{S} {'paged' if paged else 'contig'} err {err:.1e}"
        print(f"{name:34} {t:10.4f} {flops / t / 1e9:8.1f} {bytes_ / t / 1e6:7.0f} {100 * bytes_ / t / 1e-3 / bw:6.1f} "
              f"{tk:10.4f} {flops / tk / 1e9:8.1f} {100 * bytes_ / tk / 1e-3 / bw:6.1f} {tt:9.3f} {tt / t:8.2f}  "
              f"{roofline(q, cache, lens, pages_table, t, bw / 1e9)}")
    fp8_table(bw)


if __name__ == "__main__":
    main()
