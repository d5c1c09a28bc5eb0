"""What every benchmark script shares: timing, the device's measured copy bandwidth, rows
with a target and PASS/MISS, a table printer, and the JSON file written under $OUT.

Times are medians in milliseconds of the GPU time between CUDA events, with L2 flushed
before each run, so a kernel is timed reading from HBM the way it would inside a model
(a 32 MiB tensor would otherwise sit in the H100's 50 MiB L2 and look faster than DRAM).
`tegula.profiler.do_bench` does that when it exists; `event_bench` below is the same
method for when it does not.

"% of copy" compares a kernel's bytes moved per second with a device-to-device copy of
1 GiB measured on the same GPU at the same time: the achievable ceiling of any kernel that
reads and writes each byte once, rather than the datasheet figure no kernel reaches.

"roofline" is tegula.tools.Analyzer's view of the same timed call (`roofline` below): the
FLOPs and DRAM bytes of the kernels it launches, counted from their lowered IR, against
this GPU's peaks and the same copy bandwidth: the share of the binding roof reached and
which roof binds, "93% bw (memory)" or "71% compute (compute)".
"""
import json
import os
import statistics
import sys
import time

import torch

_COPY_GBS = None
_FLUSH = None


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "no CUDA device"


def require_gpu(script: str) -> None:
    """Exit quietly (status 0) where there is no GPU to measure."""
    if not torch.cuda.is_available():
        print(f"{script}: skipped, needs a CUDA GPU ({device_name()})")
        sys.exit(0)


def _flush_l2() -> None:
    global _FLUSH
    if _FLUSH is None:  # larger than any current L2 (H100 50 MiB, H200 60 MiB)
        _FLUSH = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    _FLUSH.zero_()


def per_call_us(fn, warmup: int, count: int, rounds: int, wall: bool = False) -> float:
    """Microseconds per call of fn() issued back to back, without synchronising between
    calls: the median over `rounds` bursts of `count` calls, after `warmup` calls. wall=False
    times the host alone (the GPU drains its queue outside the timed span); wall=True waits
    for the GPU inside it (wall time per call, the GPU's time where that is longer)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(count):
            fn()
        if wall:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / count * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def event_bench(fn, warmup: float = 25, rep: float = 200) -> float:
    """Median ms of fn() between CUDA events; warmup and rep are budgets in ms (Triton's and
    TileLang's meaning), turned into call counts from a first estimate."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        _flush_l2()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    return _median_event_ms(fn, min(1000, max(10, int(rep / estimate))), _flush_l2)


def _median_event_ms(fn, count: int, before) -> float:
    """Median ms of `count` calls of fn() between CUDA events, before() (untimed) ahead of each."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for s, e in zip(starts, ends):
        before()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


_CLEAN = None


def clean_l2_bench(fn, count: int = 200) -> float:
    """Median ms of fn() between CUDA events with L2 flushed and then left clean: the
    flush's zeros are written back and L2 refilled by reading a buffer of 256 MiB (a sum)
    before each call. The write flush alone (`bench`) leaves up to the whole L2 dirty, so
    a kernel that streams tens of MiB pays for writing those lines back to HBM as it
    evicts them: a 32 MiB read then runs at half speed, cuBLAS's too. A model's decode
    step finds L2 full of what the kernel before it read, the case measured here."""
    global _CLEAN
    if _CLEAN is None:
        _CLEAN = torch.ones(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    for _ in range(4):
        fn()
    torch.cuda.synchronize()

    def flush_then_read():
        _flush_l2()
        _CLEAN.sum()

    return _median_event_ms(fn, count, flush_then_read)


def synced_event_ms(fn, repeat: int, warmup: int = 0, before=None) -> float:
    """Median ms of fn() between CUDA events, one call at a time (synchronised after each),
    as a whole model step or a collective is timed; `warmup` untimed calls first, and
    `before()`, untimed, before each timed one (a barrier lining the ranks up, say)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench(fn, warmup: float = 25, rep: float = 200) -> float:
    """Median ms of fn() on the GPU (see the module note)."""
    try:
        from tegula.profiler import do_bench
    except ImportError:
        return event_bench(fn, warmup, rep)
    try:
        result = do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    except TypeError:  # an implementation without return_mode
        result = do_bench(fn, warmup=warmup, rep=rep)
    if isinstance(result, (list, tuple)):
        result = result[0]
    return float(result)


def copy_bandwidth_gbs() -> float:
    """GB/s of a device-to-device copy of 1 GiB: (bytes read + bytes written) / time."""
    global _COPY_GBS
    if _COPY_GBS is None:
        nbytes = 1 << 30
        src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
        dst = torch.empty_like(src)
        ms = bench(lambda: dst.copy_(src))
        _COPY_GBS = 2 * nbytes / (ms * 1e-3) / 1e9
        del src, dst
        torch.cuda.empty_cache()
    return _COPY_GBS


def roofline(kernels, ms) -> dict:
    """The roofline cells of one of our timed calls: `kernels` lists the (jit kernel,
    arguments as the kernel takes them) the call launches, or is a function returning that
    list; `ms` is the call's time. {"roofline": text, "roofline_pct": % of the binding roof,
    "bound": "memory"/"compute"}, or {} without a time; an analysis that fails says so in
    the cell."""
    if ms is None:
        return {}
    try:
        from tegula.tools.analyzer import AnalysisResult, Analyzer

        pairs = kernels() if callable(kernels) else kernels
        result = AnalysisResult.combine([Analyzer(k, *args).calculate() for k, args in pairs])
        result = result.with_time(ms, copy_bandwidth=copy_bandwidth_gbs())
    except Exception as exc:  # the times stand without it
        return {"roofline": f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"}
    pct = 100 * result.peak_fraction
    what = "bw" if result.bound == "memory" else "compute"
    return {"roofline": f"{pct:.0f}% {what} ({result.bound})", "roofline_pct": pct, "bound": result.bound}


def gbs(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64, a sanity check that the timed kernel is right."""
    out64, ref64 = out.double(), ref.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-300)).item()


def status(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def memory_row(case: str, nbytes: int, ours_ms, torch_ms: float, *, min_ratio=None,
               min_pct_copy=None, err=None, tol=None, error=None, kernels=None) -> dict:
    """One result of a memory-bound kernel: times, GB/s, % of copy bandwidth, speed-up over
    torch (torch time / our time) and the targets it is held to. A result further than
    `tol` from torch's is WRONG whatever its speed. `kernels`: what our call launches, for
    the roofline column (see `roofline`)."""
    copy = copy_bandwidth_gbs()
    row = {"case": case, "bytes": nbytes, "torch_ms": torch_ms, "torch_gbs": gbs(nbytes, torch_ms),
           "torch_pct_copy": 100 * gbs(nbytes, torch_ms) / copy, "copy_gbs": copy,
           "ours_ms": ours_ms, "rel_err": err, "error": error}
    if kernels is not None and not error:
        row.update(roofline(kernels, ours_ms))
    checks, targets = [], []
    if ours_ms is not None:
        row["ours_gbs"] = gbs(nbytes, ours_ms)
        row["pct_copy"] = 100 * row["ours_gbs"] / copy
        row["ratio"] = torch_ms / ours_ms
    if min_pct_copy is not None:
        targets.append(f">={min_pct_copy:.0f}% copy")
        checks.append(ours_ms is not None and row["pct_copy"] >= min_pct_copy)
    if min_ratio is not None:
        targets.append(f">={min_ratio:.1f}x torch")
        checks.append(ours_ms is not None and row["ratio"] >= min_ratio)
    row["target"] = ", ".join(targets) or "-"
    if error:
        row["status"] = "ERROR"
    elif tol is not None and (err is None or not err <= tol):
        row["status"] = "WRONG"
    else:
        row["status"] = status(all(checks)) if checks else "-"
    return row


def _fmt(value, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


MEMORY_COLUMNS = [
    ("case", "case", "s"), ("ours ms", "ours_ms", ".4f"), ("torch ms", "torch_ms", ".4f"),
    ("ours GB/s", "ours_gbs", ".0f"), ("torch GB/s", "torch_gbs", ".0f"),
    ("% copy", "pct_copy", ".1f"), ("torch % copy", "torch_pct_copy", ".1f"), ("roofline", "roofline", "s"),
    ("vs torch", "ratio", ".2f"), ("target", "target", "s"), ("status", "status", "s"),
]


def print_table(title: str, rows: list, columns=MEMORY_COLUMNS, notes=()) -> None:
    """A plain-text table: the device and title, a header, one line per row, then notes
    (and the message of any row that failed)."""
    cells = [[_fmt(row.get(key), spec) for _, key, spec in columns] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, (h, _, _) in enumerate(columns)]
    print(f"\n{title} — {device_name()}")
    print("  ".join(h.rjust(w) for (h, _, _), w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for line in cells:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths)))
    for row in rows:
        if row.get("error"):
            print(f"  {row['case']}: {row['error']}")
    for note in notes:
        print(f"  note: {note}")


def write_json(name: str, rows: list, **extra) -> None:
    """$OUT/bench_<name>.json, when OUT is set: the rows plus the device and the time."""
    out_dir = os.environ.get("OUT")
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    payload = {"benchmark": name, "device": device_name(), "torch": torch.__version__,
               "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows, **extra}
    with open(os.path.join(out_dir, f"bench_{name}.json"), "w") as f:
        json.dump(payload, f, indent=2, default=str)


def run_ours(fn, ref_fn):
    """Runs our kernel once and compares it with torch: (rel_err, None) or (None, message)
    when it raises, so that a failing kernel still leaves torch's row in the table."""
    try:
        out = fn()
        torch.cuda.synchronize()
        return rel_err(out, ref_fn()), None
    except Exception as exc:  # reported in the table and the JSON, not swallowed
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def exit_status(rows: list) -> int:
    """Non-zero when one of our kernels failed to run or gave a wrong result; a missed
    performance target is reported, not a failure."""
    return 1 if any(row.get("status") in ("ERROR", "WRONG") for row in rows) else 0


def time_baseline(fn, args, compile_baseline: bool = True):
    """What a user would run instead, timed: (eager ms, torch.compile ms or None, the
    compile error or None) of fn(*args). torch.compile that fails on fn is reported, not
    raised, so the row of ours is still timed."""
    eager_ms = bench(lambda: fn(*args))
    if not compile_baseline:
        return eager_ms, None, None
    try:
        compiled = torch.compile(fn, dynamic=False)
        compiled(*args)
        return eager_ms, bench(lambda: compiled(*args)), None
    except Exception as exc:  # noqa: BLE001 - any compile failure is a reported result
        return eager_ms, None, f"torch.compile of {fn.__name__}: {type(exc).__name__}: {exc}".splitlines()[0][:300]
