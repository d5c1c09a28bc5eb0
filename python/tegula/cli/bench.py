"""`python -m tegula bench`: the shipped kernels timed at representative shapes and placed on
this GPU's roofline.

    python -m tegula bench                          # every kernel, the table
    python -m tegula bench --quick --out roofline.png
    python -m tegula bench --kernel matmul --kernel softmax
    python -m tegula bench --dry-run --out roofline.png   # no GPU: counted, not timed

Each row times the entry point as a user calls it (tegula.profiler.do_bench: L2 flushed
before each call, the median) and reads the FLOPs and DRAM bytes of the kernels that call
launches from their lowered IR (tegula.tools.Analyzer): TFLOP/s, GB/s, the share of the
binding roof reached ("% of peak": of the compute peak when compute bound, of the copy
bandwidth when memory bound) and which roof binds. The memory roof is a device-to-device
copy measured here, unless --copy-bandwidth gives one.

--dry-run needs no GPU: the kernels are compiled for the target (TEGULA_TARGET, else
sm_90a), counted, and each drawn on the roof at its arithmetic intensity, where the
roofline says it could be at best (hollow points); the table gives the roofline time.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Callable

DTYPE_NAME = "float16"


@dataclass(frozen=True)
class Case:
    name: str
    full: tuple
    quick: tuple
    build: Callable      # (shape, device or None) -> (run or None, [(kernel, args)])
    describe: Callable   # shape -> text


def _module(name):
    return importlib.import_module("tegula.kernels." + name)


def _tensors(device, *shapes):
    """Random float16 tensors on `device`, or the shapes themselves for a dry run (device None)."""
    import torch

    if device is None:
        return shapes
    gen = torch.Generator(device=device).manual_seed(0)
    return tuple(torch.randn(s, generator=gen, device=device).half() for s in shapes)


def _half():
    import torch

    return torch.float16


def _row_case(shape, device, kernel_of, entry, vectors=0, out_shape=None, full_rows=0):
    """(run, [(kernel, args)]) of a row kernel over x (m, n) with `vectors` (n,) inputs and
    `full_rows` more (m, n) ones; the output is x's shape, or `out_shape(m, n)` with the
    kernel's view of it (m, 1)."""
    import torch

    m, n = shape
    ins = _tensors(device, (m, n), *[(m, n)] * full_rows, *[(n,)] * vectors)
    kernel = kernel_of(n)
    dims = out_shape(m, n) if out_shape else (m, n)
    kernel_dims = (m, 1) if out_shape else (m, n)
    if device is None:
        return None, [(kernel, (*ins, kernel_dims))]
    out = torch.empty(dims, device=device, dtype=torch.float16)
    return (lambda: entry(*ins, out)), [(kernel, (*ins, out.view(kernel_dims)))]


def _matmul(shape, device):
    import torch

    from tegula.kernels.gemm import kernel_for, matmul

    M, N, K = shape
    sms = _sms(device)
    kernel = kernel_for(M, N, K, _half(), "none", path="auto", sms=sms)
    a, b = _tensors(device, (M, K), (K, N))
    bias = (N,) if device is None else torch.empty(N, device=device, dtype=torch.float16)
    return (None if device is None else (lambda: matmul(a, b))), [(kernel, (a, b, bias))]


def _attention(shape, device):
    from tegula.kernels.flash_attention import flash_attention, kernel_for

    B, H, S, D = shape
    kernel = kernel_for(B, H, H, S, S, D, True, 0, "bhsd", DTYPE_NAME, None)
    q, k, v = _tensors(device, (B, H, S, D), (B, H, S, D), (B, H, S, D))
    run = None if device is None else (lambda: flash_attention(q, k, v, causal=True, layout="bhsd"))
    return run, [(kernel, (q, k, v))]


def _decode(shape, device):
    import torch

    fd = _module("flash_decoding")
    B, H, Hkv, L, D = shape
    splits = fd.default_num_split(B, Hkv, L, sms=_sms(device))
    split, combine = fd.kernels_for(B, H, Hkv, L, D, splits, DTYPE_NAME, None)
    q, kc, vc = _tensors(device, (B, H, D), (B, L, Hkv, D), (B, L, Hkv, D))
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(L // 2, L + 1, (B,), generator=gen, dtype=torch.int32)
    if device is not None:
        lens = lens.to(device)
    kernels = [(split, (q, kc, vc, lens)), (combine, ((B, H, splits, D), (B, H, splits)))]
    return (None if device is None else (lambda: fd.flash_decode(q, kc, vc, lens, num_split=splits))), kernels


def _sms(device):
    if device is None:
        return 132
    from tegula.kernels._common import sm_count

    return sm_count(device)


def _transpose(shape, device):
    import torch

    from tegula.kernels import transpose

    m, n = shape
    kernel = _module("matrix_transpose").kernel_for(m, n, _half())
    (x,) = _tensors(device, (m, n))
    if device is None:
        return None, [(kernel, (x, (n, m)))]
    y = torch.empty((n, m), device=device, dtype=torch.float16)
    return (lambda: transpose(x, out=y)), [(kernel, (x, y))]


def _row(module, entry_name, vectors, kernel_args=(), entry_args=(), out_shape=None, full_rows=0):
    """The build of a row kernel case: the module's kernel_for(n, float16, *kernel_args),
    the entry point called as entry(*inputs, *entry_args, out=out)."""
    def build(shape, device):
        entry = getattr(importlib.import_module("tegula.kernels"), entry_name)
        return _row_case(shape, device, lambda n: _module(module).kernel_for(n, _half(), *kernel_args),
                         lambda *a: entry(*a[:-1], *entry_args, out=a[-1]), vectors, out_shape, full_rows)
    return build


def _mnk(s):
    return "x".join(map(str, s))


CASES = [
    Case("rms_norm", (32768, 4096), (4096, 4096), _row("rmsnorm", "rms_norm", 1, (1e-6,), (1e-6,)), _mnk),
    Case("softmax", (32768, 4096), (4096, 4096), _row("row_softmax", "softmax", 0), _mnk),
    Case("layer_norm", (32768, 4096), (4096, 4096), _row("layernorm", "layer_norm", 2, (1e-5,), (1e-5,)), _mnk),
    Case("add", (32768, 4096), (4096, 4096), _row("elementwise", "add", 0, (False,), full_rows=1), _mnk),
    Case("row_sum", (32768, 4096), (4096, 4096), _row("reduce", "row_sum", 0, ("sum",), (), lambda m, n: (m,)),
         _mnk),
    Case("transpose", (8192, 8192), (4096, 4096), _transpose, _mnk),
    Case("matmul", (4096, 4096, 4096), (2048, 2048, 2048), _matmul, _mnk),
    Case("flash_attention", (2, 16, 4096, 128), (2, 16, 2048, 128), _attention,
         lambda s: f"B{s[0]} H{s[1]} S{s[2]} D{s[3]} causal"),
    Case("flash_decode", (16, 32, 8, 4096, 128), (16, 32, 8, 2048, 128), _decode,
         lambda s: f"B{s[0]} H{s[1]}/{s[2]} cache {s[3]} D{s[4]}"),
]


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true", help="smaller shapes and shorter timing")
    parser.add_argument("--kernel", action="append", choices=[c.name for c in CASES],
                        help="only this kernel (repeatable)")
    parser.add_argument("--out", help="write the roofline plot to this PNG")
    parser.add_argument("--device", help="the peaks to compare with (default: this GPU; for --dry-run the "
                                         "target's part): H100 SXM, H200, A100, B200")
    parser.add_argument("--copy-bandwidth", type=float, metavar="GB/S",
                        help="the memory roof (default: a device-to-device copy measured here)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no timing: count the kernels for the target (TEGULA_TARGET, else sm_90a) and draw "
                             "them on the roof at their arithmetic intensity")


@dataclass
class Row:
    case: str
    shape: str
    result: object = None    # AnalysisResult, with the time unless a dry run
    error: str | None = None


def measure(case: Case, quick: bool, device, dry_run: bool, peaks=None, copy_bandwidth=None) -> Row:
    """One case: built, counted, and (unless dry_run) timed; an error is kept in the row."""
    from ..tools.analyzer import AnalysisResult, Analyzer

    shape = case.quick if quick else case.full
    row = Row(case.name, case.describe(shape))
    try:
        run, kernels = case.build(shape, None if dry_run else device)
        result = AnalysisResult.combine([Analyzer(k, *args).calculate(device=peaks) for k, args in kernels],
                                        name=case.name)
        ms = None
        if not dry_run:
            from ..profiler import do_bench

            ms = do_bench(run, warmup=10 if quick else 25, rep=50 if quick else 100, return_mode="median")
        row.result = result.with_time(ms, device=peaks, copy_bandwidth=copy_bandwidth)
    except Exception as err:  # one failing kernel leaves the others' rows
        row.error = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    return row


def table(rows, timed: bool) -> str:
    if timed:
        head = ("kernel", "shape", "ms", "TFLOP/s", "GB/s", "% of peak", "bound")

        def cells(r):
            x = r.result
            return (f"{x.time_ms:.4f}", f"{x.tflops:.1f}", f"{x.gbs:.0f}", f"{100 * x.peak_fraction:.1f}", x.bound)
    else:
        head = ("kernel", "shape", "GFLOP", "DRAM MB", "FLOP/B", "roofline ms", "bound")

        def cells(r):
            x = r.result
            return (f"{x.flops / 1e9:.3g}", f"{x.dram_bytes / 1e6:.1f}", f"{x.arithmetic_intensity:.3g}",
                    f"{x.roofline_ms:.4f}", x.bound)
    lines = [(r.case, r.shape) + (cells(r) if r.result is not None else ("ERROR",) + ("",) * (len(head) - 3))
             for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]

    def fmt(line):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
    out = [fmt(head), fmt(tuple("-" * w for w in widths))] + [fmt(line) for line in lines]
    out += [f"  {r.case}: {r.error}" for r in rows if r.error]
    return "\n".join(out)


def run(args) -> int:
    import torch

    from .. import env

    gpu = torch.cuda.is_available() and env.native().driver_available()
    if not gpu and not args.dry_run:
        print("python -m tegula bench: no CUDA GPU here, so nothing can be timed. Use --dry-run to count the "
              "kernels for sm_90a (or TEGULA_TARGET) and draw them on that part's roofline without timing.",
              file=sys.stderr)
        return 1
    cases = [c for c in CASES if not args.kernel or c.name in args.kernel]
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else None
    target = env.resolve_target("auto")[0]
    rows = [measure(c, args.quick, device, args.dry_run, args.device, args.copy_bandwidth) for c in cases]
    for r in rows:
        if r.result is not None and r.result.device is None:  # a GPU without a peak table
            r.error = f"{'; '.join(r.result.notes)}: name one with --device"
            r.result = None
    done = [r for r in rows if r.result is not None]
    where = done[0].result if done else None
    title = "dry run, not timed" if args.dry_run else "timed"
    print(f"tegula bench ({title}): target {target}" + (f", {where.device.name}" if where else ""))
    print(table(rows, timed=not args.dry_run))
    if where is not None:
        print(f"roofs: {where.device.tensor_tflops:g} TFLOP/s fp16/bf16 tensor core, {where.device.fp32_tflops:g} "
              f"TFLOP/s fp32, {where.copy_gbs:.0f} GB/s ({where.copy_source} copy bandwidth); bytes are DRAM "
              "bytes (each tensor's traffic capped at its size); "
              + ("roofline ms: the larger of the FLOPs at peak and the bytes at the memory roof" if args.dry_run
                 else "% of peak is of the binding roof"))
    if args.out and done:
        from ..tools.roofline_plot import plot_roofline

        plot_roofline([r.result for r in done], out=args.out, labels=[r.case for r in done],
                      title=f"Roofline, {where.device.name} ({title})")
        print(f"wrote {args.out}")
    return 1 if any(r.error for r in rows) else 0
