"""tfloat32 programs, shared by cpu/test_tf32.py and gpu/test_tf32_gpu.py: T.gemm on float32
and tfloat32 operands (mma.sync m16n8k8 tf32) from shared memory in every transpose and
from registers, conversions into tfloat32, and the fused gemm + sum of squares of
DeepSeek's mHC block (a bfloat16 tile widened to tfloat32 in registers, a tfloat32 weight)."""
import torch

import tegula.language as T


def to_tf32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to tfloat32 as cvt.rna.tf32.f32 does: to nearest, ties away from zero (half
    an ulp added to the magnitude's bits, the low 13 dropped); infinities and NaN stay."""
    bits = x.float().contiguous().view(torch.int32)
    special = (bits & 0x7F800000) == 0x7F800000
    rounded = (bits + 0x1000) & ~0x1FFF
    return torch.where(special, bits, rounded).view(torch.float32)


def tf32_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The product the tf32 tensor cores compute: operands rounded to tf32, summed in float64."""
    return to_tf32(a).double() @ to_tf32(b).double()


def gemm_program(M, N, K, dtype="float32", trans_A=False, trans_B=False, a_in_registers=False, threads=128,
                 block_K=None):
    """C = op(A) @ op(B) with A and B stored as `dtype` on chip (float32 or tfloat32; the
    copy from the float32 tensors rounds into tfloat32), K walked in block_K steps."""
    block_K = block_K or K
    a_shape = (K, M) if trans_A else (M, K)
    b_shape = (N, K) if trans_B else (K, N)
    as_shape = (block_K, M) if trans_A else (M, block_K)
    bs_shape = (N, block_K) if trans_B else (block_K, N)

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, "float32"), B: T.Tensor(b_shape, "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_shared(as_shape, dtype)
            b = T.alloc_shared(bs_shape, dtype)
            acc = T.alloc_fragment((M, N), "float32")
            T.clear(acc)
            for k in T.serial(K // block_K):
                if trans_A:
                    T.copy(A[k * block_K, 0], a)
                else:
                    T.copy(A[0, k * block_K], a)
                if trans_B:
                    T.copy(B[0, k * block_K], b)
                else:
                    T.copy(B[k * block_K, 0], b)
                if a_in_registers:
                    a_regs = T.alloc_fragment(as_shape, dtype)
                    T.copy(a, a_regs)
                    T.gemm(a_regs, b, acc, transpose_A=trans_A, transpose_B=trans_B)
                else:
                    T.gemm(a, b, acc, transpose_A=trans_A, transpose_B=trans_B)
            T.copy(acc, C)

    return gemm


def round_program(n, src="float32"):
    """Y = X converted to tfloat32 (T.cast and a store into a tfloat32 tensor), and Z the
    product of two tfloat32 values (float32 arithmetic)."""

    @T.prim_func
    def round_tf32(X: T.Tensor((n,), src), Y: T.Tensor((n,), "tfloat32"), Z: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    t = T.cast(X[bx * 128 + i], "tfloat32")
                    Y[bx * 128 + i] = t
                    Z[bx * 128 + i] = t * t

    return round_tf32


def mhc_gemm_sqrsum_program(hc_mult3, hidden, token_block=32, hidden_block=256):
    """out = x @ fnᵀ on the tf32 tensor cores and sqrsum = the row sums of x², x a bfloat16
    tile widened to tfloat32 in registers, fn a tfloat32 weight (DeepSeek mHC's pre block)."""
    num_tokens = T.dynamic("num_tokens")

    @T.prim_func
    def mhc(x: T.Tensor((num_tokens, hidden), "bfloat16"), fn: T.Tensor((hc_mult3, hidden), "tfloat32"),
            out: T.Tensor((num_tokens, hc_mult3), "float32"), sqrsum: T.Tensor((num_tokens,), "float32")):
        with T.Kernel(T.ceildiv(num_tokens, token_block)) as px:
            out_frag = T.alloc_fragment((token_block, 32), "float32")
            sqrsum_part = T.alloc_fragment((token_block, 4), "float32")
            T.clear(out_frag)
            T.clear(sqrsum_part)
            for pz in T.Pipelined(hidden // hidden_block, num_stages=2):
                x_smem = T.alloc_shared((token_block, hidden_block), "bfloat16")
                fn_smem = T.alloc_shared((32, hidden_block), "tfloat32")
                T.copy(x[px * token_block, pz * hidden_block], x_smem)
                T.copy(fn[0, pz * hidden_block], fn_smem)
                x_frag16 = T.alloc_fragment((token_block, hidden_block), "bfloat16")
                T.copy(x_smem, x_frag16)
                x_frag = T.alloc_fragment((token_block, hidden_block), "tfloat32")
                T.copy(x_frag16, x_frag)
                for jj in T.serial(hidden_block // 4):
                    for i, j in T.Parallel(token_block, 4):
                        sqrsum_part[i, j] += x_frag[i, jj * 4 + j] * x_frag[i, jj * 4 + j]
                T.gemm(x_frag, fn_smem, out_frag, transpose_B=True)
            sqrsum_l = T.alloc_fragment(token_block, "float32")
            T.reduce_sum(sqrsum_part, sqrsum_l)
            for i in T.Parallel(token_block):
                sqrsum[px * token_block + i] = sqrsum_l[i]
            for i, j in T.Parallel(token_block, 32):
                if j < hc_mult3:
                    out[px * token_block + i, j] = out_frag[i, j]

    return mhc
