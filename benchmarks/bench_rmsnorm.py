"""RMSNorm (tegula.kernels.rms_norm) against torch.nn.functional.rms_norm, float16.

RMSNorm reads x once and writes y once (the weight is one row, served from cache), so it
is bounded by memory bandwidth: the measure is GB/s, as a share of this GPU's measured
copy bandwidth, and the speed-up over torch. Targets: at 32768×4096, at least 80 % of copy
bandwidth and at least 1.0× torch; at the other sizes, at least 1.0× torch.

Backward (second table): rms_norm_backward and layer_norm_backward against torch's autograd
backward of F.rms_norm / F.layer_norm (torch.autograd.grad with retain_graph; the forward
runs once, outside the timed region). Bytes = read dy and x, write dx (the weight and its
gradient are one row each). Target: at least 1.0× torch.

    python benchmarks/bench_rmsnorm.py        # OUT=dir also writes dir/bench_rmsnorm.json
"""
import importlib
import sys

import torch
import torch.nn.functional as F

import common

SHAPES = [(16384, 1024), (32768, 4096), (65536, 512), (2048, 32768)]
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
        min_pct_copy=80.0 if headline else None, err=err, tol=TOL, error=error,
        kernels=lambda: [(importlib.import_module("tegula.kernels.rmsnorm").kernel_for(n, DTYPE, EPS), (x, w, y))])


BACKWARD_SHAPES = [(16384, 1024), (32768, 4096), (4096, 12288)]


def backward_kernel(module, op, n, m, device):
    """The kernel rms_norm_backward / layer_norm_backward launches for m rows of n."""
    from tegula.kernels._common import elem_bytes, persistent_grid, sm_count

    if op == "rms_norm":
        plan = module.plan_backward_rows(n, elem_bytes(DTYPE), module.BACKWARD_REGISTERS_PER_ELEMENT)
        grid = persistent_grid(sm_count(device), plan.threads, m, plan.blk_m)
        return module.backward_kernel_for(n, DTYPE, EPS, False, grid)
    plan = module._backward_plan(n, DTYPE)
    grid = persistent_grid(sm_count(device), plan.threads, m, plan.blk_m)
    return module.backward_kernel_for(n, DTYPE, 1e-5, grid)


def measure_backward(shape, op):
    """One backward row: op is "rms_norm" or "layer_norm"."""
    m, n = shape
    x = torch.randn(shape, device="cuda", dtype=DTYPE)
    dy = torch.randn(shape, device="cuda", dtype=DTYPE)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(DTYPE)
    b = (0.1 * torch.randn(n, device="cuda")).to(DTYPE)
    nbytes = 3 * x.numel() * x.element_size() + 2 * n * w.element_size()
    if op == "rms_norm":
        module = importlib.import_module("tegula.kernels.rmsnorm")
        leaves = (x.requires_grad_(), w.requires_grad_())
        y = F.rms_norm(x, (n,), w, EPS)
        ours = lambda: module.rms_norm_backward(dy, x.detach(), w.detach(), EPS)[0]  # noqa: E731
    else:
        module = importlib.import_module("tegula.kernels.layernorm")
        leaves = (x.requires_grad_(), w.requires_grad_(), b.requires_grad_())
        y = F.layer_norm(x, (n,), w, b, 1e-5)
        ours = lambda: module.layer_norm_backward(dy, x.detach(), w.detach(), b.detach(), 1e-5)[0]  # noqa: E731

    def torch_bwd():
        return torch.autograd.grad(y, leaves, dy, retain_graph=True)

    def ref():
        xf = x.detach().float().requires_grad_()
        if op == "rms_norm":
            yf = F.rms_norm(xf, (n,), w.detach().float(), EPS)
        else:
            yf = F.layer_norm(xf, (n,), w.detach().float(), b.detach().float(), 1e-5)
        return torch.autograd.grad(yf, xf, dy.float())[0]

    err, error = common.run_ours(ours, ref)
    ours_ms = None if error else common.bench(ours)
    torch_ms = common.bench(torch_bwd)
    return common.memory_row(f"{op} backward {m}x{n} fp16", nbytes, ours_ms, torch_ms, min_ratio=1.0,
                             err=err, tol=TOL, error=error,
                             kernels=lambda: [(backward_kernel(module, op, n, m, x.device),
                                               (dy, x.detach(), w.detach()))])


def main() -> int:
    common.require_gpu("bench_rmsnorm")
    rows = [measure(shape) for shape in SHAPES]
    backward = [measure_backward(shape, op) for op in ("rms_norm", "layer_norm") for shape in BACKWARD_SHAPES]
    common.write_json("rmsnorm", rows + backward, copy_gbs=common.copy_bandwidth_gbs())
    common.print_table(
        "RMSNorm, float16, eps=1e-6", rows,
        notes=[f"copy bandwidth (1 GiB device-to-device, read+write): "
               f"{common.copy_bandwidth_gbs():.0f} GB/s",
               "vs torch = torch time / our time; bytes = read x + write y + read weight"])
    common.print_table(
        "RMSNorm and LayerNorm backward, float16 (dx and dweight[, dbias])", backward,
        notes=["vs torch = torch.autograd.grad time / our time (dx, dweight[, dbias] both sides); "
               "bytes = read dy + read x + write dx",
               "ours ms includes the fixed-order sum of the per-block weight gradients"])
    return common.exit_status(rows + backward)


if __name__ == "__main__":
    sys.exit(main())
