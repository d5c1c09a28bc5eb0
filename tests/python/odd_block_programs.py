"""A row kernel over blocks whose threads are not a power of two (448 threads for
DeepSeek-V3's 7168-wide rows): each block copies its rows into a fragment, reduces them
and writes the shifted rows. Its layout once gave the threads past a row's 256 lanes the
next row, which the next block also wrote: a race on the GPU that the interpreters, running
blocks one at a time, did not show. Shared by cpu/test_odd_block_rows.py and
gpu/test_odd_block_rows_gpu.py."""
import tegula.language as T


def row_program(N=7168, threads=448, bm=1, dtype="bfloat16"):
    M = T.dynamic("m")

    @T.prim_func
    def odd_rows(X: T.Tensor((M, N), dtype), O: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), dtype)
            a = T.alloc_fragment((bm, N), "float32")
            r = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            for i, j in T.Parallel(bm, N):
                a[i, j] = T.cast(x[i, j], "float32")
            T.reduce_absmax(a, r, dim=1)
            for i, j in T.Parallel(bm, N):
                if bx * bm + i < M:
                    O[bx * bm + i, j] = a[i, j] / r[i]
            for i in T.Parallel(bm):
                if bx * bm + i < M:
                    R[bx * bm + i] = r[i]

    return odd_rows


def reference(x):
    a = x.float()
    r = a.abs().amax(1)
    return a / r[:, None], r
