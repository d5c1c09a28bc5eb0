"""T.Parallel loops whose extent is known only at launch but bounded (TileLang's
`T.Parallel(T.min(valid_len, max_len))`), shared by cpu/test_parallel_extents.py and
gpu/test_parallel_extents_gpu.py."""
import tegula.language as T


def span_program(max_len=512, threads=256):
    """B = 0, then B[:valid_len] = A[:valid_len] - 1 (valid_len may be 0, negative, or past
    max_len)."""

    @T.prim_func
    def span(A: T.Tensor((max_len,), "float32"), B: T.Tensor((max_len,), "float32"), valid_len: T.int32):
        with T.Kernel(1, threads=threads) as _:
            for i in T.Parallel(max_len):
                B[i] = 0.0
            n = T.min(valid_len, max_len)
            for i in T.Parallel(n):
                B[i] = A[i] - 1.0

    return span


def rows_program(M=64, N=128):
    """Per block of 64 rows, rows [0, T.min(rows, 64)) of a fragment scaled, the rest 0:
    a 2-D nest whose outer extent is bounded, over a fragment."""

    @T.prim_func
    def rows(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), valid_rows: T.int32):
        with T.Kernel(1, threads=128) as _:
            f = T.alloc_fragment((64, N), "float32")
            T.clear(f)
            for i, j in T.Parallel(T.min(valid_rows, 64), N):
                f[i, j] = A[i, j] * 2.0
            T.copy(f, B)

    return rows
