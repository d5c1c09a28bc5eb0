"""T.Persistent kernels: fewer blocks than tiles, each block walking the tile grid wave by
wave. Shared by cpu/test_persistent.py and gpu/test_persistent_gpu.py. Each returns
(prim_func, torch reference of the inputs)."""
import tegula.language as T


def persistent_gemm(M, N, K, blocks, group=8, bm=64, bn=64, bk=32):
    """C = A B with `blocks` blocks, the pipelined K loop inside the tile loop."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(blocks, threads=128) as block_id:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            c = T.alloc_fragment((bm, bn), "float32")
            for bx, by in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], blocks, block_id, group):
                T.clear(c)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                    T.copy(A[bx * bm, k * bk], A_s)
                    T.copy(B[k * bk, by * bn], B_s)
                    T.gemm(A_s, B_s, c)
                T.copy(c, C[bx * bm, by * bn])

    return main, lambda A, B: A.double() @ B.double()


def tile_owner(mt, nt, blocks, group):
    """Each tile records which block took it and how many tiles that block had taken
    before: what TileLang's order gives (tile w * blocks + b of the grouped numbering in
    wave w; a tile past the domain is skipped)."""

    @T.prim_func
    def main(O: T.Tensor((mt, nt), "int32")):
        with T.Kernel(blocks, threads=32) as b:
            w = T.alloc_var("int32")
            w = 0
            for i, j in T.Persistent([mt, nt], blocks, b, group):
                if T.get_thread_binding() == 0:
                    O[i, j] = w * 1000 + b
                w += 1

    def ref():
        import torch
        out = torch.full((mt, nt), -1, dtype=torch.int32)
        g = max(1, min(group, nt))
        groups = -(-nt // g)
        padded = groups * mt * g
        taken = [0] * blocks
        for wave in range(-(-padded // blocks)):
            for blk in range(blocks):
                lin = wave * blocks + blk
                if lin >= padded:
                    continue
                grp, rest = divmod(lin, mt * g)
                i, jj = divmod(rest, g)
                j = grp * g + jj
                if j < nt:
                    out[i, j] = taken[blk] * 1000 + blk
                    taken[blk] += 1
        return out

    return main, ref
