"""Fuzz family of one-kernel split-K products whose last block adds the slices, as the
decode GEMM does (kernels/gemm.py, matmul_decode_program): each block of a (tile, K slice)
grid computes Cᵀ = Bᵀ Aᵀ over its slice on the tensor cores, writes the fp32 partial to a
workspace, counts itself with an acq_rel `T.atomic_add(..., return_prev=True)` by one
thread between two barriers, and the block that sees the count at splits - 1 sums the
partials in slice order (tile code under a branch on a shared flag, the same for the whole
block), stores C and puts the counter back to zero. Drawn: the target, the dtype, the tile
(64 or 128 rows of B, 16 or 32 of A), 1 to 4 slices with a shorter last one, B stored
(K, N) or as a weight (N, K), ragged extents, bias and relu in the epilogue. The counter
and the partials are in-out tensors, so both must come back as the reference leaves them
(counters zero, each slice's partial)."""
from __future__ import annotations

from .fuzz_gen import Kernel, _size


def gen_last_block_reduce(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_90a", "sm_90a", "sm_80"])
    dt = c.choice(["float16", "bfloat16"])
    bn, bm, bk = c.choice([64, 128]), c.choice([16, 32]), c.choice([32, 64])
    M = c.int(1, bm)
    N = _size(c, bn, 3)
    steps = c.int(2, 9)
    K = steps * bk - (c.int(1, bk - 1) if c.flip(0.5) else 0)
    want = c.int(1, 4)
    per = -(-steps // want)
    splits = -(-steps // per)                     # no slice empty
    weight = c.flip(0.5)                          # B stored (N, K)
    bias = c.flip(0.4)
    relu = c.flip(0.4)
    tiles = -(-N // bn)
    k.dtypes.update({dt, "float32"})
    A = k.tensor("A", [str(M), str(K)], [M, K], dt)
    B = (k.tensor("B", [str(N), str(K)], [N, K], dt) if weight else k.tensor("B", [str(K), str(N)], [K, N], dt))
    Bias = k.tensor("Bias", [str(N)], [N], dt) if bias else None
    P = k.tensor("Partial", [str(splits), str(N), str(M)], [splits, N, M], "float32", role="inout", values="zeros")
    Cnt = k.tensor("Count", [str(tiles)], [tiles], "int32", role="inout", values="zeros")
    C = k.tensor("C", [str(M), str(N)], [M, N], "float32", role="out")
    k.header = f"with T.Kernel({tiles}, {splits}, threads=128) as (bx, bz):"
    b = k.body
    As = k.alloc("shared", (bm, bk), dt, "A_s")
    Bs = k.alloc("shared", (bn, bk) if weight else (bk, bn), dt, "B_s")
    acc = k.alloc("fragment", (bn, bm), "float32", "Ct")
    flag = k.alloc("shared", (1,), "int32", "arrived")
    b.emit(f"T.clear({acc})")
    b.open(f"for kb in T.Pipelined(T.min({per}, {steps} - bz * {per}), num_stages={c.int(1, 3)}):")
    b.emit(f"T.copy({A}[0, (bz * {per} + kb) * {bk}], {As})")
    if weight:
        b.emit(f"T.copy({B}[bx * {bn}, (bz * {per} + kb) * {bk}], {Bs})")
    else:
        b.emit(f"T.copy({B}[(bz * {per} + kb) * {bk}, bx * {bn}], {Bs})")
    b.emit(f"T.gemm({Bs}, {As}, {acc}, transpose_A={not weight}, transpose_B=True)")
    b.close()
    b.emit(f"T.copy({acc}, {P}[bz, bx * {bn}:bx * {bn} + {bn}, 0:{bm}])")
    b.emit("T.sync_threads()")
    b.open("if T.get_thread_binding() == 0:")
    b.emit(f"{flag}[0] = T.atomic_add({Cnt}[bx], 1, memory_order=\"acq_rel\", return_prev=True)")
    b.close()
    b.emit("T.sync_threads()")
    b.open(f"if {flag}[0] == {splits - 1}:")
    b.emit(f"T.clear({acc})")
    b.open(f"for s in T.serial({splits}):")
    b.open(f"for i, j in T.Parallel({bn}, {bm}):")
    b.open(f"if j < {M} and bx * {bn} + i < {N}:")
    b.emit(f"{acc}[i, j] += {P}[s, bx * {bn} + i, j]")
    b.close(3)
    b.open(f"for i, j in T.Parallel({bn}, {bm}):")
    b.open(f"if j < {M} and bx * {bn} + i < {N}:")
    v = f"{acc}[i, j]" + (f" + T.cast({Bias}[bx * {bn} + i], \"float32\")" if bias else "")
    b.emit(f"{C}[j, bx * {bn} + i] = " + (f"T.max({v}, 0.0)" if relu else v))
    b.close(2)
    b.open("if T.get_thread_binding() == 0:")
    b.emit(f"{Cnt}[bx] = 0")
    b.close(2)
    k.features.update({"gen_last_block_reduce", f"lastblock_{k.target}",
                       "lastblock_one_slice" if splits == 1 else "lastblock_slices",
                       "lastblock_weight_nk" if weight else "lastblock_weight_kn"})
    if K % bk or N % bn:
        k.features.add("lastblock_ragged")
    if bias or relu:
        k.features.add("lastblock_epilogue")


FAMILIES = [(gen_last_block_reduce, 1)]
