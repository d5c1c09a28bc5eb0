"""Where the host time of one launch goes, on the GPU machine: the jit kernel object given
its three tensors (checks + cuLaunchKernel), the same call on a tensor with an empty
dynamic dimension (every check and the stream lookup, but no cuLaunchKernel: the grid is
empty), the entry point, torch.add(out=) beside them.

    python scripts/profile_launch.py
"""
import statistics
import time

import torch

import tegula
import tegula.language as T

N = 1024


@tegula.jit
def _add(N):
    M = T.dynamic("m")

    @T.prim_func
    def add(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16"), Z: T.Tensor((M, N), "float16")):
        with T.Kernel(M, threads=128) as bx:
            for j in T.Parallel(N):
                Z[bx, j] = X[bx, j] + Y[bx, j]

    return add


def per_call_us(fn, count=200, rounds=50):
    """Host time per call over bursts of `count` calls, each burst started on an idle GPU:
    a burst shorter than the driver's launch queue measures the host path alone, where a
    long run of back-to-back launches of tiny kernels would wait for the GPU to drain the
    queue (and measure the GPU's launch throughput instead)."""
    for _ in range(500):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(count):
            fn()
        times.append((time.perf_counter() - t0) / count * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def main():
    from tegula.kernels import add

    kernel = _add(N)
    x, y, z = (torch.randn(1, N, device="cuda", dtype=torch.float16) for _ in range(3))
    e = torch.empty(0, N, device="cuda", dtype=torch.float16)
    kernel(x, y, z)
    launcher = kernel._call
    rows = [
        ("kernel(x, y, z)", per_call_us(lambda: kernel(x, y, z))),
        ("launcher(x, y, z) (no property lookup)", per_call_us(lambda: launcher(x, y, z))),
        ("launcher on an empty grid (checks, no cuLaunchKernel)", per_call_us(lambda: launcher(e, e, e))),
        ("tegula.kernels.add(x, y) entry point", per_call_us(lambda: add(x, y))),
        ("torch.add(x, y, out=z)", per_call_us(lambda: torch.add(x, y, out=z))),
        ("torch.cuda.current_stream()", per_call_us(torch.cuda.current_stream)),
    ]
    long_run = per_call_us(lambda: launcher(x, y, z), count=5000, rounds=5)
    rows.append(("launcher(x, y, z), 5000 back to back (queue-bound)", long_run))
    print(f"host time per call, bursts of 200 after a synchronise, {torch.cuda.get_device_name()}")
    for name, us in rows:
        print(f"  {name:55s} {us:6.2f} us")


if __name__ == "__main__":
    main()
