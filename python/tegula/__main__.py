"""Command line: `python -m tegula demo`, `info`, `layout`, `bench` and `model`.

layout, bench and model live in their own modules (tegula.cli.layout, tegula.cli.bench,
tegula.cli.model), each with `add_arguments(parser)` and `run(args)`; they are imported
only when their command runs.

demo: compiles every shipped kernel (to a cubin, for the GPU present or for sm_90a
without one), prints the CUDA generated for one of them, and where a GPU is present runs
each on fresh random inputs, checks it against torch in float32 and times it next to the
torch operation a user would call instead.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time


def _compile_table():
    """name -> a zero-argument function returning the JITKernel the entry point would use
    for a 4096-wide float16 row."""
    import torch

    m = {n: importlib.import_module("tegula.kernels." + n)
         for n in ("elementwise", "rmsnorm", "row_softmax", "layernorm", "reduce", "matrix_transpose", "gemm",
                   "flash_attention", "flash_decoding")}
    h = torch.float16
    return {
        "add": lambda: m["elementwise"].kernel_for(4096, h, True),
        "rms_norm": lambda: m["rmsnorm"].kernel_for(4096, h, 1e-6),
        "rms_norm_silu": lambda: m["rmsnorm"].kernel_for(4096, h, 1e-6, True),
        "softmax": lambda: m["row_softmax"].kernel_for(4096, h),
        "layer_norm": lambda: m["layernorm"].kernel_for(4096, h, 1e-5),
        "row_sum": lambda: m["reduce"].kernel_for(4096, h, "sum"),
        "row_max": lambda: m["reduce"].kernel_for(4096, h, "max"),
        "transpose": lambda: m["matrix_transpose"].kernel_for(4096, 4096, h),
        "matmul": lambda: m["gemm"].kernel_for(*_GEMM, h),
        "flash_attention": lambda: m["flash_attention"].kernel_for(*_ATTN, True, 0, "bhsd", "float16", None),
        "flash_decode": lambda: m["flash_decoding"].kernels_for(*_DECODE, 4, "float16", None)[0],
    }


# The tensor-core kernels' demo shapes: matmul (M, N, K); attention (B, H, Hkv, Sq, Skv, D),
# causal; decoding (B, H, Hkv, cache length, D).
_GEMM = (2048, 2048, 2048)
_ATTN = (2, 16, 16, 2048, 2048, 128)
_DECODE = (16, 32, 8, 4096, 128)


def _tensor_core_runs():
    """(name, run, reference, torch equivalent) over fresh random inputs, float16."""
    import torch
    import torch.nn.functional as F

    from tegula.kernels.flash_attention import flash_attention
    from tegula.kernels.flash_decoding import flash_decode
    from tegula.kernels.gemm import matmul

    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device="cuda").half()

    M, N, K = _GEMM
    a, b = rnd(M, K), rnd(K, N)
    B, H, _, S, _, D = _ATTN
    q, k, v = rnd(B, H, S, D), rnd(B, H, S, D), rnd(B, H, S, D)
    Bd, Hd, Hkv, L, Dd = _DECODE
    qd, kc, vc = rnd(Bd, Hd, Dd), rnd(Bd, L, Hkv, Dd), rnd(Bd, L, Hkv, Dd)
    lens = torch.randint(1, L + 1, (Bd,), generator=g, device="cuda", dtype=torch.int32)

    def decode_ref():
        out = []
        for i in range(Bd):
            n = int(lens[i])
            kk = kc[i, :n].float().transpose(0, 1).repeat_interleave(Hd // Hkv, 0)
            vv = vc[i, :n].float().transpose(0, 1).repeat_interleave(Hd // Hkv, 0)
            out.append(F.scaled_dot_product_attention(qd[i, :, None].float(), kk, vv)[:, 0])
        return torch.stack(out)

    kd = kc.transpose(1, 2).contiguous()
    vd = vc.transpose(1, 2).contiguous()
    mask = torch.arange(L, device="cuda")[None, :] < lens[:, None]
    return [
        ("matmul", lambda: matmul(a, b), lambda: a.float() @ b.float(), lambda: a @ b),
        ("flash_attention", lambda: flash_attention(q, k, v, causal=True, layout="bhsd"),
         lambda: F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True),
         lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        ("flash_decode", lambda: flash_decode(qd, kc, vc, lens), decode_ref,
         lambda: F.scaled_dot_product_attention(qd[:, :, None], kd, vd, attn_mask=mask[:, None, None],
                                                enable_gqa=True)[:, :, 0]),
    ]


def _torch_equivalents():
    import torch
    import torch.nn.functional as F

    return {
        "add": lambda x, y: x + y,
        "rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
        "rms_norm_silu": lambda x, w: F.silu(F.rms_norm(x, (x.shape[-1],), w, 1e-6)),
        "softmax": lambda x: torch.softmax(x, -1),
        "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        "row_sum": lambda x: x.sum(-1),
        "row_max": lambda x: x.amax(-1),
        "transpose": lambda x: x.t().contiguous(),
    }


def _check_and_time(name, run, reference, equivalent) -> bool:
    """One row of the demo's table: relative error against the float32 reference, then
    our time and the torch equivalent's. False when the result is wrong or the run fails."""
    import torch

    from tegula.profiler import do_bench

    try:
        out = run()
        ref = reference()
        err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
        ok = err <= 2e-3 and not torch.isnan(out).any().item()
        ours = do_bench(run)
        theirs = do_bench(equivalent)
    except Exception as e:  # report every kernel, then fail
        print(f"  {name:<16} FAILED: {e}")
        return False
    print(f"  {name:<16} {err:9.2e} {ours:10.4f} {theirs:9.4f} {theirs / ours:8.2f}x" + ("" if ok else "  WRONG"))
    return ok


def demo(args) -> int:
    import torch

    import tegula
    from tegula import env
    from tegula.kernels import DEMO_KERNELS

    gpu = torch.cuda.is_available() and env.native().driver_available()
    target = env.resolve_target("auto")[0]
    print(f"tegula {tegula.__version__}: target {target}" +
          (f" ({torch.cuda.get_device_name()})" if gpu else " (no GPU here: compile only)"))
    print("\n== compile: DSL -> IR -> passes -> CUDA -> NVRTC cubin ==")
    failures = 0
    kernels = {}
    for name, make in _compile_table().items():
        if args.kernel and name != args.kernel:
            continue
        t0 = time.perf_counter()
        try:
            k = make()
            cubin = k.cubin()
        except Exception as err:  # report every kernel, then fail
            print(f"  {name:<16} FAILED: {err}")
            failures += 1
            continue
        kernels[name] = k
        print(f"  {name:<16} {len(cubin):>7} bytes of cubin in {1e3 * (time.perf_counter() - t0):7.1f} ms")
    shown = args.show if args.show in kernels else next(iter(kernels), None)
    if shown:
        print(f"\n== generated CUDA for {shown} ==")
        print(kernels[shown].get_kernel_source())
    if not gpu:
        print("no GPU: skipping run, check and timing")
        return 1 if failures else 0

    rows, cols = args.rows, args.cols
    print(f"\n== run on {torch.cuda.get_device_name()}: {rows}x{cols} float16, checked against torch (float32) ==")
    print(f"  {'kernel':<16} {'rel err':>9} {'tegula ms':>10} {'torch ms':>9} {'speed-up':>9}")
    equivalents = _torch_equivalents()
    for dk in DEMO_KERNELS:
        if args.kernel and dk.name != args.kernel:
            continue
        inputs = dk.make_inputs("cuda", (rows, cols))
        failures += not _check_and_time(dk.name, lambda: dk.run(inputs), lambda: dk.reference(inputs),
                                        lambda: equivalents[dk.name](*inputs))
    print("\n== tensor-core kernels: matmul 2048^3, causal attention B2 H16 S2048 D128, decoding B16 "
          "H32/8 cache 4096 (vs torch.matmul, SDPA) ==")
    for name, run, reference, equivalent in _tensor_core_runs():
        if args.kernel and name != args.kernel:
            continue
        failures += not _check_and_time(name, run, reference, equivalent)
    return 1 if failures else 0


def info(args) -> int:
    import tegula
    from tegula import env

    C = env.native()
    print(f"tegula {tegula.__version__}")
    print(f"nvrtc version: {C.nvrtc_version()}")
    print(f"driver available: {C.driver_available()}")
    if C.driver_available():
        print(f"device: {C.device_name()} ({C.device_arch()})")
    print(f"cache dir: {C.cache_dir()}")
    return 0


# (command, module, help): the module has add_arguments(parser) and run(args).
_COMMANDS = (
    ("layout", "tegula.cli.layout", "draw a compiled kernel's buffer layout as a PNG"),
    ("bench", "tegula.cli.bench", "time the shipped kernels and draw their roofline as a PNG"),
    ("model", "tegula.cli.model",
     "run a Llama-style model (random weights) eager and on Tegula kernels; compare and time them"),
)


def _add_arguments(module: str, parser) -> None:
    """The command's own arguments. Its module is imported lazily, at `--help` or run time,
    unless argparse needs the arguments now: it does, so import it (light: the modules
    import torch and heavy packages inside their functions)."""
    importlib.import_module(module).add_arguments(parser)


def _lazy(module: str):
    def run(args):
        return importlib.import_module(module).run(args)

    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tegula")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="compile, show, run, check and time the shipped kernels")
    d.add_argument("--kernel", help="only this kernel")
    d.add_argument("--show", default="rms_norm", help="whose generated source to print")
    d.add_argument("--rows", type=int, default=16384)
    d.add_argument("--cols", type=int, default=4096)
    d.set_defaults(run=demo)
    i = sub.add_parser("info", help="NVRTC, driver, device and cache facts")
    i.set_defaults(run=info)
    for name, module, text in _COMMANDS:
        c = sub.add_parser(name, help=text)
        c.set_defaults(run=_lazy(module), module=module)
        _add_arguments(module, c)
    args = p.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
