"""Programs that read a fragment at a scalar index outside every T.Parallel loop (a block
mask tested in a serial or pipelined loop): TileLang holds such a fragment whole in every
thread. One definition shared by the CPU tests (reference and simulator) and the GPU
tests. Each case is (kernel factory, input maker, torch reference in float64)."""
import torch

import tegula
import tegula.language as T


def masked_tiles(M, N, NB, blk=32, threads=128, pipelined=False, target="auto"):
    """Y[r, tile k] = X[r, tile k] * (Mask[r, k] + 1) where Mask[r, k] >= 0, else 0: the
    mask row copied into a fragment, then read element by element in a loop over tiles."""

    @tegula.jit(out_idx=[-1], target=target)
    def kernel(M, N, NB, blk, threads, pipelined):
        @T.prim_func
        def main(Mask: T.Tensor((M, NB), "int32"), X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
            with T.Kernel(M, threads=threads) as by:
                mf = T.alloc_fragment((NB,), "int32")
                s = T.alloc_shared((blk,), "float32")
                T.copy(Mask[by, :], mf)
                for k in T.Pipelined(NB, num_stages=2) if pipelined else T.serial(NB):
                    a = mf[k]
                    if a >= 0:
                        T.copy(X[by, k * blk], s)
                        for j in T.Parallel(blk):
                            s[j] = s[j] * T.cast(mf[k] + 1, "float32")
                    else:
                        T.clear(s)
                    T.copy(s, Y[by, k * blk])

        return main

    return kernel(M, N, NB, blk, threads, pipelined)


def masked_tiles_ref(Mask, X, blk=32):
    m = Mask.repeat_interleave(blk, 1)[:, : X.shape[1]].double()
    return torch.where(m >= 0, X.double() * (m + 1), torch.zeros_like(X, dtype=torch.float64))


def scaled_count(M, NB, threads=128, target="auto"):
    """S[r] = sum over k of W[r, k] * 2 where W[r, k] > 0: the fragment written by a loop
    (every thread's copy), then summed at scalar indices in a serial loop."""

    @tegula.jit(out_idx=[-1], target=target)
    def kernel(M, NB, threads):
        @T.prim_func
        def main(W: T.Tensor((M, NB), "float32"), S: T.Tensor((M,), "float32")):
            with T.Kernel(M, threads=threads) as by:
                wf = T.alloc_fragment((NB,), "float32")
                acc = T.alloc_var("float32")
                for i in T.Parallel(NB):
                    wf[i] = W[by, i] * 2.0
                acc = 0.0
                for k in T.serial(NB):
                    if wf[k] > 0:
                        acc += wf[k]
                S[by] = acc

        return main

    return kernel(M, NB, threads)


def scaled_count_ref(W):
    w = W.double() * 2
    return torch.where(w > 0, w, torch.zeros_like(w)).sum(1)


def _mask_inputs(M, N, NB):
    def make(gen):
        return [torch.randint(-1, 3, (M, NB), generator=gen, dtype=torch.int32), torch.randn(M, N, generator=gen)]
    return make


CASES = {
    # name: (factory(target), inputs(gen), reference(*inputs))
    "mask_aligned": (lambda t: masked_tiles(4, 7 * 32, 7, target=t), _mask_inputs(4, 7 * 32, 7), masked_tiles_ref),
    "mask_ragged": (lambda t: masked_tiles(3, 5 * 32 - 9, 5, threads=64, target=t), _mask_inputs(3, 5 * 32 - 9, 5),
                    masked_tiles_ref),
    "mask_pipelined": (lambda t: masked_tiles(4, 6 * 32, 6, pipelined=True, target=t), _mask_inputs(4, 6 * 32, 6),
                       masked_tiles_ref),
    "count_aligned": (lambda t: scaled_count(4, 16, target=t), lambda g: [torch.randn(4, 16, generator=g)],
                      scaled_count_ref),
    "count_ragged": (lambda t: scaled_count(3, 13, threads=32, target=t), lambda g: [torch.randn(3, 13, generator=g)],
                     scaled_count_ref),
}


def gathered_rows(M, N, bm=32, bn=32, target="auto"):
    """B[tile (by, i)] = A[Rows[by, i] : + bm, 0 : bn]: a row index read from a fragment
    becomes the start of a tile copy inside a pipelined loop (a TMA copy on sm_90a)."""
    NS = N // bn

    @tegula.jit(out_idx=[1], target=target)
    def kernel(M, N, NS, bm, bn):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"), Rows: T.Tensor((M // bm, NS), "int32")):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
                sa = T.alloc_shared((bm, bn), "float16")
                rf = T.alloc_fragment((NS,), "int32")
                T.copy(Rows[by, :], rf)
                for i in T.Pipelined(NS, num_stages=2):
                    r = rf[i]
                    if r >= 0:
                        T.copy(A[r, 0], sa)
                        T.copy(sa, B[by * bm, i * bn])

        return main

    return kernel(M, N, NS, bm, bn)


def gathered_rows_ref(A, Rows, bm=32, bn=32):
    out = torch.zeros(A.shape, dtype=torch.float64)
    for by in range(Rows.shape[0]):
        for i in range(Rows.shape[1]):
            r = int(Rows[by, i])
            out[by * bm:(by + 1) * bm, i * bn:(i + 1) * bn] = A[r:r + bm, 0:bn].double()
    return out


def _gather_inputs(M, N, bm=32, bn=32):
    def make(gen):
        A = torch.randn(M, N, generator=gen).half()
        return [A, torch.randint(0, M - bm + 1, (M // bm, N // bn), generator=gen, dtype=torch.int32)]
    return make


CASES["gather_rows"] = (lambda t: gathered_rows(128, 128, target=t), _gather_inputs(128, 128), gathered_rows_ref)
