"""Fuzz family of T.gemm_sp: C = A @ op(B) with A 2:4 sparse along K, given as its kept
elements A_sparse (M x K/2, or K/2 x M with transpose_A) and metadata E (M x K/F, or
K/F x M with transpose_E, F the bits of int8 / uint8 / int16 / int32 metadata), as
TileLang's sparse examples write it: float16 or bfloat16 operands, a float32 accumulator
(or float16 for float16 operands), 32..128 blocks under every policy of 1..8 warps, K
tiles of 32/64/128, B either way round, the kept elements from shared memory or copied into
a fragment first, T.Pipelined (1..3 stages) or T.serial, clear or clear_accum (each K tile
then added into a second accumulator), ragged M, N and K (whole
32-column steps of K: the masked copies pad A_sparse, E and B with zeros, and a group
of zero metadata is positions 0 and 1), an epilogue scaling C by a scalar, on sm_80 and
sm_90a (mma.sp either way). The metadata are drawn valid (fuzz.py's "sparse_meta":
positions in increasing order, a zero group now and then).
"""
from __future__ import annotations

from .fuzz_families_tc import _policies
from .fuzz_gen import Kernel

META = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32}


def gen_gemm_sp(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_80", "sm_90a"])
    dt = c.choice(["float16", "bfloat16"])
    acc = "float16" if dt == "float16" and c.flip(0.2) else "float32"
    et = c.choice(sorted(META))
    f = META[et]
    k.dtypes.update({dt, acc})
    bm, bn = c.choice([(32, 32), (64, 64), (64, 32), (32, 64), (128, 64), (16, 32)])
    bk = c.choice([32, 64, 128])
    threads = c.choice([t for t in (32, 64, 128, 256) if bm * bn // t <= 64])  # registers of two accumulators
    pols = _policies(bm, bn, threads // 32)
    if not pols:
        threads = 128
        pols = _policies(bm, bn, 4)
    policy = c.choice(pols)
    ta, tb = c.flip(0.3), c.flip(0.4)
    M = c.int(1, 2) * bm - (c.int(1, bm - 1) if c.flip(0.5) else 0)
    N = c.int(1, 2) * bn - (c.int(1, bn - 1) if c.flip(0.5) else 0)
    K = c.int(1, 3) * bk - (32 * c.int(1, bk // 32 - 1) if bk > 32 and c.flip(0.4) else 0)
    a_shape, e_shape = ([K // 2, M], [K // f, M]) if ta else ([M, K // 2], [M, K // f])
    k.tensor("A_sparse", [str(x) for x in a_shape], a_shape, dt)
    k.tensor("E", [str(x) for x in e_shape], e_shape, et, values="sparse_meta")
    b_shape = [N, K] if tb else [K, N]
    k.tensor("B", [str(x) for x in b_shape], b_shape, dt)
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", (bk // 2, bm) if ta else (bm, bk // 2), dt, "A_shared")
    Es = k.alloc("shared", (bk // f, bm) if ta else (bm, bk // f), et, "E_shared")
    Bs = k.alloc("shared", (bn, bk) if tb else (bk, bn), dt, "B_shared")
    Cf = k.alloc("fragment", (bm, bn), acc, "C_local")
    clear_accum = c.flip(0.2)
    Tf = k.alloc("fragment", (bm, bn), "float32", "C_total") if clear_accum else None
    b = k.body
    b.emit(f"T.clear({Tf or Cf})")
    trips = f"T.ceildiv({K}, {bk})"
    if c.flip(0.7):
        b.open(f"for ko in T.Pipelined({trips}, num_stages={c.int(1, 3)}):")
    else:
        b.open(f"for ko in T.serial({trips}):")
    if ta:
        b.emit(f"T.copy(A_sparse[ko * {bk // 2}, by * {bm}], {As})")
        b.emit(f"T.copy(E[ko * {bk // f}, by * {bm}], {Es})")
    else:
        b.emit(f"T.copy(A_sparse[by * {bm}, ko * {bk // 2}], {As})")
        b.emit(f"T.copy(E[by * {bm}, ko * {bk // f}], {Es})")
    b.emit(f"T.copy(B[bx * {bn}, ko * {bk}], {Bs})" if tb else f"T.copy(B[ko * {bk}, bx * {bn}], {Bs})")
    flags = ", clear_accum=True" if clear_accum else ""
    a_op = As
    if c.flip(0.25):  # the kept elements from registers (gemm_sp_rs)
        a_op = k.alloc("fragment", (bk // 2, bm) if ta else (bm, bk // 2), dt, "A_frag")
        b.emit(f"T.copy({As}, {a_op})")
        k.features.add("gemm_sp_a_registers")
    b.emit(f"T.gemm_sp({a_op}, {Es}, {Bs}, {Cf}, transpose_A={ta}, transpose_E={ta}, transpose_B={tb}, "
           f"policy=T.GemmWarpPolicy.{policy}{flags})")
    if Tf:
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{Tf}[i, j] += {Cf}[i, j]")
        b.close()
        k.features.add("gemm_sp_clear_accum")
    b.close()
    out = Tf or Cf
    if c.flip(0.3):
        alpha = k.scalar("alpha", "float32", 0.5)
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{out}[i, j] = {out}[i, j] * {alpha}")
        b.close()
        k.features.add("gemm_sp_epilogue")
    k.tensor("C", [str(M), str(N)], [M, N], "float32", role="out")
    b.emit(f"T.copy({out}, C[by * {bm}, bx * {bn}])")
    k.features.add(f"gemm_sp_{dt}_{acc}_{et}_{k.target}_{policy}{'_tA' if ta else ''}{'_tB' if tb else ''}")


FAMILIES: list = [(gen_gemm_sp, 2)]
