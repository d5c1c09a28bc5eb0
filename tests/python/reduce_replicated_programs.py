"""Reductions whose source several threads hold (the result of an earlier reduction, kept
in its replicated layout) and cross-warp reductions in blocks whose thread count is not a
power of two (tests/python/cpu/test_reduce_replicated.py, gpu/test_reduce_replicated_gpu.py)."""
import tegula.language as T


def chained(M, G, gs, threads, kind="sum", dtype="float32"):
    """Y[m] = reduce over (g, i) of X[m, g, i], as two reductions: over i, then over g
    (the second one's source is held by every thread that held part of a row of the first)."""
    reduce = {"sum": T.reduce_sum, "max": T.reduce_max, "abssum": T.reduce_abssum, "xor": T.reduce_bitxor}[kind]

    @T.prim_func
    def chained_reduce(X: T.Tensor((M, G, gs), dtype), Y: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((M, G, gs), dtype)
            p = T.alloc_fragment((M, G), dtype)
            r = T.alloc_fragment((M,), dtype)
            T.copy(X[0, 0, 0], x)
            reduce(x, p, dim=2)
            reduce(p, r, dim=1)
            T.copy(r, Y[0])

    return chained_reduce


def rows(M, N, threads):
    """Y[m] = sum of X[m, :] over a block of `threads` threads (448: 14 warps)."""
    @T.prim_func
    def row_sum(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(X[0, 0], x)
            T.reduce_sum(x, r, dim=1)
            T.copy(r, Y[0])

    return row_sum
