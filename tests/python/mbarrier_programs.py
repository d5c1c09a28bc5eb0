"""Programs with explicit mbarriers and manual warp specialisation (language/barriers.py):
a producer warpgroup fills a two-stage ring of shared tiles, consumers wait for each stage,
multiply and free it. Shared by cpu/test_mbarriers.py and gpu/test_mbarriers_gpu.py."""
import torch

import tegula.language as T


def tma_wgmma_program(M, N, K, block_K=32, stages=2):
    """C = A @ B: threads [0, 128) consume, [128, 256) produce with T.tma_copy; the tiles
    of K go round a ring of `stages` buffers guarded by full / empty barriers."""
    steps = K // block_K

    @T.prim_func
    def ring_gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256) as bx:
            A_s = T.alloc_shared((stages, M, block_K), "float16")
            B_s = T.alloc_shared((stages, block_K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            full = T.alloc_barrier(arrive_count=[128] * stages)
            empty = T.alloc_barrier(arrive_count=[128] * stages)
            tx = T.get_thread_binding()
            if tx < 128:
                T.set_max_nreg(240, 1)
                T.clear(acc)
                for k in T.serial(steps):
                    T.barrier_wait(full[k % stages], (k // stages) & 1)
                    T.wgmma_gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], acc)
                    T.wait_wgmma(0)
                    T.barrier_arrive(empty[k % stages])
                T.copy(acc, C[0:M, 0:N])
            else:
                T.set_max_nreg(24, 0)
                for k in T.serial(steps):
                    T.barrier_wait(empty[k % stages], ((k // stages) & 1) ^ 1)
                    T.tma_copy(A[0:M, k * block_K:(k + 1) * block_K], A_s[k % stages, :, :], barrier=full[k % stages])
                    T.tma_copy(B[k * block_K:(k + 1) * block_K, 0:N], B_s[k % stages, :, :], barrier=full[k % stages])
                    T.barrier_arrive(full[k % stages])

    return ring_gemm


def cp_async_program(M, N, K, block_K=32, stages=2):
    """C = A @ B with a producer warp [128, 160) that moves each tile with T.ptx_cp_async,
    8 halves per copy, and arrives with T.cp_async_barrier_noinc when its copies land."""
    steps = K // block_K
    row_chunks = block_K // 8  # 8-element copies per row of an A tile

    @T.prim_func
    def cp_ring_gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=160) as bx:
            A_s = T.alloc_shared((stages, M, block_K), "float16")
            B_s = T.alloc_shared((stages, N, block_K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            full = T.alloc_barrier(arrive_count=[32] * stages)
            empty = T.alloc_barrier(arrive_count=[128] * stages)
            tx = T.get_thread_binding()
            if tx < 128:
                T.clear(acc)
                for k in T.serial(steps):
                    T.barrier_wait(full[k % stages], (k // stages) & 1)
                    T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], acc, transpose_B=True)
                    T.barrier_arrive(empty[k % stages])
                T.copy(acc, C[0:M, 0:N])
            else:
                for k in T.serial(steps):
                    T.barrier_wait(empty[k % stages], ((k // stages) & 1) ^ 1)
                    for c in T.serial(M * row_chunks // 32):
                        r = (c * 32 + tx - 128) // row_chunks
                        col = (c * 32 + tx - 128) % row_chunks * 8
                        T.ptx_cp_async(T.access_ptr(A_s[k % stages, r, col], "w", 8),
                                       T.access_ptr(A[r, k * block_K + col], "r", 8), 8)
                    for c in T.serial(N * row_chunks // 32):
                        r = (c * 32 + tx - 128) // row_chunks
                        col = (c * 32 + tx - 128) % row_chunks * 8
                        T.ptx_cp_async(T.access_ptr(B_s[k % stages, r, col], "w", 8),
                                       T.access_ptr(B[r, k * block_K + col], "r", 8), 8)
                    T.cp_async_barrier_noinc(full[k % stages])

    return cp_ring_gemm


def cp_async_single_program(M, N, K, block_K=32, stages=2):
    """cp_async_program with one producer thread (128) that moves whole tiles: the thread
    index only in the branch, so the reference (one logical thread per warpgroup) runs it."""
    steps = K // block_K

    @T.prim_func
    def cp_one_gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=160) as bx:
            A_s = T.alloc_shared((stages, M, block_K), "float16")
            B_s = T.alloc_shared((stages, N, block_K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            full = T.alloc_barrier(arrive_count=[1] * stages)
            empty = T.alloc_barrier(arrive_count=[128] * stages)
            tx = T.get_thread_binding()
            if tx < 128:
                T.clear(acc)
                for k in T.serial(steps):
                    T.barrier_wait(full[k % stages], (k // stages) & 1)
                    T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], acc, transpose_B=True)
                    T.barrier_arrive(empty[k % stages])
                T.copy(acc, C[0:M, 0:N])
            elif tx == 128:
                for k in T.serial(steps):
                    T.barrier_wait(empty[k % stages], ((k // stages) & 1) ^ 1)
                    for r in T.serial(M):
                        for c in T.serial(block_K // 8):
                            T.ptx_cp_async(T.access_ptr(A_s[k % stages, r, c * 8], "w", 8),
                                           T.access_ptr(A[r, k * block_K + c * 8], "r", 8), 8)
                    for r in T.serial(N):
                        for c in T.serial(block_K // 8):
                            T.ptx_cp_async(T.access_ptr(B_s[k % stages, r, c * 8], "w", 8),
                                           T.access_ptr(B[r, k * block_K + c * 8], "r", 8), 8)
                    T.cp_async_barrier_noinc(full[k % stages])

    return cp_one_gemm


def deadlock_program():
    """Consumers wait for a phase nobody completes: the interpreters report it."""

    @T.prim_func
    def stuck(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            full = T.alloc_barrier(arrive_count=128)
            tx = T.get_thread_binding()
            if tx < 128:
                T.barrier_wait(full, 0)
                for i in T.Parallel(128):
                    B[i] = A[i]
            else:
                T.barrier_wait(full, 0)

    return stuck


def inputs(M, N, K, transpose_B=False, device="cpu"):
    a = torch.randn(M, K, device=device).half()
    b = torch.randn(N, K, device=device).half() if transpose_B else torch.randn(K, N, device=device).half()
    return a, b


def ref(a, b, transpose_B=False):
    bf = b.float().t() if transpose_B else b.float()
    return a.float() @ bf
