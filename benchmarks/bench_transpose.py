"""Transpose (tegula.kernels.matrix_transpose) against x.t().contiguous(), float16 8192×8192.

A transpose reads and writes every byte once; the work is to keep both sides coalesced.
Target: at least 80 % of this GPU's measured copy bandwidth.

    python benchmarks/bench_transpose.py      # OUT=dir also writes dir/bench_transpose.json
"""
import importlib
import sys

import torch

import common

SHAPES = [(8192, 8192)]
DTYPE = torch.float16


def measure(shape):
    from tegula.kernels import transpose

    m, n = shape
    x = torch.randn(shape, device="cuda", dtype=DTYPE)
    y = torch.empty((n, m), device="cuda", dtype=DTYPE)
    nbytes = 2 * x.numel() * x.element_size()
    err, error = common.run_ours(lambda: transpose(x, out=y), lambda: x.t().contiguous())
    ours_ms = None if error else common.bench(lambda: transpose(x, out=y))
    torch_ms = common.bench(lambda: x.t().contiguous())
    # Transposing is exact: any difference at all is a bug.
    return common.memory_row(f"transpose {m}x{n} fp16", nbytes, ours_ms, torch_ms,
                             min_pct_copy=80.0, err=err, tol=0.0, error=error,
                             kernels=lambda: [(importlib.import_module("tegula.kernels.matrix_transpose").kernel_for(
                                 m, n, DTYPE), (x, y))])


def main() -> int:
    common.require_gpu("bench_transpose")
    rows = [measure(shape) for shape in SHAPES]
    common.write_json("transpose", rows, copy_gbs=common.copy_bandwidth_gbs())
    common.print_table(
        "Transpose, float16", rows,
        notes=[f"copy bandwidth (1 GiB device-to-device, read+write): "
               f"{common.copy_bandwidth_gbs():.0f} GB/s",
               "vs torch = torch time / our time (torch: x.t().contiguous())"])
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
