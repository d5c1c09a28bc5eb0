"""Fuzz family of persistent GEMMs: a T.Persistent loop over the output tiles with a
T.Pipelined loop inside, which on sm_90a is warp specialised across the tiles (the producer
loading the next tile's stages while the consumers finish this one; plan_bulk_copies.cc,
pipeline_ws.cc, warp_specialize.cc). Drawn: the block count (one block for every tile,
some blocks with no tile, or one block walking them all, so that the stages' phases wrap
many times), 1 to 4 stages, ragged extents, the epilogue straight from the accumulator or
through a shared tile (swizzled by the engine, or with padded rows), and sometimes a second computation in the loop that reads
a staged buffer (its stage is then released after it rather than a gemm later)."""
from __future__ import annotations

from .fuzz_gen import Kernel, _size


def gen_persistent_gemm(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_90a", "sm_90a", "sm_80"])
    dt = c.choice(["float16", "bfloat16"])
    threads = c.choice([128, 256])
    bm, bn, bk = 64 * threads // 128, c.choice([64, 128]), c.choice([32, 64])
    M, N, K = _size(c, bm, 3), _size(c, bn, 2), _size(c, bk, 3)
    if k.target == "sm_90a" and c.flip(0.75):
        # Rows of a multiple of 16 bytes, which bulk tensor copies need (the others keep
        # the cp.async pipeline).
        N, K = -(-N // 8) * 8, -(-K // 8) * 8
    tiles = -(-M // bm) * -(-N // bn)
    blocks = c.choice(["one", "some", "all", "over"])
    count = {"one": 1, "some": max(1, tiles // 2), "all": tiles, "over": tiles + c.int(1, 3)}[blocks]
    stages = c.int(1, 4)
    staged = c.flip(0.5)
    second = c.flip(0.3)
    k.dtypes.update({dt, "float32"})
    A = k.tensor("A", [str(M), str(K)], [M, K], dt)
    B = k.tensor("B", [str(K), str(N)], [K, N], dt)
    C = k.tensor("C", [str(M), str(N)], [M, N], "float32" if not staged else dt, role="out")
    k.header = f"with T.Kernel({count}, threads={threads}) as bid:"
    b = k.body
    As = k.alloc("shared", (bm, bk), dt, "A_s")
    Bs = k.alloc("shared", (bk, bn), dt, "B_s")
    acc = k.alloc("fragment", (bm, bn), "float32", "acc")
    pad = c.choice([0, 8])  # rows of a power of two of 16-byte chunks are stored swizzled
    Cs = k.alloc("shared", (bm, bn + pad), dt, "C_s") if staged else None
    b.open(f"for ty, tx in T.Persistent([T.ceildiv({M}, {bm}), T.ceildiv({N}, {bn})], {count}, bid, "
           f"group_size={c.choice([1, 2, 8])}):")
    b.emit(f"T.clear({acc})")
    b.open(f"for kb in T.Pipelined(T.ceildiv({K}, {bk}), num_stages={stages}):")
    b.emit(f"T.copy({A}[ty * {bm}, kb * {bk}], {As})")
    b.emit(f"T.copy({B}[kb * {bk}, tx * {bn}], {Bs})")
    b.emit(f"T.gemm({As}, {Bs}, {acc})")
    if second:
        # Reads the staged B tile after the gemm: the stage is released after this.
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{acc}[i, j] = {acc}[i, j] + T.cast({Bs}[0, j], \"float32\") * 0.25")
        b.close()
    b.close()
    if staged:
        b.emit(f"T.copy({acc}, {Cs}[0:{bm}, 0:{bn}])")
        b.emit(f"T.copy({Cs}[0:{bm}, 0:{bn}], {C}[ty * {bm}, tx * {bn}])")
    else:
        b.emit(f"T.copy({acc}, {C}[ty * {bm}, tx * {bn}])")
    b.close()
    k.features.update({"gen_persistent_gemm", f"persistent_{k.target}", f"persistent_blocks_{blocks}",
                       "persistent_direct_epilogue" if not staged else
                       "persistent_staged_swizzled" if pad == 0 else "persistent_staged_padded"})
    if second:
        k.features.add("persistent_second_compute")
    if stages == 1:
        k.features.add("persistent_one_stage")
    if k.target == "sm_90a" and N % 8 == 0 and K % 8 == 0:
        k.features.add("persistent_bulk_copies")


FAMILIES = [(gen_persistent_gemm, 1)]
