"""break and continue in serial loops, shared by cpu/test_loop_jumps.py and
gpu/test_loop_jumps_gpu.py. Each builder returns a T.prim_func; the *_expected functions say
what it computes, in torch (float64 where it sums)."""
import torch

import tegula.language as T


def first_negative_program(rows, cols, use_continue=False):
    """Per row (an iteration of a T.Parallel loop, one thread's): the index of the first
    negative element (cols when none) by a break, and the sum of the elements before it
    (with use_continue, zeros are skipped by a continue). The break differs between
    threads; the loop it leaves holds no barrier."""

    @T.prim_func
    def first_negative(X: T.Tensor((rows, cols), "float32"), Idx: T.Tensor((rows,), "int32"),
                       S: T.Tensor((rows,), "float32")):
        with T.Kernel(T.ceildiv(rows, 128), threads=128) as bx:
            first = T.alloc_fragment((128,), "int32")
            total = T.alloc_fragment((128,), "float32")
            for i in T.Parallel(128):
                first[i] = cols
                total[i] = 0.0
                for j in T.serial(cols):
                    v = X[bx * 128 + i, j]
                    if v < 0:
                        first[i] = j
                        break
                    if use_continue:
                        if v == 0:
                            continue
                    total[i] += v
            for i in T.Parallel(128):
                if bx * 128 + i < rows:
                    Idx[bx * 128 + i] = first[i]
                    S[bx * 128 + i] = total[i]

    return first_negative


def first_negative_expected(x: torch.Tensor):
    neg = x < 0
    has = neg.any(1)
    first = torch.where(has, neg.int().argmax(1), torch.full_like(has, x.shape[1], dtype=torch.int64))
    before = torch.arange(x.shape[1])[None, :] < first[:, None]
    total = (x.double() * before).sum(1)
    return first.int(), total.float()


def rounds_program(n, max_rounds):
    """A block halves its tile in rounds until its sum drops under a limit: each round sums
    the tile (a T.copy, a reduction, a T.Parallel loop, their barriers) and leaves the
    loop by a break on that sum read from shared memory, the same in every thread, as
    topk_selector's tail pass breaks. Rounds[0] = rounds that halved; Y = the tile after."""

    @T.prim_func
    def rounds(X: T.Tensor((n,), "float32"), Limit: T.Tensor((1,), "float32"), Y: T.Tensor((n,), "float32"),
               Rounds: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((n,), "float32")
            frag = T.alloc_fragment((n,), "float32")
            total = T.alloc_fragment((1,), "float32")
            total_shared = T.alloc_shared((1,), "float32")
            count = T.alloc_var("int32")
            count = 0
            T.copy(X, tile)
            for r in T.serial(max_rounds):
                T.copy(tile, frag)
                T.reduce_sum(frag, total, dim=0)
                T.copy(total, total_shared)
                if total_shared[0] < Limit[0]:
                    break
                count = count + 1
                for i in T.Parallel(n):
                    tile[i] = frag[i] * 0.5
            T.copy(tile, Y)
            Rounds[0] = count

    return rounds


def rounds_expected(x: torch.Tensor, limit: float, max_rounds: int):
    y, count = x.double().clone(), 0
    for _ in range(max_rounds):
        if y.sum() < limit:
            break
        count += 1
        y = y * 0.5
    return y.float(), count


def skip_columns_program(M, N, skip):
    """A continue in a serial loop over column blocks, on a value every thread sees alike
    (the block index): blocks whose index is a multiple of `skip` are not copied."""

    @T.prim_func
    def skip_columns(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            for c in T.serial(N // 32):
                if c % skip == 0:
                    continue
                for i, j in T.Parallel(M, 32):
                    B[i, c * 32 + j] = A[i, c * 32 + j] * 2.0

    return skip_columns


def skip_columns_expected(a: torch.Tensor, skip: int):
    b = torch.zeros_like(a)
    for c in range(a.shape[1] // 32):
        if c % skip:
            b[:, c * 32:(c + 1) * 32] = a[:, c * 32:(c + 1) * 32] * 2
    return b


def divergent_break_over_barrier_program():
    """A break some threads take in a loop that holds a barrier: refused at the break."""

    @T.prim_func
    def bad(X: T.Tensor((128, 8), "float32"), Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128,), "float32")
            tx = T.get_thread_binding(0)
            for j in T.serial(8):
                if X[tx, j] < 0:
                    break
                s[tx] = X[tx, j]
                T.sync_threads()
                Y[tx] = s[127 - tx]

    return bad
