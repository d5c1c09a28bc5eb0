"""T.gemm with B in a fragment (TileLang's gemm_sr, and gemm_rr with A in one too), the
form of TileLang's kda chunk_bwd_intra (T.gemm(dA_shared, kg_fragment, dq_fragment)),
shared by cpu/test_gemm_fragment_b.py and gpu/test_gemm_fragment_b_gpu.py. The op stages B
through shared memory. Each builder returns (prim_func, torch reference in float64)."""
import torch

import tegula.language as T


def accumulate(M, N, K, block_K, dtype="float16", transpose_B=False, a_in_fragment=False, threads=128):
    """C = sum over K tiles of A_tile @ (2 * B_tile), B scaled into a fragment by a loop each
    tile (so the staged copy of the tile before is still being read when the next one is
    written: barriers), accumulated across a serial loop; K ragged against block_K."""
    b_shape = (N, block_K) if transpose_B else (block_K, N)
    B_shape = (N, K) if transpose_B else (K, N)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(B_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            a_s = T.alloc_shared((M, block_K), dtype)
            a_f = T.alloc_fragment((M, block_K), dtype)
            b_s = T.alloc_shared(b_shape, dtype)
            b_f = T.alloc_fragment(b_shape, dtype)
            c = T.alloc_fragment((M, N), "float32")
            T.clear(c)
            for kt in T.serial(T.ceildiv(K, block_K)):
                T.copy(A[0, kt * block_K], a_s)
                if transpose_B:
                    T.copy(B[0, kt * block_K], b_s)
                else:
                    T.copy(B[kt * block_K, 0], b_s)
                for i, j in T.Parallel(*b_shape):
                    b_f[i, j] = b_s[i, j] * 2
                if a_in_fragment:
                    T.copy(a_s, a_f)
                    T.gemm(a_f, b_f, c, transpose_B=transpose_B)
                else:
                    T.gemm(a_s, b_f, c, transpose_B=transpose_B)
            T.copy(c, C)

    def ref(A, B):
        a, b = A.float(), B.float() * 2
        if dtype == "float32":  # the tensor cores take float32 operands as tf32
            a, b = tf32(a), tf32(b)
        b = b.double()
        return a.double() @ (b.T if transpose_B else b)

    return main, ref


def tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to tfloat32 (10 mantissa bits), to nearest with ties away from zero."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
