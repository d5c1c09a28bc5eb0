"""SwiGLU (tegula.kernels.gated_mlp) against torch eager and torch.compile, at Llama-8B's MLP
shapes (I = 14336, K = 4096), M = 8192 and 8 tokens, bfloat16.

Part "swiglu": the activation alone, silu(gate) * up. Two rows a shape: gate and up as two
tensors (M, I), against `F.silu(g) * u`; and one joined tensor (M, 2I), gate columns first,
against `F.silu(x[:, :I]) * x[:, I:]`. Memory-bound: bytes = read gate and up, write the
result; "% copy" is that rate against a 1 GiB device-to-device copy on the same GPU.

Part "linear": the gate and up projections with the activation fused,
swiglu_linear(x, w_gate, w_up), against `F.silu(F.linear(x, wg)) * F.linear(x, wu)` (two
cuBLAS GEMMs, then silu and the product) eager and under torch.compile. The "cuBLAS GEMMs"
column times the two F.linear calls alone: the GEMM time the fused kernel competes with
(ours also saves writing and re-reading g and u). TFLOP/s count the two products,
4·M·I·K; "W % copy" is the rate at which the weights stream (2·I·K elements / time)
against the copy bandwidth, the measure for decode shapes.

Targets: >= 1.0x eager and >= 1.0x torch.compile, both. Every output of ours is first
compared with a float32 torch result (relative error <= 1e-2 for bfloat16, 2e-3 for
float16, else the row is WRONG). Same inputs for every column, one process, medians of
CUDA-event timings with L2 flushed (common.bench).

--sweep times every tile of `swiglu.sweep_configs` (swiglu_linear_config's choice first)
for the linear shapes, for picking the rule on the GPU at hand.

    python benchmarks/bench_swiglu.py                  # both parts
    python benchmarks/bench_swiglu.py --part linear --sweep
    python benchmarks/bench_swiglu.py --m 8192 --m 512 --dtype float16 --no-compile
    python benchmarks/bench_swiglu.py --dry-run        # no GPU: the cases and tiles chosen

OUT=dir also writes dir/bench_swiglu.json (and dir/bench_swiglu_sweep.json).
"""
import argparse
import importlib
import sys

import torch
import torch.nn.functional as F

import common

I_SIZE, K_SIZE = 14336, 4096
DEFAULT_M = (8192, 8)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def silu_mul(g, u):
    return F.silu(g) * u


def silu_mul_joined(x):
    n = x.shape[-1] // 2
    return F.silu(x[..., :n]) * x[..., n:]


def mlp_gate_up(x, wg, wu):
    return F.silu(F.linear(x, wg)) * F.linear(x, wu)


def two_gemms(x, wg, wu):
    return F.linear(x, wg), F.linear(x, wu)


def verdict(r, tol):
    """Speed-ups and PASS/MISS (ERROR and WRONG first) of a row with ours, eager and compile ms."""
    checks = []
    ours_ms = r.get("ours_ms")
    if ours_ms is not None:
        r["vs_eager"] = r["eager_ms"] / ours_ms
        checks.append(r["vs_eager"] >= 1.0)
        if r.get("compile_ms") is not None:
            r["vs_compile"] = r["compile_ms"] / ours_ms
            checks.append(r["vs_compile"] >= 1.0)
    r["target"] = ">=1.0x eager" + (", >=1.0x compile" if r.get("compile_ms") is not None else "")
    if r.get("error"):
        r["status"] = "ERROR"
    elif r.get("rel_err") is None or not r["rel_err"] <= tol:
        r["status"] = "WRONG"
    else:
        r["status"] = common.status(bool(checks) and all(checks))
    return r


def measure_swiglu(m, dtype, compile_baseline):
    from tegula.kernels.gated_mlp import swiglu

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (2 * torch.randn((m, 2 * I_SIZE), generator=gen, device="cuda")).to(dtype)
    g, u = x[:, :I_SIZE].contiguous(), x[:, I_SIZE:].contiguous()
    y = torch.empty((m, I_SIZE), device="cuda", dtype=dtype)
    nbytes = 3 * m * I_SIZE * x.element_size()
    ref = silu_mul(g.float(), u.float())
    rows = []
    for name, ours, baseline, args in [
        ("gate, up", lambda: swiglu(g, u, out=y), silu_mul, (g, u)),
        ("joined (M, 2I)", lambda: swiglu(x, out=y), silu_mul_joined, (x,)),
    ]:
        err, error = common.run_ours(ours, lambda: ref)
        ours_ms = None if error else common.bench(ours)
        eager_ms, compile_ms, compile_error = common.time_baseline(baseline, args, compile_baseline)
        r = {"case": f"swiglu {m}x{I_SIZE} {name}", "bytes": nbytes, "ours_ms": ours_ms, "eager_ms": eager_ms,
             "compile_ms": compile_ms, "rel_err": err, "error": error, "compile_error": compile_error}
        if ours_ms is not None:
            r["ours_gbs"] = common.gbs(nbytes, ours_ms)
            r["pct_copy"] = 100 * r["ours_gbs"] / common.copy_bandwidth_gbs()
        rows.append(verdict(r, TOL[dtype]))
    return rows


def linear_inputs(m, dtype):
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn((m, K_SIZE), generator=gen, device="cuda").to(dtype)
    wg = (torch.randn((I_SIZE, K_SIZE), generator=gen, device="cuda") * K_SIZE ** -0.5).to(dtype)
    wu = (torch.randn((I_SIZE, K_SIZE), generator=gen, device="cuda") * K_SIZE ** -0.5).to(dtype)
    return x, wg, wu


def tile_text(cfg):
    text = f"{cfg['block_M']}x{cfg['block_N']}x{cfg['block_K']} s{cfg['num_stages']} t{cfg['threads']}"
    if cfg.get("splits", 1) > 1:
        text += f" split-K x{cfg['splits']}"
    if "panel_size" in cfg and cfg["splits"] == 1:
        text += f" p{cfg['panel_size']}"
    return text


def linear_rates(r, m, ms, prefix):
    """TFLOP/s and weight streaming (% of copy) of a time."""
    if ms is None:
        return
    r[f"{prefix}_tflops"] = 4.0 * m * I_SIZE * K_SIZE / ms / 1e9
    r[f"{prefix}_w_pct_copy"] = 100 * common.gbs(2 * I_SIZE * K_SIZE * 2, ms) / common.copy_bandwidth_gbs()


def measure_linear(m, dtype, compile_baseline):
    S = importlib.import_module("tegula.kernels.gated_mlp")

    x, wg, wu = linear_inputs(m, dtype)
    ref = mlp_gate_up(x.float(), wg.float(), wu.float())
    ours = lambda: S.swiglu_linear(x, wg, wu)  # noqa: E731
    err, error = common.run_ours(ours, lambda: ref)
    del ref
    ours_ms = None if error else common.bench(ours)
    eager_ms, compile_ms, compile_error = common.time_baseline(mlp_gate_up, (x, wg, wu), compile_baseline)
    cublas_ms = common.bench(lambda: two_gemms(x, wg, wu))
    r = {"case": f"swiglu_linear {m}x{I_SIZE}x{K_SIZE}", "tile": tile_text(S.swiglu_linear_config(m, I_SIZE, K_SIZE)),
         "ours_ms": ours_ms, "eager_ms": eager_ms, "compile_ms": compile_ms, "cublas_ms": cublas_ms,
         "rel_err": err, "error": error, "compile_error": compile_error}
    linear_rates(r, m, ours_ms, "ours")
    linear_rates(r, m, cublas_ms, "cublas")
    if ours_ms is not None:
        r["vs_cublas_gemms"] = cublas_ms / ours_ms
    del x, wg, wu
    torch.cuda.empty_cache()
    return verdict(r, TOL[dtype])


def sweep_linear(m, dtype, compile_baseline):
    """Every tile of sweep_configs for this M: its time against eager and compile."""
    S = importlib.import_module("tegula.kernels.gated_mlp")

    x, wg, wu = linear_inputs(m, dtype)
    ref = mlp_gate_up(x.float(), wg.float(), wu.float())
    eager_ms, compile_ms, compile_error = common.time_baseline(mlp_gate_up, (x, wg, wu), compile_baseline)
    rows = []
    for i, cfg in enumerate(S.sweep_configs(m, I_SIZE, K_SIZE)):
        r = {"case": f"{m}x{I_SIZE}x{K_SIZE}", "tile": tile_text(cfg) + (" (default)" if i == 0 else ""),
             "config": cfg, "eager_ms": eager_ms, "compile_ms": compile_ms, "compile_error": compile_error}
        try:
            kernel = S.linear_kernel_for(I_SIZE, K_SIZE, dtype, **cfg)
            r["rel_err"], r["error"] = common.run_ours(lambda: kernel(x, wg, wu), lambda: ref)
        except Exception as exc:  # a tile that does not compile is reported, not fatal
            r["rel_err"], r["error"] = None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        r["ours_ms"] = None if r["error"] else common.bench(lambda: kernel(x, wg, wu))
        linear_rates(r, m, r["ours_ms"], "ours")
        rows.append(verdict(r, TOL[dtype]))
    timed = [r for r in rows if r["ours_ms"] is not None]
    if timed:
        min(timed, key=lambda r: r["ours_ms"])["tile"] += "  <- fastest"
    del x, wg, wu, ref
    torch.cuda.empty_cache()
    return rows


SWIGLU_COLUMNS = [
    ("case", "case", "s"), ("ours ms", "ours_ms", ".4f"), ("eager ms", "eager_ms", ".4f"),
    ("compile ms", "compile_ms", ".4f"), ("ours GB/s", "ours_gbs", ".0f"), ("% copy", "pct_copy", ".1f"),
    ("vs eager", "vs_eager", ".2f"), ("vs compile", "vs_compile", ".2f"), ("rel err", "rel_err", ".1e"),
    ("target", "target", "s"), ("status", "status", "s"),
]
LINEAR_COLUMNS = [
    ("case", "case", "s"), ("tile", "tile", "s"), ("ours ms", "ours_ms", ".4f"), ("eager ms", "eager_ms", ".4f"),
    ("compile ms", "compile_ms", ".4f"), ("cuBLAS GEMMs ms", "cublas_ms", ".4f"), ("ours TF/s", "ours_tflops", ".0f"),
    ("cuBLAS TF/s", "cublas_tflops", ".0f"), ("W % copy", "ours_w_pct_copy", ".1f"),
    ("cuBLAS W % copy", "cublas_w_pct_copy", ".1f"), ("vs eager", "vs_eager", ".2f"),
    ("vs compile", "vs_compile", ".2f"), ("vs GEMMs", "vs_cublas_gemms", ".2f"), ("rel err", "rel_err", ".1e"),
    ("target", "target", "s"), ("status", "status", "s"),
]
SWEEP_COLUMNS = [
    ("shape", "case", "s"), ("tile", "tile", "s"), ("ours ms", "ours_ms", ".4f"), ("ours TF/s", "ours_tflops", ".0f"),
    ("W % copy", "ours_w_pct_copy", ".1f"), ("vs eager", "vs_eager", ".2f"), ("vs compile", "vs_compile", ".2f"),
    ("rel err", "rel_err", ".1e"), ("status", "status", "s"),
]


def dry_run(ms, sms):
    S = importlib.import_module("tegula.kernels.gated_mlp")

    rows = []
    for m in ms:
        cfgs = S.sweep_configs(m, I_SIZE, K_SIZE, wgmma=True, max_shared=227 * 1024)
        chosen = S.swiglu_linear_config(m, I_SIZE, K_SIZE, wgmma=True, sms=sms, max_shared=227 * 1024)
        rows.append({"case": f"swiglu_linear {m}x{I_SIZE}x{K_SIZE}", "tile": tile_text(chosen),
                     "sweep": f"{len(cfgs)} tiles"})
    common.print_table(f"bench_swiglu dry run (sm_90, {sms} SMs assumed): what swiglu_linear launches", rows,
                       [("case", "case", "s"), ("tile", "tile", "s"), ("--sweep", "sweep", "s")])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "swiglu", "linear"), default="all")
    parser.add_argument("--m", type=int, action="append", help=f"token counts M (default {DEFAULT_M}); repeatable")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    parser.add_argument("--sweep", action="store_true", help="also time every tile of sweep_configs (linear part)")
    parser.add_argument("--dry-run", action="store_true", help="list the cases and tiles chosen; no GPU needed")
    parser.add_argument("--sms", type=int, default=132, help="SM count assumed by --dry-run")
    args = parser.parse_args()
    ms = tuple(args.m) if args.m else DEFAULT_M
    if args.dry_run:
        return dry_run(ms, args.sms)
    common.require_gpu("bench_swiglu")
    dtype, compile_baseline = DTYPES[args.dtype], not args.no_compile
    rows, linear, sweep = [], [], []
    if args.part in ("all", "swiglu"):
        rows = [r for m in ms for r in measure_swiglu(m, dtype, compile_baseline)]
    if args.part in ("all", "linear"):
        linear = [measure_linear(m, dtype, compile_baseline) for m in ms]
        if args.sweep:
            sweep = [r for m in ms for r in sweep_linear(m, dtype, compile_baseline)]
    copy = common.copy_bandwidth_gbs()
    common.write_json("swiglu", rows + linear, copy_gbs=copy, dtype=args.dtype)
    errors = sorted({r["compile_error"] for r in rows + linear + sweep if r.get("compile_error")})
    if rows:
        common.print_table(
            f"SwiGLU silu(gate) * up, {args.dtype}, I={I_SIZE}: tegula swiglu vs torch", rows, SWIGLU_COLUMNS,
            notes=[f"copy bandwidth (1 GiB device-to-device, read+write): {copy:.0f} GB/s",
                   "vs eager / vs compile = baseline time / our time; bytes = read gate, up + write the result"]
            + errors)
    if linear:
        common.print_table(
            f"Gate/up projections + SwiGLU, {args.dtype}, I={I_SIZE} K={K_SIZE}: tegula swiglu_linear vs "
            f"F.silu(F.linear(x, wg)) * F.linear(x, wu)", linear, LINEAR_COLUMNS,
            notes=["vs GEMMs = time of the two cuBLAS GEMMs alone (no activation) / our time",
                   "TF/s count both products (4*M*I*K); W % copy = weight bytes (2*I*K*2) / time vs the copy "
                   "bandwidth"] + errors)
    if sweep:
        common.write_json("swiglu_sweep", sweep, copy_gbs=copy, dtype=args.dtype)
        common.print_table(f"swiglu_linear tile sweep, {args.dtype}", sweep, SWEEP_COLUMNS,
                           notes=["the first tile of each shape is swiglu_linear_config's choice"])
    return common.exit_status(rows + linear + sweep)


if __name__ == "__main__":
    sys.exit(main())
