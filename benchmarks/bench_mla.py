"""MLA decode (tegula.kernels.mla_decode) beside an eager torch implementation, one
process, same inputs; median of CUDA-event timings of whole calls (the entry point's host
work included), and the GPU time of the program's two kernels alone (torch's profiler,
summed per call: what a CUDA-graph decode loop pays). FLOPs count 2·h_q·S·(576+512) per
sequence; bytes count the KV cache read once. "roofline" is tegula.tools.Analyzer's view of
the whole call: the program's FLOPs and DRAM bytes counted from its lowered IR, the share of
the binding roof (this GPU's peaks, the copy bandwidth measured here) and which roof binds.

    python benchmarks/bench_mla.py
"""
import importlib
import math

import torch

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


def roofline(q, kv, lens, table, ms, copy_gbs):
    """The Analyzer's cell for one timed call of mla_decode (the kernel it launches)."""
    from tegula.kernels._common import sm_count
    from tegula.tools.analyzer import Analyzer

    mod = importlib.import_module("tegula.kernels.mla_decode")
    B, H, _ = q.shape
    paged = table is not None
    width = table.shape[1] if paged else 0
    max_len = width * mod.PAGE if paged else kv.shape[1]
    args = (q, kv, table if paged else torch.zeros((B, 1), dtype=torch.int32, device=q.device), lens)
    try:
        splits = mod.default_num_split(B, H, max_len, sms=sm_count(q.device))
        kernel = mod.kernel_for(B, H, kv.shape[0] if paged else kv.shape[1], splits, paged, width, "float16", None)
        r = Analyzer(kernel, *args).calculate(time_ms=ms, copy_bandwidth=copy_gbs)
    except Exception as exc:  # the times stand without it
        return f"n/a ({type(exc).__name__})"
    return f"{100 * r.peak_fraction:.0f}% {'bw' if r.bound == 'memory' else 'compute'} ({r.bound})"


def main():
    dev = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    print(f"device: {dev}; copy bandwidth {bw / 1e9:.0f} GB/s")
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


if __name__ == "__main__":
    main()
