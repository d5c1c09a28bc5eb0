"""GEMM (fp16/bf16 in, fp32 accumulate) against torch.matmul (cuBLAS): times, TFLOP/s and
ratios, with a PNG plot ($OUT/bench_gemm.png) and the rows as JSON ($OUT/bench_gemm.json)
when OUT is set.

Columns: `ours` is tegula's matmul() as a user calls it (operand padding and the split-K
combine included); `legacy` is the same call held to the engine's legacy code path
(matmul(..., path="legacy"): no TMA lowering, no warp specialisation); `cuBLAS` is
torch.matmul on the same tensors. vs cuBLAS = cuBLAS time / our time, vs legacy = legacy
time / our time (above 1: ours is faster). The mma.sync column holds the square fp16
shapes to mma.sync (kernel_for(..., mma_sync=True)). For the decode shapes (M <= 64, where
B is read once and dominates the traffic) "B % copy" is the rate at which B is streamed
(bytes of B / time) as a share of a 1 GiB device-to-device copy measured in this process
(common.copy_bandwidth_gbs: bytes read + written / time), timed as every row is (L2
flushed by writing); "clean L2" times the same call with the flush written back first
(common.clean_l2_bench: the write flush leaves L2 dirty, and a 32 MiB read that must
write those lines back runs at half speed, cuBLAS's too). The decode rows' target is on
the clean-L2 time. Before timing, each result is
compared once with torch in float32: a relative error past 2e-3 (fp16) or 1e-2 (bf16) is
WRONG whatever its speed.

Backward (matmul_backward, activation "none", no bias): its two GEMMs, dA = dC @ Bᵀ (NT:
b read transposed in place) and dB = Aᵀ @ dC (TN: a read transposed in place), each timed
alone (needs=(True, False, False) and (False, True, False)) against torch.matmul of the
same transposed views (cuBLAS); and the whole backward against torch.autograd.grad of
torch.matmul(a, b) on a graph whose forward ran once outside the timed region
(retain_graph=True). Shapes are tokens M x out N x in K. Target: each GEMM >= 0.8x cuBLAS.
Rows go to $OUT/bench_gemm_backward.json (with the device).

    python benchmarks/bench_gemm.py             # on a GPU: forward, then backward
    python benchmarks/bench_gemm.py --part backward
    python benchmarks/bench_gemm.py --dry-run   # no GPU: the cases, targets and kernel choices
"""
import argparse
import importlib
import json
import os
import sys

import torch

import common

FP16, BF16 = torch.float16, torch.bfloat16
TOL = {FP16: 2e-3, BF16: 1e-2}


def case(M, N, K, dtype=FP16, min_ratio=None, min_pct_copy=None):
    return dict(M=M, N=N, K=K, dtype=dtype, min_ratio=min_ratio, min_pct_copy=min_pct_copy)


# The Hopper schedules' targets: >= 1.0x cuBLAS at 4096^3 and 8192^3 (fp16 and bf16),
# >= 0.95x at 2048^3; decode shapes at >= 80 % of copy bandwidth.
CASES = [
    case(4096, 4096, 4096, min_ratio=1.0),
    case(8192, 8192, 8192, min_ratio=1.0),
    case(8192, 1024, 8192, min_ratio=0.95),
    case(4096, 4096, 4000, min_ratio=0.95),
    case(2048, 2048, 2048, min_ratio=0.95),
    case(8192, 8192, 8192, BF16, min_ratio=1.0),
    case(4096, 4096, 4096, BF16, min_ratio=1.0),
    case(4097, 4095, 4096, min_ratio=2.5),
    case(16, 4096, 4096, min_pct_copy=80.0),
    case(64, 8192, 8192, min_pct_copy=80.0),
    case(8, 14336, 4096, min_pct_copy=80.0),
    case(1, 4096, 4096, min_pct_copy=80.0),
    case(127, 1000, 333),
]


def label(c):
    return f"{c['M']}x{c['N']}x{c['K']} {'fp16' if c['dtype'] == FP16 else 'bf16'}"


def device_sms():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def target_text(c):
    parts = []
    if c["min_ratio"] is not None:
        parts.append(f">={c['min_ratio']:g}x cuBLAS")
    if c["min_pct_copy"] is not None:
        parts.append(f">={c['min_pct_copy']:g}% copy (clean L2)")
    return ", ".join(parts) or "-"


def verdict(row, c):
    """PASS/MISS against the case's targets; ERROR or WRONG first (a failure of ours)."""
    if row.get("error"):
        return "ERROR"
    if any(e is None or not e <= TOL[c["dtype"]] for e in (row["rel_err"], row["legacy_rel_err"])):
        return "WRONG"
    checks = []
    if c["min_ratio"] is not None:
        checks.append(row["vs_cublas"] >= c["min_ratio"])
    if c["min_pct_copy"] is not None:
        checks.append(row["b_pct_copy_clean"] >= c["min_pct_copy"])
    return common.status(all(checks)) if checks else "-"


def kernel_choice(gemm, c, sms, wgmma=None):
    """What matmul() launches for the case: split-K with its slice count, or the tile
    (wgmma: whether the device is an sm_90 part; default, this one)."""
    M, N, K = c["M"], c["N"], c["K"]
    if M <= gemm.DECODE_MAX_M:
        return decode_choice(gemm, M, N, K, sms)
    cfg = gemm.default_config(M, N, K, wgmma=wgmma, sms=sms)
    blocks = f", {cfg['blocks']} blocks" if cfg.get("blocks") else ""
    return f"tile {cfg['block_M']}x{cfg['block_N']}x{cfg['block_K']}{blocks}"


def decode_choice(gemm, M, N, K, sms):
    cfg = gemm.decode_config(M, N, K, sms)
    slices = f" x{cfg['splits']} K slices" if cfg["splits"] > 1 else ""
    loads = ", cp.async" if cfg["block_M"] > gemm.DECODE_TMA_MAX_M else ""
    return f"decode {cfg['block_N']}x{cfg['block_M']}x{cfg['block_K']}{slices}{loads}"


def matmul_kernels(gemm, a, b):
    """What matmul(a, b) launches, with the arguments it passes: the operands as matmul
    stores them (rows padded where it pads them)."""
    from tegula.kernels._common import sm_count

    M, N = a.shape[0], b.shape[1]
    (a2, trans_a), (b2, trans_b) = gemm._stored(a), gemm._stored(b)
    a2, b2, K, layout = gemm._aligned_operands(a2, b2, trans_a, trans_b)
    kernel = gemm.kernel_for(M, N, K, a.dtype, "none", path="auto", sms=sm_count(a.device), **layout)
    return [(kernel, (a2, b2, a.new_empty(N)))]


def measure(gemm, c, rep):
    M, N, K, dtype = c["M"], c["N"], c["K"], c["dtype"]
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, generator=g, device="cuda").to(dtype)
    b = torch.randn(K, N, generator=g, device="cuda").to(dtype)
    flops = 2.0 * M * N * K
    row = {"case": label(c), "shape": label(c), "M": M, "N": N, "K": K, "dtype": str(dtype).replace("torch.", ""),
           "choice": kernel_choice(gemm, c, device_sms()), "target": target_text(c)}
    ref = a.float() @ b.float()
    ours = lambda: gemm.matmul(a, b)  # noqa: E731
    legacy = lambda: gemm.matmul(a, b, path="legacy")  # noqa: E731
    row["rel_err"], row["error"] = common.run_ours(ours, lambda: ref)
    row["legacy_rel_err"], legacy_error = common.run_ours(legacy, lambda: ref)
    row["error"] = row["error"] or (legacy_error and f"legacy: {legacy_error}")
    del ref
    row["cublas_ms"] = common.bench(lambda: torch.matmul(a, b), rep=rep)
    row["ours_ms"] = None if row["rel_err"] is None else common.bench(ours, rep=rep)
    row["legacy_ms"] = None if row["legacy_rel_err"] is None else common.bench(legacy, rep=rep)
    for name in ("ours", "legacy", "cublas"):
        ms = row[f"{name}_ms"]
        row[f"{name}_tflops"] = None if ms is None else flops / ms / 1e9
    row.update(common.roofline(lambda: matmul_kernels(gemm, a, b), row["ours_ms"]))
    row["vs_cublas"] = None if row["ours_ms"] is None else row["cublas_ms"] / row["ours_ms"]
    row["vs_legacy"] = (None if row["ours_ms"] is None or row["legacy_ms"] is None
                        else row["legacy_ms"] / row["ours_ms"])
    if M == N == K and dtype == FP16:
        k_mma = gemm.kernel_for(M, N, K, dtype, mma_sync=True)
        dummy = a.new_empty(N)
        row["mma_sync_tflops"] = flops / common.bench(lambda: k_mma(a, b, dummy), rep=rep) / 1e9
    if M <= 64:
        b_bytes = K * N * b.element_size()
        copy = common.copy_bandwidth_gbs()
        row["b_gbs"] = None if row["ours_ms"] is None else common.gbs(b_bytes, row["ours_ms"])
        row["b_pct_copy"] = None if row["b_gbs"] is None else 100 * row["b_gbs"] / copy
        row["cublas_b_pct_copy"] = 100 * common.gbs(b_bytes, row["cublas_ms"]) / copy
        # The verdict's time: L2 left clean before each call (common.clean_l2_bench says why).
        row["cublas_clean_ms"] = common.clean_l2_bench(lambda: torch.matmul(a, b))
        row["ours_clean_ms"] = None if row["rel_err"] is None else common.clean_l2_bench(ours)
        row["b_pct_copy_clean"] = (None if row["ours_clean_ms"] is None
                                   else 100 * common.gbs(b_bytes, row["ours_clean_ms"]) / copy)
        row["cublas_b_pct_copy_clean"] = 100 * common.gbs(b_bytes, row["cublas_clean_ms"]) / copy
        row["vs_cublas_clean"] = (None if row["ours_clean_ms"] is None
                                  else row["cublas_clean_ms"] / row["ours_clean_ms"])
    row["status"] = verdict(row, c)
    del a, b
    torch.cuda.empty_cache()
    return row


COLUMNS = [("shape", "shape", "s"), ("kernel", "choice", "s"), ("err", "rel_err", ".1e"),
           ("legacy err", "legacy_rel_err", ".1e"),
           ("ours ms", "ours_ms", ".4f"), ("legacy ms", "legacy_ms", ".4f"), ("cuBLAS ms", "cublas_ms", ".4f"),
           ("ours TF/s", "ours_tflops", ".1f"), ("roofline", "roofline", "s"), ("legacy TF/s", "legacy_tflops", ".1f"),
           ("cuBLAS TF/s", "cublas_tflops", ".1f"), ("mma.sync TF/s", "mma_sync_tflops", ".1f"),
           ("vs cuBLAS", "vs_cublas", ".2f"), ("vs legacy", "vs_legacy", ".2f"),
           ("B % copy", "b_pct_copy", ".1f"), ("cuBLAS B % copy", "cublas_b_pct_copy", ".1f"),
           ("B % copy clean L2", "b_pct_copy_clean", ".1f"), ("cuBLAS clean", "cublas_b_pct_copy_clean", ".1f"),
           ("vs cuBLAS clean", "vs_cublas_clean", ".2f"),
           ("target", "target", "s"), ("status", "status", "s")]


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed"
    x = range(len(rows))
    plt.figure(figsize=(11, 4.5))
    for offset, key, name in ((-0.27, "ours_tflops", "tegula"), (0.0, "legacy_tflops", "tegula legacy path"),
                              (0.27, "cublas_tflops", "torch.matmul")):
        plt.bar([i + offset for i in x], [r.get(key) or 0.0 for r in rows], 0.27, label=name)
    plt.xticks(list(x), [r["shape"] for r in rows], rotation=25, ha="right")
    plt.ylabel("TFLOP/s")
    plt.title(f"GEMM — {common.device_name()}")
    plt.legend()
    plt.tight_layout()
    plt.savefig(path)
    plt.close()
    return f"plot: {path}"


# ---- backward ----

BACKWARD_CASES = [
    case(4096, 4096, 4096, min_ratio=0.8),
    case(8192, 4096, 4096, min_ratio=0.8),   # tokens x hidden
    case(64, 4096, 4096, min_ratio=0.8),     # decode-ish: dA split-K, dB an outer product over 64 tokens
]


def gemm_choice(gemm, M, N, K, sms, wgmma=None):
    """What matmul_backward launches for one of its GEMMs, (M, N) output and inner K."""
    if M <= gemm.DECODE_MAX_M:
        return decode_choice(gemm, M, N, K, sms)
    gemm_bwd = importlib.import_module("tegula.kernels.gemm_backward")
    cfg = dict(gemm.default_config(M, N, K, wgmma=wgmma), **gemm_bwd.backward_config(M, N, K))
    return f"tile {cfg['block_M']}x{cfg['block_N']}x{cfg['block_K']} s{cfg['num_stages']}"


def backward_choices(gemm, c, sms, wgmma=None):
    M, N, K = c["M"], c["N"], c["K"]
    return gemm_choice(gemm, M, K, N, sms, wgmma), gemm_choice(gemm, K, N, M, sms, wgmma)


def backward_verdict(row, c):
    if row.get("error"):
        return "ERROR"
    if any(e is None or not e <= TOL[c["dtype"]] for e in (row["da_err"], row["db_err"])):
        return "WRONG"
    return common.status(row["da_vs_cublas"] >= c["min_ratio"] and row["db_vs_cublas"] >= c["min_ratio"])


def measure_backward(gemm, c, rep):
    M, N, K, dtype = c["M"], c["N"], c["K"], c["dtype"]
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(M, K, generator=g, device="cuda").to(dtype)
    b = torch.randn(K, N, generator=g, device="cuda").to(dtype)
    dc = torch.randn(M, N, generator=g, device="cuda").to(dtype)
    flops = 2.0 * M * N * K   # per GEMM
    da_choice, db_choice = backward_choices(gemm, c, device_sms())
    row = {"case": label(c), "shape": label(c), "M": M, "N": N, "K": K, "dtype": str(dtype).replace("torch.", ""),
           "da_kernel": da_choice, "db_kernel": db_choice, "target": f">={c['min_ratio']:g}x cuBLAS each GEMM"}
    gemm_bwd = importlib.import_module("tegula.kernels.gemm_backward")
    ours_da = lambda: gemm_bwd.matmul_backward(dc, a, b, False, needs=(True, False, False))[0]  # noqa: E731
    ours_db = lambda: gemm_bwd.matmul_backward(dc, a, b, False, needs=(False, True, False))[1]  # noqa: E731
    ours = lambda: gemm_bwd.matmul_backward(dc, a, b, False)  # noqa: E731
    row["da_err"], da_error = common.run_ours(ours_da, lambda: dc.float() @ b.float().t())
    row["db_err"], db_error = common.run_ours(ours_db, lambda: a.float().t() @ dc.float())
    row["error"] = (da_error and f"dA: {da_error}") or (db_error and f"dB: {db_error}")
    row["cublas_da_ms"] = common.bench(lambda: torch.matmul(dc, b.t()), rep=rep)
    row["cublas_db_ms"] = common.bench(lambda: torch.matmul(a.t(), dc), rep=rep)
    a_r, b_r = a.detach().requires_grad_(), b.detach().requires_grad_()
    out = torch.matmul(a_r, b_r)
    row["autograd_ms"] = common.bench(lambda: torch.autograd.grad(out, (a_r, b_r), dc, retain_graph=True), rep=rep)
    del out
    ok = row["error"] is None
    row["da_ms"] = common.bench(ours_da, rep=rep) if ok else None
    row["db_ms"] = common.bench(ours_db, rep=rep) if ok else None
    row["ours_ms"] = common.bench(ours, rep=rep) if ok else None
    for name in ("da", "cublas_da", "db", "cublas_db"):
        ms = row[f"{name}_ms"]
        row[f"{name}_tflops"] = None if ms is None else flops / ms / 1e9
    row["ours_tflops"] = None if row["ours_ms"] is None else 2 * flops / row["ours_ms"] / 1e9
    row["autograd_tflops"] = 2 * flops / row["autograd_ms"] / 1e9
    row["da_vs_cublas"] = None if row["da_ms"] is None else row["cublas_da_ms"] / row["da_ms"]
    row["db_vs_cublas"] = None if row["db_ms"] is None else row["cublas_db_ms"] / row["db_ms"]
    row["vs_autograd"] = None if row["ours_ms"] is None else row["autograd_ms"] / row["ours_ms"]
    row["status"] = backward_verdict(row, c)
    del a, b, dc, a_r, b_r
    torch.cuda.empty_cache()
    return row


BACKWARD_COLUMNS = [
    ("shape", "shape", "s"), ("dA kernel", "da_kernel", "s"), ("dB kernel", "db_kernel", "s"),
    ("dA err", "da_err", ".1e"), ("dB err", "db_err", ".1e"),
    ("dA ms", "da_ms", ".4f"), ("cuBLAS dA ms", "cublas_da_ms", ".4f"), ("dA TF/s", "da_tflops", ".1f"),
    ("dA vs cuBLAS", "da_vs_cublas", ".2f"),
    ("dB ms", "db_ms", ".4f"), ("cuBLAS dB ms", "cublas_db_ms", ".4f"), ("dB TF/s", "db_tflops", ".1f"),
    ("dB vs cuBLAS", "db_vs_cublas", ".2f"),
    ("bwd ms", "ours_ms", ".4f"), ("autograd ms", "autograd_ms", ".4f"), ("vs autograd", "vs_autograd", ".2f"),
    ("target", "target", "s"), ("status", "status", "s"),
]


def run_backward(gemm, rep):
    rows = [measure_backward(gemm, c, rep) for c in BACKWARD_CASES]
    notes = ["dA = dC @ bᵀ against torch.matmul(dc, b.t()); dB = aᵀ @ dC against torch.matmul(a.t(), dc); "
             "vs cuBLAS = cuBLAS ms / ours ms",
             "bwd = matmul_backward (both GEMMs) against torch.autograd.grad(torch.matmul(a, b), (a, b), dc); "
             "vs autograd = autograd ms / bwd ms",
             "err = relative Frobenius error against torch float32"]
    common.print_table("GEMM backward, fp32 accumulate: tegula matmul_backward vs cuBLAS", rows, BACKWARD_COLUMNS,
                       notes=notes)
    common.write_json("gemm_backward", rows)
    return rows


def dry_run(gemm, sms):
    """The cases as they would run, with no GPU: labels, targets and matmul's kernel choice
    on an sm_90 part of `sms` SMs (the tile and the split rule depend on the device)."""
    rows = [{"shape": label(c), "choice": kernel_choice(gemm, c, sms, wgmma=True), "target": target_text(c),
             "gflop": 2.0 * c["M"] * c["N"] * c["K"] / 1e9} for c in CASES]
    common.print_table(f"bench_gemm dry run (sm_90, {sms} SMs assumed): the cases and what matmul() launches", rows,
                       [("shape", "shape", "s"), ("kernel", "choice", "s"), ("GFLOP", "gflop", ".1f"),
                        ("target", "target", "s")])
    rows = []
    for c in BACKWARD_CASES:
        da, db = backward_choices(gemm, c, sms, wgmma=True)
        rows.append({"shape": label(c), "da": da, "db": db, "target": f">={c['min_ratio']:g}x cuBLAS each GEMM",
                     "gflop": 4.0 * c["M"] * c["N"] * c["K"] / 1e9})
    common.print_table(f"bench_gemm dry run, backward (sm_90, {sms} SMs assumed): what matmul_backward launches",
                       rows, [("shape", "shape", "s"), ("dA = dC @ bT", "da", "s"), ("dB = aT @ dC", "db", "s"),
                              ("GFLOP", "gflop", ".1f"), ("target", "target", "s")])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="list the cases and kernel choices; no GPU needed")
    parser.add_argument("--sms", type=int, default=132, help="SM count assumed by --dry-run")
    parser.add_argument("--rep", type=float, default=200.0, help="timing budget per measurement in ms")
    parser.add_argument("--part", choices=("all", "forward", "backward"), default="all")
    args = parser.parse_args()
    gemm = importlib.import_module("tegula.kernels.gemm")
    if args.dry_run:
        return dry_run(gemm, args.sms)
    common.require_gpu("bench_gemm")
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 references stay float32
    if args.part == "backward":
        return common.exit_status(run_backward(gemm, args.rep))
    rows = [measure(gemm, c, args.rep) for c in CASES]
    notes = ["vs cuBLAS = cuBLAS ms / ours ms; vs legacy = legacy ms / ours ms; "
             "err = relative Frobenius error of ours vs torch float32",
             "roofline: ours against this GPU's roofline (tegula.tools.Analyzer: the kernels' FLOPs and DRAM "
             "bytes), the share of the binding roof and which roof binds",
             "B % copy: bytes of B / time against a 1 GiB device-to-device copy "
             f"({common.copy_bandwidth_gbs():.0f} GB/s read+written), decode shapes only"]
    common.print_table("GEMM, fp32 accumulate: tegula matmul (and its legacy path) vs cuBLAS",
                       rows, COLUMNS, notes=notes)
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "bench_gemm.json"), "w") as f:
            json.dump(rows, f, indent=1)
        try:
            print(plot(rows, os.path.join(out, "bench_gemm.png")))
        except Exception as e:  # the table is the result; the plot is a convenience
            print("no plot:", e)
    if args.part == "all":
        rows = rows + run_backward(gemm, args.rep)
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
