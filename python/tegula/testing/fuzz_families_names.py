"""A family of fuzz programs whose every user name is one the generated CUDA may not print
as it is: a C++ keyword (`do`, `int`, `auto`), a CUDA built-in (`threadIdx`), a name of the
device library the printed code calls (`cast`, `max`, `Vec`), one the printer emits itself
(`tx`, `tegula_smem`, `wgmma_ss_n64_f16`) or a reserved identifier (`__x`, `_Tile`). The
tensor and scalar parameters, the block index, the tiles, a local array, an alloc_var, the
loop variables and a let all draw from that pool, so the printer's renaming
(src/codegen/cuda_names.h) is checked by compiling, simulating and comparing them.
"""
from __future__ import annotations

from .fuzz_gen import Kernel, Tiling, Val, _size, _threads, expr, load_tile, store_tile

# Python identifiers (not Python keywords, nor the module's own T, tegula, make, TARGET).
NAMES = [
    # C++ keywords
    "do", "int", "auto", "new", "this", "case", "switch", "default", "float", "double", "char", "short", "long",
    "unsigned", "signed", "void", "const", "static", "struct", "union", "template", "typename", "namespace",
    "using", "operator", "register", "volatile", "extern", "inline", "goto", "delete", "friend", "virtual",
    "typedef", "sizeof", "decltype", "nullptr", "bool", "xor", "bitand", "compl", "export", "explicit",
    # CUDA built-ins and header names
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "half", "half2", "float2", "int4", "dim3",
    "uint32_t", "size_t", "NULL",
    # the device library
    "cast", "max", "min", "exp", "Vec", "print", "floordiv", "floormod", "infinity", "half_t", "bfloat16_t",
    "atomic_add", "barrier_sync", "tegula", "TEGULA_DEVICE",
    # the printer's own names
    "tx", "bx", "tegula_smem", "tegula_by", "tegula_tmap_0", "tegula_lin", "wgmma_ss_n64_f16", "vld_0",
    # reserved identifiers
    "__x", "__global__", "__syncthreads", "_Tile", "_M",
]
NAMES.remove("tegula")  # the generated module imports tegula


def _draw_names(c, n: int) -> list:
    """n distinct names of the pool."""
    pool = list(NAMES)
    return [pool.pop(c.int(0, len(pool) - 1)) for _ in range(n)]


def gen_names(k: Kernel) -> None:
    """A 1-D tile program (load, a per-thread local array filled in a serial loop, an
    alloc_var summing it, elementwise math through a let, store) in pool names only."""
    c = k.c
    xn, sn, on, bxn, tile, z, local, acc, lv, j, let = _draw_names(c, 11)
    bn = c.choice([32, 64, 16, 128])
    n = _size(c, bn, 3)
    is_int = c.flip(0.3)
    dt = "int32" if is_int else c.choice(["float32", "float32", "float16"])
    k.dtypes.add(dt)
    X = k.tensor(xn, [str(n)], [n], dt)
    scalar_dt = "int32" if is_int else "float32"
    s = k.scalar(sn, scalar_dt, c.int(-4, 4) if is_int else c.choice([0.5, -1.25]))
    k.header = f"with T.Kernel(T.ceildiv({n}, {bn}), threads={_threads(c)}) as {bxn}:"
    tiling = Tiling([(bn, str(n), n, f"{bxn} * {bn}", j)])
    xt = load_tile(k, tiling, X, c.choice(["fragment", "shared"]), dt, tile)
    L = c.int(1, 4)
    loc = k.alloc("local", (L,), scalar_dt, local)
    k.body.open(f"for {lv} in T.serial({L}):")
    k.body.emit(f"{loc}[{lv}] = {lv} + 1" if is_int else f"{loc}[{lv}] = T.cast({lv}, \"float32\") * 0.25")
    k.body.close()
    k.body.emit(f"{acc} = T.alloc_var(\"{scalar_dt}\", init={'0' if is_int else '0.0'})")
    k.body.open(f"for {lv} in T.serial({L}):")
    k.body.emit(f"{acc} = {acc} + {loc}[{lv}]")
    k.body.close()
    k.features.update({"alloc_var", "names"})
    zt = k.alloc(c.choice(["fragment", "shared"]), (bn,), dt, z)
    k.body.open(tiling.parallel())
    k.body.emit(f"{let} = {xt}[{j}] * {'2' if is_int else '2.0'}")  # a let: it reads a buffer
    leaves = [Val(let, dt, 80 if is_int else 2.0, True), Val(f"{loc}[{j} % {L}]", scalar_dt, 4, True),
              Val(s, scalar_dt, 4, True), Val(acc, scalar_dt, 10, True)]
    k.body.emit(f"{zt}[{j}] = {expr(k, leaves, c.int(1, 3), is_int).text}")
    k.body.close()
    O = k.tensor(on, [str(n)], [n], dt if is_int else "float32", role="out")
    k.dtypes.add("float32")
    store_tile(k, tiling, zt, O)


FAMILIES = [(gen_names, 1)]
