"""Attention: FlashAttention forward and flash decoding against torch's
scaled_dot_product_attention (SDPA), float16.

Part 1, forward (tegula.kernels.flash_attention.flash_attention, layout="bhsd"): ours as
a user calls it, ours held to the engine's legacy code path (path="legacy": no TMA
lowering, no warp specialisation), and each SDPA backend forced in turn with
torch.nn.attention.sdpa_kernel (FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION), all
on the same (B, H, S, D) tensors. A backend that refuses a shape shows "n/a" (the reason is
in the notes); one that refuses grouped-query heads is timed on K and V expanded to H heads
beforehand (marked in the notes). FLOPs = 4·B·H·Sq·Skv·D, halved when causal. Before
timing, our outputs (both paths) are compared once with SDPA run in float32 (math backend,
in chunks of heads): relative Frobenius error <= 2e-3, else the row is WRONG. Targets:
>= 1.0x the SDPA cuDNN backend (0.95x at D=256; ratio = cuDNN time / our time); vs flash
and vs legacy are the same ratio against SDPA flash and our legacy path, and on sm_90
"vs no overlap" against ours without FlashAttention-3's schedule (overlap=False). A sweep over S
(batch shrunk so that B·S = 16384) feeds $OUT/bench_attention.png, TFLOP/s against S.

Part 2, decoding (tegula.kernels.flash_decoding.flash_decode): one query token per
sequence, B=64, H=32 query heads over Hkv=8 KV heads, D=128, KV cache of 8192 tokens.
The kernel is bound by reading K and V once: achieved GB/s = bytes of K and V read /
time, against the GPU's measured device-to-device copy bandwidth (common.copy_bandwidth_gbs);
target >= 80 % of it. References: SDPA on q (B, H, 1, D) against (B, Hkv, S, D) copies of
the caches with enable_gqa, a few num_split values, and a ragged batch (lengths uniform in
[1, 8192], bytes counted on the actual lengths).

Part 3, backward (tegula.kernels.flash_attention_bwd.flash_attention_backward, layout
"bhsd"): everything after the forward (preprocess, main and postprocess kernels) given the
forward's output and log-sum-exp, against SDPA's flash and cuDNN backends timed as
torch.autograd.grad(out, (q, k, v), do) on a graph whose forward ran once outside the
timed region (retain_graph=True). FLOPs = 10·B·H·Sq·Skv·D (five GEMMs), halved when causal.
Our gradients are compared once with float32 autograd (chunked by KV head): relative
error of each of dq, dk, dv <= 1e-2, else the row is WRONG. Target: >= 1.0x SDPA flash.
--bwd-sweep also times every tile config of flash_attention_bwd.configs on those cases.

    python benchmarks/bench_attention.py                  # all parts
    python benchmarks/bench_attention.py --part forward   # or: --part decode, --part backward
    python benchmarks/bench_attention.py --backward       # the same as --part backward
    python benchmarks/bench_attention.py --part backward --bwd-sweep   # and the tile sweep
    python benchmarks/bench_attention.py --no-sweep       # forward headline cases only
    python benchmarks/bench_attention.py --sweep-legacy   # the sweep times the legacy path too
    python benchmarks/bench_attention.py --rep 100        # timing budget (ms) per measurement

OUT=dir also writes dir/bench_attention.json and (with matplotlib) dir/bench_attention.png.
"""
import argparse
import importlib
import math
import os
import sys
import warnings

import torch
import torch.nn.functional as F

import common

DTYPE = torch.float16
TOL = 2e-3
# (B, H, Hkv, S, D, causal, target ratio vs SDPA cuDNN or None)
FORWARD_CASES = [
    (2, 32, 32, 4096, 128, False, 1.0),
    (2, 32, 32, 4096, 128, True, 1.0),
    (2, 32, 32, 4096, 64, True, 1.0),
    (4, 32, 32, 2048, 128, False, 1.0),
    (2, 32, 8, 4096, 128, True, 1.0),       # grouped-query attention, SDPA with enable_gqa
    (8, 16, 16, 1024, 64, False, 1.0),
    (2, 32, 32, 4096, 256, False, 0.95),
]
TARGET_BACKEND = "cudnn"
SWEEP_S = (512, 1024, 2048, 4096, 8192)
SWEEP_TOKENS = 16384                       # B * S held constant over the sweep
SWEEP_H, SWEEP_D = 32, 128
BACKENDS = ("flash", "cudnn", "efficient")

# (B, H, Hkv, S, D, causal, target ratio vs SDPA flash or None)
BACKWARD_CASES = [
    (2, 32, 32, 4096, 128, False, 1.0),
    (2, 32, 32, 4096, 128, True, 1.0),
    (2, 16, 16, 4096, 64, True, 1.0),
    (2, 32, 8, 4096, 128, True, None),      # grouped-query attention
]
BWD_TOL = 1e-2
BWD_TARGET_BACKEND = "flash"
BWD_BACKENDS = ("flash", "cudnn")

DEC_B, DEC_H, DEC_HKV, DEC_D, DEC_S = 64, 32, 8, 128, 8192
DEC_SPLITS = (None, 1, 4, 8)
DEC_MIN_PCT_COPY = 80.0


def _backend(name):
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]


def _reason(exc, caught):
    """The first line of why SDPA refused: its warnings say which check failed."""
    for w in caught:
        text = str(w.message).strip()
        if text:
            return text.splitlines()[0][:160]
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:160]


def _try_backend(name, fn):
    """Runs fn once under the forced backend: (output, None) or (None, reason)."""
    from torch.nn.attention import sdpa_kernel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(_backend(name)) if name else _null():
                out = fn()
            torch.cuda.synchronize()
            return out, None
        except Exception as exc:
            return None, _reason(exc, caught)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _bench_backend(name, fn, rep):
    from torch.nn.attention import sdpa_kernel
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with sdpa_kernel(_backend(name)) if name else _null():
            return common.bench(fn, rep=rep)


def _sdpa_fn(q, k, v, causal, attn_mask=None):
    """SDPA on (B, H, S, D) q and (B, Hkv, S, D) k, v; with H != Hkv through enable_gqa, or
    (torch without it) on k, v expanded once here, outside the timed region."""
    H, Hkv = q.shape[1], k.shape[1]
    if H == Hkv:
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal)
    try:
        F.scaled_dot_product_attention(q[:1, :, :1], k[:1, :, :16], v[:1, :, :16], enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal,
                                                      enable_gqa=True)
    except TypeError:  # torch < 2.5
        k_rep = k.repeat_interleave(H // Hkv, dim=1)
        v_rep = v.repeat_interleave(H // Hkv, dim=1)
        return lambda: F.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=attn_mask, is_causal=causal)


def reference_forward(q, k, v, causal):
    """SDPA in float32 (math backend), in chunks of heads so that no chunk's score matrix
    exceeds 512 MiB."""
    from torch.nn.attention import sdpa_kernel
    B, H, S, D = q.shape
    group = H // k.shape[1]
    chunk = max(1, min(H, (512 << 20) // (S * S * 4)))
    out = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    with sdpa_kernel(_backend("math")):
        for b in range(B):
            for h0 in range(0, H, chunk):
                h1 = min(H, h0 + chunk)
                kv_heads = torch.arange(h0, h1, device=q.device) // group
                out[b:b + 1, h0:h1] = F.scaled_dot_product_attention(
                    q[b:b + 1, h0:h1].float(), k[b:b + 1, kv_heads].float(), v[b:b + 1, kv_heads].float(),
                    is_causal=causal)
    return out


def _expanded_sdpa_fn(q, k, v, causal):
    """SDPA on k, v repeated to q's heads (once, here, outside the timed region)."""
    group = q.shape[1] // k.shape[1]
    k_rep, v_rep = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return lambda: F.scaled_dot_product_attention(q, k_rep, v_rep, is_causal=causal)


def forward_case(fa, B, H, Hkv, S, D, causal, target, rep, failures, legacy=True):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, S, D, generator=gen, device="cuda", dtype=DTYPE)
    k = torch.randn(B, Hkv, S, D, generator=gen, device="cuda", dtype=DTYPE)
    v = torch.randn(B, Hkv, S, D, generator=gen, device="cuda", dtype=DTYPE)
    heads = f"H{H}" if H == Hkv else f"H{H}/{Hkv}"
    case = f"B{B} {heads} S{S} D{D} {'causal' if causal else 'full'}"
    flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    row = {"case": case, "B": B, "H": H, "Hkv": Hkv, "S": S, "D": D, "causal": causal, "flops": flops,
           "part": "forward"}

    def ours():
        return fa(q, k, v, causal=causal, layout="bhsd")

    def ours_legacy():
        return fa(q, k, v, causal=causal, layout="bhsd", path="legacy")

    def ours_plain():  # without FlashAttention-3's schedule (kernels/flash_attention.py)
        return fa(q, k, v, causal=causal, layout="bhsd", overlap=False)

    ref = reference_forward(q, k, v, causal)
    err, error = common.run_ours(ours, lambda: ref)
    row["rel_err"], row["error"] = err, error
    row["ours_ms"] = None if error else common.bench(ours, rep=rep)
    row["ours_tflops"] = None if error else flops / row["ours_ms"] / 1e9
    row.update(common.roofline(lambda: [(importlib.import_module("tegula.kernels.flash_attention").kernel_for(
        B, H, Hkv, S, S, D, causal, 0, "bhsd", "float16", None), (q, k, v))], row["ours_ms"]))
    overlap = importlib.import_module("tegula.kernels.flash_attention").default_config(S, D, causal).get("overlap")
    if overlap:
        plain_err, plain_error = common.run_ours(ours_plain, lambda: ref)
        row["error"] = row["error"] or (plain_error and f"without overlap: {plain_error}")
        row["plain_ms"] = None if plain_error or plain_err is None or plain_err > TOL else common.bench(ours_plain,
                                                                                                         rep=rep)
    if legacy:
        legacy_err, legacy_error = common.run_ours(ours_legacy, lambda: ref)
        row["legacy_rel_err"] = legacy_err
        row["error"] = row["error"] or (legacy_error and f"legacy path: {legacy_error}")
        row["legacy_ms"] = None if legacy_error else common.bench(ours_legacy, rep=rep)
        row["legacy_tflops"] = None if legacy_error else flops / row["legacy_ms"] / 1e9

    sdpa = _sdpa_fn(q, k, v, causal)
    expanded = None
    for name in BACKENDS:
        fn = sdpa
        out, reason = _try_backend(name, fn)
        if reason and H != Hkv:  # a backend without grouped-query heads, on expanded K/V
            expanded = expanded or _expanded_sdpa_fn(q, k, v, causal)
            out, retry = _try_backend(name, expanded)
            if not retry:
                fn, reason = expanded, None
                row[f"{name}_expanded_kv"] = True
        if reason:
            row[f"{name}_ms"] = row[f"{name}_tflops"] = None
            row[f"{name}_reason"] = reason
            failures.setdefault((name, reason), []).append(case)
            continue
        row[f"{name}_rel_err"] = common.rel_err(out, ref)
        del out
        row[f"{name}_ms"] = _bench_backend(name, fn, rep)
        row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
    del expanded

    def speedup(other_ms):
        return other_ms / row["ours_ms"] if row["ours_ms"] is not None and other_ms is not None else None

    row["vs_flash"] = speedup(row["flash_ms"])
    row["vs_cudnn"] = speedup(row["cudnn_ms"])
    row["vs_legacy"] = speedup(row.get("legacy_ms"))
    row["vs_plain"] = speedup(row.get("plain_ms"))
    row["target"] = f">={target}x SDPA cuDNN" if target is not None else "-"
    errors = [err] + ([row["legacy_rel_err"]] if legacy else [])
    if row["error"]:
        row["status"] = "ERROR"
    elif not all(e is not None and e <= TOL for e in errors):
        row["status"] = "WRONG"
    elif target is None:
        row["status"] = "-"
    elif row[f"vs_{TARGET_BACKEND}"] is None:
        row["status"] = "n/a"
    else:
        row["status"] = common.status(row[f"vs_{TARGET_BACKEND}"] >= target)
    return row


def plot_sweep(rows, path):
    """TFLOP/s against S, one panel per causal mode; returns a message when skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, causal in zip(axes, (False, True)):
        sel = [r for r in rows if r["causal"] == causal]
        xs = [r["S"] for r in sel]
        for key, label in (("ours", "tegula"), ("legacy", "tegula legacy path"), ("flash", "SDPA flash"),
                           ("cudnn", "SDPA cuDNN"), ("efficient", "SDPA efficient")):
            ys = [r.get(f"{key}_tflops") for r in sel]
            ys = [float("nan") if y is None else y for y in ys]
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel(f"S (B = {SWEEP_TOKENS} / S, H={SWEEP_H}, D={SWEEP_D})")
        ax.set_title("causal" if causal else "non-causal")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("TFLOP/s")
    axes[0].legend()
    fig.suptitle(f"Attention forward fp16 — {common.device_name()}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"plot: {path}"


def run_forward(args):
    fa = importlib.import_module("tegula.kernels.flash_attention").flash_attention
    failures = {}
    rows, sweep = [], []
    for case in FORWARD_CASES:
        rows.append(forward_case(fa, *case, rep=args.rep, failures=failures))
        torch.cuda.empty_cache()  # the case's inputs and float32 reference are gone by now
    if not args.no_sweep:
        for causal in (False, True):
            for S in SWEEP_S:
                r = forward_case(fa, SWEEP_TOKENS // S, SWEEP_H, SWEEP_H, S, SWEEP_D, causal, None,
                                 rep=args.rep / 2, failures=failures, legacy=args.sweep_legacy)
                r["case"] = "sweep " + r["case"]
                r["sweep"] = True
                sweep.append(r)
                torch.cuda.empty_cache()
    notes = ["FLOPs = 4*B*H*Sq*Skv*D, halved for causal; vs cuDNN / vs flash / vs legacy = that time / our "
             "time; err = relative Frobenius error vs SDPA in float32 (tolerance 2e-3, both of our paths)",
             "roofline: ours against this GPU's roofline (tegula.tools.Analyzer: the kernel's FLOPs and DRAM "
             "bytes, causal tiles counted per block), the share of the binding roof and which roof binds",
             "both sides read the same (B, H, S, D) fp16 tensors (ours with layout='bhsd'); GQA: "
             "SDPA with enable_gqa=True"]
    if sweep:
        notes.append(f"sweep rows hold B*S = {SWEEP_TOKENS} (B = {SWEEP_TOKENS // SWEEP_S[-1]}.."
                     f"{SWEEP_TOKENS // SWEEP_S[0]}), H={SWEEP_H}, D={SWEEP_D}, timed with half the budget")
    for (name, reason), cases in failures.items():
        notes.append(f"{name} n/a on {len(cases)} case(s), e.g. {cases[0]}: {reason}")
    for row in rows + sweep:
        expanded = [name for name in BACKENDS if row.get(f"{name}_expanded_kv")]
        if expanded:
            notes.append(f"{row['case']}: {', '.join(expanded)} refused grouped-query heads; timed on K/V "
                         "expanded to H heads beforehand")
    return rows + sweep, sweep, notes


def reference_backward(q, k, v, out_grad, causal):
    """(dq, dk, dv) of attention in float32 by autograd, one (batch, KV head) at a time so
    that no chunk's score matrix exceeds group x S x S floats; (B, H, S, D) layout."""
    B, H, S, D = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    grads = [torch.empty(t.shape, device=t.device, dtype=torch.float32) for t in (q, k, v)]
    mask = torch.ones(S, S, dtype=torch.bool, device=q.device).tril() if causal else None
    for b in range(B):
        for h in range(Hkv):
            heads = slice(h * group, (h + 1) * group)
            qf = q[b, heads].float().requires_grad_()
            kf = k[b, h].float().requires_grad_()
            vf = v[b, h].float().requires_grad_()
            s = qf @ kf.transpose(-1, -2) / math.sqrt(D)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            o = torch.softmax(s, dim=-1) @ vf
            dq, dk, dv = torch.autograd.grad(o, (qf, kf, vf), out_grad[b, heads].float())
            grads[0][b, heads], grads[1][b, h], grads[2][b, h] = dq, dk, dv
            del s, o
    return grads


def _sdpa_backward_fn(name, q, k, v, do, causal):
    """The forward once under backend `name` (on leaves that require grad, K/V expanded to
    H heads where the heads differ), then a function timing only its backward."""
    from torch.nn.attention import sdpa_kernel
    group = q.shape[1] // k.shape[1]
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    qg, kg, vg = leaves
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(_backend(name)):
                kk = kg.repeat_interleave(group, dim=1) if group > 1 else kg
                vv = vg.repeat_interleave(group, dim=1) if group > 1 else vg
                out = F.scaled_dot_product_attention(qg, kk, vv, is_causal=causal)
                grads = torch.autograd.grad(out, leaves, do, retain_graph=True)
            torch.cuda.synchronize()
        except Exception as exc:
            return None, None, _reason(exc, caught)

    def backward():
        with sdpa_kernel(_backend(name)):
            return torch.autograd.grad(out, leaves, do, retain_graph=True)
    return backward, grads, None


def backward_case(bw, B, H, Hkv, S, D, causal, target, rep, failures, sweep=False):
    fa = importlib.import_module("tegula.kernels.flash_attention").flash_attention
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, S, D, generator=gen, device="cuda", dtype=DTYPE)
    k = torch.randn(B, Hkv, S, D, generator=gen, device="cuda", dtype=DTYPE)
    v = torch.randn(B, Hkv, S, D, generator=gen, device="cuda", dtype=DTYPE)
    do = torch.randn(B, H, S, D, generator=gen, device="cuda", dtype=DTYPE)
    heads = f"H{H}" if H == Hkv else f"H{H}/{Hkv}"
    case = f"bwd B{B} {heads} S{S} D{D} {'causal' if causal else 'full'}"
    flops = 10.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    row = {"case": case, "B": B, "H": H, "Hkv": Hkv, "S": S, "D": D, "causal": causal, "flops": flops,
           "part": "backward"}
    out, lse = fa(q, k, v, causal=causal, layout="bhsd", return_lse=True)

    def ours(**config):
        return bw.flash_attention_backward(do, q, k, v, out, lse, causal=causal, layout="bhsd", **config)

    ref = reference_backward(q, k, v, do, causal)
    row["error"] = None
    try:
        got = ours()
        torch.cuda.synchronize()
        errs = [common.rel_err(g, r) for g, r in zip(got, ref)]
        row["rel_err"] = max(errs)
        row["errs"] = errs
        del got
    except Exception as exc:
        row["rel_err"], row["error"] = None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    row["ours_ms"] = None if row["error"] else common.bench(ours, rep=rep)
    row["ours_tflops"] = None if row["error"] else flops / row["ours_ms"] / 1e9
    row.update(common.roofline(lambda: [(bw.kernel_for(B, H, Hkv, S, S, D, causal, 0, "bhsd", "float16", None),
                                         (q, k, v, out, do, lse, (B, H, S)))], row["ours_ms"]))
    for name in BWD_BACKENDS:
        fn, grads, reason = _sdpa_backward_fn(name, q, k, v, do, causal)
        if reason:
            row[f"{name}_ms"] = row[f"{name}_tflops"] = None
            row[f"{name}_reason"] = reason
            failures.setdefault((name, reason), []).append(case)
            continue
        row[f"{name}_rel_err"] = max(common.rel_err(g, r) for g, r in zip(grads, ref))
        del grads
        row[f"{name}_ms"] = _bench_backend(name, fn, rep)
        row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
        del fn

    def speedup(other_ms):
        return other_ms / row["ours_ms"] if row["ours_ms"] is not None and other_ms is not None else None

    row["vs_flash"] = speedup(row["flash_ms"])
    row["vs_cudnn"] = speedup(row["cudnn_ms"])
    row["target"] = f">={target}x SDPA flash" if target is not None else "-"
    if row["error"]:
        row["status"] = "ERROR"
    elif not row["rel_err"] <= BWD_TOL:
        row["status"] = "WRONG"
    elif target is None:
        row["status"] = "-"
    elif row[f"vs_{BWD_TARGET_BACKEND}"] is None:
        row["status"] = "n/a"
    else:
        row["status"] = common.status(row[f"vs_{BWD_TARGET_BACKEND}"] >= target)

    sweep_rows = []
    if sweep:
        for config in bw.configs:
            label = ("{block_M}x{block_N} t{threads} s{num_stages}".format(**config)
                     + ("" if config.get("stagger", True) else " unstaggered")
                     + {None: "", True: " heads-first", False: " kv-blocks-first"}[config.get("heads_first")])
            srow = {"case": f"{case} {label}", "part": "backward-sweep", "config": config, "error": None}
            try:
                got = ours(**config)
                torch.cuda.synchronize()
                srow["rel_err"] = max(common.rel_err(g, r) for g, r in zip(got, ref))
                del got
                srow["ms"] = common.bench(lambda: ours(**config), rep=rep / 2)
                srow["tflops"] = flops / srow["ms"] / 1e9
                srow["vs_default"] = row["ours_ms"] / srow["ms"] if row["ours_ms"] else None
                srow["status"] = "-" if srow["rel_err"] <= BWD_TOL else "WRONG"
            except Exception as exc:  # a config that does not fit this shape or GPU
                srow["reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                srow["status"] = "n/a"
            sweep_rows.append(srow)
            torch.cuda.empty_cache()
    del ref
    return row, sweep_rows


def run_backward(args):
    bw = importlib.import_module("tegula.kernels.flash_attention_bwd")
    failures, rows, sweep = {}, [], []
    for case in BACKWARD_CASES:
        row, sweep_rows = backward_case(bw, *case, rep=args.rep, failures=failures, sweep=args.bwd_sweep)
        rows.append(row)
        sweep.extend(sweep_rows)
        torch.cuda.empty_cache()
    notes = ["FLOPs = 10*B*H*Sq*Skv*D (five GEMMs), halved for causal; ours = preprocess + main + "
             "postprocess after our forward; SDPA = torch.autograd.grad on a retained graph of a forward "
             "run beforehand under the same backend; vs flash / vs cuDNN = that time / our time",
             f"err = the largest relative Frobenius error of dq, dk, dv against float32 autograd "
             f"(tolerance {BWD_TOL:.0e}); GQA: SDPA on K/V expanded to H heads inside its graph (the "
             "expansion's backward, a sum over the group, is timed with it)"]
    for (name, reason), cases in failures.items():
        notes.append(f"{name} n/a on {len(cases)} case(s), e.g. {cases[0]}: {reason}")
    for row in sweep:
        if row.get("reason"):
            notes.append(f"{row['case']}: n/a, {row['reason']}")
    return rows, sweep, notes


def reference_decode(q, k_cache, v_cache, lens, chunk=8):
    """Float32 attention of q (B, H, D) over the first lens[b] keys, a few sequences at a time."""
    B, H, D = q.shape
    S, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = H // Hkv
    out = torch.empty(B, H, D, device=q.device, dtype=torch.float32)
    pos = torch.arange(S, device=q.device)
    for b0 in range(0, B, chunk):
        b1 = min(B, b0 + chunk)
        qf = q[b0:b1].float().view(b1 - b0, Hkv, group, D)
        kf, vf = k_cache[b0:b1].float(), v_cache[b0:b1].float()
        s = torch.einsum("bkgd,bskd->bkgs", qf, kf) / math.sqrt(D)
        s.masked_fill_((pos[None, :] >= lens[b0:b1, None].long())[:, None, None, :], float("-inf"))
        p = torch.softmax(s, dim=-1)
        out[b0:b1] = torch.einsum("bkgs,bskd->bkgd", p, vf).reshape(b1 - b0, H, D)
        del kf, vf, s, p
    return out


def decode_kernels(fd_mod, q, k_cache, v_cache, lens, num_split):
    """What flash_decode launches with `num_split` splits: the split and combine kernels and
    their arguments (the combine kernel's as shapes)."""
    B, H, D = q.shape
    S, Hkv = k_cache.shape[1], k_cache.shape[2]
    split, combine = fd_mod.kernels_for(B, H, Hkv, S, D, num_split, "float16", None)
    return [(split, (q, k_cache, v_cache, lens)), (combine, ((B, H, num_split, D), (B, H, num_split)))]


def decode_row(case, nbytes, copy_gbs, fn, ref, rep, *, ours=True, target=None, kernels=None, **extra):
    row = {"case": case, "part": "decode", "bytes": nbytes, "copy_gbs": copy_gbs, **extra}
    if ours:
        err, error = common.run_ours(fn, lambda: ref)
    else:
        out, error = _try_backend(extra.get("backend"), fn)
        err = None if error else common.rel_err(out.reshape(ref.shape), ref)
        out = None
    row["rel_err"], row["error"] = err, error
    if error:
        row["ms"] = None
    elif ours:
        row["ms"] = common.bench(fn, rep=rep)
    else:
        row["ms"] = _bench_backend(extra.get("backend"), fn, rep)
    if row["ms"] is not None:
        row["gbs"] = common.gbs(nbytes, row["ms"])
        row["pct_copy"] = 100 * row["gbs"] / copy_gbs
        if kernels is not None:
            row.update(common.roofline(kernels, row["ms"]))
    row["target"] = f">={target:.0f}% of copy BW" if target is not None else "-"
    if error:
        row["status"] = "ERROR" if ours else "n/a"
    elif ours and not err <= TOL:
        row["status"] = "WRONG"
    elif target is None:
        row["status"] = "-"
    else:
        row["status"] = common.status(row["pct_copy"] >= target)
    return row


def run_decode(args):
    fd_mod = importlib.import_module("tegula.kernels.flash_decoding")
    fd = fd_mod.flash_decode
    B, H, Hkv, D, S = DEC_B, DEC_H, DEC_HKV, DEC_D, DEC_S
    copy_gbs = common.copy_bandwidth_gbs()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, D, generator=gen, device="cuda", dtype=DTYPE)
    k_cache = torch.randn(B, S, Hkv, D, generator=gen, device="cuda", dtype=DTYPE)
    v_cache = torch.randn(B, S, Hkv, D, generator=gen, device="cuda", dtype=DTYPE)
    full = torch.full((B,), S, device="cuda", dtype=torch.int32)
    nbytes = 2 * B * S * Hkv * D * k_cache.element_size()
    shape = f"B{B} H{H}/{Hkv} D{D} L{S}"
    auto = fd_mod.default_num_split(B, Hkv, S, sms=torch.cuda.get_device_properties(0).multi_processor_count)
    rows = []

    ref = reference_decode(q, k_cache, v_cache, full)
    for split in DEC_SPLITS:
        label = f"num_split={split}" if split is not None else f"num_split=auto({auto})"
        rows.append(decode_row(f"flash_decode {shape} {label}", nbytes, copy_gbs,
                               lambda split=split: fd(q, k_cache, v_cache, full, num_split=split), ref, args.rep,
                               target=DEC_MIN_PCT_COPY if split is None else None, num_split=split or auto,
                               kernels=lambda split=split: decode_kernels(fd_mod, q, k_cache, v_cache, full,
                                                                          split or auto)))

    # SDPA: q (B, H, 1, D) against (B, Hkv, S, D) copies of the caches.
    q4 = q.unsqueeze(2)
    k_t, v_t = k_cache.transpose(1, 2).contiguous(), v_cache.transpose(1, 2).contiguous()
    sdpa = _sdpa_fn(q4, k_t, v_t, False)
    backend = "flash"
    if _try_backend("flash", sdpa)[1] is not None:
        backend = None
    rows.append(decode_row(f"SDPA {'flash' if backend else 'default'} {shape} (B,H,1,D)", nbytes, copy_gbs,
                           sdpa, ref, args.rep, ours=False, backend=backend))
    del ref
    torch.cuda.empty_cache()

    # Ragged: lengths uniform in [1, S]; bytes on the actual lengths.
    lens = torch.randint(1, S + 1, (B,), generator=gen, device="cuda", dtype=torch.int32)
    ragged_bytes = 2 * int(lens.sum().item()) * Hkv * D * k_cache.element_size()
    ref = reference_decode(q, k_cache, v_cache, lens)
    mean_len = lens.float().mean().item()
    rows.append(decode_row(f"flash_decode B{B} H{H}/{Hkv} D{D} ragged L~U[1,{S}] (mean {mean_len:.0f}) auto",
                           ragged_bytes, copy_gbs, lambda: fd(q, k_cache, v_cache, lens), ref, args.rep,
                           num_split=auto, kernels=lambda: decode_kernels(fd_mod, q, k_cache, v_cache, lens, auto)))
    mask = (torch.arange(S, device="cuda")[None, :] < lens[:, None])[:, None, None, :]
    rows.append(decode_row(f"SDPA default B{B} H{H}/{Hkv} D{D} ragged (bool mask)", ragged_bytes, copy_gbs,
                           _sdpa_fn(q4, k_t, v_t, False, attn_mask=mask), ref, args.rep, ours=False, backend=None))
    del ref, k_t, v_t
    torch.cuda.empty_cache()
    notes = [f"copy bandwidth (1 GiB device-to-device, read+write): {copy_gbs:.0f} GB/s",
             f"GB/s = bytes of K and V read (2*B*L*Hkv*D*2 = {nbytes / 2**30:.2f} GiB at full length) / time; "
             "err vs float32 attention",
             f"num_split=auto is flash_decode's default ({auto} here); the split effect is the rows "
             "num_split=1,4,8",
             "SDPA rows are references on (B, Hkv, S, D) copies of the caches with enable_gqa; the masked "
             "ragged SDPA row reads all S keys, its GB/s counts only the actual lengths"]
    for row in rows:
        if row["status"] == "n/a" and row.get("error"):
            notes.append(f"{row['case']}: n/a, {row['error']}")
            row["reason"], row["error"] = row["error"], None  # not a failure of ours
    return rows, notes


FORWARD_COLUMNS = [
    ("case", "case", "s"), ("err", "rel_err", ".1e"), ("legacy err", "legacy_rel_err", ".1e"),
    ("ours ms", "ours_ms", ".3f"), ("ours TF/s", "ours_tflops", ".0f"),
    ("legacy ms", "legacy_ms", ".3f"), ("legacy TF/s", "legacy_tflops", ".0f"),
    ("flash ms", "flash_ms", ".3f"), ("flash TF/s", "flash_tflops", ".0f"),
    ("cuDNN ms", "cudnn_ms", ".3f"), ("cuDNN TF/s", "cudnn_tflops", ".0f"),
    ("effic ms", "efficient_ms", ".3f"), ("effic TF/s", "efficient_tflops", ".0f"),
    ("vs cuDNN", "vs_cudnn", ".2f"), ("vs flash", "vs_flash", ".2f"), ("vs legacy", "vs_legacy", ".2f"),
    ("vs no overlap", "vs_plain", ".2f"), ("roofline", "roofline", "s"), ("target", "target", "s"),
    ("status", "status", "s"),
]
BACKWARD_COLUMNS = [
    ("case", "case", "s"), ("err", "rel_err", ".1e"),
    ("ours ms", "ours_ms", ".3f"), ("ours TF/s", "ours_tflops", ".0f"),
    ("flash ms", "flash_ms", ".3f"), ("flash TF/s", "flash_tflops", ".0f"),
    ("cuDNN ms", "cudnn_ms", ".3f"), ("cuDNN TF/s", "cudnn_tflops", ".0f"),
    ("vs flash", "vs_flash", ".2f"), ("vs cuDNN", "vs_cudnn", ".2f"),
    ("roofline", "roofline", "s"), ("target", "target", "s"), ("status", "status", "s"),
]
BACKWARD_SWEEP_COLUMNS = [
    ("case", "case", "s"), ("err", "rel_err", ".1e"), ("ms", "ms", ".3f"), ("TF/s", "tflops", ".0f"),
    ("vs default", "vs_default", ".2f"), ("status", "status", "s"),
]
DECODE_COLUMNS = [
    ("case", "case", "s"), ("err", "rel_err", ".1e"), ("ms", "ms", ".4f"), ("GB/s", "gbs", ".0f"),
    ("% copy", "pct_copy", ".1f"), ("roofline", "roofline", "s"), ("target", "target", "s"),
    ("status", "status", "s"),
]


def _display(rows, keys):
    """Rows for the table: a backend that refused the shape reads n/a, not '-'."""
    out = []
    for row in rows:
        shown = dict(row)
        for key in keys:
            if shown.get(key) is None:
                shown[key] = "n/a"
        out.append(shown)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "forward", "decode", "backward"), default="all")
    parser.add_argument("--backward", action="store_true", help="the backward part only (--part backward)")
    parser.add_argument("--bwd-sweep", action="store_true",
                        help="backward: also time every tile config of flash_attention_bwd.configs")
    parser.add_argument("--no-sweep", action="store_true", help="skip the forward S sweep and its plot")
    parser.add_argument("--sweep-legacy", action="store_true", help="time the legacy path in the sweep too")
    parser.add_argument("--rep", type=float, default=200.0,
                        help="timing budget per measurement in ms (the sweep uses half)")
    args = parser.parse_args()
    common.require_gpu("bench_attention")
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 references stay float32

    if args.backward:
        args.part = "backward"
    fwd_rows, fwd_notes, dec_rows, dec_notes, messages = [], [], [], [], []
    bwd_rows, bwd_sweep, bwd_notes = [], [], []
    if args.part in ("all", "forward"):
        fwd_rows, sweep, fwd_notes = run_forward(args)
    if args.part in ("all", "backward"):
        bwd_rows, bwd_sweep, bwd_notes = run_backward(args)
    if args.part in ("all", "decode"):
        dec_rows, dec_notes = run_decode(args)

    out_dir = os.environ.get("OUT")
    copy = common.copy_bandwidth_gbs() if dec_rows else None
    common.write_json("attention", fwd_rows + bwd_rows + bwd_sweep + dec_rows, copy_gbs=copy)
    if fwd_rows and not args.no_sweep:
        if out_dir:
            messages.append(plot_sweep(sweep, os.path.join(out_dir, "bench_attention.png")))
        else:
            fwd_notes.append("set OUT=dir to write the sweep plot (dir/bench_attention.png)")
    for message in messages:
        print(message)

    if fwd_rows:
        common.print_table("Attention forward, float16: tegula flash_attention vs torch SDPA backends",
                           _display(fwd_rows, [f"{b}_{m}" for b in BACKENDS for m in ("ms", "tflops")]),
                           FORWARD_COLUMNS, notes=fwd_notes)
    if bwd_rows:
        common.print_table("Attention backward, float16: tegula flash_attention_backward vs torch SDPA backends",
                           _display(bwd_rows, [f"{b}_{m}" for b in BWD_BACKENDS for m in ("ms", "tflops")]),
                           BACKWARD_COLUMNS, notes=bwd_notes)
    if bwd_sweep:
        common.print_table("Attention backward tile sweep (flash_attention_bwd.configs)", bwd_sweep,
                           BACKWARD_SWEEP_COLUMNS)
    if dec_rows:
        common.print_table("Flash decoding, float16: tegula flash_decode (bandwidth of K and V)",
                           dec_rows, DECODE_COLUMNS, notes=dec_notes)
    return common.exit_status(fwd_rows + bwd_rows + bwd_sweep + dec_rows)


if __name__ == "__main__":
    sys.exit(main())
