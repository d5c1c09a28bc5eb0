"""Programs in which a fragment is indexed by the row-major position of a T.Parallel
nest's iteration under another shape (TileLang's composable index: `B_local[i * bn + j] =
A_local[i, j]`), so its layout is the loop's reshaped; shared by cpu/test_flat_index.py
and gpu/test_flat_index_gpu.py. Each copies A (M, N) to B (M * N,) through the fragments,
B[r * N + c] = A[r, c] * scale, ragged edges masked."""
import tegula.language as T


def flat_copy(M, N, bm, bn, dtype="float32", threads=128, scale=1.0):
    """TileLang's test_tilelang_language_composable_index program (with a scale)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M * N,), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_local = T.alloc_fragment([bm, bn], dtype)
            B_local = T.alloc_fragment([bm * bn], dtype)
            T.copy(A[by * bm, bx * bn], A_local)
            for i, j in T.Parallel(bm, bn):
                B_local[i * bn + j] = A_local[i, j] * scale
            for i in T.Parallel(bm * bn):
                if by * bm + i // bn < M and bx * bn + i % bn < N:
                    B[(by * bm + i // bn) * N + bx * bn + i % bn] = B_local[i]

    return main


def flat_read(M, N, bm, bn, width=16, threads=128):
    """The other way round: a 2-D fragment (bm * bn / width, width) filled from A's tile in a
    1-D loop, read back in a (bm, bn) loop at its row-major position."""

    rows = bm * bn // width

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M * N,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            F = T.alloc_fragment([rows, width], "float32")
            for r, c in T.Parallel(rows, width):
                k = r * width + c
                F[r, c] = T.if_then_else(by * bm + k // bn < M and bx * bn + k % bn < N,
                                         A[by * bm + k // bn, bx * bn + k % bn], 0.0)
            G = T.alloc_fragment([bm, bn], "float32")
            for i, j in T.Parallel(bm, bn):
                G[i, j] = F[(i * bn + j) // width, (i * bn + j) % width] + 1.0
            for i, j in T.Parallel(bm, bn):
                if by * bm + i < M and bx * bn + j < N:
                    B[(by * bm + i) * N + bx * bn + j] = G[i, j]

    return main
