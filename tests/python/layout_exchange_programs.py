"""Programs whose fragments are read in another layout than the one they are held in,
shared by cpu/test_layout_exchange.py and gpu/test_layout_exchange_gpu.py: split-KV
decoding's combine step, as TileLang's decode examples write it. lse[k, j] is read in a
loop over j inside a serial loop over k (the register is a function of k, or the row
crosses through shared memory), and the row maximum's output was laid out by a
(rows, dim) loop before the reduction could derive it."""
import torch

import tegula.language as T


def combine_program(heads, num_split, dim, copy_rows=False):
    """out[h] = sum_k softmax_k(lse[h, k] in base 2) * part[h, k]; 128 query rows a block
    (rows of one head, all alike, as a GQA decode's combine holds them)."""

    @T.prim_func
    def combine(glse: T.Tensor((heads, num_split), "float32"), part: T.Tensor((heads, num_split, dim), "float32"),
                out: T.Tensor((heads, dim), "float32")):
        with T.Kernel(heads, threads=128) as bx:
            lse = T.alloc_fragment((num_split, 128), "float32")
            lse_row = T.alloc_fragment((128,), "float32")
            lse_max = T.alloc_fragment((128,), "float32")
            logsum = T.alloc_fragment((128,), "float32")
            scale = T.alloc_fragment((128,), "float32")
            acc = T.alloc_fragment((128, dim), "float32")
            po = T.alloc_fragment((128, dim), "float32")
            T.clear(logsum)
            T.clear(acc)
            for k, j in T.Parallel(num_split, 128):
                lse[k, j] = glse[bx, k]
            T.reduce_max(lse, lse_max, dim=0, clear=True)
            for k in T.serial(num_split):
                if copy_rows:
                    T.copy(lse[k, :], lse_row)
                    for j in T.Parallel(128):
                        logsum[j] += T.exp2(lse_row[j] - lse_max[j])
                else:
                    for j in T.Parallel(128):
                        logsum[j] += T.exp2(lse[k, j] - lse_max[j])
            for j in T.Parallel(128):
                logsum[j] = T.log2(logsum[j]) + lse_max[j]
            for k in T.serial(num_split):
                for i, d in T.Parallel(128, dim):
                    po[i, d] = part[bx, k, d]
                for j in T.Parallel(128):
                    scale[j] = T.exp2(lse[k, j] - logsum[j])
                for i, d in T.Parallel(128, dim):
                    acc[i, d] += po[i, d] * scale[i]
            for d in T.Parallel(dim):
                out[bx, d] = acc[0, d]

    return combine


def combine_rows_program(heads, num_split, dim):
    """The combine as TileLang's GQA decode example writes it: lse held in half, the
    partial outputs read a row at a time into 1-D fragments. Its lse[k, j] loops are laid
    out first, so lse is held column by column for every k: no crossing, no barrier."""

    @T.prim_func
    def combine(glse: T.Tensor((heads, num_split), "float16"), part: T.Tensor((heads, num_split, dim), "float16"),
                out: T.Tensor((heads, dim), "float16")):
        with T.Kernel(heads, threads=128) as by:
            po = T.alloc_fragment([dim], "float16")
            acc = T.alloc_fragment([dim], "float32")
            lse = T.alloc_fragment([num_split, 128], "float16")
            logsum = T.alloc_fragment([128], "float32")
            lse_max = T.alloc_fragment([128], "float32")
            scale = T.alloc_fragment([128], "float32")
            T.clear(logsum)
            T.clear(acc)
            for k, j in T.Parallel(num_split, 128):
                lse[k, j] = glse[by, k]
            T.reduce_max(lse, lse_max, dim=0, clear=True)
            for k in T.serial(num_split):
                for j in T.Parallel(128):
                    logsum[j] += T.exp2(lse[k, j] - lse_max[j])
            for j in T.Parallel(128):
                logsum[j] = T.log2(logsum[j]) + lse_max[j]
            for k in T.serial(num_split):
                for i in T.Parallel(dim):
                    po[i] = part[by, k, i]
                for j in T.Parallel(128):
                    scale[j] = T.exp2(lse[k, j] - logsum[j])
                for i in T.Parallel(dim):
                    acc[i] += po[i] * scale[i]
            for i in T.Parallel(dim):
                out[by, i] = acc[i]

    return combine


def combine_expected(glse: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    w = torch.softmax(glse.double() * torch.log(torch.tensor(2.0, dtype=torch.float64)), -1)
    return (w[:, :, None] * part.double()).sum(1)


def row_max_program(rows, cols, accumulate):
    """The maximum over the rows of a (rows, 128) tile into a 128-vector laid out by a
    (128, cols) loop first; with `accumulate`, into the running maximum (clear=False)."""

    @T.prim_func
    def row_max(A: T.Tensor((rows, 128), "float32"), B: T.Tensor((128, cols), "float32"),
                M: T.Tensor((128,), "float32"), C: T.Tensor((128, cols), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((rows, 128), "float32")
            m = T.alloc_fragment((128,), "float32")
            c = T.alloc_fragment((128, cols), "float32")
            T.copy(B, c)
            for i in T.Parallel(128):
                m[i] = -1.0
            T.copy(A, a)
            T.reduce_max(a, m, dim=0, clear=not accumulate)
            for i, j in T.Parallel(128, cols):
                c[i, j] = c[i, j] * m[i]
            T.copy(m, M)
            T.copy(c, C)

    return row_max


def scalar_of_reduction_program(M, N, threads):
    """Per row: the maximum of |X| over a row that fewer threads than the block's hold (N
    elements in vectors of 4), read outside the T.Parallel loops (so every thread holds
    it) to scale the row and written out by one thread."""

    @T.prim_func
    def scale_rows(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=threads) as bx:
            x = T.alloc_fragment((N,), "float32")
            amax = T.alloc_fragment((1,), "float32")
            T.copy(X[bx, :], x)
            T.reduce_absmax(x, amax, dim=0)
            s = T.max(amax[0], 1e-4)
            for j in T.Parallel(N):
                Y[bx, j] = x[j] / s
            S[bx] = s

    return scale_rows


def split_store_program(BS, D, K, split, threads=128):
    """C = A @ B in a (BS, D) accumulator, stored in `split` slices of BS // split rows
    through a shared tile, each slice read as acc[i + s * (BS // split), j] in a loop over
    the whole tile masked to the slice (sparse MLA's backward writes dKV so). When the
    accumulator's layout puts rows i and i + s * (BS // split) in one thread (slices of 16
    rows of an mma accumulator), the loop runs with that layout and no exchange is needed;
    otherwise the rows cross through shared memory."""
    rows = BS // split

    @T.prim_func
    def split_store(A: T.Tensor((BS, K), "float16"), B: T.Tensor((K, D), "float16"), C: T.Tensor((BS, D), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_shared((BS, K), "float16")
            b = T.alloc_shared((K, D), "float16")
            acc = T.alloc_fragment((BS, D), "float32")
            part = T.alloc_shared((rows, D), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, acc, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
            for s in range(split):
                for i, j in T.Parallel(BS, D):
                    if i < rows:
                        part[i, j] = acc[i + s * rows, j]
                for i, j in T.Parallel(rows, D):
                    C[s * rows + i, j] = part[i, j]

    return split_store
