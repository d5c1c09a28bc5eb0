"""Row-wise kernels that sit on memory bandwidth, against the torch call a user would make:
softmax vs torch.softmax(x, -1), layer_norm vs F.layer_norm, row_sum vs x.sum(-1), all
float16 at 32768×4096.

On the softmax target: torch's softmax is itself a single pass near the bandwidth limit,
so no kernel can be 2× faster than it once torch runs above 50 % of copy bandwidth. The
table prints torch's own share of copy bandwidth and the ceiling that implies (copy
bandwidth / torch's bandwidth); the targets held here are those a single-pass kernel can
meet: at least 80 % of copy bandwidth and at least 1.0× torch.

Backward: softmax_backward(dy, y) against torch.autograd.grad of torch.softmax (the
forward outside the timed region); bytes = read dy and y, write dx; target 1.0× torch.

    python benchmarks/bench_softmax.py        # OUT=dir also writes dir/bench_softmax.json
"""
import importlib
import sys

import torch
import torch.nn.functional as F

import common

SHAPE = (32768, 4096)
DTYPE = torch.float16
TOL = 2e-3


def _kernels(module):
    return importlib.import_module("tegula.kernels." + module)


def _row(case, nbytes, ours, reference, torch_fn, kernels=None):
    err, error = common.run_ours(ours, reference)
    ours_ms = None if error else common.bench(ours)
    torch_ms = common.bench(torch_fn)
    row = common.memory_row(case, nbytes, ours_ms, torch_ms, min_ratio=1.0, min_pct_copy=80.0,
                            err=err, tol=TOL, error=error, kernels=kernels)
    row["ceiling_vs_torch"] = row["copy_gbs"] / row["torch_gbs"]
    return row


def softmax_row(x):
    from tegula.kernels import softmax

    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    return _row(f"softmax {SHAPE[0]}x{SHAPE[1]} fp16", nbytes, lambda: softmax(x, out=y),
                lambda: torch.softmax(x.float(), -1), lambda: torch.softmax(x, -1),
                lambda: [(_kernels("row_softmax").kernel_for(x.shape[-1], DTYPE), (x, y))])


def layer_norm_row(x):
    from tegula.kernels import layer_norm

    n = x.shape[-1]
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(DTYPE)
    b = (0.1 * torch.randn(n, device="cuda")).to(DTYPE)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size() + 2 * n * x.element_size()
    return _row(f"layer_norm {SHAPE[0]}x{SHAPE[1]} fp16", nbytes,
                lambda: layer_norm(x, w, b, 1e-5, out=y),
                lambda: F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5),
                lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                lambda: [(_kernels("layernorm").kernel_for(n, DTYPE, 1e-5), (x, w, b, y))])


def row_sum_row(x):
    from tegula.kernels import row_sum

    s = torch.empty(x.shape[:-1], device="cuda", dtype=DTYPE)
    nbytes = x.numel() * x.element_size() + s.numel() * s.element_size()
    return _row(f"row_sum {SHAPE[0]}x{SHAPE[1]} fp16", nbytes, lambda: row_sum(x, out=s),
                lambda: x.float().sum(-1), lambda: x.sum(-1),
                lambda: [(_kernels("reduce").kernel_for(x.shape[-1], DTYPE, "sum"), (x, s.view(-1, 1)))])


def softmax_backward_row(x):
    module = _kernels("row_softmax")
    xg = x.detach().clone().requires_grad_()
    y = torch.softmax(xg, -1)
    dy = torch.randn_like(x)
    nbytes = 3 * x.numel() * x.element_size()
    yd = y.detach()

    def reference():
        yf = yd.float()
        return yf * (dy.float() - (dy.float() * yf).sum(-1, keepdim=True))

    err, error = common.run_ours(lambda: module.softmax_backward(dy, yd), reference)
    ours_ms = None if error else common.bench(lambda: module.softmax_backward(dy, yd))
    torch_ms = common.bench(lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))
    row = common.memory_row(f"softmax backward {SHAPE[0]}x{SHAPE[1]} fp16", nbytes, ours_ms, torch_ms,
                            min_ratio=1.0, err=err, tol=TOL, error=error,
                            kernels=lambda: [(module.backward_kernel_for(x.shape[-1], DTYPE), (dy, yd))])
    row["ceiling_vs_torch"] = row["copy_gbs"] / row["torch_gbs"]
    return row


def column_sum_row(x):
    from tegula.kernels._common import elem_bytes, sm_count

    module = _kernels("reduce")
    nbytes = x.numel() * x.element_size() + x.shape[-1] * x.element_size()
    def kernels():
        plan = module.plan_column_sum(x.shape[-1], elem_bytes(DTYPE), x.shape[0], sm_count(x.device))
        return [(module.column_sum_kernel_for(x.shape[-1], DTYPE, plan), (x,))]

    return _row(f"column_sum {SHAPE[0]}x{SHAPE[1]} fp16", nbytes, lambda: module.column_sum(x),
                lambda: x.float().sum(0), lambda: x.sum(0), kernels)


def main() -> int:
    common.require_gpu("bench_softmax")
    x = torch.randn(SHAPE, device="cuda", dtype=DTYPE)
    rows = [softmax_row(x), layer_norm_row(x), row_sum_row(x), softmax_backward_row(x), column_sum_row(x)]
    common.write_json("softmax", rows, copy_gbs=common.copy_bandwidth_gbs())
    columns = common.MEMORY_COLUMNS[:-2] + [("ceiling", "ceiling_vs_torch", ".2f")] \
        + common.MEMORY_COLUMNS[-2:]
    common.print_table(
        "Softmax, LayerNorm, row sum, softmax backward, column sum; float16", rows, columns=columns,
        notes=[f"copy bandwidth (1 GiB device-to-device, read+write): "
               f"{common.copy_bandwidth_gbs():.0f} GB/s",
               "ceiling = the most any kernel moving the same bytes could beat torch by "
               "(copy GB/s / torch GB/s); a 2x target on softmax is out of reach whenever "
               "the ceiling is below 2"])
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
