"""Programs with named barriers whose id is computed at run time (TileLang's
`T.sync_threads(barrier_id, arrive_count)` with `barrier_id` an expression), shared by
cpu/test_barriers.py and gpu/test_barriers_gpu.py; each returns the prim_func, and
`expected` gives what Y must hold for input X."""
import torch

import tegula.language as T


def halves(N=256):
    """Each half of a block (128 threads) doubles its inputs into shared memory, waits at
    its own barrier (id 1 or 2, from the thread index) and reads them back reversed within
    the half."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((256,), "float32")
            base = bx * 256
            s[tx] = T.if_then_else(base + tx < N, X[base + tx], 0.0) * 2
            T.sync_threads(tx // 128 + 1, 128)
            if base + tx < N:
                Y[base + tx] = s[tx // 128 * 128 + 127 - tx % 128]

    return main


def per_block(N, threads=128):
    """A tile program whose barrier id comes from the block index (bx % 2 + 1), for the
    whole block: Y is X doubled and reversed within each block's tile."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, threads), threads=threads) as bx:
            s = T.alloc_shared((threads,), "float32")
            for i in T.Parallel(threads):
                s[i] = X[bx * threads + i] * 2
            T.sync_threads(bx % 2 + 1)
            for i in T.Parallel(threads):
                Y[bx * threads + i] = s[threads - 1 - i]

    return main


def expected(X, tile):
    """X doubled, reversed within each tile of `tile` elements (zeros past the end)."""
    n = X.shape[0]
    pad = (-n) % tile
    x = X.double()
    if pad:
        x = torch.cat([x, x.new_zeros(pad)])
    return (x.view(-1, tile).flip(1) * 2).reshape(-1)[:n]
