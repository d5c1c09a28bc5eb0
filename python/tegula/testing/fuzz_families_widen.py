"""Fuzz family of kernels lowered on more threads than they declare
(src/transform/widen_threads.h): one warpgroup (threads=128) whose gemm accumulator and
epilogue tiles take more than 224 registers a thread, so that on sm_90a the engine lowers
it on two warpgroups. An epilogue in T.Parallel reads the accumulator with a row vector
from a reduction. (A program that reads its thread index keeps its threads, which the
reference cannot run: tests/python/cpu/test_widen_threads.py covers it.) Ragged M, N and K."""
from __future__ import annotations

from .fuzz_families_tc import _ragged
from .fuzz_gen import Kernel


def gen_widened_gemm(k: Kernel) -> None:
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    k.dtypes.update({dt, "float32"})
    bm, bn = c.choice([(128, 256), (256, 128)])
    bk = c.choice([32, 64])
    M, N, K = _ragged(c, bm, 1), _ragged(c, bn, 1), _ragged(c, bk, 2)
    k.tensor("A", [str(M), str(K)], [M, K], dt)
    k.tensor("B", [str(K), str(N)], [K, N], dt)
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads=128) as (bx, by):"
    As = k.alloc("shared", (bm, bk), dt, "A_shared")
    Bs = k.alloc("shared", (bk, bn), dt, "B_shared")
    Cf = k.alloc("fragment", (bm, bn), "float32", "C_local")
    rows = k.alloc("fragment", (bm,), "float32", "row_max")
    b = k.body
    b.emit(f"T.clear({Cf})")
    b.open(f"for ko in T.Pipelined(T.ceildiv({K}, {bk}), num_stages={c.int(1, 2)}):")
    b.emit(f"T.copy(A[by * {bm}, ko * {bk}], {As})")
    b.emit(f"T.copy(B[ko * {bk}, bx * {bn}], {Bs})")
    b.emit(f"T.gemm({As}, {Bs}, {Cf})")
    b.close()
    b.emit(f"T.reduce_max({Cf}, {rows}, dim=1)")
    b.open(f"for i, j in T.Parallel({bm}, {bn}):")
    b.emit(f"{Cf}[i, j] = {Cf}[i, j] - {rows}[i] * 0.5")
    b.close()
    k.tensor("C", [str(M), str(N)], [M, N], "float32", role="out")
    b.emit(f"T.copy({Cf}, C[by * {bm}, bx * {bn}])")
    k.features.add(f"widen_{k.target}_{bm}x{bn}")


FAMILIES: list = [(gen_widened_gemm, 1)]
