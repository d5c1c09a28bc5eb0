"""Fuzz family of 16-bit registers written as the two halves of one 32-bit word, the code a
weight dequantizer writes (kernels/dequant_gemm.py) and pack_casts stores as the word
itself: h[i, 2 q + e] = T.reinterpret(T.cast(x >> 16 e, "uint16"), half) for the two
e of one x. Drawn: float16 or bfloat16, the target, the word as loaded or through a
mask-and-XOR (an int4 code's magic, both halves at once), `& 0xffff` around a half or not,
and what reads the halves: stored as they are (random bits: NaN, infinities, subnormals
and negative zero among them), after an element-wise subtract, or as the A operand of a
T.gemm in registers against a shared tile (the dequantized weights times X)."""
from __future__ import annotations

from .fuzz_gen import Kernel, _size

# A 16-bit float whose ulp is 1, and that plus 8: an int4 code OR-ed into its mantissa and
# the second subtracted is the code as a signed integer, -8..7.
MAGIC = {"float16": 0x6400, "bfloat16": 0x4300}
BASE = {"float16": 1032.0, "bfloat16": 136.0}


def _half(k: Kernel, word: str, e: str, half: str) -> str:
    """The 16-bit value of `half` in bits 16 e .. 16 e + 15 of `word` (e a loop variable)."""
    bits = f"T.shift_right({word}, 16 * ({e}))"
    if k.c.flip(0.5):
        bits = f"({bits} & 0xFFFF)"
        k.features.add("halves_masked")
    return f"T.reinterpret(T.cast({bits}, \"uint16\"), \"{half}\")"


def _word(k: Kernel, load: str, half: str) -> str:
    if k.c.flip(0.5):
        k.features.add("halves_magic")
        m = MAGIC[half]
        return f"(({load} & 0x000F000F) ^ {m | m << 16})"
    return load


def gen_halves(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_90a", "sm_80"])
    half = c.choice(["float16", "bfloat16"])
    form = c.choice(["store", "subtract", "gemm"])
    k.features.update({"gen_halves", f"halves_{form}", f"halves_{half}", f"halves_{k.target}"})
    k.dtypes.update({"int32", half, "float32"})
    b = k.body
    if form == "gemm":
        _gen_gemm(k, half)
        return
    tile, threads = c.choice([64, 128, 256]), c.choice([32, 64, 128])
    n = _size(c, tile, 3)
    W = k.tensor("W", [str(n)], [n], "int32", values="bits")
    O = k.tensor("O", [str(n), "2"], [n, 2], half, role="out")
    k.header = f"with T.Kernel(T.ceildiv({n}, {tile}), threads={threads}) as bx:"
    a = k.alloc("fragment", (tile,), "int32", "w")
    h = k.alloc("fragment", (tile, 2), half, "h")
    b.emit(f"T.copy({W}[bx * {tile}:bx * {tile} + {tile}], {a})")
    b.open(f"for i, e in T.Parallel({tile}, 2):")
    b.emit(f"{h}[i, e] = {_half(k, _word(k, f'{a}[i]', half), 'e', half)}")
    b.close()
    if form == "subtract":
        b.open(f"for i, e in T.Parallel({tile}, 2):")
        b.emit(f"{h}[i, e] = {h}[i, e] - T.cast({c.choice([1032.0, 136.0, 0.5])}, \"{half}\")")
        b.close()
    b.open(f"for i, e in T.Parallel({tile}, 2):")
    b.open(f"if bx * {tile} + i < {n}:")
    b.emit(f"{O}[bx * {tile} + i, e] = {h}[i, e]")
    b.close(2)


def _gen_gemm(k: Kernel, half: str) -> None:
    """Y (N, M) = H X^T, H (N, K) the halves of Q's words (two codes a word, 16 bits apart)
    less the magic's base (small integers: exact products), X (M, K) from global."""
    c = k.c
    b = k.body
    bn = 64
    bm, bk = c.choice([8, 16, 32]), c.choice([32, 64])
    N, M = _size(c, bn, 2), c.int(1, bm)
    Q = k.tensor("Q", [str(N), str(bk // 2)], [N, bk // 2], "int32", values="bits")
    X = k.tensor("X", [str(M), str(bk)], [M, bk], half, values="ints")
    Y = k.tensor("Y", [str(N), str(M)], [N, M], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), threads=128) as bx:"
    Qs = k.alloc("shared", (bn, bk // 2), "int32", "Q_s")
    Xs = k.alloc("shared", (bm, bk), half, "X_s")
    h = k.alloc("fragment", (bn, bk), half, "h")
    acc = k.alloc("fragment", (bn, bm), "float32", "acc")
    b.emit(f"T.copy({Q}[bx * {bn}, 0], {Qs})")
    b.emit(f"T.copy({X}[0, 0], {Xs})")
    b.open(f"for i, j in T.Parallel({bn}, {bk}):")
    word = _word(k, f"{Qs}[i, j // 2]", half)
    if "halves_magic" not in k.features:   # random bits would make NaN products: the magic's always
        m = MAGIC[half]
        word = f"(({Qs}[i, j // 2] & 0x000F000F) ^ {m | m << 16})"
    b.emit(f"{h}[i, j] = {_half(k, word, 'j % 2', half)}")
    b.close()
    b.open(f"for i, j in T.Parallel({bn}, {bk}):")
    b.emit(f"{h}[i, j] = {h}[i, j] - T.cast({BASE[half]}, \"{half}\")")
    b.close()
    b.emit(f"T.gemm({h}, {Xs}, {acc}, transpose_B=True, clear_accum=True)")
    b.emit(f"T.copy({acc}, {Y}[bx * {bn}, 0])")


FAMILIES: list = [(gen_halves, 2)]
