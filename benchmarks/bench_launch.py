"""Host cost of one launch: how long the CPU spends in a call that launches a small kernel,
for our jit kernel object called directly (three tensors: x, y and a preallocated z of
1×1024 float16), the same launcher reached through a Python property `__call__` (how a
kernel call dispatched before calls got their own slot, kept here as the baseline that
slot must not lose to), the same kernel with out_idx (it allocates z), our `add` entry
point, torch.add(x, y, out=z), a Triton kernel doing the same add when triton is
importable, and a function calling the out_idx kernel under torch.compile (through the
kernel's operator) beside torch.compile of x + y.

The GPU work is a few microseconds, so back-to-back launches without synchronising measure
the host path alone: argument checks, packing, the driver call. Wall clock over many
launches after a warm-up, divided by the count; the median of several such rounds.
Target: at most 2.5 µs per launch through the jit kernel object given its three tensors.

    python benchmarks/bench_launch.py         # OUT=dir also writes dir/bench_launch.json
"""
import operator
import sys

import torch

import common

SHAPE = (1, 1024)
DTYPE = torch.float16
WARMUP = 500
COUNT = 5000
ROUNDS = 5
TARGET_US = 2.5


def per_launch_us(fn) -> float:
    return common.per_call_us(fn, WARMUP, COUNT, ROUNDS)  # host time only


def _row(case, fn, torch_us, target_us=None, error=None):
    row = {"case": case, "us": None, "torch_us": torch_us, "error": error, "target": "-",
           "status": "ERROR" if error else "-"}
    if error is None:
        try:
            row["us"] = per_launch_us(fn)
        except Exception as exc:  # reported in the table and the JSON
            row["error"], row["status"] = f"{type(exc).__name__}: {exc}"[:300], "ERROR"
            return row
        row["vs_torch"] = torch_us / row["us"]
        if target_us is not None:
            row["target"] = f"<={target_us:.0f} us"
            row["status"] = common.status(row["us"] <= target_us)
    return row


def _triton_add():
    """A launch of Triton's add on (x, y, z), or None when triton is not importable."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(z_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)

    def launch(x, y, z):
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, z, n, BLOCK=1024)

    return launch


def main() -> int:
    common.require_gpu("bench_launch")
    from tegula.kernels import add
    from tegula.kernels import elementwise

    x = torch.randn(SHAPE, device="cuda", dtype=DTYPE)
    y = torch.randn(SHAPE, device="cuda", dtype=DTYPE)
    z = torch.empty_like(x)
    torch_us = per_launch_us(lambda: torch.add(x, y, out=z))

    kernel, error = None, None
    try:
        kernel = elementwise.kernel_for(SHAPE[1], DTYPE, False)
        kernel(x, y, z)
        torch.cuda.synchronize()
        if not torch.equal(z, x + y):
            error = "WRONG: the kernel's z differs from x + y"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    allocating, alloc_error = None, None
    try:
        allocating = elementwise.kernel_for(SHAPE[1], DTYPE, False, True)
        if not torch.equal(allocating(x, y), x + y):
            alloc_error = "WRONG: the out_idx kernel's result differs from x + y"
    except Exception as exc:
        alloc_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    class _PropertyCall:  # the dispatch before the call slot: a property handing out the launcher
        __call__ = property(operator.attrgetter("_call"))

        def __init__(self, launch):
            self._call = launch

    via_property = _PropertyCall(kernel._call) if kernel is not None else None
    compiled, compiled_torch, compiled_error = None, None, None
    try:
        compiled = torch.compile(lambda a, b: allocating(a, b), fullgraph=True)
        compiled_torch = torch.compile(lambda a, b: a + b, fullgraph=True)
        if not torch.equal(compiled(x, y), x + y):
            compiled_error = "WRONG: the compiled call's result differs from x + y"
        compiled_torch(x, y)
    except Exception as exc:
        compiled_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    compiled_torch_us = per_launch_us(lambda: compiled_torch(x, y)) if compiled_error is None else None

    rows = [
        _row("jit kernel(x, y, z)", lambda: kernel(x, y, z), torch_us, TARGET_US, error),
        _row("the same launcher through a property __call__", lambda: via_property(x, y, z), torch_us, None, error),
        _row("jit kernel(x, y) with out_idx (allocates z)", lambda: allocating(x, y), torch_us, None, alloc_error),
        _row("add(x, y, out=z) entry point", lambda: add(x, y, out=z), torch_us, None, error),
        {"case": "torch.add(x, y, out=z)", "us": torch_us, "torch_us": torch_us,
         "vs_torch": 1.0, "target": "-", "status": "-"},
    ]
    triton_add = _triton_add()
    if triton_add is not None:
        triton_error = None
        try:
            triton_add(x, y, z)
            torch.cuda.synchronize()
        except Exception as exc:
            triton_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        rows.append(_row("triton add[grid](x, y, z, n)", lambda: triton_add(x, y, z), torch_us, None, triton_error))
    rows.append(_row("torch.compile(lambda a, b: kernel(a, b)) (out_idx)", lambda: compiled(x, y), torch_us, None,
                     compiled_error))
    if compiled_torch_us is not None:
        rows.append({"case": "torch.compile(lambda a, b: a + b)", "us": compiled_torch_us, "torch_us": torch_us,
                     "vs_torch": torch_us / compiled_torch_us, "target": "-", "status": "-"})
    common.write_json("launch", rows, shape=list(SHAPE), count=COUNT, rounds=ROUNDS)
    columns = [("case", "case", "s"), ("host us/launch", "us", ".2f"),
               ("torch us/launch", "torch_us", ".2f"), ("torch/ours", "vs_torch", ".2f"),
               ("target", "target", "s"), ("status", "status", "s")]
    common.print_table(f"Launch overhead on {common.device_name()}, {SHAPE[0]}x{SHAPE[1]} float16, {COUNT} "
                       f"launches without sync, median of {ROUNDS}", rows, columns=columns)
    return common.exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
