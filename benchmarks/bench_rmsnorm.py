"""RMSNorm (tegula.kernels.rms_norm) against torch.nn.functional.rms_norm, float16.

RMSNorm reads x once and writes y once (the weight is one row, served from cache), so it
is bounded by memory bandwidth: the measure is GB/s, as a share of this GPU's measured
copy bandwidth, and the speed-up over torch. Targets: at 32768×4096, at least 80 % of copy
bandwidth and at least 1.0× torch; at the other sizes, at least 1.0× torch.

    python benchmarks/bench_rmsnorm.py        # OUT=dir also writes dir/bench_rmsnorm.json
"""
import sys

import torch
import torch.nn.functional as F

import common

SHAPES = [(16384, 1024), (32768, 4096), (65536, 512)]
HEADLINE = (32768, 4096)
EPS = 1e-6
DTYPE = torch.float16
TOL = 2e-3


def measure(shape):
    from tegula.kernels import rms_norm

    m, n = shape
    x = torch.randn(shape, device="cuda", dtype=DTYPE)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(DTYPE)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()

    def ref():
        return F.rms_norm(x.float(), (n,), w.float(), EPS)

    err, error = common.run_ours(lambda: rms_norm(x, w, EPS, out=y), ref)
    ours_ms = None if error else common.bench(lambda: rms_norm(x, w, EPS, out=y))
    torch_ms = common.bench(lambda: F.rms_norm(x, (n,), w, EPS))
    headline = shape == HEADLINE
    return common.memory_row(
        f"rms_norm {m}x{n} fp16", nbytes, ours_ms, torch_ms, min_ratio=1.0,
        min_pct_copy=80.0 if headline else None, err=err, tol=TOL, error=error)


def main() -> int:
    common.require_gpu("bench_rmsnorm")
    rows = [measure(shape) for shape in SHAPES]
    common.write_json("rmsnorm", rows, copy_gbs=common.copy_bandwidth_gbs())
    common.print_table(
        "RMSNorm, float16, eps=1e-6", rows,
        notes=[f"copy bandwidth (1 GiB device-to-device, read+write): "
               f"{common.copy_bandwidth_gbs():.0f} GB/s",
               "vs torch = torch time / our time; bytes = read x + write y + read weight"])
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
