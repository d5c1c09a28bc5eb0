"""`python -m tegula layout`: compile a kernel and draw one of its buffers' layouts.

    python -m tegula layout --kernel gemm --list
    python -m tegula layout --kernel gemm --buffer C_local --out c.png
    python -m tegula layout --kernel attention --buffer acc_s --out s.png --target sm_80
    python -m tegula layout --kernel mypkg.kernels:make_kernel --buffer acc --out a.png

--kernel names a shipped kernel (KERNELS: a fixed problem size each) or module:attribute,
where the attribute is a JITKernel, a T.prim_func, or a function of no arguments returning
either. Kernels are compiled for --target (default: the GPU present, else sm_90a); only
lowering runs, no NVRTC, so no GPU is needed.
"""
from __future__ import annotations

import importlib
import sys


def _gemm(target):
    gemm = importlib.import_module("tegula.kernels.gemm")
    cfg = gemm.default_config(1024, 1024, 1024, wgmma=target.startswith("sm_90"))
    return gemm.matmul_program(1024, 1024, 1024, **cfg), [-1], {}


def _attention(target):
    fa = importlib.import_module("tegula.kernels.flash_attention")
    cfg = fa.default_config(1024, 128, True)
    return (fa.flash_attention_program(1, 8, 8, 1024, 1024, 128, is_causal=True, layout="bhsd", **cfg), [3, 4],
            fa.FAST_MATH)


def _rows(module, program, n=1024):
    def make(target):
        from tegula.kernels._common import plan_rows

        m = importlib.import_module("tegula.kernels." + module)
        plan = plan_rows(n, 2)  # float16
        args = (n, "float16") + ((1e-6, False) if module == "rmsnorm" else ())
        return getattr(m, program)(*args, plan.blk_m, plan.threads, plan.n_pad, plan.chunks), [-1], {}

    return make


# name -> (what it is, a function of the target returning (prim_func, out_idx, pass_configs)).
KERNELS = {
    "gemm": ("matmul 1024^3 float16 (kernels/gemm.py)", _gemm),
    "attention": ("causal flash attention B1 H8 S1024 D128 float16 (kernels/flash_attention.py)", _attention),
    "rms_norm": ("RMSNorm of 1024-wide float16 rows (kernels/rmsnorm.py)", _rows("rmsnorm", "rms_norm_program")),
    "softmax": ("softmax of 1024-wide float16 rows (kernels/row_softmax.py)", _rows("row_softmax", "softmax_program")),
}


def add_arguments(parser) -> None:
    names = ", ".join(KERNELS)
    parser.add_argument("--kernel", default="gemm", help=f"{names}, or module:attribute (default gemm)")
    parser.add_argument("--buffer", help="the fragment or shared buffer to draw (--list shows them)")
    parser.add_argument("--out", help="the PNG to write (default <buffer>.png)")
    parser.add_argument("--target", help="e.g. sm_80, sm_90a (default: this GPU's, else sm_90a)")
    parser.add_argument("--list", action="store_true", help="list the kernel's buffers and their layouts")
    parser.add_argument("--access", default="rows", choices=("rows", "contiguous"),
                        help="a shared buffer's warp access whose bank conflicts are shown (default rows)")
    parser.add_argument("--index", type=int, default=None, help="which kernel of a multi-kernel prim_func")


def compile_kernel(spec: str, target: str | None):
    """The JITKernel `spec` names (a KERNELS name or module:attribute) for `target`."""
    import tegula
    from tegula import env
    from tegula.frontend.prim_func import PrimFunc
    from tegula.jit import JITKernel

    concrete = env.resolve_target(target or "auto")[0]
    if spec in KERNELS:
        func, out_idx, configs = KERNELS[spec][1](concrete)
        return tegula.compile(func, out_idx=out_idx, target=concrete, pass_configs=configs)
    if ":" not in spec:
        raise ValueError(f"--kernel {spec!r}: expected one of {', '.join(KERNELS)} or module:attribute")
    module, attr = spec.split(":", 1)
    obj = getattr(importlib.import_module(module), attr)
    if callable(obj) and not isinstance(obj, (JITKernel, PrimFunc)):
        obj = obj()
    if isinstance(obj, PrimFunc):
        return tegula.compile(obj, target=concrete)
    if not isinstance(obj, JITKernel):
        raise TypeError(f"--kernel {spec!r}: expected a JITKernel, a T.prim_func or a function returning one, "
                        f"got {type(obj).__name__}")
    return obj


def run(args) -> int:
    from tegula.tools.layout_plot import plot_layout

    try:
        kernel = compile_kernel(args.kernel, args.target)
    except (ValueError, TypeError, ImportError, AttributeError) as err:
        print(f"tegula layout: {err}", file=sys.stderr)
        return 2
    indices = range(kernel.num_kernels) if args.index is None else [args.index]
    if args.list or not args.buffer:
        print(f"{kernel!r}")
        for i in indices:
            if kernel.num_kernels > 1:
                print(f"kernel {i}:")
            for name, layout in kernel.layouts(i).items():
                print(f"  {name:<20} {layout.scope:<9} {layout.dtype}{list(layout.shape)}  "
                      + (layout.description if layout.scope == "fragment" else layout.storage))
        if not args.list:
            print("tegula layout: give --buffer NAME to draw one", file=sys.stderr)
            return 2
        return 0
    try:
        layout = kernel.layout_of(args.buffer, args.index)
    except ValueError as err:
        print(f"tegula layout: {err}", file=sys.stderr)
        return 2
    out = args.out or f"{args.buffer}.png"
    pic = plot_layout(layout, out, access=args.access)
    print(pic.title.replace("\n", "; "))
    print(f"wrote {out}")
    return 0
