"""Programs of T.gemm on integer operands, shared by cpu/test_int_gemm.py and
gpu/test_int_gemm_gpu.py: C = A Bᵀ into int32 with A (M x K) and B (N x K) of int8 / uint8
(mma.sync m16n8k32 .s32, wgmma m64nNk32 .s32 on sm_90a) or of the packed 4-bit int4 / uint4
(mma.sync m16n8k64), as TileLang's int8 and int4 gemm examples write them
(gemm_program, tilelang_int4_program); gemms the tensor cores have no integer form for
(refused_gemm_program); and the operands and torch's answer (operands, expected)."""
import torch

import tegula.language as T

INT8 = ["int8", "uint8"]
INT4 = ["int4", "uint4"]
# Each type's range of values.
RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int4": (-8, 7), "uint4": (0, 15)}


def gemm_program(M, N, K, a_dtype, b_dtype=None, block_M=128, block_N=128, block_K=64, threads=128,
                 num_stages=2, clear_accum=False):
    """C = A Bᵀ in int32 (A: M x K, B: N x K of integers); with clear_accum, each K block's
    product is added into a second accumulator in a T.Parallel loop. M, N, K need not be
    multiples of the blocks (K even for the packed 4-bit types)."""
    b_dtype = b_dtype or a_dtype

    @T.prim_func
    def gemm(A: T.Tensor((M, K), a_dtype), B: T.Tensor((N, K), b_dtype), C: T.Tensor((M, N), "int32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), a_dtype)
            B_shared = T.alloc_shared((block_N, block_K), b_dtype)
            C_local = T.alloc_fragment((block_M, block_N), "int32")
            total = T.alloc_fragment((block_M, block_N), "int32") if clear_accum else None
            T.clear(C_local)
            if clear_accum:
                T.clear(total)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                if clear_accum:
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True, clear_accum=True)
                    for i, j in T.Parallel(block_M, block_N):
                        total[i, j] += C_local[i, j]
                else:
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            if clear_accum:
                T.copy(total, C[by * block_M, bx * block_N])
            else:
                T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def tilelang_int4_program(M, N, K, block_M, block_N, block_K, threads=128):
    """TileLang's int4 gemm example (matmul_nt_int4), as it is written there."""

    @T.prim_func
    def main(A: T.Tensor((M, K), T.int4), B: T.Tensor((N, K), T.int4), C: T.Tensor((M, N), T.int32)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), T.int4)
            B_shared = T.alloc_shared((block_N, block_K), T.int4)
            C_local = T.alloc_fragment((block_M, block_N), T.int32)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[bx * block_N, ko * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def pack_int4(t: torch.Tensor) -> torch.Tensor:
    """Two 4-bit values a byte along the last dimension, the even element in the low nibble
    (as the TileLang int4 example packs them): a torch.int8 tensor of half the width."""
    return ((t[..., ::2] & 0xF) | ((t[..., 1::2] & 0xF) << 4)).to(torch.int8)


def values(rows, cols, dtype, gen: torch.Generator) -> torch.Tensor:
    """Random integers over dtype's whole range (its extremes included), as int64."""
    lo, hi = RANGE[dtype]
    v = torch.randint(lo, hi + 1, (rows, cols), generator=gen, dtype=torch.int64)
    v.view(-1)[:2] = torch.tensor([lo, hi])
    return v


def as_operand(v: torch.Tensor, dtype: str) -> torch.Tensor:
    """The tensor a kernel takes for values v of dtype: torch.int8 / torch.uint8, or two
    4-bit values a byte (torch.int8) for int4 / uint4."""
    if dtype in INT4:
        return pack_int4(v)
    return v.to(getattr(torch, dtype))


def operands(M, N, K, a_dtype, b_dtype, gen: torch.Generator, device="cpu"):
    """(a, b, want): the kernel's A (M x K) and B (N x K) and torch's C = A Bᵀ in int32 from
    the same values."""
    va, vb = values(M, K, a_dtype, gen), values(N, K, b_dtype, gen)
    want = (va @ vb.T).to(torch.int32)  # sums of at most K products: no wrap at these sizes
    return as_operand(va, a_dtype).to(device), as_operand(vb, b_dtype).to(device), want.to(device)


def refused_gemm_program(a_dtype="int8", b_dtype="int8", c_dtype="int32", K=64, transpose_A=False,
                         transpose_B=True, a_in_registers=False):
    """One 64 x 64 gemm of integer operands in a form the tensor cores have no instruction
    for (the T.gemm line carries the mark MARK-gemm)."""
    a_shape = (K, 64) if transpose_A else (64, K)
    b_shape = (64, K) if transpose_B else (K, 64)

    @T.prim_func
    def refused(A: T.Tensor(a_shape, a_dtype), B: T.Tensor(b_shape, b_dtype), C: T.Tensor((64, 64), c_dtype)):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment(a_shape, a_dtype) if a_in_registers else T.alloc_shared(a_shape, a_dtype)
            b = T.alloc_shared(b_shape, b_dtype)
            c = T.alloc_fragment((64, 64), c_dtype)
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, transpose_A=transpose_A, transpose_B=transpose_B, clear_accum=True)  # MARK-gemm
            T.copy(c, C)

    return refused
