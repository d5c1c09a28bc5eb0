"""Kernels for the porting surface (T.Serial, T.atomic_add's memory_order, T.Fragment user
layouts, T.alloc_local, tegula.cdiv), written the TileLang way; shared by the compile-only
and simulator tests (tests/python/cpu/test_port_surface.py) and the GPU tests
(tests/python/gpu/test_port_surface_gpu.py). Each builder returns a compiled kernel."""
import tegula
import tegula.language as T


def column_sums(M, N, memory_order=None, dtype="float32", block_m=16, target="auto"):
    """S[j] += sum_i X[i, j], every element added with T.atomic_add(..., memory_order)."""

    @T.prim_func
    def col_sum(X: T.Tensor((M, N), dtype), S: T.Tensor((N,), dtype)):
        with T.Kernel(tegula.cdiv(M, block_m), threads=128) as bx:
            for i, j in T.Parallel(block_m, N):
                if bx * block_m + i < M:
                    T.atomic_add(S[j], X[bx * block_m + i, j], memory_order=memory_order)

    return tegula.compile(col_sum, target=target)


def serial_alias_scale(M, N, target="auto"):
    """T.Serial / T.Unroll / T.vectorized as loops: Y[i, :] = 2 * X[i, :] + i, one block a row."""

    @T.prim_func
    def scale(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as bx:
            tx = T.get_thread_binding()
            for k in T.Serial(tegula.cdiv(N, 32)):
                if k * 32 + tx < N:
                    Y[bx, k * 32 + tx] = X[bx, k * 32 + tx] * 2.0
            for k in T.Unroll(1):
                for v in T.vectorized(1):
                    if tx == 0:
                        Y[bx, k + v] = Y[bx, k + v] + bx

    return tegula.compile(scale, out_idx=[-1], target=target)


def column_fragment(K, N, target="auto", threads=128):
    """A (K, N) tile laid out by T.Fragment(forward_fn=lambda i, j: (j, i)): thread j holds
    column j in registers 0..K-1. Y = X * 2 + 1, and S = the column sums (reduced within a
    thread, as the layout keeps each column in one)."""

    @T.prim_func
    def cols(X: T.Tensor((K, N), "float32"), Y: T.Tensor((K, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((K, N), "float32")
            s = T.alloc_fragment((N,), "float32")
            T.annotate_layout({x: T.Fragment(x.shape, forward_fn=lambda i, j: (j, i))})
            T.copy(X, x)
            for i, j in T.Parallel(K, N):
                x[i, j] = x[i, j] * 2.0 + 1.0
            T.reduce_sum(x, s, dim=0)
            T.copy(x, Y)
            T.copy(s, S)

    return tegula.compile(cols, out_idx=[1, 2], target=target)


def mma_like_fragment(target="auto"):
    """A 16x16 tile in an mma.sync-like accumulator layout (bit-linear in the thread index):
    thread t holds rows t/4 and t/4 + 8, columns 2*(t%4) + {0, 1, 8, 9}. Y = X^2 row-max
    broadcast: Y[i, j] = max_k X[i, k]^2."""

    def thread(i, j):
        return (i % 8) * 4 + (j % 8) // 2

    def index(i, j):
        return (i // 8) * 4 + (j // 8) * 2 + j % 2

    @T.prim_func
    def mma_like(X: T.Tensor((16, 16), "float32"), Y: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((16, 16), "float32")
            m = T.alloc_fragment((16,), "float32")
            T.annotate_layout({x: T.Fragment((16, 16), forward_thread_fn=thread, forward_index_fn=index)})
            T.copy(X, x)
            for i, j in T.Parallel(16, 16):
                x[i, j] = x[i, j] * x[i, j]
            T.reduce_max(x, m, dim=1)
            for i, j in T.Parallel(16, 16):
                x[i, j] = m[i]
            T.copy(x, Y)

    return tegula.compile(mma_like, out_idx=[1], target=target)


def partial_fragment(N=64, threads=128, target="auto"):
    """A (N,) fragment held by the first N threads only (element i in thread i, one
    register), with replicate=2 copies of a (N // 2,) one: Y = X + 1, Z[i] = X[2i] * 3."""

    @T.prim_func
    def partial(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N // 2,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((N,), "float32")
            h = T.alloc_fragment((N // 2,), "float32")
            T.annotate_layout({
                x: T.Fragment(x.shape, forward_thread_fn=lambda i: i),
                h: T.Fragment(h.shape, forward_thread_fn=lambda i, rep: rep * (N // 2) + i, replicate=2),
            })
            T.copy(X, x)
            for i in T.Parallel(N // 2):
                h[i] = X[2 * i] * 3.0
            for i in T.Parallel(N):
                x[i] = x[i] + 1.0
            T.copy(x, Y)
            T.copy(h, Z)

    return tegula.compile(partial, out_idx=[1, 2], target=target)


def gemv_local(N, K, block_n=128, block_k=32, target="auto"):
    """TileLang's naive GEMV: thread tn accumulates C[bn * block_n + tn] in a local [1]
    buffer (T.clear, `C_reg[0] += ...` in serial loops). Only thread 0 stages A (TileLang's
    example has every thread store the same values, a race the simulator reports)."""

    @T.prim_func
    def gemv(A: T.Tensor((K,), "float32"), B: T.Tensor((N, K), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_n), threads=block_n) as bn:
            tn = T.get_thread_binding(0)
            A_shared = T.alloc_shared((block_k,), "float32")
            B_shared = T.alloc_shared((block_n, block_k), "float32")
            C_reg = T.alloc_local((1,), "float32")
            T.clear(C_reg)
            for bk in T.serial(T.ceildiv(K, block_k)):
                for tk in T.serial(block_k):
                    if tn == 0:
                        A_shared[tk] = A[bk * block_k + tk]
                    B_shared[tn, tk] = B[bn * block_n + tn, bk * block_k + tk]
                T.sync_threads()
                for tk in T.serial(block_k):
                    C_reg[0] += A_shared[tk] * B_shared[tn, tk]
                T.sync_threads()
            C[bn * block_n + tn] = C_reg[0]

    return tegula.compile(gemv, out_idx=[-1], target=target)


def splitk_gemv_local(N, K, block_n=32, reduce_threads=4, target="auto"):
    """TileLang's split-K GEMV on a flat thread index: thread (tn, tk) sums its slice into
    local arrays, then T.atomic_add into a shared partial per row."""
    tile_k = 4
    block_k = reduce_threads * tile_k

    @T.prim_func
    def gemv(A: T.Tensor((K,), "float32"), B: T.Tensor((N, K), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_n), threads=block_n * reduce_threads) as bn:
            tx = T.get_thread_binding(0)
            tn = tx % block_n
            tk = tx // block_n
            A_local = T.alloc_local((tile_k,), "float32")
            B_local = T.alloc_local((tile_k,), "float32")
            C_accum = T.alloc_local((1,), "float32")
            C_shared = T.alloc_shared((block_n,), "float32")
            if tk == 0:
                C_shared[tn] = 0
            T.sync_threads()
            T.clear(C_accum)
            for bk in T.serial(T.ceildiv(K, block_k)):
                for k in T.vectorized(tile_k):
                    A_local[k] = A[bk * block_k + tk * tile_k + k]
                    B_local[k] = B[bn * block_n + tn, bk * block_k + tk * tile_k + k]
                for k in T.serial(tile_k):
                    C_accum[0] += A_local[k] * B_local[k]
            T.atomic_add(C_shared[tn], C_accum[0])
            T.sync_threads()
            if tk == 0:
                C[bn * block_n + tn] = C_shared[tn]

    return tegula.compile(gemv, out_idx=[-1], target=target)


def local_rows(M, N, threads=64, target="auto"):
    """Each thread owns a row: T.copy of its row into a local buffer and back, a T.Parallel
    loop that stores only into local buffers (every thread runs all of it), a dynamic
    index, and T.alloc_var with init. Y[r, :] = reversed(X[r, :]) * 2 + sum(X[r, :]) + 1."""

    @T.prim_func
    def rows(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, threads), threads=threads) as bx:
            tx = T.get_thread_binding()
            row = bx * threads + tx
            buf = T.alloc_local((N,), "float32")
            rev = T.alloc_local((N,), "float32")
            total = T.alloc_var("float32", init=1.0)
            T.copy(X[row, 0:N], buf)
            for k in T.serial(N):
                total += buf[k]
            for i in T.Parallel(N):
                rev[i] = buf[N - 1 - i] * 2.0
            for k in T.serial(N):
                rev[k] = rev[k] + total
            T.copy(rev, Y[row, 0:N])

    return tegula.compile(rows, out_idx=[-1], target=target)


def mla_combine(batch, heads, num_split, dim, target="auto"):
    """TileLang's MLA split-KV combine, as its examples write it: a local [1] log-sum-exp
    accumulator annotated with T.Fragment(forward_thread_fn=lambda i: i), which names
    each thread's own copy."""

    @T.prim_func
    def combine(glse: T.Tensor((batch, heads, num_split), "float32"),
                Output_partial: T.Tensor((batch, heads, num_split, dim), "float32"),
                Output: T.Tensor((batch, heads, dim), "float32")):
        with T.Kernel(heads, batch, threads=128) as (by, bz):
            po_local = T.alloc_fragment([dim], "float32")
            o_accum_local = T.alloc_fragment([dim], "float32")
            lse_local_split = T.alloc_local([1], "float32")
            lse_logsum_local = T.alloc_local([1], "float32")
            lse_max_local = T.alloc_local([1], "float32")
            scale_local = T.alloc_local([1], "float32")

            T.annotate_layout({
                lse_logsum_local: T.Fragment(lse_logsum_local.shape, forward_thread_fn=lambda i: i),
            })

            T.clear(lse_logsum_local)
            T.clear(o_accum_local)
            lse_max_local[0] = -T.infinity("float32")
            for k in T.serial(num_split):
                lse_max_local[0] = T.max(lse_max_local[0], glse[bz, by, k])
            for k in T.Pipelined(num_split, num_stages=1):
                lse_local_split[0] = glse[bz, by, k]
                lse_logsum_local[0] += T.exp2(lse_local_split[0] - lse_max_local[0])
            lse_logsum_local[0] = T.log2(lse_logsum_local[0]) + lse_max_local[0]
            for k in T.serial(num_split):
                for i in T.Parallel(dim):
                    po_local[i] = Output_partial[bz, by, k, i]
                lse_local_split[0] = glse[bz, by, k]
                scale_local[0] = T.exp2(lse_local_split[0] - lse_logsum_local[0])
                for i in T.Parallel(dim):
                    o_accum_local[i] += po_local[i] * scale_local[0]
            for i in T.Parallel(dim):
                Output[bz, by, i] = o_accum_local[i]

    return tegula.compile(combine, out_idx=[-1], target=target)


def mla_combine_reference(glse, partial):
    """torch, in float64: the splits' outputs weighted by softmax over their log2-sum-exps."""
    import torch

    weights = torch.softmax(glse.double() * torch.log(torch.tensor(2.0, dtype=torch.float64)), dim=-1)
    return (partial.double() * weights.unsqueeze(-1)).sum(2)
