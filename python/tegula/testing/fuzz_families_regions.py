"""Fuzz family of T.gemm on regions of shared buffers, as TileLang's DeepSeek sparse MLA
writes it (T.gemm(Q_shared[:, :D], ...) then the tail Q_shared[:, D:]): each K block of
A (and of B) is loaded once into a tile `bk` wide and multiplied as two regions split at
a multiple of 16 columns, into one accumulator. B is N x K (transpose_B, its regions
along columns) or K x N (its regions along rows); the tile widths give plain, swizzled
and panelled shared layouts (96 to 256 columns), so mma.sync reads the regions through
ldmatrix and, on sm_90a where the regions start where a descriptor can, wgmma through
its panels. Ragged M, N and K; T.Pipelined or T.serial."""
from __future__ import annotations

from .fuzz_families_tc import _policies, _ragged
from .fuzz_gen import Kernel


def gen_gemm_regions(k: Kernel) -> None:
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    k.dtypes.update({dt, "float32"})
    threads = c.choice([128, 256])
    bm, bn = c.choice([(64, 64), (128, 64), (64, 128), (64, 32)])
    bk = c.choice([64, 96, 128, 256])
    split = 16 * c.int(1, bk // 16 - 1)
    tb = c.flip(0.6)
    pols = _policies(bm, bn, threads // 32)
    if not pols:
        threads = 128
        pols = _policies(bm, bn, 4)
    policy = c.choice(pols)
    M, N, K = _ragged(c, bm, 2), _ragged(c, bn, 2), _ragged(c, bk, 2)
    k.tensor("A", [str(M), str(K)], [M, K], dt)
    if tb:
        k.tensor("B", [str(N), str(K)], [N, K], dt)
    else:
        k.tensor("B", [str(K), str(N)], [K, N], dt)
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", (bm, bk), dt, "A_shared")
    Bs = k.alloc("shared", (bn, bk) if tb else (bk, bn), dt, "B_shared")
    Cf = k.alloc("fragment", (bm, bn), "float32", "C_local")
    b = k.body
    b.emit(f"T.clear({Cf})")
    trips = f"T.ceildiv({K}, {bk})"
    if c.flip(0.7):
        b.open(f"for ko in T.Pipelined({trips}, num_stages={c.int(1, 2)}):")
    else:
        b.open(f"for ko in T.serial({trips}):")
    b.emit(f"T.copy(A[by * {bm}, ko * {bk}], {As})")
    b.emit(f"T.copy(B[bx * {bn}, ko * {bk}], {Bs})" if tb else f"T.copy(B[ko * {bk}, bx * {bn}], {Bs})")
    for lo, hi in ((0, split), (split, bk)):
        b_region = f"{Bs}[:, {lo}:{hi}]" if tb else f"{Bs}[{lo}:{hi}, :]"
        flags = ", transpose_B=True" if tb else ""
        b.emit(f"T.gemm({As}[:, {lo}:{hi}], {b_region}, {Cf}{flags}, policy=T.GemmWarpPolicy.{policy})")
    b.close()
    k.tensor("C", [str(M), str(N)], [M, N], "float32", role="out")
    b.emit(f"T.copy({Cf}, C[by * {bm}, bx * {bn}])")
    k.features.add(f"gemm_regions_{k.target}_{'tB' if tb else 'nB'}_{bk}_{split}")


FAMILIES: list = [(gen_gemm_regions, 1)]
