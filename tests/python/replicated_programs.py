"""Programs that write a replicated fragment (the output of a T.reduce_*) inside a later
loop, and TileLang-style norms built on them: one definition shared by the CPU tests
(reference and simulator) and the GPU tests.

A reduction's output is held by every thread that took part in it. A later T.Parallel
loop over it runs in every one of those threads, so each keeps its own copy up to date;
only stores to memory are made once. Each case is (kernel factory, torch reference,
input maker), the reference in float64 on the CPU.
"""
import torch

import tegula
import tegula.language as T


def center(M, N, blk_m=1, threads=128, in_dtype="float32", target="auto"):
    """S = rowmean(X), Y = X - rowmean(X): the row's mean written into the reduced
    fragment itself, then read by a loop over the whole tile."""

    @tegula.jit(out_idx=[-2, -1], target=target)
    def kernel(M, N, blk_m, threads, in_dtype):
        @T.prim_func
        def main(X: T.Tensor((M, N), in_dtype), Y: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32")):
            with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
                x = T.alloc_fragment((blk_m, N), "float32")
                s = T.alloc_fragment((blk_m,), "float32")
                T.copy(X[bx * blk_m, 0], x)
                T.reduce_sum(x, s, dim=1)
                for i in T.Parallel(blk_m):
                    s[i] = s[i] / N  # every copy must be updated
                    S[bx * blk_m + i] = s[i]  # the store: once
                for i, j in T.Parallel(blk_m, N):
                    x[i, j] = x[i, j] - s[i]
                T.copy(x, Y[bx * blk_m, 0])

        return main

    return kernel(M, N, blk_m, threads, in_dtype)


def center_ref(x):
    x = x.double()
    mean = x.mean(dim=1)
    return [x - mean[:, None], mean]


def layer_norm(M, N, blk_m=1, threads=128, eps=1e-5, target="auto"):
    """Two fragments (mean and rstd) written in one loop after their reductions."""

    @tegula.jit(out_idx=[-1], target=target)
    def kernel(M, N, blk_m, threads, eps):
        @T.prim_func
        def main(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
                 Y: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
                x = T.alloc_fragment((blk_m, N), "float32")
                sq = T.alloc_fragment((blk_m, N), "float32")
                mean = T.alloc_fragment((blk_m,), "float32")
                rstd = T.alloc_fragment((blk_m,), "float32")
                T.copy(X[bx * blk_m, 0], x)
                for i, j in T.Parallel(blk_m, N):
                    sq[i, j] = x[i, j] * x[i, j]
                T.reduce_sum(x, mean, dim=1)
                T.reduce_sum(sq, rstd, dim=1)
                for i in T.Parallel(blk_m):
                    mean[i] = mean[i] / N
                    rstd[i] = T.rsqrt(rstd[i] / N - mean[i] * mean[i] + eps)
                for i, j in T.Parallel(blk_m, N):
                    x[i, j] = (x[i, j] - mean[i]) * rstd[i] * W[j] + B[j]
                T.copy(x, Y[bx * blk_m, 0])

        return main

    return kernel(M, N, blk_m, threads, eps)


def layer_norm_ref(x, w, b, eps=1e-5):
    return torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(), eps)


def center_shared(M, N, blk_m=2, threads=128, target="auto"):
    """The updated fragment used by a later loop over a shared tile."""

    @tegula.jit(out_idx=[-1], target=target)
    def kernel(M, N, blk_m, threads):
        @T.prim_func
        def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
                xs = T.alloc_shared((blk_m, N), "float32")
                x = T.alloc_fragment((blk_m, N), "float32")
                s = T.alloc_fragment((blk_m,), "float32")
                T.copy(X[bx * blk_m, 0], xs)
                T.copy(xs, x)
                T.reduce_sum(x, s, dim=1)
                for i in T.Parallel(blk_m):
                    s[i] = s[i] / N
                for i, j in T.Parallel(blk_m, N):
                    xs[i, j] = xs[i, j] - s[i]
                T.copy(xs, Y[bx * blk_m, 0])

        return main

    return kernel(M, N, blk_m, threads)


def rms_norm_split(M, N, blk_m=4, blk_k=128, threads=128, eps=1e-6, target="auto"):
    """A TileLang-style split-K RMSNorm: squares accumulated over column tiles read
    through one shared tile reused across iterations, the reduced fragment rewritten
    with rsqrt, then a second pass scaling the shared tile by it."""

    @tegula.jit(out_idx=[-1], target=target)
    def kernel(M, N, blk_m, blk_k, threads, eps):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
                a_shared = T.alloc_shared((blk_m, blk_k), "float32")
                acc = T.alloc_fragment((blk_m, blk_k), "float32")
                scale = T.alloc_fragment((blk_m,), "float32")
                steps = T.ceildiv(N, blk_k)
                T.clear(acc)
                for k in range(steps):
                    T.copy(A[bx * blk_m, k * blk_k], a_shared)
                    for i, j in T.Parallel(blk_m, blk_k):
                        acc[i, j] += a_shared[i, j] * a_shared[i, j]
                T.reduce_sum(acc, scale, dim=1)
                for i in T.Parallel(blk_m):
                    scale[i] = T.rsqrt(scale[i] / N + eps)
                for k in range(steps):
                    T.copy(A[bx * blk_m, (steps - 1 - k) * blk_k], a_shared)
                    for i, j in T.Parallel(blk_m, blk_k):
                        a_shared[i, j] *= scale[i]
                    T.copy(a_shared, B[bx * blk_m, (steps - 1 - k) * blk_k])

        return main

    return kernel(M, N, blk_m, blk_k, threads, eps)


def rms_norm_ref(x, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + eps)


def running_mean(M, N, bn=64, threads=64, target="auto"):
    """A serial loop carrying a replicated accumulator across iterations: each step's
    partial row sum (a reduction) is added into it inside a T.Parallel loop."""

    @tegula.jit(out_idx=[-1], target=target)
    def kernel(M, N, bn, threads):
        @T.prim_func
        def main(X: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32")):
            with T.Kernel(M, threads=threads) as bx:
                xs = T.alloc_shared((1, bn), "float32")
                x = T.alloc_fragment((1, bn), "float32")
                part = T.alloc_fragment((1,), "float32")
                total = T.alloc_fragment((1,), "float32")
                T.clear(total)
                for k in T.serial(T.ceildiv(N, bn)):
                    T.copy(X[bx, k * bn], xs)
                    T.copy(xs, x)
                    T.reduce_sum(x, part, dim=1)
                    for i in T.Parallel(1):
                        total[i] = total[i] + part[i]
                for i in T.Parallel(1):
                    total[i] = total[i] / N
                T.copy(total, S[bx:bx + 1])

        return main

    return kernel(M, N, bn, threads)


def running_mean_ref(x):
    return x.double().mean(dim=1)


# name -> (factory(target) -> kernel, make inputs(gen) -> list of CPU tensors, reference(*inputs))
def _randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype)


CASES = {
    "center_blk1": (lambda t: center(256, 1024, target=t), lambda g: [_randn(g, 256, 1024) + 3], center_ref),
    "center_blk1_small": (lambda t: center(8, 256, threads=64, target=t), lambda g: [_randn(g, 8, 256) + 3], center_ref),
    "center_blk4_ragged": (lambda t: center(30, 256, blk_m=4, target=t), lambda g: [_randn(g, 30, 256) - 2], center_ref),
    "center_bf16": (lambda t: center(16, 512, blk_m=2, in_dtype="bfloat16", target=t),
                    lambda g: [_randn(g, 16, 512, dtype=torch.bfloat16) + 1], center_ref),
    "layer_norm_blk1": (lambda t: layer_norm(16, 512, target=t),
                        lambda g: [_randn(g, 16, 512) * 2 + 1, _randn(g, 512), _randn(g, 512)], layer_norm_ref),
    "layer_norm_blk4": (lambda t: layer_norm(22, 256, blk_m=4, target=t),
                        lambda g: [_randn(g, 22, 256) - 1, _randn(g, 256), _randn(g, 256)], layer_norm_ref),
    "center_shared": (lambda t: center_shared(18, 256, target=t), lambda g: [_randn(g, 18, 256) + 5], lambda x: center_ref(x)[0]),
    "rms_norm_split": (lambda t: rms_norm_split(20, 1000, target=t), lambda g: [_randn(g, 20, 1000)], rms_norm_ref),
    "running_mean": (lambda t: running_mean(12, 300, target=t), lambda g: [_randn(g, 12, 300) + 1], running_mean_ref),
}
