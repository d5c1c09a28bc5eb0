"""Where the host time of a patched model's decode step goes (a GPU is needed).

1. Host microseconds per call of each op a patched Llama layer calls at decode shapes
   (batch 8, one token), in bursts of 500 calls with no synchronisation inside a burst,
   next to the torch op it replaces.
2. cProfile of decode steps of the patched small model: the functions with the most own
   time.

    python scripts/profile_model_host.py [--size small|8b] [--steps 20]
"""
import argparse
import cProfile
import importlib
import pstats
import sys
import time

import torch
import torch.nn.functional as F


def per_call_us(fn, n=500):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="small")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_model_host: needs a CUDA GPU")
        return 0
    import tegula.integrations.transformers as tt
    from tegula import kernels as K
    from tegula.cli.model import build_model

    rope = importlib.import_module("tegula.kernels.rotary_embedding")
    swiglu = importlib.import_module("tegula.kernels.gated_mlp")
    fused = importlib.import_module("tegula.kernels.fused_norm")
    dt, B, H, Hk, D, hid, inter, L = torch.bfloat16, 8, 32, 8, 128, 4096, 14336, 1152
    x = torch.randn(B, 1, hid, device="cuda", dtype=dt)
    w = torch.ones(hid, device="cuda", dtype=dt)
    q = torch.randn(B, 1, H, D, device="cuda", dtype=dt)
    k = torch.randn(B, 1, Hk, D, device="cuda", dtype=dt)
    cos, sin = rope.rope_cache(L, D, device="cuda")
    pos = torch.tensor([100], device="cuda")
    kc = torch.randn(B, L, Hk, D, device="cuda", dtype=dt)
    lens = torch.full((B,), 1000, dtype=torch.int32, device="cuda")
    wqkv = torch.randn(H * D, hid, device="cuda", dtype=dt)
    wgu = torch.randn(2 * inter, hid, device="cuda", dtype=dt) / 64
    h2 = torch.randn(B, 1, 2 * inter, device="cuda", dtype=dt)
    rows = [
        ("rms_norm", lambda: K.rms_norm(x, w, 1e-5), lambda: F.rms_norm(x, (hid,), w, 1e-5)),
        ("add_rms_norm", lambda: fused.add_rms_norm(x, x, w, 1e-5), lambda: F.rms_norm(x + x, (hid,), w, 1e-5)),
        ("rope in place", lambda: rope.rope(q, k, cos, sin, pos, inplace=True), None),
        ("flash_decode", lambda: K.flash_decode(q.view(B, H, D), kc, kc, lens), None),
        ("linear 4096x4096 (cuBLAS)", lambda: F.linear(x, wqkv), None),
        ("matmul 4096x4096 (ours)", lambda: K.matmul(x.view(B, hid), wqkv.t()), None),
        ("swiglu_linear (ours)", lambda: swiglu.swiglu_linear(x.view(B, hid), wgu), None),
        ("swiglu joined", lambda: swiglu.swiglu(h2), lambda: F.silu(h2[..., :inter]) * h2[..., inter:]),
        ("torch.empty", lambda: torch.empty(B, hid, device="cuda", dtype=dt), None),
    ]
    print(f"host us per call, decode shapes (batch {B}), {torch.cuda.get_device_name()}")
    for name, ours, ref in rows:
        line = f"  {name:<28}{per_call_us(ours):8.1f}"
        if ref is not None:
            line += f"   torch {per_call_us(ref):8.1f}"
        print(line)

    model = build_model(args.size, dt, "cuda", 0, 1024)
    tt.apply(model)
    prompts = torch.randint(0, model.config.vocab_size, (B, 64), device="cuda")
    with torch.no_grad():
        cache = tt.KVCache(model, B, 64 + args.steps + 8)
        out = model(prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        model(tok, past_key_values=cache, use_cache=True, logits_to_keep=1)   # compile everything first
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for _ in range(args.steps):
            tok = model(tok, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
        prof.disable()
        torch.cuda.synchronize()
        print(f"\n{args.steps} decode steps of the patched {args.size} model: "
              f"{(time.perf_counter() - t0) / args.steps * 1e3:.2f} ms per step under cProfile")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(35)
    return 0


if __name__ == "__main__":
    sys.exit(main())
