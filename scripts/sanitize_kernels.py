"""One small and one ragged call of every shipped kernel and every language-feature test
kernel, for running under compute-sanitizer on the GPU machine:

    compute-sanitizer --tool memcheck  --error-exitcode 1 python scripts/sanitize_kernels.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python scripts/sanitize_kernels.py
    compute-sanitizer --tool synccheck --error-exitcode 1 python scripts/sanitize_kernels.py

(scripts/device_run.sh runs all three). Every call's result is also compared with torch
loosely, so a kernel that the sanitizer passes but that computes nonsense still fails;
the tests in tests/python/gpu hold the tight tolerances. `--list` prints the cases.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import lang_kernels as lk  # noqa: E402
import replicated_programs as rp  # noqa: E402
import tegula  # noqa: E402
import tegula.kernels as K  # noqa: E402
from tegula.kernels import flash_attention as fa_mod  # noqa: E402
from tegula.kernels import flash_decoding as fd_mod  # noqa: E402
from tegula.kernels import gemm as gemm_mod  # noqa: E402

DEV = "cuda"


def randn(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(dtype)


def close(out, ref, tol):
    out, ref = out.float(), ref.float()
    err = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    if not err <= tol:
        raise AssertionError(f"relative error {err:.3e} > {tol}")


def shipped_cases():
    for rows, hidden in ((64, 256), (37, 1000)):
        x = randn(rows, hidden)
        w = randn(hidden) * 0.1 + 1
        b = randn(hidden) * 0.1
        yield f"rms_norm {rows}x{hidden}", lambda x=x, w=w: close(
            K.rms_norm(x, w), F.rms_norm(x.float(), (x.shape[-1],), w.float(), 1e-6), 1e-2)
        yield f"rms_norm_silu {rows}x{hidden}", lambda x=x, w=w: K.rms_norm_silu(x, w)
        yield f"layer_norm {rows}x{hidden}", lambda x=x, w=w, b=b: close(
            K.layer_norm(x, w, b), F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5), 1e-2)
        yield f"softmax {rows}x{hidden}", lambda x=x: close(K.softmax(x), torch.softmax(x.float(), -1), 1e-2)
        yield f"row_sum {rows}x{hidden}", lambda x=x: close(K.row_sum(x), x.float().sum(-1), 1e-2)
        yield f"row_max {rows}x{hidden}", lambda x=x: close(K.row_max(x), x.float().amax(-1), 1e-2)
        yield f"row_min {rows}x{hidden}", lambda x=x: close(K.row_min(x), x.float().amin(-1), 1e-2)
        yield f"add {rows}x{hidden}", lambda x=x, w=w: close(K.add(x, w), x.float() + w.float(), 1e-2)
        yield f"transpose {rows}x{hidden}", lambda x=x: close(K.transpose(x), x.t(), 0)
    for m, n, k in ((128, 128, 64), (100, 72, 40)):
        a, bm = randn(m, k), randn(k, n)
        yield f"matmul {m}x{n}x{k}", lambda a=a, bm=bm: close(gemm_mod.matmul(a, bm), a.float() @ bm.float(), 1e-2)
    for b, h, s, d, causal in ((1, 2, 128, 64, False), (1, 2, 77, 64, True)):
        q, kk, v = randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d)

        def attn(q=q, kk=kk, v=v, causal=causal):
            ref = F.scaled_dot_product_attention(q.transpose(1, 2).float(), kk.transpose(1, 2).float(),
                                                 v.transpose(1, 2).float(), is_causal=causal).transpose(1, 2)
            close(fa_mod.flash_attention(q, kk, v, causal=causal), ref, 1e-2)

        yield f"flash_attention b{b} h{h} s{s} d{d} causal={causal}", attn
    for batch, seqlens in ((2, (128, 128)), (3, (1, 70, 200))):
        hq, hkv, d, smax = 8, 2, 64, max(seqlens)
        q = randn(batch, hq, d)
        kc, vc = randn(batch, smax, hkv, d), randn(batch, smax, hkv, d)
        lens = torch.tensor(seqlens, device=DEV, dtype=torch.int32)
        yield f"flash_decode b{batch} lens={seqlens}", lambda q=q, kc=kc, vc=vc, lens=lens: fd_mod.flash_decode(
            q, kc, vc, lens)


def language_cases():
    for m, n in ((64, 128), (37, 100)):
        x = randn(m, n, dtype=torch.float32)

        def col(x=x, m=m, n=n):
            s = torch.zeros(n, device=DEV)
            lk.column_sums(m, n)(x, s)
            close(s, x.sum(0), 1e-4)

        yield f"column_sums {m}x{n}", col

        def serial(x=x, m=m, n=n):
            y = torch.empty(m, device=DEV)
            lk.serial_row_sums(m, n)(x, y)
            sign = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(m)], device=DEV)
            close(y, x.sum(1) * sign, 1e-4)

        yield f"serial_row_sums {m}x{n}", serial
        yield f"math_mix {m}x{n}", lambda x=x, m=m, n=n: close(
            lk.math_mix(m, n)(x), lk.math_mix_reference(x), 1e-3)
        yield f"staged_copy {m}x{n}", lambda x=x, m=m, n=n: close(
            lk.staged_copy(m, n)(x.half()), 2 * x.half().float() + 1, 1e-3)
        xb = randn(2, m, n, dtype=torch.float32)
        yield f"batched_row_stats 2x{m}x{n}", lambda xb=xb, m=m, n=n: lk.batched_row_stats(2, m, n)(xb)
        yield f"swizzled_transpose {m}x{n}", lambda x=x, m=m, n=n: close(
            tegula.compile(lk.swizzled_transpose_program(m, n), out_idx=[-1])(x.half()), x.half().t(), 0)
    for n in (1024, 1000):
        x, y = randn(n, dtype=torch.float32), randn(n, dtype=torch.float32)
        yield f"scaled_add {n}", lambda x=x, y=y, n=n: close(lk.scaled_add(128)(x, y, 0.5), 0.5 * x + y, 1e-5)
    for m, n, k in ((128, 128, 64), (100, 72, 40)):
        a, b = randn(m, k), randn(k, n)
        kernel = tegula.compile(lk.gemm_relu_program(m, n, k, 64, 64, 32), out_idx=[-1])
        yield f"gemm_relu {m}x{n}x{k}", lambda a=a, b=b, kernel=kernel: close(
            kernel(a, b), torch.relu(a.float() @ b.float()), 1e-2)
    for m, n, k, ta, tb in ((128, 128, 64, False, True), (100, 72, 40, True, False)):
        a = randn(k, m) if ta else randn(m, k)
        b = randn(n, k) if tb else randn(k, n)
        kernel = tegula.compile(lk.gemm_variant_program(m, n, k, transpose_A=ta, transpose_B=tb), out_idx=[-1])
        yield f"gemm_variant {m}x{n}x{k} tA={ta} tB={tb}", lambda a=a, b=b, ta=ta, tb=tb, kernel=kernel: close(
            kernel(a, b), (a.t() if ta else a).float() @ (b.t() if tb else b).float(), 1e-2)
    for name, (make, inputs, ref) in rp.CASES.items():
        def run(make=make, inputs=inputs, ref=ref):
            gen = torch.Generator().manual_seed(0)
            args = inputs(gen)
            out = make("auto")(*[a.to(DEV) for a in args])
            outs = out if isinstance(out, list) else [out]
            refs = ref(*args)
            refs = refs if isinstance(refs, list) else [refs]
            for o, r in zip(outs, refs):
                close(o.cpu().double(), r, 1e-5)

        yield f"replicated {name}", run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the cases and stop")
    parser.add_argument("-k", default="", help="run only cases whose name contains this")
    args = parser.parse_args()
    global DEV
    DEV = "cpu" if args.list else "cuda"  # --list builds the cases without running them
    torch.manual_seed(0)
    cases = [c for c in list(shipped_cases()) + list(language_cases()) if args.k in c[0]]
    failed = []
    for name, run in cases:
        if args.list:
            print(name)
            continue
        try:
            run()
            torch.cuda.synchronize()
            print(f"ok      {name}", flush=True)
        except Exception as err:  # noqa: BLE001 - every case runs; the summary counts failures
            failed.append(name)
            print(f"FAILED  {name}: {type(err).__name__}: {str(err)[:300]}", flush=True)
    print(f"sanitize_kernels: cases={len(cases)} failed={len(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
