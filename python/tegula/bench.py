"""Timing a function on the GPU (`do_bench`, tilelang.profiler's name and meaning), below
the profiler (tegula/profiler.py, which times kernels with it and re-exports it) and the
tools that measure the machine (tools/hardware.py)."""
from __future__ import annotations

import torch

_RETURN_MODES = ("min", "max", "mean", "median", "all")
BACKENDS = ("event", "cupti", "cudagraph")
_FLUSH_RANGE = "tegula::l2_flush"  # the profiler range around each flush (backend "cupti")


def _require_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs a CUDA device (torch.cuda.is_available() is False here)")


def _check_bench_args(warmup, rep, n_warmup, n_repeat, quantiles, backend, return_mode, cache_size) -> None:
    """ValueError naming the argument, before any device work."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: expected one of {BACKENDS}")
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode {return_mode!r}: expected one of {_RETURN_MODES}")
    for name, value in (("warmup", warmup), ("rep", rep), ("cache_size", cache_size)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    for name, value in (("n_warmup", n_warmup), ("n_repeat", n_repeat)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int (0: derived from the time budget), got {value!r}")
    if quantiles is not None:
        if not isinstance(quantiles, (list, tuple)) or not quantiles or not all(
                isinstance(q, (int, float)) and not isinstance(q, bool) and 0 <= q <= 1 for q in quantiles):
            raise ValueError(f"quantiles must be a non-empty list of numbers in [0, 1], got {quantiles!r}")
    if backend == "cupti" and (quantiles is not None or return_mode != "mean"):
        raise ValueError("backend 'cupti' measures the kernels' total time over all runs, so it gives their mean: "
                         f"return_mode must be 'mean' and quantiles None (got return_mode={return_mode!r}, "
                         f"quantiles={quantiles!r})")


def _summary(times: list, quantiles, return_mode):
    times = torch.tensor(times, dtype=torch.float64)
    if quantiles is not None:
        values = torch.quantile(times, torch.tensor(quantiles, dtype=torch.float64)).tolist()
        return values[0] if len(values) == 1 else values
    if return_mode == "all":
        return times.tolist()
    return getattr(torch, return_mode)(times).item()


def do_bench(fn, warmup=25, rep=100, _n_warmup=0, _n_repeat=0, quantiles=None, fast_flush=True, backend="event",
             return_mode="mean", device=None, cache_size=256, early_stop_baseline=None, flush_l2=True):
    """Milliseconds per call of `fn` (TileLang's arguments and meaning).

    `warmup` and `rep` are budgets in ms; the iteration counts come from a first estimate
    of one call, unless `_n_warmup` / `_n_repeat` (> 0) fix them. With `flush_l2`, a buffer
    of at least `cache_size` MiB and 4x the L2 is overwritten (in int32 words with
    `fast_flush`, bytes without) before each timed call, so no call finds the previous
    call's data in L2.

    `backend`:
      "event"      a pair of CUDA events around each call: what the caller waits for,
                   launch gaps between a call's kernels included;
      "cupti"      the kernels' own time, from torch's profiler (CUPTI) activity records:
                   the sum of the device time of every kernel `fn` launched, per call,
                   without launch gaps (and without the flushes);
      "cudagraph"  the calls captured in one CUDA graph, replayed; per call: a replay's time
                   over the calls in it (the flush runs before each replay only).
    Returns the statistic `return_mode` names ("all": the list of times), or with
    `quantiles` the list of those quantiles (one value alone if one); "cupti" gives the
    mean only. With `early_stop_baseline`, a first estimate above it is returned at once.
    `device` (an index or torch.device) is the GPU to time on.
    """
    _check_bench_args(warmup, rep, _n_warmup, _n_repeat, quantiles, backend, return_mode, cache_size)
    _require_cuda("tegula.profiler.do_bench")
    if device is not None:
        with torch.cuda.device(device):
            return do_bench(fn, warmup, rep, _n_warmup, _n_repeat, quantiles, fast_flush, backend, return_mode,
                            None, cache_size, early_stop_baseline, flush_l2)
    flush = None
    if flush_l2:
        l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        nbytes = max(int(cache_size * 1024 * 1024), 4 * l2_bytes)
        flush = (torch.empty(nbytes // 4, dtype=torch.int32, device="cuda") if fast_flush
                 else torch.empty(nbytes, dtype=torch.int8, device="cuda"))

    fn()  # compiles/loads anything lazy before the estimate
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-4)
    if early_stop_baseline is not None and estimate_ms > early_stop_baseline:
        return [estimate_ms] * len(quantiles) if quantiles is not None else estimate_ms
    n_warmup = _n_warmup if _n_warmup > 0 else max(1, int(warmup / estimate_ms))
    n_repeat = _n_repeat if _n_repeat > 0 else max(1, int(rep / estimate_ms))

    for _ in range(n_warmup):
        if flush is not None:
            flush.zero_()
        fn()
    if backend == "cupti":
        return _bench_cupti(fn, flush, n_repeat)
    if backend == "cudagraph":
        return _summary(_bench_cudagraph(fn, flush, n_repeat), quantiles, return_mode)
    return _summary(_event_times(fn, flush, n_repeat), quantiles, return_mode)


def _event_times(run, flush, count: int) -> list:
    """The times in ms of `count` calls of `run` on the current stream, each between two
    CUDA events, the L2 flush (when given) ahead of each outside them."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for i in range(count):
        if flush is not None:
            flush.zero_()
        starts[i].record()
        run()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _bench_cupti(fn, flush, n_repeat: int) -> float:
    """Mean kernel time per call: every device activity record of the profiled calls
    (kernels, memsets, copies), less those inside the flush ranges."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n_repeat):
            if flush is not None:
                with record_function(_FLUSH_RANGE):
                    flush.zero_()
            fn()
        torch.cuda.synchronize()
    device_us = flush_us = 0.0
    kernels = 0
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        if getattr(event, "is_user_annotation", False):
            if event.name == _FLUSH_RANGE:
                flush_us += event.self_device_time_total
            continue
        device_us += event.self_device_time_total
        kernels += 1
    if kernels == 0:
        raise RuntimeError("do_bench(backend='cupti'): torch's profiler recorded no device activity (is CUPTI "
                           "available to torch here?); use backend='event'")
    return max(device_us - flush_us, 0.0) / n_repeat * 1e-3


def _bench_cudagraph(fn, flush, n_repeat: int, replays: int = 10) -> list:
    """Per-call times of `replays` replays of a graph of n_repeat calls (as
    triton.testing.do_bench_cudagraph does)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(n_repeat):
                fn()
        torch.cuda.synchronize()
        times = _event_times(graph.replay, flush, replays)
    return [t / n_repeat for t in times]
