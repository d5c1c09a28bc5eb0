"""`while` loops and T.PersistentTileScheduler: persistent kernels whose blocks loop
`while sched.valid()` over the tiles the scheduler deals them. Shared by
cpu/test_tile_schedule.py and gpu/test_tile_schedule_gpu.py. Each returns (prim_func,
torch reference)."""
import tegula.language as T


def schedule_reference(m_tiles, n_tiles, workers, swizzle=1, column_major=True, cluster=1):
    """(worker, iteration, m, n) of every tile, in the order each worker takes them: the
    linear numbering of the scheduler's docstring, written out in plain Python."""
    m_rows = -(-m_tiles // cluster)
    primary, secondary = (m_rows, n_tiles) if column_major else (n_tiles, m_rows)
    total = m_rows * n_tiles
    out = []
    for w in range(workers):
        t, it = w, 0
        while t < total:
            group = t // (primary * swizzle)
            base = group * swizzle
            width = max(1, min(swizzle, secondary - base))
            within = t - group * primary * swizzle
            fast, slow = within // width, base + within % width
            m, n = (fast, slow) if column_major else (slow, fast)
            out.append((w, it, m, n))
            t, it = t + workers, it + 1
    return out


def tile_owner(m_tiles, n_tiles, workers, swizzle=1, column_major=True):
    """O[m, n] = 1000 * iteration + worker for every tile the scheduler hands out."""

    @T.prim_func
    def main(O: T.Tensor((m_tiles, n_tiles), "int32")):
        with T.Kernel(workers, threads=32) as worker:
            sched = T.PersistentTileScheduler(m_tiles, n_tiles, num_workers=workers, swizzle_size=swizzle,
                                              column_major=column_major, name="sched")
            sched.init(worker)
            while sched.valid():
                if T.get_thread_binding() == 0:
                    O[sched.m_idx, sched.n_idx] = sched.current_iter * 1000 + worker
                sched.next_tile()

    def ref():
        import torch
        out = torch.full((m_tiles, n_tiles), -1, dtype=torch.int32)
        for w, it, m, n in schedule_reference(m_tiles, n_tiles, workers, swizzle, column_major):
            out[m, n] = it * 1000 + w
        return out

    return main, ref


def scheduled_scale(M, N, workers, bm=16, bn=32, swizzle=2):
    """B = 2 A + 1 tile by tile, ragged edges guarded, tiles dealt by the scheduler."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(workers, threads=128) as worker:
            sched = T.PersistentTileScheduler(T.ceildiv(M, bm), T.ceildiv(N, bn), num_workers=workers,
                                              swizzle_size=swizzle)
            sched.init(worker)
            while sched.valid():
                for i, j in T.Parallel(bm, bn):
                    r = sched.m_idx * bm + i
                    c = sched.n_idx * bn + j
                    if r < M and c < N:
                        B[r, c] = A[r, c] * 2.0 + 1.0
                sched.next_tile()

    return main, lambda A: A * 2 + 1


def scheduled_gemm(M, N, K, workers, bm=64, bn=64, bk=32, swizzle=2):
    """C = A B: the pipelined K loop of each tile inside `while sched.valid()`."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(workers, threads=128) as worker:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            sched = T.PersistentTileScheduler(T.ceildiv(M, bm), T.ceildiv(N, bn), num_workers=workers,
                                              swizzle_size=swizzle)
            sched.init(worker)
            while sched.valid():
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                    T.copy(A[sched.m_idx * bm, k * bk], A_s)
                    T.copy(B[k * bk, sched.n_idx * bn], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[sched.m_idx * bm, sched.n_idx * bn])
                sched.next_tile()

    return main, lambda A, B: A.double() @ B.double()


def stateless_owner(m_tiles, n_tiles, workers, swizzle=1):
    """The stateless form: the kernel counts waves itself and decodes with sched.coord."""
    waves = -(-(m_tiles * n_tiles) // workers)

    @T.prim_func
    def main(O: T.Tensor((m_tiles, n_tiles), "int32")):
        with T.Kernel(workers, threads=32) as worker:
            sched = T.PersistentTileScheduler(m_tiles, n_tiles, num_workers=workers, swizzle_size=swizzle,
                                              stateful=False)
            for w in T.serial(waves):
                bx, by = sched.coord(w * workers + worker)
                if w * workers + worker < m_tiles * n_tiles and T.get_thread_binding() == 0:
                    O[bx, by] = w * 1000 + worker

    def ref():
        import torch
        out = torch.full((m_tiles, n_tiles), -1, dtype=torch.int32)
        for w, it, m, n in schedule_reference(m_tiles, n_tiles, workers, swizzle):
            out[m, n] = it * 1000 + w
        return out

    return main, ref


def halving_steps(n):
    """S[i] = how many halvings take A[i] (a positive int) to 1, by a `while` on a
    T.alloc_var, one element per block so the loop's condition is the block's own."""

    @T.prim_func
    def main(A: T.Tensor((n,), "int32"), S: T.Tensor((n,), "int32")):
        with T.Kernel(n, threads=32) as bx:
            x = T.alloc_var("int32")
            steps = T.alloc_var("int32")
            x = A[bx]
            steps = 0
            while x > 1:
                x = x // 2
                steps = steps + 1
            if T.get_thread_binding() == 0:
                S[bx] = steps

    def ref(A):
        import torch
        return torch.tensor([max(int(v), 1).bit_length() - 1 for v in A], dtype=torch.int32)

    return main, ref


def per_thread_halving(n, threads=64):
    """halving_steps with one element per thread: each thread's while loop runs its own
    number of iterations (the loop diverges within a warp)."""

    @T.prim_func
    def main(A: T.Tensor((n,), "int32"), S: T.Tensor((n,), "int32")):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            i = bx * threads + T.get_thread_binding()
            x = T.alloc_var("int32")
            steps = T.alloc_var("int32")
            x = 1
            if i < n:
                x = A[i]
            steps = 0
            while x > 1:
                x = x // 2
                steps = steps + 1
            if i < n:
                S[i] = steps

    return main, halving_steps(n)[1]
