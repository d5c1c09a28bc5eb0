"""2:4 structured-sparse gemm programs (T.gemm_sp), shared by cpu/test_gemm_sp.py and
gpu/test_gemm_sp_gpu.py, with the torch side of their inputs: a random A with two of each
four elements along K zero (some groups emptier), its compression into kept elements and
metadata in the layout tegula.cuda.intrinsics.sparse_layout describes, and the dense A back
from them.

compress_program is a compressor written in the language the way TileLang's example
writes one: a two-dimensional thread block (threads=(rows, column groups)), a T.alloc_var
counter, T.device_assert on it, a tuple swap of two local elements and T.shift_left.
"""
import torch

import tegula.language as T
from tegula.cuda.intrinsics.sparse_layout import get_e_factor

POLICIES = {"Square": T.GemmWarpPolicy.Square, "FullRow": T.GemmWarpPolicy.FullRow,
            "FullCol": T.GemmWarpPolicy.FullCol}


def semi_sparse(M, K, dtype=torch.float16, generator=None, device="cpu", sparser=0.1):
    """M x K normal values with two of each group of four along K set to zero, at random
    places; a fraction `sparser` of the groups loses one or both of its other two as well."""
    x = torch.randn(M, K // 4, 4, generator=generator)
    drop = torch.rand(M, K // 4, 4, generator=generator).argsort(-1)[..., :2]
    x.scatter_(-1, drop, 0.0)
    extra = torch.rand(M, K // 4, 4, generator=generator) < sparser / 2
    x[extra] = 0.0
    return x.reshape(M, K).to(dtype).to(device)


def compress(dense: torch.Tensor, e_dtype="int16"):
    """(kept, E) of a 2:4 sparse M x K tensor: kept (M x K/2) the two kept elements of each
    group of four, in order; E (M x K/F, F = E's bits) their positions, 4 bits a group from
    an element's low bits up, the first kept in bits 0-1. A group with fewer than two
    non-zeros keeps a zero as well, positions still increasing: (0, 1) for none, (0, p)
    for one at p > 0, (0, 1) for one at 0."""
    M, K = dense.shape
    groups = dense.reshape(M, K // 4, 4)
    nonzero = groups != 0
    if int(nonzero.sum(-1).max()) > 2:
        raise ValueError("more than two non-zeros in a group of four")
    pos = torch.arange(4).expand_as(groups)
    # The non-zero positions, then the zero ones, each in order: the first two, sorted.
    first = torch.where(nonzero, pos, pos + 4).argsort(dim=-1)[..., :2]  # keys are distinct
    p0, p1 = first.min(-1).values, first.max(-1).values
    kept = torch.stack([groups.gather(-1, p0[..., None])[..., 0], groups.gather(-1, p1[..., None])[..., 0]], -1)
    nibbles = (p0 | (p1 << 2)).to(torch.int64)  # M x K/4
    bits = getattr(torch, e_dtype).itemsize * 8
    per = bits // 4
    words = (nibbles.reshape(M, K // (4 * per), per) << (4 * torch.arange(per))).sum(-1)
    if not e_dtype.startswith("u"):
        words = torch.where(words >= 2 ** (bits - 1), words - 2 ** bits, words)
    return kept.reshape(M, K // 2).contiguous(), words.to(getattr(torch, e_dtype))


def decompress(kept: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """The dense M x K tensor from kept elements and metadata (as compress writes them;
    a group naming one position twice is positions 0 and 1, as T.gemm_sp reads it)."""
    M, half = kept.shape
    K = 2 * half
    bits = e.dtype.itemsize * 8
    words = e.to(torch.int64) & ((1 << bits) - 1)
    nibbles = ((words[..., None] >> (4 * torch.arange(bits // 4))) & 0xF).reshape(M, K // 4)
    p0, p1 = nibbles & 3, nibbles >> 2
    same = p0 == p1
    p0, p1 = torch.where(same, 0, p0), torch.where(same, 1, p1)
    out = torch.zeros(M, K // 4, 4, dtype=kept.dtype, device=kept.device)
    k = kept.reshape(M, K // 4, 2)
    out.scatter_(-1, p0[..., None].to(kept.device), k[..., :1])
    out.scatter_(-1, p1[..., None].to(kept.device), k[..., 1:])
    return out.reshape(M, K)


def operands(M, N, K, dtype="float16", e_dtype="int16", trans_A=False, trans_B=False, generator=None,
             device="cpu"):
    """(A_sparse, E, B, dense A) as gemm_sp_program takes them: A_sparse and E transposed
    with trans_A (stored K/2 x M and K/F x M), B N x K with trans_B."""
    tdtype = getattr(torch, dtype)
    dense = semi_sparse(M, K, tdtype, generator)
    kept, e = compress(dense, e_dtype)
    b = torch.randn((N, K) if trans_B else (K, N), generator=generator).to(tdtype)
    if trans_A:
        kept, e = kept.T.contiguous(), e.T.contiguous()
    return kept.to(device), e.to(device), b.to(device), dense.to(device)


def gemm_sp_program(M, N, K, block_M=64, block_N=64, block_K=64, dtype="float16", accum="float32",
                    e_dtype="int16", trans_A=False, trans_B=False, num_stages=2, threads=128, policy="Square",
                    clear_accum=False, out_dtype="float32", a_in_registers=False):
    """C = A @ op(B) for A 2:4 sparse along K given as (A_sparse, E); trans_A stores A_sparse
    and E transposed (transpose_A and transpose_E), trans_B stores B N x K. With clear_accum
    each K tile's product replaces C's tile, so the kernel adds it into a second
    accumulator. a_in_registers copies the kept elements' tile into a fragment first (the
    gemm reads A from registers, as TileLang's gemm_sp rs tests do)."""
    f = get_e_factor(dtype, e_dtype)
    a_shape = (K // 2, M) if trans_A else (M, K // 2)
    e_shape = (K // f, M) if trans_A else (M, K // f)
    b_shape = (N, K) if trans_B else (K, N)
    as_shape = (block_K // 2, block_M) if trans_A else (block_M, block_K // 2)
    es_shape = (block_K // f, block_M) if trans_A else (block_M, block_K // f)
    bs_shape = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def gemm_sp(A_sparse: T.Tensor(a_shape, dtype), E: T.Tensor(e_shape, e_dtype), B: T.Tensor(b_shape, dtype),
                C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            a = T.alloc_shared(as_shape, dtype)
            e = T.alloc_shared(es_shape, e_dtype)
            b = T.alloc_shared(bs_shape, dtype)
            acc = T.alloc_fragment((block_M, block_N), accum)
            T.clear(acc)
            if clear_accum:
                total = T.alloc_fragment((block_M, block_N), "float32")
                T.clear(total)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A_sparse[k * block_K // 2, by * block_M], a)
                    T.copy(E[k * block_K // f, by * block_M], e)
                else:
                    T.copy(A_sparse[by * block_M, k * block_K // 2], a)
                    T.copy(E[by * block_M, k * block_K // f], e)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], b)
                else:
                    T.copy(B[k * block_K, bx * block_N], b)
                if a_in_registers:
                    a_regs = T.alloc_fragment(as_shape, dtype)
                    T.copy(a, a_regs)
                    T.gemm_sp(a_regs, e, b, acc, trans_A, trans_A, trans_B, policy=POLICIES[policy],
                              clear_accum=clear_accum)
                else:
                    T.gemm_sp(a, e, b, acc, trans_A, trans_A, trans_B, policy=POLICIES[policy], clear_accum=clear_accum)
                if clear_accum:
                    for i, j in T.Parallel(block_M, block_N):
                        total[i, j] += acc[i, j]
            if clear_accum:
                T.copy(total, C[by * block_M, bx * block_N])
            else:
                T.copy(acc, C[by * block_M, bx * block_N])

    return gemm_sp


def compress_program(K, e_dtype="int16", dtype="float16", block_M=16, block_K=64, per_thread=32):
    """(A_sparse, E) of a 2:4 sparse S x K tensor (S a T.dynamic multiple of block_M), as
    compress() writes them: a block of block_M x block_K / per_thread threads, each
    compressing per_thread elements of one row."""
    f = get_e_factor(dtype, e_dtype)
    S = T.dynamic("S")
    col_threads = block_K // per_thread

    @T.prim_func
    def compress_kernel(dense: T.Tensor((S, K), dtype), kept: T.Tensor((S, K // 2), dtype),
                        meta: T.Tensor((S, K // f), e_dtype)):
        with T.Kernel(S // block_M, K // block_K, threads=(block_M, col_threads)) as (by, bk):
            tm = T.get_thread_binding(0)
            tn = T.get_thread_binding(1)
            x = T.alloc_local((per_thread,), dtype)
            out = T.alloc_local((per_thread // 2,), dtype)
            word = T.alloc_local((per_thread // f,), e_dtype)
            pos = T.alloc_local((4,), "uint8")
            count = T.alloc_var("int32")
            col = bk * block_K + tn * per_thread
            T.copy(dense[by * block_M + tm, col:col + per_thread], x)
            T.clear(word)
            for g in T.unroll(per_thread // 4):
                T.clear(pos)
                count = 0
                for i in T.unroll(4):
                    if x[g * 4 + i] != 0:
                        pos[count] = i
                        count = count + 1
                T.device_assert(count <= 2, "more than two non-zeros in a group of four")
                if count == 0:
                    pos[0], pos[1] = 0, 1
                elif count == 1:
                    if pos[0] == 0:
                        pos[1] = 1
                    else:
                        pos[0], pos[1] = pos[1], pos[0]
                for s in T.unroll(2):
                    out[g * 2 + s] = x[g * 4 + pos[s]]
                    word[g * 4 // f] |= T.shift_left(T.cast(pos[s], e_dtype), 4 * (g % (f // 4)) + 2 * s)
            T.copy(out, kept[by * block_M + tm, col // 2:col // 2 + per_thread // 2])
            T.copy(word, meta[by * block_M + tm, col // f:col // f + per_thread // f])

    return compress_kernel
