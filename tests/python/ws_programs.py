"""Warp-group scopes (`with T.ws(g):`, language/warpgroup.py) and gemms whose clear_accum
is a run-time condition, for the CPU tests (tests/python/cpu/test_warp_groups.py:
reference and simulate) and the GPU tests (tests/python/gpu/test_warp_groups_gpu.py).

Each builder takes the target and returns a compiled-on-call @tegula.jit function; the
`*_expected` functions say in torch what each computes.
"""
import torch

import tegula
import tegula.language as T


def _jit(target, out_idx):
    return tegula.jit(out_idx=out_idx, target=target)


def ring_gemm(target, consumer_first=False, stages=2):
    """C = A @ B (float16 in, float32 out) with manual warp specialisation: warp group 1
    moves the K tiles into a ring of `stages` shared buffers (T.tma_copy on full[s]), warp
    group 0 waits for each, multiplies and frees it (empty[s]). Producer first in a
    T.Pipelined loop (which then runs in order in each group), or consumer first in a
    T.serial loop: each group runs as far as its own waits let it."""

    @_jit(target, [2])
    def program(M, N, K, bM=64, bN=64, bK=32):
        steps = (K + bK - 1) // bK

        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
                A_s = T.alloc_shared((stages, bM, bK), "float16")
                B_s = T.alloc_shared((stages, bK, bN), "float16")
                acc = T.alloc_fragment((bM, bN), "float32")
                full = T.alloc_barrier([128] * stages)
                empty = T.alloc_barrier([128] * stages)
                with T.ws(0):
                    T.clear(acc)
                if consumer_first:
                    for k in T.serial(steps):
                        with T.ws(0):
                            T.barrier_wait(full[k % stages], (k // stages) & 1)
                            T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], acc)
                            T.barrier_arrive(empty[k % stages])
                        with T.ws(1):
                            T.barrier_wait(empty[k % stages], ((k // stages) & 1) ^ 1)
                            T.tma_copy(A[by * bM:(by + 1) * bM, k * bK:(k + 1) * bK], A_s[k % stages, :, :],
                                       barrier=full[k % stages])
                            T.tma_copy(B[k * bK:(k + 1) * bK, bx * bN:(bx + 1) * bN], B_s[k % stages, :, :],
                                       barrier=full[k % stages])
                            T.barrier_arrive(full[k % stages])
                else:
                    for k in T.Pipelined(steps, num_stages=2):
                        with T.ws(1):
                            T.barrier_wait(empty[k % stages], ((k // stages) & 1) ^ 1)
                            T.tma_copy(A[by * bM:(by + 1) * bM, k * bK:(k + 1) * bK], A_s[k % stages, :, :],
                                       barrier=full[k % stages])
                            T.tma_copy(B[k * bK:(k + 1) * bK, bx * bN:(bx + 1) * bN], B_s[k % stages, :, :],
                                       barrier=full[k % stages])
                            T.barrier_arrive(full[k % stages])
                        with T.ws(0):
                            T.barrier_wait(full[k % stages], (k // stages) & 1)
                            T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], acc)
                            T.barrier_arrive(empty[k % stages])
                with T.ws(0):
                    T.copy(acc, C[by * bM, bx * bN])

        return main

    return program


def two_consumer_groups(target):
    """C = A @ B with 384 threads: warp groups 0 and 1 together (`T.ws(0, 1)`, 256
    threads) multiply a 128-row tile, warp group 2 produces it, one K tile at a time."""

    @_jit(target, [2])
    def program(M, N, K, bM=128, bN=64, bK=32):
        steps = (K + bK - 1) // bK

        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=384) as (bx, by):
                A_s = T.alloc_shared((bM, bK), "float16")
                B_s = T.alloc_shared((bK, bN), "float16")
                acc = T.alloc_fragment((bM, bN), "float32")
                full = T.alloc_barrier(arrive_count=128)
                empty = T.alloc_barrier(arrive_count=256)
                with T.ws(1, 0):
                    T.clear(acc)
                for k in T.serial(steps):
                    with T.ws(2):
                        T.barrier_wait(empty, (k & 1) ^ 1)
                        T.tma_copy(A[by * bM:(by + 1) * bM, k * bK:(k + 1) * bK], A_s, barrier=full)
                        T.tma_copy(B[k * bK:(k + 1) * bK, bx * bN:(bx + 1) * bN], B_s, barrier=full)
                        T.barrier_arrive(full)
                    with T.ws(0, 1):
                        T.barrier_wait(full, k & 1)
                        T.gemm(A_s, B_s, acc)
                        T.barrier_arrive(empty)
                with T.ws(0, 1):
                    T.copy(acc, C[by * bM, bx * bN])

        return main

    return program


def split_columns(target):
    """C = A @ B, each warp group computing half of a 64-column tile from its own copy of
    B (TileLang's copy-then-gemm in T.ws scopes, no mbarriers): the A tile all threads
    copy, the compiler's barriers order it."""

    @_jit(target, [2])
    def program(M, N, K, bM=64, bN=64, bK=32):
        half = bN // 2

        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
                A_s = T.alloc_shared((bM, bK), "float16")
                B0 = T.alloc_shared((bK, half), "float16")
                B1 = T.alloc_shared((bK, half), "float16")
                acc0 = T.alloc_fragment((bM, half), "float32")
                acc1 = T.alloc_fragment((bM, half), "float32")
                with T.ws(1):
                    T.clear(acc1)
                with T.ws(0):
                    T.clear(acc0)
                for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                    T.copy(A[by * bM, k * bK], A_s)
                    with T.ws(1):
                        T.copy(B[k * bK, bx * bN + half], B1)
                        T.gemm(A_s, B1, acc1)
                    with T.ws(0):
                        T.copy(B[k * bK, bx * bN], B0)
                        T.gemm(A_s, B0, acc0)
                with T.ws(0):
                    T.copy(acc0, C[by * bM, bx * bN])
                with T.ws(1):
                    T.copy(acc1, C[by * bM, bx * bN + half])

        return main

    return program


def elementwise_groups(target):
    """Each warp group of 256 threads transforms its own half of a 256-element block with a
    T.Parallel loop; `T.ws(0, 1)` (every thread) then adds one to all of it."""

    @_jit(target, [1])
    def program(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
                S = T.alloc_shared((256,), "float32")
                with T.ws(0):
                    for i in T.Parallel(128):
                        S[i] = A[bx * 256 + i] * 2
                with T.ws(1):
                    for i in T.Parallel(128):
                        S[128 + i] = A[bx * 256 + 128 + i] - 3
                with T.ws(0, 1):
                    for i in T.Parallel(256):
                        B[bx * 256 + i] = S[i] + 1

        return main

    return program


def elementwise_expected(a):
    out = a.clone().view(-1)
    n = out.numel()
    idx = torch.arange(n)
    low = (idx % 256) < 128
    out[low] = a.view(-1)[low] * 2 + 1
    out[~low] = a.view(-1)[~low] - 3 + 1
    return out


CLEAR_WHEN = ["first", "last", "odd", "flag"]


def gemm_clear_when(target, when, loop="serial", threads=128):
    """C = the product accumulated over K tiles, cleared at the tiles where `when` holds:
    clear_accum=(k == 0) (the whole product), (k == steps - 1) (the last tile's), k % 2 (an
    int: the odd tiles clear; both clear the accumulator first too), or a T.alloc_var flag
    the loop sets."""

    @_jit(target, [2])
    def program(M, N, K, bM=64, bN=64, bK=32):
        steps = (K + bK - 1) // bK

        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                A_s = T.alloc_shared((bM, bK), "float16")
                B_s = T.alloc_shared((bK, bN), "float16")
                acc = T.alloc_fragment((bM, bN), "float32")
                flag = T.alloc_var("int32")
                flag = 1
                if when in ("last", "odd"):
                    T.clear(acc)  # the tiles before the clear add to a value of their own
                loop_range = T.Pipelined(steps, num_stages=2) if loop == "pipelined" else T.serial(steps)
                for k in loop_range:
                    T.copy(A[by * bM, k * bK], A_s)
                    T.copy(B[k * bK, bx * bN], B_s)
                    if when == "first":
                        T.gemm(A_s, B_s, acc, clear_accum=(k == 0))
                    elif when == "last":
                        T.gemm(A_s, B_s, acc, clear_accum=(k == steps - 1))
                    elif when == "odd":
                        T.gemm(A_s, B_s, acc, clear_accum=k % 2)
                    else:
                        T.gemm(A_s, B_s, acc, clear_accum=flag)
                        flag = 0
                T.copy(acc, C[by * bM, bx * bN])

        return main

    return program


def clear_expected(a, b, when, bK=32):
    """What gemm_clear_when computes: the tiles' products summed from the last clear on."""
    steps = (a.shape[1] + bK - 1) // bK
    clears = {"first": [0], "last": [steps - 1], "odd": list(range(1, steps, 2)), "flag": [0]}[when]
    start = max(clears)  # the "odd" programs have two tiles at least
    af, bf = a.float(), b.float()
    return af[:, start * bK:] @ bf[start * bK:, :]


def split_k_attention(target):
    """A warp-specialised S = Q Kᵀ (float32) and O = cast(S) V (float16 P, float32 O) with
    the inner dimension in tiles of 64: warp group 1 loads Q, K and V (T.tma_copy on one
    barrier), warp group 0 runs `for j in T.unroll(tiles): T.gemm(Q_s[:, j*64:(j+1)*64],
    K_s[:, j*64:(j+1)*64], S, transpose_B=True, clear_accum=(j == 0))` on the slices, then
    P V from registers (TileLang's flash-MLA split of QKᵀ)."""

    @_jit(target, [3, 4])
    def program(H, L, D, Dv=64, tile=64):
        tiles = D // tile

        @T.prim_func
        def main(Q: T.Tensor((H, D), "float16"), Kt: T.Tensor((L, D), "float16"), V: T.Tensor((L, Dv), "float16"),
                 S_out: T.Tensor((H, L), "float32"), O: T.Tensor((H, Dv), "float32")):
            with T.Kernel(1, threads=256) as bx:
                Q_s = T.alloc_shared((H, D), "float16")
                K_s = T.alloc_shared((L, D), "float16")
                V_s = T.alloc_shared((L, Dv), "float16")
                S = T.alloc_fragment((H, L), "float32")
                P = T.alloc_fragment((H, L), "float16")
                acc = T.alloc_fragment((H, Dv), "float32")
                loaded = T.alloc_barrier(arrive_count=128)
                with T.ws(1):
                    T.tma_copy(Q[0:H, 0:D], Q_s, barrier=loaded)
                    T.tma_copy(Kt[0:L, 0:D], K_s, barrier=loaded)
                    T.tma_copy(V[0:L, 0:Dv], V_s, barrier=loaded)
                    T.barrier_arrive(loaded)
                with T.ws(0):
                    T.barrier_wait(loaded, 0)
                    for j in T.unroll(tiles):
                        T.gemm(Q_s[:, j * tile:(j + 1) * tile], K_s[:, j * tile:(j + 1) * tile], S,
                               transpose_B=True, clear_accum=(j == 0))
                    T.copy(S, S_out)
                    T.copy(S, P)
                    T.gemm(P, V_s, acc, clear_accum=True)
                    T.copy(acc, O)

        return main

    return program


def split_k_attention_expected(q, k, v, s=None):
    """(S, O); O from the given S when there is one (P = S rounded to float16 is sensitive
    to S's last bits)."""
    s_ref = q.float() @ k.float().t()
    p = (s_ref if s is None else s).half().float()
    return s_ref, p @ v.float()


def gemm_inputs(M, N, K, device="cpu"):
    return torch.randn(M, K, device=device).half(), torch.randn(K, N, device=device).half()
