"""Draws the pictures of docs/tools.md into docs/img/ (no GPU needed):

    python docs/img/make_tools_images.py

The same kernels and calls as the page's examples (a GEMM tile for sm_90a and sm_80, a row
maximum of a wgmma accumulator, the GEMM's A tile swizzled and plain, and
`python -m tegula bench --dry-run` for the H100 SXM's roofline), written at a lower dpi
and reduced to a 256-colour palette so that each file stays small enough to commit.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TEGULA_TARGET", "sm_90a")

import tegula  # noqa: E402
import tegula.language as T  # noqa: E402
from tegula.kernels import gemm  # noqa: E402
from tegula.cli import bench as bench_cli  # noqa: E402
from tegula.tools import plot_layout  # noqa: E402

HERE = Path(__file__).resolve().parent
DPI = 90


def _row_max_kernel():
    @T.prim_func
    def row_max(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 64), "float16"),
                M: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((128, 64), "float32")
            m = T.alloc_fragment((128,), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(acc)
            T.gemm(A_s, B_s, acc)
            T.reduce_max(acc, m, dim=1)
            T.copy(m, M)

    return tegula.compile(row_max, target="sm_90a")


def _palette(path: Path) -> None:
    """Rewrites the PNG at `path` with a 256-colour palette (the pictures are flat colours
    and text: a few times smaller, no visible change)."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)


def main() -> None:
    program = gemm.matmul_program(256, 256, 256, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128)
    hopper = tegula.compile(program, out_idx=[-1], target="sm_90a")
    ampere = tegula.compile(program, out_idx=[-1], target="sm_80")
    written = {
        "layout_wgmma_accumulator.png": lambda p: hopper.plot_layout("C_local", p, window=((0, 24), (0, 16)), dpi=DPI),
        "layout_mma_accumulator.png": lambda p: ampere.plot_layout("C_local", p, window=((56, 72), (56, 72)),
                                                                   dpi=DPI),
        "layout_row_max.png": lambda p: _row_max_kernel().plot_layout("m", p, dpi=DPI),
        "layout_swizzled_tile.png": lambda p: plot_layout(hopper.layout_of("A_shared"), p, window=((0, 32), (0, 64)),
                                                          labels=False, dpi=DPI),
        "layout_plain_tile.png": lambda p: plot_layout("plain", p, shape=(128, 64), dtype="float16",
                                                       window=((0, 32), (0, 64)), labels=False, dpi=DPI),
    }
    for name, draw in written.items():
        draw(str(HERE / name))
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    roofline = HERE / "roofline_dry_run.png"
    bench_cli.run(parser.parse_args(["--dry-run", "--device", "H100 SXM", "--out", str(roofline)]))
    for name in [*written, roofline.name]:
        _palette(HERE / name)
        print(f"{name}: {(HERE / name).stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
