"""Persistent GEMMs: a T.Persistent loop over the output tiles with a T.Pipelined loop
inside, which on sm_90a is warp specialised across the tiles (the producer loads the next
tile's stages while the consumers store this one). Shared by cpu/test_persistent_ws.py
and gpu/test_persistent_ws_gpu.py; each builder returns (prim_func, torch reference of
the inputs, in float32)."""
import torch

import tegula.language as T


def persistent_gemm(M, N, K, blocks, block_M=64, block_N=64, block_K=32, stages=2, threads=128, staged=False,
                    second=False, touch_a=False, dtype="float16", pad=0):
    """C = A @ B tile by tile, `blocks` blocks walking the tiles wave by wave.
    staged: the epilogue goes through a shared tile (the engine stores it swizzled), its
    rows padded by `pad` elements (then stored plainly). second: a computation after
    the gemm reads the staged B tile (acc += B_s[0, :] / 4, each k step), so the stage is
    released after it. touch_a: the epilogue also writes the staged A tile, which the
    producer may be refilling for the next tile (the engine must not run ahead then)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(blocks, threads=threads) as bid:
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_s = T.alloc_shared((block_M, block_N + pad), "float32")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            for ty, tx in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)], blocks, bid):
                T.clear(acc)
                for kb in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                    T.copy(A[ty * block_M, kb * block_K], A_s)
                    T.copy(B[kb * block_K, tx * block_N], B_s)
                    T.gemm(A_s, B_s, acc)
                    if second:
                        for i, j in T.Parallel(block_M, block_N):
                            acc[i, j] = acc[i, j] + T.cast(B_s[0, j], "float32") * 0.25
                if touch_a:
                    T.clear(A_s)
                if staged:
                    T.copy(acc, C_s[0:block_M, 0:block_N])
                    T.copy(C_s[0:block_M, 0:block_N], C[ty * block_M, tx * block_N])
                else:
                    T.copy(acc, C[ty * block_M, tx * block_N])

    def reference(a, b):
        out = a.float() @ b.float()
        if second:
            steps = -(-K // block_K)
            rows = torch.zeros(N)
            for kb in range(steps):
                rows += b[kb * block_K].float() if kb * block_K < K else 0
            out = out + rows * 0.25
        return out

    return main, reference


def inputs(M, N, K, seed, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g).to(dtype), torch.randn(K, N, generator=g).to(dtype)
