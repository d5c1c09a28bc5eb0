"""Programs of raw pointers (T.ptr parameters, T.Tensor(shape, T.ptr) tables of addresses,
T.make_tensor), shared by cpu/test_pointers.py and gpu/test_pointers_gpu.py, with the
inputs they take and what they compute in torch. Sizes may be ragged: T.copy and T.Parallel
mask what lies past a tensor's declared edge."""
import math

import torch

import tegula.language as T


def table_program(G, N, dtype="float32", threads=128):
    """out[g, i] = 2 * X_g[i] + g, X_g the tensor at the g-th address of the table."""

    @T.prim_func
    def table(ptrs: T.Tensor([G], T.ptr), out: T.Tensor([G, N], dtype)):
        with T.Kernel(G, threads=threads) as g:
            X = T.make_tensor(ptrs[g], (N,), dtype)
            for i in T.Parallel(N):
                out[g, i] = X[i] * 2 + g

    return table


def table_expected(xs):
    return torch.stack([x.double() * 2 + g for g, x in enumerate(xs)])


def summed_program(G, N, dtype="float32"):
    """out[i] = sum over g of X_g[i]: one tensor per iteration of a serial loop, each made
    where its address is read (a let inside the loop)."""

    @T.prim_func
    def summed(ptrs: T.Tensor([G], T.ptr), out: T.Tensor([N], "float32")):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as b:
            acc = T.alloc_fragment((64,), "float32")
            T.clear(acc)
            for g in T.serial(G):
                X = T.make_tensor(ptrs[g], (N,), dtype)
                for i in T.Parallel(64):
                    acc[i] += T.cast(X[b * 64 + i], "float32")
            T.copy(acc, out[b * 64])

    return summed


def pointer_gemm_program(block_M=64, block_N=64, block_K=32, dtype="float16", stages=2, static=None):
    """C = A @ B.T with A, B, C given as T.ptr parameters and their sizes as scalars (the
    tensors made before the kernel), as TileLang's pointer matmul test; with static=(M, N,
    K) the tensors have those sizes instead (the scalars unused), so their accesses are
    vectors the launch checks each address's alignment for."""

    @T.prim_func
    def gemm(a_ptr: T.ptr, b_ptr: T.ptr, c_ptr: T.ptr(T.float32), m: T.int32, n: T.int32, k: T.int32):
        M, N, K = static if static is not None else (m, n, k)
        A = T.make_tensor(a_ptr, (M, K), dtype)
        B = T.make_tensor(b_ptr, (N, K), dtype)
        C = T.make_tensor(c_ptr, (M, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, ko * block_K], A_s)
                T.copy(B[bx * block_N, ko * block_K], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C[by * block_M, bx * block_N])

    return gemm


def tile_offsets(sizes, block_M):
    offsets = [0]
    for size in sizes[:-1]:
        offsets.append(offsets[-1] + math.ceil(size / block_M))
    return offsets


def grouped_gemm_program(sizes, N, K, block_M=32, block_N=32, block_K=32, dtype="float16", stages=1):
    """C_g[:sizes[g]] = A_g @ B_g for groups of rows given by tables of addresses: each A_g
    and C_g padded to max(sizes) rows; the blocks of group g start at tile_offsets[g]."""
    G, max_M = len(sizes), max(sizes)
    blocks = sum(math.ceil(s / block_M) for s in sizes)

    @T.prim_func
    def grouped(A_ptrs: T.Tensor([G], T.ptr), B_ptrs: T.Tensor([G], T.ptr), C_ptrs: T.Tensor([G], T.ptr),
                offsets: T.Tensor([G], T.int32)):
        with T.Kernel(blocks, T.ceildiv(N, block_N), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            group = T.alloc_var("int32")
            first = T.alloc_var("int32")
            group = 0
            first = 0
            for g in range(G):
                group = T.if_then_else(bx >= offsets[g], g, group)
                first = T.if_then_else(bx >= offsets[g], offsets[g], first)
            row = (bx - first) * block_M
            A = T.make_tensor(A_ptrs[group], (max_M, K), dtype)
            B = T.make_tensor(B_ptrs[group], (K, N), dtype)
            C = T.make_tensor(C_ptrs[group], (max_M, N), "float32")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[row, ko * block_K], A_s)
                T.copy(B[ko * block_K, by * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[row, by * block_N])

    return grouped


def grouped_inputs(sizes, N, K, block_M=32, device="cpu", dtype=torch.float16):
    """(A_g, B_g, C_g lists, the three tables, the tile offsets) with fresh values; C poisoned."""
    max_M = max(sizes)
    a = [torch.zeros(max_M, K, device=device, dtype=dtype) for _ in sizes]
    for x, s in zip(a, sizes):
        x[:s] = torch.randn(s, K, device=device).to(dtype)
    b = [torch.randn(K, N, device=device).to(dtype) for _ in sizes]
    c = [torch.full((max_M, N), 12345.0, device=device) for _ in sizes]

    def table(ts):
        return torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64, device=device)

    offsets = torch.tensor(tile_offsets(sizes, block_M), dtype=torch.int32, device=device)
    return a, b, c, table(a), table(b), table(c), offsets


def strided_program(M, N, dtype="float32"):
    """Y = X + 1 over the M x N tensor at an address, rows `ld` elements apart."""

    @T.prim_func
    def strided(x_ptr: T.ptr, ld: T.int32, Y: T.Tensor((M, N), dtype)):
        X = T.make_tensor(x_ptr, (M, N), dtype, strides=(ld, 1))
        with T.Kernel(T.ceildiv(M, 16), threads=128) as b:
            for i, j in T.Parallel(16, N):
                Y[b * 16 + i, j] = X[b * 16 + i, j] + 1

    return strided
