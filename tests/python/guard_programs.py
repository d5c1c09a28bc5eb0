"""Tile code under a branch on the thread index (`if tx < 128:`), for the CPU tests
(reference and simulate) and the GPU tests alike. TileLang's meaning: the tile code is
divided among the threads that take the branch, which must be a contiguous range of whole
warps known at compile time.

Each program builder takes the target and returns a compiled-on-call @tegula.jit function;
`torch_reference(name, inputs)` says what each computes.
"""
import torch

import tegula
import tegula.language as T


def _jit(target, out_idx):
    return tegula.jit(out_idx=out_idx, target=target) if out_idx else tegula.jit(target=target)


def copy_guarded(target, how):
    """A (M, N) half copy through a shared tile filled by part of 256 threads, then copied
    out by all of them. `how` picks the guard and the way the tile is filled."""

    @_jit(target, [1])
    def program(M, N, bM=128, bN=128):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
                S = T.alloc_shared((bM, bN), "float16")
                tx = T.get_thread_binding(0)
                if how == "parallel_low":
                    if tx < 128:
                        for i, k in T.Parallel(bM, bN):
                            S[i, k] = A[by * bM + i, bx * bN + k]
                elif how == "copy_low":
                    if tx < 128:
                        T.copy(A[by * bM, bx * bN], S)
                elif how == "parallel_high":
                    if tx >= 128:
                        for i, k in T.Parallel(bM, bN):
                            S[i, k] = A[by * bM + i, bx * bN + k]
                elif how == "copy_warpgroup":
                    if tx // 128 == 1:
                        T.copy(A[by * bM, bx * bN], S)
                elif how == "halves":
                    # each half of the block fills its half of the tile
                    if tx < 128:
                        T.copy(A[by * bM, bx * bN], S[0:bM // 2, :])
                    else:
                        T.copy(A[by * bM + bM // 2, bx * bN], S[bM // 2:bM, :])
                elif how == "nested":
                    if tx < 192:
                        if tx >= 64:
                            T.copy(A[by * bM, bx * bN], S)
                elif how == "range_and_block":
                    # a thread range and a block-uniform test together
                    if tx >= 32 and tx < 96 and by >= 0:
                        T.copy(A[by * bM, bx * bN], S)
                T.copy(S, B[by * bM, bx * bN])

        return main

    return program


def chain_in_scope(target):
    """Several dependent tile steps inside one guard (barriers among its threads alone):
    B = flip_rows(2 * A) over a warpgroup of a 256-thread block; the other threads idle."""

    @_jit(target, [1])
    def program(M, N, bM=64, bN=64):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
                S = T.alloc_shared((bM, bN), "float32")
                S2 = T.alloc_shared((bM, bN), "float32")
                tx = T.get_thread_binding(0)
                if tx // 64 == 2:
                    for i, k in T.Parallel(bM, bN):
                        S[i, k] = A[by * bM + i, bx * bN + k] * 2.0
                    for i, k in T.Parallel(bM, bN):
                        S2[i, k] = S[bM - 1 - i, k]
                    T.copy(S2, B[by * bM, bx * bN])

        return main

    return program


def gemm_reduce_guarded(target):
    """C = A @ B and R = row sums of C, computed by the upper 128 of 256 threads after all
    of them loaded the operands: a gemm and a cross-warp reduction under a guard."""

    @_jit(target, [2, 3])
    def program(M=64, N=64, K=32):
        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), Bm: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32"),
                 R: T.Tensor((M,), "float32")):
            with T.Kernel(1, threads=256) as bx:
                As = T.alloc_shared((M, K), "float16")
                Bs = T.alloc_shared((K, N), "float16")
                acc = T.alloc_fragment((M, N), "float32")
                row = T.alloc_fragment((M,), "float32")
                tx = T.get_thread_binding(0)
                T.copy(A, As)
                T.copy(Bm, Bs)
                if tx >= 128:
                    T.gemm(As, Bs, acc, clear_accum=True)
                    T.reduce_sum(acc, row, dim=1)
                    T.copy(acc, C)
                    T.copy(row, R)

        return main

    return program


def uniform_branch_chain(target):
    """Tile code under a block-uniform branch that needs a barrier inside the branch:
    B = transpose(A) tile by tile, only in blocks with bx >= by (the rest of B untouched)."""

    @_jit(target, None)
    def program(M, bM=32):
        @T.prim_func
        def main(A: T.Tensor((M, M), "float32"), B: T.Tensor((M, M), "float32")):
            with T.Kernel(T.ceildiv(M, bM), T.ceildiv(M, bM), threads=128) as (bx, by):
                S = T.alloc_shared((bM, bM), "float32")
                if bx >= by:
                    T.copy(A[by * bM, bx * bM], S)
                    for i, k in T.Parallel(bM, bM):
                        B[bx * bM + i, by * bM + k] = S[k, i]

        return main

    return program


COPY_GUARDS = ["parallel_low", "copy_low", "parallel_high", "copy_warpgroup", "halves", "nested",
               "range_and_block"]


def chain_expected(a):
    bM = 64
    out = torch.empty_like(a)
    for r0 in range(0, a.shape[0], bM):
        rows = a[r0:r0 + bM] * 2.0
        out[r0:r0 + bM] = rows.flip(0)
    return out


def uniform_expected(a, b_before, bM=32):
    out = b_before.clone()
    n = a.shape[0] // bM
    for by in range(n):
        for bx in range(n):
            if bx >= by:
                out[bx * bM:(bx + 1) * bM, by * bM:(by + 1) * bM] = a[by * bM:(by + 1) * bM, bx * bM:(bx + 1) * bM].T
    return out


def masked_block_gemm(target, num_stages):
    """C = A B over the K tiles a block mask keeps: the mask row of a block of rows is copied
    into a fragment every thread holds whole, and each K step's copies and gemm sit under
    `if mask[k] != 0:` in a (pipelined) loop: a branch every thread takes alike, whose
    copies and gemm need barriers inside it (block-sparse attention's shape)."""

    @_jit(target, [3])
    def program(M, N, K, bM=64, bN=64, bK=32):
        KT = T.ceildiv(K, bK)

        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
                 Mask: T.Tensor((T.ceildiv(M, bM), KT), "int8"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
                A_s = T.alloc_shared((bM, bK), "float16")
                B_s = T.alloc_shared((bK, bN), "float16")
                acc = T.alloc_fragment((bM, bN), "float32")
                keep = T.alloc_fragment((KT,), "int8")
                T.copy(Mask[by, 0], keep)
                T.clear(acc)
                for k in T.Pipelined(KT, num_stages=num_stages):
                    if keep[k] != 0:
                        T.copy(A[by * bM, k * bK], A_s)
                        T.copy(B[k * bK, bx * bN], B_s)
                        T.gemm(A_s, B_s, acc)
                T.copy(acc, C[by * bM, bx * bN])

        return main

    return program


def masked_block_gemm_expected(a, b, mask, bM=64, bK=32):
    """What masked_block_gemm computes, in float64."""
    keep = mask.ne(0).repeat_interleave(bM, 0).repeat_interleave(bK, 1)[:a.shape[0], :a.shape[1]]
    return (a.double() * keep) @ b.double()
