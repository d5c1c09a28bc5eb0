"""Programs that group their own copies and wait for them (T.ptx_commit_group,
T.ptx_wait_group), as TileLang's sparse-attention prefetch does. Shared by
cpu/test_async_groups.py and gpu/test_async_groups_gpu.py."""
import torch

import tegula.language as T


def prefetch_program(M, steps, bm=16, bn=32, stages=2, dtype="float16", annotated=False, threads=128):
    """O[r, j] = sum over s of X[r, s * bn + j]: step s+1's tile is copied into a ring of
    `stages` shared tiles (T.Parallel with prefer_async) before step s is read, each step's
    copy its own group, and the read waits for all but the newest group."""
    annotations = {"parallel_async_without_async_commit_wait": True} if annotated else None

    @T.prim_func
    def prefetch(X: T.Tensor((M, steps * bn), dtype), O: T.Tensor((M, bn), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as by:
            ring = T.alloc_shared((stages, bm, bn), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for i, j in T.Parallel(bm, bn, prefer_async=True, annotations=annotations):
                ring[0, i, j] = T.if_then_else(by * bm + i < M, X[by * bm + i, j], T.cast(0, dtype))
            T.ptx_commit_group()
            for k in T.serial(steps - 1):
                for i, j in T.Parallel(bm, bn, prefer_async=True, annotations=annotations):
                    ring[(k + 1) % stages, i, j] = T.if_then_else(by * bm + i < M, X[by * bm + i, (k + 1) * bn + j],
                                                                  T.cast(0, dtype))
                T.ptx_commit_group()
                T.ptx_wait_group(1)
                for i, j in T.Parallel(bm, bn):
                    acc[i, j] += T.cast(ring[k % stages, i, j], "float32")
            T.ptx_wait_group(0)
            for i, j in T.Parallel(bm, bn):
                acc[i, j] += T.cast(ring[(steps - 1) % stages, i, j], "float32")
            for i, j in T.Parallel(bm, bn):
                if by * bm + i < M:
                    O[by * bm + i, j] = acc[i, j]

    return prefetch


def prefetch_ref(x, steps, bn):
    return x.float().reshape(x.shape[0], steps, bn).sum(1)


def thread_groups_program(threads=128, early=False):
    """Each thread moves its 4 floats of each half of A with T.ptx_cp_async, one group per
    half; after T.ptx_wait_group(1) the first half is read back reversed (each thread reads
    what another copied), after T.ptx_wait_group(0) the second: B = flip(A) + 1 per half.
    early: the read after T.ptx_wait_group(1) is of the second half, whose group may still
    be in flight (a program the simulator must refuse)."""
    n = threads * 4
    first = n if early else 0

    @T.prim_func
    def thread_groups(A: T.Tensor((2 * n,), "float32"), B: T.Tensor((2 * n,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            S = T.alloc_shared((2 * n,), "float32")
            tx = T.get_thread_binding()
            T.ptx_cp_async(T.access_ptr(S[tx * 4], "w", 4), T.access_ptr(A[tx * 4], "r", 4), 4)
            T.ptx_commit_group()
            T.ptx_cp_async(T.access_ptr(S[n + tx * 4], "w", 4), T.access_ptr(A[n + tx * 4], "r", 4), 4)
            T.ptx_commit_group()
            T.ptx_wait_group(1)
            for i in T.Parallel(n):
                B[i] = S[first + n - 1 - i] + 1
            T.ptx_wait_group(0)
            for i in T.Parallel(n):
                B[n + i] = S[2 * n - 1 - i] + 1

    return thread_groups


def thread_groups_ref(a):
    n = a.shape[0] // 2
    return torch.cat([a[:n].flip(0), a[n:].flip(0)]) + 1
