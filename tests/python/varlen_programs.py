"""Varlen kernels in the shape TileLang's varlen attention examples take: per sequence b,
offsets read from cu_seqlens into lets (`start = cu[b]`), a T.Pipelined loop over the
sequence's key tiles whose index is itself a let (`kk = k + first`), and a wgmma gemm. On
sm_90a the loop is warp specialised (bulk tensor copies) through those lets. Shared by
cpu/test_varlen.py and gpu/test_varlen_gpu.py. Each returns (prim_func, torch reference)."""
import torch

import tegula.language as T


def varlen_tile_scores(lens, D, block=64, first=0):
    """S[b-th sequence's query tile bx] = sum over its key tiles t >= first of
    Q_tile K_t^T (block x block), a tile's rows read past the sequence's end as the
    copy engine reads them (the next sequence's rows, zeros past the tensor)."""
    total = sum(lens)
    B = len(lens)
    tiles = max((n + block - 1) // block for n in lens)

    @T.prim_func
    def main(Q: T.Tensor((total, D), "float16"), K: T.Tensor((total, D), "float16"),
             cu: T.Tensor((B + 1,), "int32"), S: T.Tensor((B, tiles, block, block), "float32")):
        with T.Kernel(tiles, B, threads=128) as (bx, b):
            Q_s = T.alloc_shared((block, D), "float16")
            K_s = T.alloc_shared((block, D), "float16")
            acc = T.alloc_fragment((block, block), "float32")
            start = cu[b]
            n = cu[b + 1] - start
            T.copy(Q[start + bx * block: start + (bx + 1) * block, :], Q_s)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(n, block) - first, num_stages=2):
                kk = k + first
                T.copy(K[start + kk * block: start + (kk + 1) * block, :], K_s)
                T.gemm(Q_s, K_s, acc, transpose_B=True)
            T.copy(acc, S[b, bx, :, :])

    def ref(Q, K, cu):
        pad = torch.zeros(block * (tiles + 1), D, dtype=torch.float64)
        Qp, Kp = torch.cat([Q.double(), pad]), torch.cat([K.double(), pad])
        out = torch.zeros(B, tiles, block, block, dtype=torch.float64)
        for b in range(B):
            s, n = int(cu[b]), int(cu[b + 1] - cu[b])
            for bx in range(tiles):
                q = Qp[s + bx * block: s + (bx + 1) * block]
                for t in range(first, (n + block - 1) // block):
                    out[b, bx] += q @ Kp[s + t * block: s + (t + 1) * block].T
        return out

    return main, ref


def cu_seqlens(lens):
    return torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)


def paged_scores(B, pages, page, D, total_pages, block=64, reverse=False):
    """S[b] = sum over the sequence's pages p of Q[b] KV[table[b, p] * page : +page]^T, the
    page's rows found through a block table in a let of the pipelined loop's body (a paged
    KV cache, as TileLang's paged MLA decode reads it); reverse walks the pages backwards."""

    @T.prim_func
    def main(Q: T.Tensor((B, block, D), "float16"), KV: T.Tensor((total_pages * page, D), "float16"),
             table: T.Tensor((B, pages), "int32"), S: T.Tensor((B, block, page), "float32")):
        with T.Kernel(B, threads=128) as b:
            Q_s = T.alloc_shared((block, D), "float16")
            K_s = T.alloc_shared((page, D), "float16")
            acc = T.alloc_fragment((block, page), "float32")
            T.copy(Q[b, :, :], Q_s)
            T.clear(acc)
            for kr in T.Pipelined(pages, num_stages=2):
                k = pages - 1 - kr if reverse else kr
                start = table[b, k] * page
                T.copy(KV[start: start + page, :], K_s)
                T.gemm(Q_s, K_s, acc, transpose_B=True)
            T.copy(acc, S[b, :, :])

    def ref(Q, KV, table):
        out = torch.zeros(B, block, page, dtype=torch.float64)
        for b in range(B):
            for p in range(pages):
                t = int(table[b, p])
                out[b] += Q[b].double() @ KV[t * page: (t + 1) * page].double().T
        return out

    return main, ref


def paged_values(B, pages, D, total_pages, page=64, stages=3):
    """O[b] = sum over the sequence's pages p of half(Q[b] KV_p^T) KV_p, KV_p the page the
    block table names, the result staged through shared memory on its way out. At D = 384
    and three stages the buffers side by side need 248 KiB: the warp-specialised kernel
    fits in 227 only with the output tile in the bytes of the K/V stages, which the
    consumers are done with when the loop ends (plan_storage's live ranges)."""

    @T.prim_func
    def main(Q: T.Tensor((B, 64, D), "float16"), KV: T.Tensor((total_pages * page, D), "float16"),
             table: T.Tensor((B, pages), "int32"), O: T.Tensor((B, 64, D), "float16")):
        with T.Kernel(B, threads=256) as b:
            Q_s = T.alloc_shared((64, D), "float16")
            K_s = T.alloc_shared((page, D), "float16")
            S_s = T.alloc_shared((64, page), "float16")
            O_s = T.alloc_shared((64, D), "float16")
            acc_s = T.alloc_fragment((64, page), "float32")
            acc_o = T.alloc_fragment((64, D), "float32")
            T.copy(Q[b, :, :], Q_s)
            T.clear(acc_o)
            for p in T.Pipelined(pages, num_stages=stages):
                start = table[b, p] * page
                T.copy(KV[start: start + page, :], K_s)
                T.clear(acc_s)
                T.gemm(Q_s, K_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
                T.copy(acc_s, S_s)
                T.gemm(S_s, K_s, acc_o, policy=T.GemmWarpPolicy.FullCol)
            T.copy(acc_o, O_s)
            T.copy(O_s, O[b, :, :])

    def ref(Q, KV, table):
        out = torch.zeros(B, 64, D, dtype=torch.float64)
        for b in range(B):
            for p in range(pages):
                t = int(table[b, p])
                kv = KV[t * page: (t + 1) * page].double()
                out[b] += (Q[b].double() @ kv.T).half().double() @ kv
        return out

    return main, ref
