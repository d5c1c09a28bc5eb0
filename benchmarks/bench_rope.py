"""Rotary position embedding (tegula.kernels.rotary_embedding) against Hugging Face's torch code, eager
and under torch.compile, bfloat16, at Llama 3 8B's shapes (Hq=32, Hk=8, D=128, bshd).

Baselines, the torch code a Hugging Face Llama runs: "gather" takes cos and sin (P, D) in
the activation dtype, gathers them by position_ids, then q·cos + rotate_half(q)·sin and
the same for k; "apply" is that formula alone on per-token cos/sin (B, S, D) already
gathered (apply_rotary_pos_emb, what each layer runs). Ours, q and k in one launch: a
rope_cache table (P, D/2) float32 read by the same positions, out of place and in place,
and the angles computed in the kernel (no table), each against "gather"; and the per-token
(B, S, D) tables themselves, in place, against "apply". Cases: prefill B=8, S=1024,
positions arange(S) per sequence; decode B=8, S=1, each sequence at its own length. The
same inputs for every column, one process, medians of CUDA-event timings with L2 flushed
(common.bench).

RoPE reads q and k once and writes them once: bytes = 2·(q + k) (the cos/sin rows are a
few KiB). Targets: >= 1.0x torch eager and >= 1.0x torch.compile, both. Every output of
ours is first compared with the float64 result of the same formula (relative error
<= 1e-2 for bfloat16, else the row is WRONG).

    python benchmarks/bench_rope.py                   # both cases, all rows
    python benchmarks/bench_rope.py --case decode     # or: --case prefill
    python benchmarks/bench_rope.py --no-compile      # skip the torch.compile baseline
    python benchmarks/bench_rope.py --dtype float16

OUT=dir also writes dir/bench_rope.json.
"""
import argparse
import sys

import torch

import common

HQ, HK, D = 32, 8, 128
CASES = {"prefill": (8, 1024), "decode": (8, 1)}
TABLE_ROWS = 8192
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_apply(q, k, cos, sin):
    """Hugging Face's apply_rotary_pos_emb for bshd q and k, cos and sin (B, S, D)."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def hf_rope(q, k, cos_table, sin_table, position_ids):
    """The (P, D) tables gathered by position_ids (B, S), then hf_apply."""
    return hf_apply(q, k, cos_table[position_ids], sin_table[position_ids])


def inputs(case, dtype):
    from tegula.kernels.rotary_embedding import rope_cache

    B, S = CASES[case]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn((B, S, HQ, D), generator=gen, device="cuda").to(dtype)
    k = torch.randn((B, S, HK, D), generator=gen, device="cuda").to(dtype)
    if case == "decode":
        positions = torch.randint(0, TABLE_ROWS, (B, 1), generator=gen, device="cuda")
    else:
        positions = torch.arange(S, device="cuda").expand(B, S).contiguous()
    cos, sin = rope_cache(TABLE_ROWS, D)
    hf_cos, hf_sin = (torch.cat([t, t], -1).to(dtype) for t in (cos, sin))
    return q, k, positions, cos, sin, hf_cos, hf_sin


def reference(q, k, cos, sin):
    """float64 result of the formula for cos, sin (B, S, D/2) (the angles ours reads)."""
    c = torch.cat([cos, cos], -1).double().unsqueeze(2)
    s = torch.cat([sin, sin], -1).double().unsqueeze(2)
    return tuple(x.double() * c + rotate_half(x.double()) * s for x in (q, k))


def pair_error(out, ref):
    """The larger relative error of the (q, k) pair `out`; inf for a non-finite output."""
    return max(common.rel_err(o, r) for o, r in zip(out, ref))


def measure(case, dtype, compile_baseline):
    """Rows of one case. Each variant of ours is held to the baseline that starts from what
    it is given: the tables and positions (Hugging Face's gather + apply), or per-token
    cos/sin (B, S, D) already gathered (apply_rotary_pos_emb alone, what each layer of a
    Hugging Face model runs)."""
    from tegula.kernels.rotary_embedding import rope

    q, k, positions, cos, sin, hf_cos, hf_sin = inputs(case, dtype)
    B, S = CASES[case]
    tok_cos, tok_sin = hf_cos[positions], hf_sin[positions]
    nbytes = 2 * (q.numel() + k.numel()) * q.element_size()
    baselines = {
        "gather": common.time_baseline(hf_rope, (q, k, hf_cos, hf_sin, positions), compile_baseline),
        "apply": common.time_baseline(hf_apply, (q, k, tok_cos, tok_sin), compile_baseline),
    }
    ref = reference(q, k, cos[positions], sin[positions])
    ref_tok = reference(q, k, tok_cos[..., :D // 2], tok_sin[..., :D // 2])
    qi, ki = q.clone(), k.clone()  # in place turns these again on every timed call

    variants = [
        ("table + positions, out of place", "gather", ref, lambda: rope(q, k, cos, sin, positions),
         lambda: rope(q, k, cos, sin, positions)),
        ("table + positions, in place", "gather", ref,
         lambda: rope(q.clone(), k.clone(), cos, sin, positions, inplace=True),
         lambda: rope(qi, ki, cos, sin, positions, inplace=True)),
        ("computed angles, in place", "gather", ref,
         lambda: rope(q.clone(), k.clone(), positions=positions, inplace=True),
         lambda: rope(qi, ki, positions=positions, inplace=True)),
        ("per-token cos/sin (B,S,D), in place", "apply", ref_tok,
         lambda: rope(q.clone(), k.clone(), tok_cos, tok_sin, inplace=True),
         lambda: rope(qi, ki, tok_cos, tok_sin, inplace=True)),
    ]
    rows = []
    for name, baseline, expected, check, timed in variants:
        err, error = None, None
        try:
            err = pair_error(check(), expected)
            torch.cuda.synchronize()
        except Exception as exc:  # reported in the table and the JSON, not swallowed
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        ours_ms = None if error else common.bench(timed)
        eager_ms, compiled_ms, compile_error = baselines[baseline]
        rows.append(row(f"{case} B={B} S={S}: {name}", nbytes, ours_ms, eager_ms, compiled_ms, err,
                        TOL[dtype], error, compile_error))
    return rows


def row(case, nbytes, ours_ms, eager_ms, compiled_ms, err, tol, error, compile_error):
    copy = common.copy_bandwidth_gbs()
    r = {"case": case, "bytes": nbytes, "ours_ms": ours_ms, "eager_ms": eager_ms, "compile_ms": compiled_ms,
         "rel_err": err, "error": error, "compile_error": compile_error,
         "target": ">=1.0x eager" + (", >=1.0x compile" if compiled_ms is not None else "")}
    checks = []
    if ours_ms is not None:
        r["ours_gbs"] = common.gbs(nbytes, ours_ms)
        r["pct_copy"] = 100 * r["ours_gbs"] / copy
        r["vs_eager"] = eager_ms / ours_ms
        checks.append(r["vs_eager"] >= 1.0)
        if compiled_ms is not None:
            r["vs_compile"] = compiled_ms / ours_ms
            checks.append(r["vs_compile"] >= 1.0)
    if error:
        r["status"] = "ERROR"
    elif err is None or not err <= tol:
        r["status"] = "WRONG"
    else:
        r["status"] = common.status(bool(checks) and all(checks))
    return r


COLUMNS = [
    ("case", "case", "s"), ("ours ms", "ours_ms", ".4f"), ("eager ms", "eager_ms", ".4f"),
    ("compile ms", "compile_ms", ".4f"), ("ours GB/s", "ours_gbs", ".0f"), ("% copy", "pct_copy", ".1f"),
    ("vs eager", "vs_eager", ".2f"), ("vs compile", "vs_compile", ".2f"), ("rel err", "rel_err", ".1e"),
    ("target", "target", "s"), ("status", "status", "s"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("all",) + tuple(CASES), default="all")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    args = parser.parse_args()
    common.require_gpu("bench_rope")
    dtype = DTYPES[args.dtype]
    cases = list(CASES) if args.case == "all" else [args.case]
    rows = [r for case in cases for r in measure(case, dtype, not args.no_compile)]
    common.write_json("rope", rows, copy_gbs=common.copy_bandwidth_gbs(), dtype=args.dtype)
    notes = [f"copy bandwidth (1 GiB device-to-device, read+write): {common.copy_bandwidth_gbs():.0f} GB/s",
             "vs eager / vs compile = baseline time / our time; bytes = read q, k + write q, k",
             "baselines: Hugging Face's (P, D) cos/sin gathered by position_ids then q*cos + rotate_half(q)*sin "
             "(first three rows of a case); that apply alone on per-token cos/sin (B, S, D) (the last row)"]
    notes += sorted({r["compile_error"] for r in rows if r.get("compile_error")})
    common.print_table(f"RoPE, {args.dtype}, Hq={HQ} Hk={HK} D={D} (bshd): tegula rope vs Hugging Face torch code",
                       rows, COLUMNS, notes=notes)
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
