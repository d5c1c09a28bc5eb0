"""Fuzz family of T.gemm on 8-bit floats: C = A Bᵀ with A (M x K) and B (N x K) of
float8_e4m3fn / float8_e5m2 (sometimes one of each) into float32, as TileLang's fp8
examples write it: 64..128 blocks, K tiles of 32/64/128 (32-, 64- and 128-byte rows), 4
or 8 warps under every policy, ragged sizes, clear or clear_accum, T.Pipelined or
T.serial, sometimes their "2xAcc" (each K block's product added into a second
accumulator), a per-column scale and relu, a float32 or bfloat16 output. The target is
sm_89 (mma.sync m16n8k32) or sm_90a (wgmma m64nNk32 where the tile fits a warpgroup).

Also T.gemm on 8-bit integers (gen_gemm_int): C = A Bᵀ with A and B of int8 / uint8 (any
mix) into int32, the same K-major form and block shapes, on sm_80 (mma.sync m16n8k32 .s32)
or sm_90a (wgmma m64nNk32 .s32 where the warpgroup tile's N is one the integer instruction
has); an int32 output compared exactly, or a float32 one dequantised by per-column scales."""
from __future__ import annotations

from .fuzz_families_tc import _policies, _ragged
from .fuzz_gen import Kernel

FLOAT8 = ("float8_e4m3fn", "float8_e5m2")


def k_loop(k: Kernel, K, bm, bn, bk, As, Bs, Cf, Tf, policy, clear_accum, two_feature) -> None:
    """Both families' loop over K (pipelined three times in four): the A and B tiles copied
    in, C = A Bᵀ (cleared each step with clear_accum), and with Tf each step's product
    added into it (feature two_feature)."""
    c, b = k.c, k.body
    trips = f"T.ceildiv({K}, {bk})"
    if c.flip(0.75):
        b.open(f"for ko in T.Pipelined({trips}, num_stages={c.int(1, 3)}):")
    else:
        b.open(f"for ko in T.serial({trips}):")
    b.emit(f"T.copy(A[by * {bm}, ko * {bk}], {As})")
    b.emit(f"T.copy(B[bx * {bn}, ko * {bk}], {Bs})")
    flags = ", clear_accum=True" if clear_accum else ""
    b.emit(f"T.gemm({As}, {Bs}, {Cf}, transpose_B=True{flags}, policy=T.GemmWarpPolicy.{policy})")
    if Tf:
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{Tf}[i, j] += {Cf}[i, j]")
        b.close()
        k.features.add(two_feature)
    b.close()


def gen_gemm_fp8(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_89", "sm_90a"])
    at = c.choice(FLOAT8)
    bt = [t for t in FLOAT8 if t != at][0] if c.flip(0.3) else at
    k.dtypes.update({at, bt, "float32"})
    threads = c.choice([128, 256])
    bm, bn = c.choice([(64, 64), (128, 64), (64, 128), (32, 64), (64, 32)])
    bk = c.choice([32, 64, 128])
    pols = _policies(bm, bn, threads // 32)
    if not pols:
        threads = 128
        pols = _policies(bm, bn, 4)
    policy = c.choice(pols)
    M, N, K = _ragged(c, bm, 2), _ragged(c, bn, 2), _ragged(c, bk, 3)
    k.tensor("A", [str(M), str(K)], [M, K], at)
    k.tensor("B", [str(N), str(K)], [N, K], bt)
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", (bm, bk), at, "A_shared")
    Bs = k.alloc("shared", (bn, bk), bt, "B_shared")
    Cf = k.alloc("fragment", (bm, bn), "float32", "C_local")
    twice = c.flip(0.3)
    Tf = k.alloc("fragment", (bm, bn), "float32", "C_total") if twice else None
    b = k.body
    clear_accum = twice or c.flip(0.2)
    if not clear_accum:
        b.emit(f"T.clear({Cf})")
    if Tf:
        b.emit(f"T.clear({Tf})")
    k_loop(k, K, bm, bn, bk, As, Bs, Cf, Tf, policy, clear_accum, "fp8_two_accumulators")
    if not Tf and clear_accum:
        k.features.add("fp8_clear_accum_every_step")  # C is the last K tile's product
    out = Tf or Cf
    if c.flip(0.3):  # per-column scales, as dequantising epilogues apply them
        k.tensor("Scale", [str(N)], [N], "float32", values="positive")
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{out}[i, j] = T.max({out}[i, j], 0.0) * T.if_then_else(bx * {bn} + j < {N}, Scale[bx * {bn} + j], 1.0)")
        b.close()
        k.features.add("fp8_scaled_relu")
    out_dt = c.choice(["float32", "bfloat16"])
    if out_dt == "bfloat16":
        k.dtypes.add(out_dt)
    k.tensor("C", [str(M), str(N)], [M, N], out_dt, role="out")
    b.emit(f"T.copy({out}, C[by * {bm}, bx * {bn}])")
    k.features.add(f"fp8_{at}_{bt}_{k.target}_{policy}_{threads // 32}warps_{bm}x{bn}x{bk}")


INT8 = ("int8", "uint8")


def gen_gemm_int(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_80", "sm_90a"])
    at, bt = c.choice(INT8), c.choice(INT8)
    k.dtypes.add("int32")  # exact: integer sums (the inputs' range keeps them far from wrapping)
    threads = c.choice([128, 256])
    bm, bn = c.choice([(64, 64), (128, 64), (64, 128), (32, 64), (64, 32), (64, 48)])
    bk = c.choice([32, 64, 128])
    pols = _policies(bm, bn, threads // 32)
    if not pols:
        threads = 128
        pols = _policies(bm, bn, 4)
    policy = c.choice(pols)
    M, N, K = _ragged(c, bm, 2), _ragged(c, bn, 2), _ragged(c, bk, 3)
    k.tensor("A", [str(M), str(K)], [M, K], at)
    k.tensor("B", [str(N), str(K)], [N, K], bt)
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", (bm, bk), at, "A_shared")
    Bs = k.alloc("shared", (bn, bk), bt, "B_shared")
    Cf = k.alloc("fragment", (bm, bn), "int32", "C_local")
    b = k.body
    clear_accum = c.flip(0.2)
    Tf = k.alloc("fragment", (bm, bn), "int32", "C_total") if clear_accum else None
    b.emit(f"T.clear({Tf or Cf})")
    k_loop(k, K, bm, bn, bk, As, Bs, Cf, Tf, policy, clear_accum, "int8_gemm_two_accumulators")
    out = Tf or Cf
    if c.flip(0.3):  # dequantised by per-column scales into float32
        k.dtypes.add("float32")
        k.tensor("Scale", [str(N)], [N], "float32", values="positive")
        k.tensor("C", [str(M), str(N)], [M, N], "float32", role="out")
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"C[by * {bm} + i, bx * {bn} + j] = T.cast({out}[i, j], \"float32\") * "
               f"T.if_then_else(bx * {bn} + j < {N}, Scale[bx * {bn} + j], 1.0)")
        b.close()
        k.features.add("int8_gemm_dequantised")
    else:
        k.tensor("C", [str(M), str(N)], [M, N], "int32", role="out")
        b.emit(f"T.copy({out}, C[by * {bm}, bx * {bn}])")
    k.features.add(f"int8_gemm_{at}_{bt}_{k.target}_{policy}_{threads // 32}warps_{bm}x{bn}x{bk}")


FAMILIES: list = [(gen_gemm_fp8, 2), (gen_gemm_int, 1)]
