"""The families of programs tegula.testing.fuzz generates (valid ones here, invalid ones
in fuzz_invalid.py), built with the helpers of fuzz_gen.py. Each family writes one kernel
shape with many random choices; its docstring says which part of the language it covers.
"""
from __future__ import annotations

from .fuzz_program import Program
from .fuzz_gen import (Kernel, Tiling, Val, _grid, _gshape, _size, _threads, expr, float_expr, load_tile,
                       store_tile)

def gen_elementwise(k: Kernel) -> None:
    """Load, stage, compute, optionally reduce, store: the tile pipeline of most kernels."""
    c = k.c
    tiling = _grid(k, c, c.choice([2, 2, 1]))
    is_int = c.flip(0.2)
    din = "int32" if is_int else c.choice(["float32", "float16", "bfloat16"])
    k.dtypes.add(din)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, din)
    leaves = []
    xdt = din if (is_int or c.flip(0.5)) else "float32"
    xa = load_tile(k, tiling, X, c.choice(["fragment", "shared"]), xdt, "x_tile")
    if c.flip(0.4):  # stage once more: every scope pair
        scope = c.choice(["fragment", "shared"])
        xb = k.alloc(scope, tiling.shape, xdt, "x_stage")
        k.body.emit(f"T.copy({xa}, {xb})")
        k.features.add("copy_tile_tile")
        xa = xb
    leaves.append(Val(f"{xa}[{tiling.vars()}]", xdt, 2.0 if not is_int else 40, True))
    if c.flip(0.4):
        Y = k.tensor("Y", src_shape, shape, din, values="positive" if c.flip() else "signed")
        if c.flip(0.5):
            ya = load_tile(k, tiling, Y, c.choice(["fragment", "shared"]), xdt, "y_tile")
            leaves.append(Val(f"{ya}[{tiling.vars()}]", xdt, 2.0 if not is_int else 40, True))
        else:
            k.features.add("global_read_in_parallel")
            leaves.append(Val(f"{Y}[{tiling.gidx()}]", din, 2.0 if not is_int else 40, True))
    if c.flip(0.3):
        if is_int:
            leaves.append(Val(k.scalar("s", "int32", c.int(-5, 5)), "int32", 5, True))
        else:
            leaves.append(Val(k.scalar("alpha", "float32", c.choice([0.5, -1.25, 3.0])), "float32", 3.0))
    # A kernel constant: Python would fold `2 / 1` to the float 2.0.
    leaves.append(Val("T.int32(2)" if is_int else "0.5", "int32" if is_int else "float32", 2, True))
    dz = din if is_int else c.choice(["float32", "float32", din])
    k.dtypes.add(dz)
    z = k.alloc(c.choice(["fragment", "shared"]), tiling.shape, dz, "z")
    k.body.open(tiling.parallel())
    k.body.emit(f"{z}[{tiling.vars()}] = {expr(k, leaves, c.int(1, 4), is_int).text}")
    k.body.close()
    k.features.add("parallel_math")
    if c.flip(0.4):  # a second pass, in place
        k.body.open(tiling.parallel())
        zleaf = Val(f"{z}[{tiling.vars()}]", dz, 1e3 if not is_int else 2**12)
        e = expr(k, [zleaf] + leaves, c.int(1, 2), is_int)
        if not is_int and e.bound > 1e4:
            e = zleaf
        k.body.emit(f"{z}[{tiling.vars()}] = {e.text}")
        k.body.close()
    out_dtype = dz if c.flip(0.6) else ("float32" if not is_int or c.flip() else "int32")
    if c.flip(0.45):
        z = reduce_stage(k, tiling, z, dz, is_int)
    O = k.tensor("O", src_shape, shape, out_dtype, role="out")
    k.dtypes.add(out_dtype)
    store_tile(k, tiling, z, O)


def reduce_stage(k: Kernel, tiling: Tiling, z: str, dz: str, is_int: bool) -> str:
    """Reduce a tile (through a fragment), write and read the replicated result, store
    it to an output R; returns the fragment that now holds the tile."""
    c = k.c
    if not z.startswith("zf"):
        zf = k.alloc("fragment", tiling.shape, dz, "zf")
        k.body.emit(f"T.copy({z}, {zf})")
        z = zf
    rank = len(tiling.dims)
    dim = c.int(0, rank - 1)
    kept = [d for i, d in enumerate(tiling.dims) if i != dim]
    kind = c.choice(["sum", "max", "min", "abssum", "absmax"])
    acc_t = dz if is_int else c.choice(["float32", dz])
    k.dtypes.add(acc_t)
    rshape = tuple(d[0] for d in kept) or (1,)
    r = k.alloc("fragment", rshape, acc_t, "red")
    ridx = ", ".join(d[4] for d in kept) or "0"
    clear = c.flip(0.6)
    if not clear:
        how = c.choice(["fill", "clear", "parallel"])
        if how == "fill":
            k.body.emit(f"T.fill({r}, {c.choice(['1', '2', '-3']) if is_int else c.choice(['0.5', '-1.0', '2.0'])})")
        elif how == "clear":
            k.body.emit(f"T.clear({r})")
        else:
            var = ", ".join(d[4] for d in kept) if kept else "q"
            k.body.open(f"for {var} in T.Parallel({', '.join(str(s) for s in rshape)}):")
            k.body.emit(f"{r}[{var}] = {'1' if is_int else '0.25'}")
            k.body.close()
            k.features.add("write_replicated")
    dim_text = str(dim) if c.flip(0.7) else str(dim - rank)
    k.body.emit(f"T.reduce_{kind}({z}, {r}, dim={dim_text}{'' if clear else ', clear=False'})")
    k.features.add(f"reduce_{kind}_{'clear' if clear else 'accumulate'}_dim{dim}_of{rank}")
    chained = ""
    if len(kept) == 1 and c.flip(0.3):
        # Reduce the replicated result again (each of its elements counts once, however
        # many threads hold it), and fold that into the read-back below.
        r2 = k.alloc("fragment", (1,), acc_t, "red2")
        k.body.emit(f"T.reduce_{c.choice(['sum', 'max', 'abssum'])}({r}, {r2}, dim=0)")
        k.features.add("reduce_of_replicated")
        chained = f" + {r2}[0]"
    if c.flip(0.4):  # write the replicated fragment in a later loop
        var = ", ".join(d[4] for d in kept) if kept else "q"
        k.body.open(f"for {var} in T.Parallel({', '.join(str(s) for s in rshape)}):")
        k.body.emit(f"{r}[{var if kept else '0'}] = {r}[{var if kept else '0'}] * 2 + {'1' if is_int else '0.5'}")
        k.body.close()
        k.features.add("write_replicated")
    # read it back in the full tile
    k.body.open(tiling.parallel())
    op = c.choice(['-', '+'] if is_int else ['-', '+', '*'])
    k.body.emit(f"{z}[{tiling.vars()}] = {z}[{tiling.vars()}] {op} "
                f"({r}[{ridx}]{chained})")
    k.body.close()
    k.features.add("read_replicated")
    # the reduction itself goes out too
    if kept:
        kd = kept[0]
        other = tiling.dims[dim]
        # R holds one row of results per block along the reduced dimension.
        blocks = "bx" if len(tiling.dims) == 1 or other[3] == "0" else other[3].split(" * ")[0]
        nblk = max(1, -(-other[2] // other[0]))
        if other[3] == "0":
            blocks, nblk = "0", 1
        shape_src = [kd[1], str(nblk)] if dim == 1 else [str(nblk), kd[1]]
        shape = [kd[2], nblk] if dim == 1 else [nblk, kd[2]]
        R = k.tensor("R", shape_src, shape, acc_t, role="out")
        idx = f"{kd[3]} + {kd[4]}" if kd[3] != "0" else kd[4]
        k.body.open(f"for {kd[4]} in T.Parallel({kd[0]}):")
        k.body.open(f"if {idx} < {kd[1]}:")
        target = f"{R}[{idx}, {blocks}]" if dim == 1 else f"{R}[{blocks}, {idx}]"
        k.body.emit(f"{target} = {r}[{kd[4]}]")
        k.body.close(2)
    else:
        d = tiling.dims[0]
        nblk = max(1, -(-d[2] // d[0]))
        R = k.tensor("R", [str(nblk)], [nblk], acc_t, role="out")
        k.body.open("for q in T.Parallel(1):")
        k.body.emit(f"{R}[bx] = {r}[0]")
        k.body.close()
    return z


def gen_accumulate(k: Kernel) -> None:
    """A loop over K chunks carrying a fragment accumulation and a clear=False reduction."""
    c = k.c
    bm = c.choice([16, 8, 32, 64, 4])
    bk = c.choice([32, 16, 64, 8])
    while bm * bk > 4096:
        bk //= 2
    M, K = _size(c, bm), _size(c, bk, 4)
    din = c.choice(["float32", "float16", "bfloat16"])
    k.dtypes.add(din)
    k_src = str(K)
    if c.flip(0.2):
        k.module_lines.append('kk = T.dynamic("kk")')
        k_src = "kk"
        k.features.add("dynamic")
    X = k.tensor("X", [str(M), k_src], [M, K], din)
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={_threads(c)}) as bx:"
    xs = k.alloc("shared", (bm, bk), din, "x_shared")
    acc = k.alloc("fragment", (bm, bk), "float32", "acc")
    use_reduce = c.flip(0.5)
    if use_reduce:
        xf = k.alloc("fragment", (bm, bk), "float32", "x_frag")
        rs = k.alloc("fragment", (bm,), "float32", "row_acc")
        k.body.emit(f"T.clear({rs})")
    use_var = c.flip(0.25)
    if use_var:
        v = k.fresh("count")
        k.body.emit(f"{v} = T.alloc_var(\"int32\")")
        k.body.emit(f"{v} = 0")
        k.features.add("alloc_var")
    # A second tile, loaded in the loop and read only after everything reads the first:
    # a pipelined loop waits for each where it is first read (pipeline_loops, by consumer).
    second = c.flip(0.4)
    if second:
        Y = k.tensor("Y", [str(M), k_src], [M, K], din)
        ys = k.alloc("shared", (bm, bk), din, "y_shared")
    if c.flip():
        k.body.emit(f"T.clear({acc})")
    else:
        k.body.emit(f"T.fill({acc}, 0.5)")
    trips = f"T.ceildiv({k_src}, {bk})"
    if c.flip(0.2) and k_src != "kk":
        trips = k.scalar("trips", "int32", -(-K // bk))
    loop = c.choice(["pipelined", "serial", "range", "pipelined"])
    if loop == "pipelined":
        stages = c.int(2, 3)
        k.body.open(f"for ko in T.Pipelined({trips}, num_stages={stages}):")
    elif loop == "serial":
        k.body.open(f"for ko in T.serial({trips}):")
    else:
        k.body.open(f"for ko in range({trips}):")
    k.features.add("loop_" + loop)
    k.body.emit(f"T.copy(X[bx * {bm}, ko * {bk}], {xs})")
    leaf = Val(f"{xs}[i, j]", din, 1.0, True)
    e = float_expr(k, [leaf, Val("0.5", "float32", 0.5, True)], c.int(1, 3))
    k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
    if c.flip(0.25):
        k.body.emit(f"{acc}[i, j] = T.max({acc}[i, j], {e.text})")
    else:
        k.body.emit(f"{acc}[i, j] += {e.text}")
    k.body.close()
    if use_reduce:
        k.body.emit(f"T.copy({xs}, {xf})")
        k.body.emit(f"T.reduce_{c.choice(['sum', 'abssum'])}({xf}, {rs}, dim=1, clear=False)")
        k.features.add("reduce_accumulate_in_loop")
    if use_var:
        k.body.emit(f"{v} += 1")
    if second:
        k.body.emit(f"T.copy({Y}[bx * {bm}, ko * {bk}], {ys})")
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] += {ys}[i, j] * 0.5")
        k.body.close()
        k.features.add("copy_read_later")
    k.body.close()
    O = k.tensor("O", [str(M), str(bk)], [M, bk], "float32", role="out")
    k.dtypes.add("float32")
    if use_var:
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] = {acc}[i, j] + {v}")
        k.body.close()
    k.body.emit(f"T.copy({acc}, {O}[bx * {bm}, 0])")
    if use_reduce:
        R = k.tensor("R", [str(M)], [M], "float32", role="out")
        k.body.open(f"for i in T.Parallel({bm}):")
        k.body.open(f"if bx * {bm} + i < {M}:")
        k.body.emit(f"{R}[bx * {bm} + i] = {rs}[i]")
        k.body.close(2)


def gen_serial_var(k: Kernel) -> None:
    """Per-thread code: a T.alloc_var accumulator and a T.alloc_local array in serial
    loops, an `if` on block values, one thread storing."""
    c = k.c
    M, N = c.int(1, 6), c.int(1, 24)
    is_int = c.flip(0.3)
    dt = "int32" if is_int else "float32"
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    Y = k.tensor("Y", [str(M)], [M], dt, role="out")
    k.header = f"with T.Kernel({M}, threads={c.choice([32, 64, 128])}) as bx:"
    acc = k.fresh("acc")
    if c.flip():
        k.body.emit(f"{acc} = T.alloc_var(\"{dt}\", init={'1' if is_int else '0.5'})")
    else:
        k.body.emit(f"{acc} = T.alloc_var(\"{dt}\")")
        k.body.emit(f"{acc} = {'1' if is_int else '0.5'}")
    k.features.add("alloc_var")
    L = c.int(1, min(N, 8))
    loc = k.alloc("local", (L,), dt, "vals")
    k.body.open(f"for t in T.serial({L}):")
    k.body.emit(f"{loc}[t] = X[bx, t] * {'3' if is_int else '1.5'}")
    k.body.close()
    leaves = [Val("X[bx, kk]", dt, 40 if is_int else 1, True)]
    e = expr(k, leaves, c.int(1, 3), is_int)
    k.body.open(f"for kk in {c.choice(['T.serial', 'range'])}({N}):")
    k.body.emit(f"{acc} += {e.text}")
    k.body.close()
    k.body.open(f"for t in {c.choice(['T.unroll', 'T.serial'])}({L}):")
    k.body.emit(f"{acc} = {acc} + {loc}[t]")
    k.body.close()
    # Every thread stores the same value (the reference has no thread index to pick one).
    k.body.open("if bx % 2 == 0:")
    k.body.emit(f"Y[bx] = {acc}")
    k.body.close()
    k.body.open("else:")
    k.body.emit(f"Y[bx] = -{acc}")
    k.body.close()


def gen_atomic(k: Kernel) -> None:
    """T.atomic_add of elements (column sums across blocks) or of whole tiles."""
    c = k.c
    tiling = _grid(k, c, 2)
    dt = c.choice(["float32", "int32"])
    k.dtypes.add(dt)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, dt, values="ints")
    n_dim = tiling.dims[1]
    if c.flip(0.5):
        S = k.tensor("S", [n_dim[1]], [n_dim[2]], dt, role="inout", values=c.choice(["zeros", "ints"]))
        k.body.open(tiling.parallel())
        k.body.open(f"if {tiling.guard()}:")
        scale = c.choice(["", " * 2", " + 1"])
        col = f"{n_dim[3]} + j" if n_dim[3] != "0" else "j"
        k.body.emit(f"T.atomic_add({S}[{col}], X[{tiling.gidx()}]{scale})")
        k.body.close(2)
        k.features.add("atomic_element")
    else:
        # A float16 destination too: a tile's adds run as packed pairs where aligned (the
        # values stay small integers, exact in half).
        sdt = "float16" if dt == "float32" and c.flip(0.5) else dt
        k.dtypes.add(sdt)
        S = k.tensor("S", src_shape, shape, sdt, role="inout", values=c.choice(["zeros", "ints"]))
        xf = load_tile(k, tiling, X, "fragment", dt, "x_tile")
        for _ in range(c.int(1, 2)):
            k.body.emit(f"T.atomic_add({tiling.corner(S)}, {xf})")
        k.features.add("atomic_tile" if sdt == dt else "atomic_tile_half")


def gen_gemm(k: Kernel) -> None:
    """A pipelined T.gemm with an epilogue."""
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    bm, bn, bk = c.choice([64, 32, 128]), c.choice([64, 32, 128]), c.choice([32, 16, 64])
    ta, tb = c.flip(0.25), c.flip(0.3)
    a_regs = not ta and c.flip(0.25)
    # Policies split the warps into whole 16x8 mma tiles: FullRow puts every warp along M
    # (and is what a register A needs), FullCol along N.
    threads = c.choice([t for t in (128, 256, 64) if not a_regs or bm % (16 * t // 32) == 0])
    warps = threads // 32
    policies = ["T.GemmWarpPolicy.Square"] if not a_regs else []
    if bm % (16 * warps) == 0:
        policies.append("T.GemmWarpPolicy.FullRow")
    if bn % (8 * warps) == 0 and not a_regs:
        policies.append("T.GemmWarpPolicy.FullCol")
    M, N, K = _size(c, bm, 2), _size(c, bn, 2), _size(c, bk, 3)
    a_shape, a_tile = ((K, M), (bk, bm)) if ta else ((M, K), (bm, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if tb else ((K, N), (bk, bn))
    A = k.tensor("A", [str(s) for s in a_shape], a_shape, dt)
    B = k.tensor("B", [str(s) for s in b_shape], b_shape, dt)
    out_dt = c.choice(["float32", dt])
    k.dtypes.update({"float32", out_dt})
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", a_tile, dt, "A_shared")
    Bs = k.alloc("shared", b_tile, dt, "B_shared")
    Cf = k.alloc("fragment", (bm, bn), "float32", "C_local")
    if a_regs:
        Af = k.alloc("fragment", (bm, bk), dt, "A_local")
    b_regs = c.flip(0.2)  # TileLang's gemm_sr / gemm_rr: the op stages B through shared memory
    if b_regs:
        Bf = k.alloc("fragment", b_tile, dt, "B_local")
    policy = c.choice(policies)
    # clear_accum clears at every k-step, so it is only right when K is one step.
    clear_in_gemm = K <= bk and c.flip(0.5)
    if not clear_in_gemm:
        k.body.emit(f"T.clear({Cf})")
    stages = c.int(1, 3)
    k.body.open(f"for ko in T.Pipelined(T.ceildiv({K}, {bk}), num_stages={stages}):")
    k.body.emit(f"T.copy(A[ko * {bk}, by * {bm}], {As})" if ta else f"T.copy(A[by * {bm}, ko * {bk}], {As})")
    k.body.emit(f"T.copy(B[bx * {bn}, ko * {bk}], {Bs})" if tb else f"T.copy(B[ko * {bk}, bx * {bn}], {Bs})")
    flags = (", transpose_A=True" if ta else "") + (", transpose_B=True" if tb else "")
    flags += ", clear_accum=True" if clear_in_gemm else ""
    if a_regs:
        k.body.emit(f"T.copy({As}, {Af})")
        k.features.add("gemm_a_registers")
    if b_regs:
        if c.flip(0.5):
            k.body.emit(f"T.copy({Bs}, {Bf})")
        else:  # computed in registers, as TileLang's kda backward computes its B
            k.body.open(f"for i, j in T.Parallel({b_tile[0]}, {b_tile[1]}):")
            k.body.emit(f"{Bf}[i, j] = {Bs}[i, j] * 2")
            k.body.close()
        k.features.add("gemm_b_registers")
    k.body.emit(f"T.gemm({Af if a_regs else As}, {Bf if b_regs else Bs}, {Cf}{flags}, policy={policy})")
    k.body.close()
    k.features.add(f"gemm_{k.target}_{'tA' if ta else ''}{'tB' if tb else ''}")
    if c.flip(0.5):
        leaves = [Val(f"{Cf}[i, j]", "float32", 60.0)]
        if c.flip(0.3):
            leaves.append(Val(k.scalar("alpha", "float32", 0.75), "float32", 1.0))
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{Cf}[i, j] = {c.choice(['T.max', 'T.min'])}({Cf}[i, j], 0) * {leaves[-1].text}"
                    if len(leaves) > 1 else f"{Cf}[i, j] = T.max({Cf}[i, j], 0)")
        k.body.close()
    C = k.tensor("C", [str(M), str(N)], [M, N], out_dt, role="out")
    k.body.emit(f"T.copy({Cf}, {C}[by * {bm}, bx * {bn}])")


FAMILIES = [(gen_elementwise, 5), (gen_accumulate, 2), (gen_serial_var, 1), (gen_atomic, 1), (gen_gemm, 2)]


# The other modules of families, each with its FAMILIES list of (family, weight), in the
# order their families join the table (a seed's program depends on it).
FAMILY_MODULES = (
    "fuzz_families_control",   # control flow and scopes
    "fuzz_families_loops",     # T.Persistent, the tile scheduler's while loop, break / continue
    "fuzz_families_tc",        # tensor-core programs
    "fuzz_families_names",     # names the generated CUDA must rename
    "fuzz_families_guards",    # tile code under thread guards
    "fuzz_families_layouts",   # global tensors in a T.Layout's order, fragments read across layouts
    "fuzz_families_reducers",  # reducers
    "fuzz_families_bounds",    # T.Parallel over bounded run-time extents
    "fuzz_families_views",     # views and T.im2col
    "fuzz_families_fp8",       # gemms of 8-bit floats
    "fuzz_families_grid",      # barriers between blocks
    "fuzz_families_casts",     # conversions between float types
    "fuzz_families_regions",   # gemms on regions of shared buffers
    "fuzz_families_tilelang",  # T.transpose, T.annotate_safe_value, T.let, T.isfinite
    "fuzz_families_scan",      # T.cumsum
    "fuzz_families_widen",     # one warpgroup over its registers, lowered on two
    "fuzz_families_barriers",  # producer and consumer sides ordered by explicit mbarriers
    "fuzz_families_flat",      # fragments indexed by a loop's row-major position (composable index)
    "fuzz_families_warp",      # warp shuffles, against an oracle in torch
    "fuzz_families_iket",      # programs instrumented with tegula.tools.cuda.iket's marks and ranges
    "fuzz_families_ws",        # warp-group scopes (T.ws) and run-time clear_accum
    "fuzz_families_sparse",    # T.gemm_sp: 2:4 sparse A
    "fuzz_families_wide",      # rows too wide for the registers (roll_loops)
    "fuzz_families_stages",    # T.Pipelined schedules with computations in several stages
    "fuzz_families_persistent",  # persistent GEMMs, warp specialised across their tiles
    "fuzz_families_lastblock",   # one-kernel split-K, the last block of a tile adding the slices
    "fuzz_families_halves",      # registers written as the two halves of one 32-bit word
    "fuzz_families_async",       # copies the program groups and waits for (T.ptx_commit_group)
    "fuzz_families_rows",        # wide rows over blocks of threads that are not a power of two
)


def all_families() -> list:
    """(family, weight) of this module and of every module in FAMILY_MODULES."""
    import importlib

    table = list(FAMILIES)
    for name in FAMILY_MODULES:
        table += importlib.import_module(f".{name}", __package__).FAMILIES
    return table


def gen_valid(c) -> Program:
    table = [f for f, w in all_families() for _ in range(w)]
    family = c.choice(table)
    k = Kernel(c, c.choice(["sm_80", "sm_90a"]))
    family(k)
    k.features.add(family.__name__)
    return k.finish(family.__name__.replace("gen_", "fuzz_"))


# ---- invalid programs ----

def all_invalid() -> dict:
    """Every family of invalid programs: kind -> family (fuzz_invalid.py, and the tile code
    under undividable thread guards of fuzz_families_guards.py, the barriers allocated in a
    branch of fuzz_families_barriers.py, the warp groups of fuzz_families_ws.py that are not
    one range, and the waits for copy groups of fuzz_families_async.py that count nothing)."""
    from . import fuzz_families_async, fuzz_families_barriers, fuzz_families_guards, fuzz_families_ws
    from .fuzz_invalid import INVALID

    return {**INVALID, **fuzz_families_guards.INVALID, **fuzz_families_barriers.INVALID, **fuzz_families_ws.INVALID,
            **fuzz_families_async.INVALID}


def gen_invalid(c) -> Program:
    INVALID = all_invalid()
    kind = c.choice(sorted(INVALID))
    k = Kernel(c, c.choice(["sm_80", "sm_90a"]))
    INVALID[kind](k)
    return k.finish("fuzz_" + kind, error_kind=kind)

