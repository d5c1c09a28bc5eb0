"""Wall time per call of every entry point at decode sizes (Llama-3-8B's dimensions,
batch 8, bfloat16), beside what a user would call instead: torch's op where there is one,
else the few torch ops that compute the same thing.

A decode step calls small kernels thousands of times a second, so the cost that matters
is the host's: argument checks, allocation, the launch. Calls are issued back to back
without synchronising (as a decode loop issues them); wall clock over many calls after a
warm-up, divided by the count, the median of several rounds. When the GPU takes longer
than the host, that is what is measured, for both columns alike. Each row also checks
the result against its torch column once (the result must be right before its time
counts) and says whether the calls replayed an entry plan (`plans`: the share of timed
calls that did; see kernels/_calls.py `planned`).

Target: ours/torch <= 1.0 for every entry point with a torch op.

    python benchmarks/bench_entry.py            # OUT=dir also writes dir/bench_entry.json
    python benchmarks/bench_entry.py --only rms_norm,matmul
    TEGULA_ENTRY_PLANS=0 python benchmarks/bench_entry.py   # the entry points without plans
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import common

WARMUP = 200
COUNT = 2000
ROUNDS = 5
B, HID, INTER, H, HKV, D, KV_LEN = 8, 4096, 14336, 32, 8, 128, 2048
DT = torch.bfloat16


def per_call_us(fn) -> float:
    return common.per_call_us(fn, WARMUP, COUNT, ROUNDS, wall=True)


def randn(*shape, dtype=DT, scale=1.0):
    return (torch.randn(shape, device="cuda") * scale).to(dtype)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def cases():
    """(name, what torch runs, ours(), torch's(), tolerance), at decode sizes."""
    import tegula.kernels as K
    from tegula.kernels import flash_decoding, mla_decode as mla, dequant_gemm as dg
    from tegula.kernels._ops import flash_attention

    x, r, w, bias = randn(B, HID), randn(B, HID), randn(HID), randn(HID)
    eps = 1e-6
    yield "rms_norm", "F.rms_norm", lambda: K.rms_norm(x, w, eps), lambda: F.rms_norm(x, (HID,), w, eps), 2e-2
    yield ("rms_norm_silu", "F.silu(F.rms_norm)", lambda: K.rms_norm_silu(x, w, eps),
           lambda: F.silu(F.rms_norm(x, (HID,), w, eps)), 2e-2)

    def torch_add_rms():
        h = x + r
        return F.rms_norm(h, (HID,), w, eps), h
    yield "add_rms_norm", "x + r, F.rms_norm", lambda: K.add_rms_norm(x, r, w, eps), torch_add_rms, 2e-2
    yield ("layer_norm", "F.layer_norm", lambda: K.layer_norm(x, w, bias, 1e-5),
           lambda: F.layer_norm(x, (HID,), w, bias, 1e-5), 2e-2)
    yield "softmax", "torch.softmax", lambda: K.softmax(x), lambda: torch.softmax(x, -1), 1e-2
    yield "add", "torch.add", lambda: K.add(x, r), lambda: torch.add(x, r), 1e-2
    yield "row_sum", "x.sum(-1)", lambda: K.row_sum(x), lambda: x.sum(-1), 5e-2
    yield "row_max", "x.amax(-1)", lambda: K.row_max(x), lambda: x.amax(-1), 0
    yield "row_min", "x.amin(-1)", lambda: K.row_min(x), lambda: x.amin(-1), 0
    yield "transpose", "x.t().contiguous()", lambda: K.transpose(x), lambda: x.t().contiguous(), 0

    wt = randn(HID, HID, scale=HID ** -0.5)
    yield "matmul", "torch.matmul", lambda: K.matmul(x, wt), lambda: torch.matmul(x, wt), 2e-2

    q = randn(B, H, D)
    kc, vc = randn(B, KV_LEN, HKV, D), randn(B, KV_LEN, HKV, D)
    lens = torch.full((B,), KV_LEN, dtype=torch.int32, device="cuda")

    def sdpa_decode():
        return F.scaled_dot_product_attention(q.unsqueeze(2), kc.transpose(1, 2), vc.transpose(1, 2),
                                              enable_gqa=True).squeeze(2)
    yield ("flash_decode", "SDPA (enable_gqa)", lambda: flash_decoding.flash_decode(q, kc, vc, lens),
           sdpa_decode, 2e-2)

    qs, ks, vs = randn(1, 128, H, D), randn(1, 128, HKV, D), randn(1, 128, HKV, D)
    yield ("flash_attention (S 128)", "SDPA (enable_gqa)", lambda: flash_attention(qs, ks, vs, causal=True),
           lambda: F.scaled_dot_product_attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2),
                                                  is_causal=True, enable_gqa=True).transpose(1, 2), 2e-2)

    mq, mkv = randn(B, 16, 576), randn(B, KV_LEN, 576, scale=0.5)
    scale = 576 ** -0.5

    def torch_mla():
        s = torch.einsum("bhd,bsd->bhs", mq.float(), mkv.float()) * scale
        return torch.einsum("bhs,bsd->bhd", torch.softmax(s, -1), mkv[..., :512].float()).to(DT)
    yield ("mla_decode (h16)", "einsum, softmax, einsum", lambda: mla.mla_decode(mq, mkv, lens, sm_scale=scale),
           torch_mla, 2e-2)

    pos = torch.arange(B, device="cuda").view(B, 1)
    cos, sin = K.rope_cache(KV_LEN, D, device="cuda")
    qr, kr = randn(B, 1, H, D), randn(B, 1, HKV, D)

    def hf_rope():
        c = torch.cat((cos[pos], cos[pos]), -1).unsqueeze(2).to(DT)
        s = torch.cat((sin[pos], sin[pos]), -1).unsqueeze(2).to(DT)
        return qr * c + _rotate_half(qr) * s, kr * c + _rotate_half(kr) * s
    yield "rope", "rotate-half (Hugging Face)", lambda: K.rope(qr, kr, cos, sin, pos), hf_rope, 3e-2

    gu = randn(B, 2 * INTER)
    yield ("swiglu", "F.silu(g) * u", lambda: K.swiglu(gu),
           lambda: F.silu(gu[:, :INTER]) * gu[:, INTER:], 2e-2)
    wgu = randn(2 * INTER, HID, scale=HID ** -0.5)

    def torch_swiglu_linear():
        y = x @ wgu.t()
        return F.silu(y[:, :INTER]) * y[:, INTER:]
    yield "swiglu_linear", "x @ Wᵀ, F.silu(g) * u", lambda: K.swiglu_linear(x, wgu), torch_swiglu_linear, 3e-2

    wq = randn(HID, HID, scale=HID ** -0.5)
    q4, s4, z4 = dg.quantize_int4(wq, 128, symmetric=True)
    wdq = dg.dequantize(q4, s4, z4, 128, "int4").to(DT)
    yield ("w4a16_gemm", "x @ Wᵀ (bf16 W)", lambda: K.w4a16_gemm(x, q4, s4, z4, 128),
           lambda: x @ wdq.t(), 3e-2)

    if torch.cuda.get_device_capability() >= (8, 9):
        a8 = x.to(torch.float8_e4m3fn)
        b8 = wq.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        yield ("fp8_gemm (per tensor)", "torch._scaled_mm", lambda: K.fp8_gemm(a8, b8, one, one),
               lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=DT), 3e-2)

        def torch_quant():
            s = x.float().abs().amax(-1, keepdim=True).clamp_min(1e-12) / 448.0
            return (x.float() / s).to(torch.float8_e4m3fn), s
        yield ("quantize_fp8 (per token)", "amax, div, cast", lambda: K.quantize_fp8(x), torch_quant, None)


def check(name, ours, theirs, tol):
    """None when ours() agrees with theirs() (tol None: shapes only), else the difference."""
    got, want = ours(), theirs()
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        if tuple(g.shape) != tuple(w.shape):
            return f"shape {tuple(g.shape)}, torch {tuple(w.shape)}"
        if tol is None:
            continue
        err = common.rel_err(g.float(), w.float())
        if not err <= tol:
            return f"relative error {err:.3g} > {tol}"
    return None


def plan_share(fn, call) -> str:
    plans = getattr(fn, "plans", None)
    if plans is None:
        return "off"
    before = plans.stats()["hits"]
    for _ in range(20):
        call()
    return f"{(plans.stats()['hits'] - before) / 20:.0%}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated entry points (the row names' first word)")
    args = parser.parse_args(argv)
    common.require_gpu("bench_entry")
    from tegula.kernels import _ops

    only = {s.strip() for s in args.only.split(",") if s.strip()}
    rows = []
    for name, what, ours, theirs, tol in cases():
        key = name.split()[0]
        if only and key not in only:
            continue
        row = {"case": name, "torch": what, "us": None, "torch_us": None, "plans": "-", "target": "<= 1.0x",
               "status": "-"}
        try:
            wrong = check(name, ours, theirs, tol)
            if wrong:
                row["status"], row["error"] = "WRONG", wrong
                rows.append(row)
                continue
            row["torch_us"] = per_call_us(theirs)
            row["us"] = per_call_us(ours)
            fn = getattr(_ops, key, None)
            row["plans"] = plan_share(fn, ours) if fn is not None else "-"
            row["ratio"] = row["us"] / row["torch_us"]
            row["status"] = common.status(row["ratio"] <= 1.0)
        except Exception as exc:  # reported in the table and the JSON
            row["status"], row["error"] = "ERROR", f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        rows.append(row)
    common.write_json("entry", rows, batch=B, hidden=HID, count=COUNT, rounds=ROUNDS)
    columns = [("entry point", "case", "s"), ("torch", "torch", "s"), ("ours us/call", "us", ".2f"),
               ("torch us/call", "torch_us", ".2f"), ("ours/torch", "ratio", ".2f"), ("plans", "plans", "s"),
               ("target", "target", "s"), ("status", "status", "s")]
    notes = [f"{r['case']}: {r['error']}" for r in rows if r.get("error")]
    common.print_table(f"Entry points, wall time per call on {common.device_name()}: batch {B}, hidden {HID}, "
                       f"bfloat16, {COUNT} calls without sync, median of {ROUNDS}", rows, columns=columns,
                       notes=notes)
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
