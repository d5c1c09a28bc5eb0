"""T.alloc_reducer programs (language/reducers.py), shared by cpu/test_reducers.py and
gpu/test_reducers_gpu.py, written the way TileLang's reducer tests write them."""
import tegula.language as T


def scalar_program(extent=8, threads=128, op="sum", dtype="float32", seed=None):
    """B[0] = seed op (op over A): a T.Parallel(extent) loop over the block's threads."""

    @T.prim_func
    def scalar(A: T.Tensor((extent,), dtype), B: T.Tensor((1,), dtype)):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment((extent,), dtype)
            T.copy(A, src)
            acc = T.alloc_reducer((1,), dtype, op=op)
            if seed is None:
                T.reducer_init(acc)
            else:
                T.reducer_init(acc, seed)
            for i in T.Parallel(extent):
                T.reducer_update(acc[0], src[i])
            result = T.alloc_fragment((1,), dtype)
            T.finalize_reducer(acc, result)
            if T.get_thread_binding() == 0:
                B[0] = result[0]

    return scalar


def replicated_program(rows=8, cols=16, threads=128):
    """The sum of the row sums of A: the row sums are a reduction's output, held by every
    thread of a row's lane group, so the loop over them runs in several threads per row;
    each row must still count once."""

    @T.prim_func
    def replicated(A: T.Tensor((rows, cols), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((rows, cols), "float32")
            r = T.alloc_fragment((rows,), "float32")
            T.copy(A, a)
            T.reduce_sum(a, r, dim=1)
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.reducer_init(acc)
            for i in T.Parallel(rows):
                T.reducer_update(acc[0], r[i])
            result = T.alloc_fragment((1,), "float32")
            T.finalize_reducer(acc, result)
            if T.get_thread_binding() == 0:
                B[0] = result[0]

    return replicated


def rows_program(M, K, block_K, threads=128, op="sum", pipelined=False):
    """B[i] = op over A[i, :], accumulated tile by tile across a serial (or pipelined) loop,
    combined once at the end; K ragged against block_K."""

    @T.prim_func
    def rows(A: T.Tensor((M, K), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_reducer((M,), "float32", op=op)
            T.reducer_init(acc)
            if pipelined:
                a_shared = T.alloc_shared((M, block_K), "float32")
                for kt in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                    T.copy(A[0, kt * block_K], a_shared)
                    for i, k in T.Parallel(M, block_K):
                        if kt * block_K + k < K:
                            T.reducer_update(acc[i], a_shared[i, k])
            else:
                a = T.alloc_fragment((M, block_K), "float32")
                for kt in T.serial(T.ceildiv(K, block_K)):
                    T.copy(A[0, kt * block_K], a)
                    for i, k in T.Parallel(M, block_K):
                        if kt * block_K + k < K:
                            T.reducer_update(acc[i], a[i, k])
            result = T.alloc_fragment((M,), "float32")
            T.finalize_reducer(acc, result)
            T.copy(result, B)

    return rows


def two_sites_program(extent=8, threads=128):
    """C[0] = sum(A) + sum(B): two update loops of different extents into one reducer."""

    @T.prim_func
    def two_sites(A: T.Tensor((extent,), "float32"), B: T.Tensor((2 * extent,), "float32"),
                  C: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((extent,), "float32")
            b = T.alloc_fragment((2 * extent,), "float32")
            T.copy(A, a)
            T.copy(B, b)
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.reducer_init(acc)
            for i in T.Parallel(extent):
                T.reducer_update(acc[0], a[i])
            for j in T.Parallel(2 * extent):
                T.reducer_update(acc[0], b[j])
            result = T.alloc_fragment((1,), "float32")
            T.finalize_reducer(acc, result)
            if T.get_thread_binding() == 0:
                C[0] = result[0]

    return two_sites


def online_softmax_program(n, block, threads=128):
    """A running max and sum of exp over blocks of a row, one reducer epoch per block: the
    max seeded with the running max at its init; out = [max, sum of exp(a - max)]."""

    @T.prim_func
    def online(A: T.Tensor((n,), "float32"), O: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((block,), "float32")
            running = T.alloc_fragment((1,), "float32")
            total = T.alloc_fragment((1,), "float32")
            m = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.fill(running, -T.infinity("float32"))
            T.fill(total, 0.0)
            for blk in T.serial(n // block):
                T.copy(A[blk * block], a)
                new_max = T.alloc_reducer((1,), "float32", op="max")
                T.reducer_init(new_max, running[0])
                for i in T.Parallel(block):
                    T.reducer_update(new_max[0], a[i])
                T.finalize_reducer(new_max, m)
                new_sum = T.alloc_reducer((1,), "float32", op="sum")
                T.reducer_init(new_sum)
                for i in T.Parallel(block):
                    T.reducer_update(new_sum[0], T.exp(a[i] - m[0]))
                T.finalize_reducer(new_sum, s)
                total[0] = total[0] * T.exp(running[0] - m[0]) + s[0]
                running[0] = m[0]
            if T.get_thread_binding() == 0:
                O[0] = running[0]
                O[1] = total[0]

    return online


def first_form_program(rows=4, K=256, threads=128, fill=None, op="sum", dtype="float32"):
    """TileLang's first reducer form: B = A @ A2.T, each element a T.Parallel(K) sum added
    to with `acc[i, j] += ...`, cleared (or filled with `fill`) first and finalized in
    place, then acc copied out as an ordinary local buffer. K ragged against threads
    where the caller picks it so."""

    @T.prim_func
    def first_form(A: T.Tensor((rows, K), dtype), A2: T.Tensor((rows, K), dtype),
                   B: T.Tensor((rows, rows), dtype)):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment((rows, K), dtype)
            src2 = T.alloc_fragment((rows, K), dtype)
            T.copy(A, src)
            T.copy(A2, src2)
            acc = T.alloc_reducer((rows, rows), dtype, op=op, replication="all")
            if fill is None:
                T.clear(acc)
            else:
                T.fill(acc, fill)
            for i in T.serial(rows):
                for j in T.serial(rows):
                    for k in T.Parallel(K):
                        if op == "sum":
                            acc[i, j] += src[i, k] * src2[j, k]
                        else:
                            acc[i, j] ^= src[i, k] * src2[j, k]
            T.finalize_reducer(acc)
            T.copy(acc, B)

    return first_form
