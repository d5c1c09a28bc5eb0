"""More families of valid programs for tegula.testing.fuzz: control flow, scopes, grids and casts.
Each family is a function of a fuzz_gen.Kernel, listed in FAMILIES with its weight
(fuzz_families.all_families() adds them to the others).

The shapes are those kernel authors write by hand around the tile ops: masked tails and
guarded loads (`if bx * bm + i < M:`, `T.if_then_else(in_bound, X[...], 0)`), branches
on block indices and scalar arguments inside and around T.Parallel loops and around tile
ops, serial and unrolled loops around and inside T.Parallel loops, per-thread
T.alloc_local arrays, shared tiles written in one order and read in another (transposes,
reversed rows, hand-written tree reductions, double buffering by `ko % 2`: the barriers
are the compiler's), reductions of shared tiles into shared or fragment results (directly,
the op staging them, or through a fragment; every kind, T.reduce too), 3-D grids and 2-D
dynamic shapes, scalar arguments in index arithmetic (run-time column offsets of copies,
T.Pipelined ones too), chains of copies that change dtype
between scopes, whole or in parts at offsets, T.fill/T.clear of every scope and of
sub-regions, loops over part of a tile, swizzled shared tiles, histograms and tiles added
with T.atomic_add into shared memory, and several loops writing disjoint parts of one
output. (T.Persistent, T.PersistentTileScheduler's `while` loops and break / continue are
in fuzz_families_loops.py.)

The rules of fuzz_gen.py hold: every element read was written, T.Parallel iterations are
independent, comparisons look only at exact values (inputs, integers, indices).
"""
from __future__ import annotations

from .fuzz_gen import Kernel, Tiling, Val, _grid, _gshape, _size, _threads, expr, float_expr, load_tile, store_tile

_FLOATS = ["float32", "float16", "bfloat16"]


def _in_dtype(k: Kernel, ints: float = 0.2) -> tuple[str, bool]:
    c = k.c
    is_int = c.flip(ints)
    dt = "int32" if is_int else c.choice(_FLOATS)
    k.dtypes.add(dt)
    return dt, is_int


def _bound(is_int: bool) -> float:
    return 40 if is_int else 2.0


def _zero(is_int: bool) -> str:
    return "0" if is_int else "0.0"


def gen_masked_tail(k: Kernel) -> None:
    """Hand-written masks: guarded global loads (`if`/`else` and T.if_then_else with a
    load on one or both sides), branches on loop variables, block indices and scalar
    arguments inside and around T.Parallel loops."""
    c = k.c
    tiling = _grid(k, c, c.choice([2, 2, 1]))
    dt, is_int = _in_dtype(k)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, dt)
    Y = k.tensor("Y", src_shape, shape, dt) if c.flip(0.5) else None
    zdt = dt if is_int else c.choice(["float32", dt])
    k.dtypes.add(zdt)
    z = k.alloc(c.choice(["fragment", "shared"]), tiling.shape, zdt, "z")
    v, g, gi = tiling.vars(), tiling.guard(), tiling.gidx()
    how = c.choice(["if_else", "select_zero", "select_two", "select_nested"])
    if how == "select_two" and Y is None:
        how = "select_nested"
    k.features.add("mask_" + how)
    k.body.open(tiling.parallel())
    if how == "if_else":
        k.body.open(f"if {g}:")
        k.body.emit(f"{z}[{v}] = {X}[{gi}]" + (f" * {Y}[{gi}]" if Y else ""))
        k.body.close()
        k.body.open("else:")
        k.body.emit(f"{z}[{v}] = {c.choice(['1', '-2']) if is_int else c.choice(['0.5', '-1.0'])}")
        k.body.close()
    elif how == "select_zero":
        k.body.emit(f"{z}[{v}] = T.if_then_else({g}, {X}[{gi}], {_zero(is_int)})")
    elif how == "select_two":
        # Both sides load; only the chosen one may be read (the other may be out of bounds).
        last = tiling.dims[-1]
        flip = f"{last[1]} - 1 - ({last[3]} + {last[4]})" if last[3] != "0" else f"{last[1]} - 1 - {last[4]}"
        rev = ", ".join([f"{d[3]} + {d[4]}" if d[3] != "0" else d[4] for d in tiling.dims[:-1]] + [flip])
        k.body.emit(f"{z}[{v}] = T.if_then_else({g}, T.if_then_else({X}[{gi}] > {_zero(is_int)}, "
                    f"{X}[{gi}], {Y}[{rev}]), {_zero(is_int)})")
        k.features.add("select_loads_both_sides")
    else:
        inner = c.choice([d for d in tiling.dims])
        half = max(1, inner[0] // 2)
        k.body.emit(f"{z}[{v}] = T.if_then_else({g}, T.if_then_else({inner[4]} < {half}, {X}[{gi}], "
                    f"-{X}[{gi}]), {_zero(is_int)})")
    k.body.close()
    # A second loop branching on a loop variable, a block index or a scalar argument.
    cond_kind = c.choice(["loop_var", "block", "scalar", "none"])
    if cond_kind != "none":
        k.features.add("branch_on_" + cond_kind)
        if cond_kind == "scalar":
            s = k.scalar("flag", "int32", c.int(-2, 2))
            cond = f"{s} > 0"
        elif cond_kind == "block":
            b = tiling.dims[0][3].split(" * ")[0] if tiling.dims[0][3] != "0" else "bx"
            cond = f"{b} % 2 == {c.int(0, 1)}"
        else:
            d = c.choice(list(tiling.dims))
            cond = f"{d[4]} {c.choice(['<', '>=', '=='])} {c.int(0, d[0] - 1)}"
        zl = Val(f"{z}[{v}]", zdt, _bound(is_int), True)
        outside = cond_kind != "loop_var" and c.flip(0.5)
        if outside:  # a uniform branch around the loops
            k.body.open(f"if {cond}:")
            k.features.add("if_around_parallel")
        k.body.open(tiling.parallel())
        if not outside:
            k.body.open(f"if {cond}:")
        k.body.emit(f"{z}[{v}] = {expr(k, [zl], c.int(1, 2), is_int).text}")
        if not outside:
            k.body.close()
            if c.flip(0.5):
                k.body.open("else:")
                k.body.emit(f"{z}[{v}] = {expr(k, [zl], 1, is_int).text}")
                k.body.close()
        k.body.close()
        if outside:
            k.body.close()
            if c.flip(0.5):
                k.body.open("else:")
                k.body.open(tiling.parallel())
                k.body.emit(f"{z}[{v}] = {zl.text} + {'3' if is_int else '0.25'}")
                k.body.close(2)
    if c.flip(0.25):
        _branch_around_tile_ops(k, tiling, z, zdt, X, Y)
    odt = zdt if c.flip(0.7) else ("float32" if not is_int else "int32")
    k.dtypes.add(odt)
    O = k.tensor("O", src_shape, shape, odt, role="out")
    store_tile(k, tiling, z, O)


def _branch_around_tile_ops(k: Kernel, tiling: Tiling, z: str, zdt: str, X: str, Y: str | None) -> None:
    """Tile ops under a branch on a block index: a staged copy from one input or the other,
    added into z; the shared tile each side fills is read after the branch."""
    c = k.c
    b = "bx" if tiling.dims[-1][3] != "0" or len(tiling.dims) == 1 else tiling.dims[0][3].split(" * ")[0]
    st = k.alloc(c.choice(["shared", "fragment"]), tiling.shape, zdt, "staged")
    k.body.open(f"if {b} % 2 == {c.int(0, 1)}:")
    k.body.emit(f"T.copy({tiling.corner(X)}, {st})")
    k.body.close()
    k.body.open("else:")
    if Y is not None and c.flip(0.5):
        k.body.emit(f"T.copy({tiling.corner(Y)}, {st})")
    else:
        k.body.emit(f"T.fill({st}, {'2' if zdt == 'int32' else '0.5'})")
    k.body.close()
    k.body.open(tiling.parallel())
    k.body.emit(f"{z}[{tiling.vars()}] = {z}[{tiling.vars()}] + {st}[{tiling.vars()}]")
    k.body.close()
    k.features.add("tile_ops_under_branch")


def gen_nested_loops(k: Kernel) -> None:
    """T.serial / T.unroll loops around T.Parallel loops (a running sum over k chunks),
    a serial k loop inside a T.Parallel body (a small matmul), and T.alloc_local arrays
    indexed by unrolled loop variables."""
    c = k.c
    bm = c.choice([8, 16, 4, 32])
    bk = c.choice([4, 8, 16])
    nk = c.int(1, 3)
    M = _size(c, bm)
    K = nk * bk
    dt = c.choice(["float32", "float16", "int32"])
    is_int = dt == "int32"
    k.dtypes.add(dt)
    acc_t = "int32" if is_int else "float32"
    k.dtypes.add(acc_t)
    X = k.tensor("X", [str(M), str(K)], [M, K], dt, values="ints" if is_int else "signed")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={_threads(c)}) as bx:"
    matmul, local = c.flip(0.6), c.flip(0.5)
    # Read at other indices than the loop's (xs[i, kk]): shared, as a kernel author writes it.
    xs = k.alloc("shared" if matmul or local else c.choice(["shared", "fragment"]), (bm, bk), dt, "x_tile")
    acc = k.alloc("fragment", (bm, bk), acc_t, "acc")
    k.body.emit(f"T.clear({acc})")
    outer = c.choice(["T.serial", "T.unroll", "range"])
    k.features.add("outer_" + outer.replace("T.", ""))
    k.body.open(f"for ko in {outer}({nk}):")
    k.body.emit(f"T.copy(X[bx * {bm}, ko * {bk}], {xs})")
    if c.flip(0.4):  # a loop nest inside the chunk loop
        reps = c.int(1, 3)
        k.body.open(f"for r in {c.choice(['T.serial', 'T.unroll'])}({reps}):")
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] += {xs}[i, j] * (r + 1)")
        k.body.close(2)
        k.features.add("loop_in_loop_parallel")
    else:
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] += {xs}[i, j] * (ko + 1)")
        k.body.close()
    k.body.close()
    O = k.tensor("O", [str(M), str(bk)], [M, bk], acc_t, role="out")
    k.body.emit(f"T.copy({acc}, O[bx * {bm}, 0])")
    # A matmul written as a serial loop inside T.Parallel (TileLang's naive GEMM body).
    if matmul:
        bn = c.choice([4, 8, 16])
        W = k.tensor("W", [str(bk), str(bn)], [bk, bn], dt, values="ints" if is_int else "signed")
        ws = k.alloc("shared", (bk, bn), dt, "w_tile")
        k.body.emit(f"T.copy(W, {ws})")
        prod = k.alloc(c.choice(["fragment", "shared"]), (bm, bn), acc_t, "prod")
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{prod}[i, j] = 0")
        k.body.open(f"for kk in {c.choice(['T.serial', 'range', 'T.unroll'])}({bk}):")
        k.body.emit(f"{prod}[i, j] += {xs}[i, kk] * {ws}[kk, j]")
        k.body.close(2)
        k.features.add("serial_in_parallel")
        P = k.tensor("P", [str(M), str(bn)], [M, bn], acc_t, role="out")
        store_tile(k, Tiling([(bm, str(M), M, f"bx * {bm}", "i"), (bn, str(bn), bn, "0", "j")]), prod, P)
    # Per-thread local arrays indexed by unrolled loop variables, one row per iteration.
    if local:
        L = c.int(2, min(bk, 8))
        loc = k.alloc("local", (L,), acc_t, "vals")
        R = k.tensor("R", [str(M)], [M], acc_t, role="out")
        k.body.open(f"for i in T.Parallel({bm}):")
        k.body.open(f"for t in T.unroll({L}):")
        k.body.emit(f"{loc}[t] = {xs}[i, t] * {'2' if is_int else '0.5'}")
        k.body.close()
        k.body.open(f"for t in T.unroll(1, {L}):")
        k.body.emit(f"{loc}[0] = {loc}[0] + {loc}[t]")
        k.body.close()
        k.body.open(f"if bx * {bm} + i < {M}:")
        k.body.emit(f"{R}[bx * {bm} + i] = {loc}[0]")
        k.body.close(2)
        k.features.add("local_in_parallel")


def gen_shared_reorder(k: Kernel) -> None:
    """A shared tile written in one order and read in another: transposes, reversed rows,
    rows shifted by one; reductions of shared tiles (directly and through a fragment) into
    a shared or fragment vector, cleared or accumulated."""
    c = k.c
    bm = c.choice([8, 16, 32, 4])
    bn = c.choice([8, 16, 32, 4])
    M, N = _size(c, bm), _size(c, bn)
    dt, is_int = _in_dtype(k, 0.25)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    k.header = (f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={_threads(c)}) "
                "as (bx, by):")
    tiling = Tiling([(bm, str(M), M, f"by * {bm}", "i"), (bn, str(N), N, f"bx * {bn}", "j")])
    s = load_tile(k, tiling, X, "shared", dt, "x_shared")
    kind = c.choice(["transpose", "reverse", "shift", "reduce"])
    k.features.add("shared_" + kind)
    if kind == "transpose":
        t = k.alloc(c.choice(["fragment", "shared"]), (bn, bm), dt, "xt")
        k.body.open(f"for j, i in T.Parallel({bn}, {bm}):")
        k.body.emit(f"{t}[j, i] = {s}[i, j]")
        k.body.close()
        O = k.tensor("O", [str(N), str(M)], [N, M], dt, role="out")
        store_tile(k, Tiling([(bn, str(N), N, f"bx * {bn}", "j"), (bm, str(M), M, f"by * {bm}", "i")]), t, O)
        return
    if kind in ("reverse", "shift"):
        # In place: the reads of the first loop finish before the writes of the second.
        t = k.alloc(c.choice(["fragment", "shared", "shared"]), (bm, bn), dt, "tmp")
        src = f"{s}[{bm - 1} - i, j]" if kind == "reverse" else f"{s}[i, (j + 1) % {bn}]"
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{t}[i, j] = {src}")
        k.body.close()
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{s}[i, j] = {s}[i, j] + {t}[i, j]")
        k.body.close()
        O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
        store_tile(k, tiling, s, O)
        return
    rdt = dt if is_int else "float32"
    k.dtypes.add(rdt)
    dim = c.int(0, 1)
    kinds = ["sum", "max", "min", "abssum", "absmax"] + (["bitand", "bitor", "bitxor"] if is_int else [])
    red_kind = c.choice(kinds)
    n_keep = bm if dim == 1 else bn
    # Either side in shared memory or a fragment: the op stages a shared side itself.
    r_scope = c.choice(["fragment", "shared"])
    r = k.alloc(r_scope, (n_keep,), rdt, "red")
    src = s
    if c.flip(0.3):
        src = k.alloc("fragment", (bm, bn), rdt, "x_frag")
        k.body.emit(f"T.copy({s}, {src})")
        k.features.add("reduce_of_copied_shared")
    else:
        k.features.add("reduce_of_shared")
    k.features.add(f"reduce_into_{r_scope}")
    clear = c.flip(0.7)
    if not clear:
        start = c.choice(["1", "-3", "7"]) if is_int else c.choice(["0.5", "-1.0", "2.0"])
        k.body.emit(f"T.fill({r}, {start})")
        k.features.add("reduce_shared_accumulate")
    if c.flip(0.3):
        k.body.emit(f"T.reduce({src}, {r}, \"{red_kind}\", {dim}, {clear})")
        k.features.add("reduce_general_form")
    else:
        k.body.emit(f"T.reduce_{red_kind}({src}, {r}, dim={dim}{'' if clear else ', clear=False'})")
    if dim == 1:
        R = k.tensor("R", [str(M), f"T.ceildiv({N}, {bn})"], [M, -(-N // bn)], rdt, role="out")
        k.body.open(f"for i in T.Parallel({bm}):")
        k.body.open(f"if by * {bm} + i < {M}:")
        k.body.emit(f"{R}[by * {bm} + i, bx] = {r}[i]")
    else:
        R = k.tensor("R", [f"T.ceildiv({M}, {bm})", str(N)], [-(-M // bm), N], rdt, role="out")
        k.body.open(f"for j in T.Parallel({bn}):")
        k.body.open(f"if bx * {bn} + j < {N}:")
        k.body.emit(f"{R}[by, bx * {bn} + j] = {r}[j]")
    k.body.close(2)


def gen_grid3d(k: Kernel) -> None:
    """3-D grids over a batched tensor, 2-D dynamic shapes with ragged edges, and scalar
    arguments in index arithmetic (an offset into a wider tensor, a row limit)."""
    c = k.c
    bm = c.choice([8, 16, 4, 32])
    bn = c.choice([16, 8, 32, 4])
    B = c.int(1, 3)
    M, N = _size(c, bm, 2), _size(c, bn, 2)
    dt, is_int = _in_dtype(k, 0.25)
    dynamic = c.flip(0.4)
    m_src, n_src = str(M), str(N)
    if dynamic:
        k.module_lines += ['m = T.dynamic("m")', 'n = T.dynamic("n")']
        m_src, n_src = "m", "n"
        k.features.add("dynamic_2d")
    # A dynamic size is read off a whole dimension of a tensor, so `n + 3` needs a fixed n.
    use_off = not dynamic and c.flip(0.5)
    off = c.int(0, 3)
    width_src, width = (f"{n_src} + 3", N + 3) if use_off else (n_src, N)
    X = k.tensor("X", [str(B), m_src, width_src], [B, M, width], dt)
    if use_off:
        o = k.scalar("off", "int32", off)
        k.features.add("scalar_index")
    threads = _threads(c)
    grid3 = c.flip(0.7)
    if grid3:
        k.header = (f"with T.Kernel(T.ceildiv({n_src}, {bn}), T.ceildiv({m_src}, {bm}), {B}, threads={threads}) "
                    "as (bx, by, bz):")
        k.features.add("grid3d")
    else:
        # The batch folded into the second grid dimension.
        k.header = (f"with T.Kernel(T.ceildiv({n_src}, {bn}), T.ceildiv({m_src}, {bm}) * {B}, threads={threads}) "
                    "as (bx, byz):")
        k.features.add("grid_folded_batch")
    if not grid3:
        k.body.emit(f"bz = byz // T.ceildiv({m_src}, {bm})")
        k.body.emit(f"by = byz % T.ceildiv({m_src}, {bm})")
        k.features.add("block_index_arith")
    col = f"bx * {bn} + j" + (f" + {o}" if use_off else "")
    limit = None
    if c.flip(0.3):
        limit = k.scalar("rows", "int32", c.int(0, M))
        k.features.add("scalar_mask")
    tile = k.alloc(c.choice(["fragment", "shared"]), (bm, bn), dt, "x_tile")
    guard = f"by * {bm} + i < {m_src} and bx * {bn} + j < {n_src}"
    if limit:
        guard += f" and by * {bm} + i < {limit}"
    how = c.choice(["parallel", "copy"]) if not limit else "parallel"
    if how == "copy":
        # Past column n (up to n + 3) the tile holds real values the stores below skip.
        start = f"bx * {bn}" + (f" + {o}" if use_off else "")
        k.body.emit(f"T.copy(X[bz, by * {bm}:by * {bm} + {bm}, {start}:{start} + {bn}], {tile})")
        k.features.add("copy_3d_slice_offset" if use_off else "copy_3d_slice")
    else:
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{tile}[i, j] = T.if_then_else({guard}, X[bz, by * {bm} + i, {col}], {_zero(is_int)})")
        k.body.close()
    leaves = [Val(f"{tile}[i, j]", dt, _bound(is_int), True), Val("bz", "int32", B, True)]
    if not is_int:
        leaves.append(Val("0.5", "float32", 0.5, True))
    e = expr(k, leaves, c.int(1, 3), is_int)
    odt = dt if is_int else c.choice(["float32", dt])
    k.dtypes.add(odt)
    O = k.tensor("O", [str(B), m_src, n_src], [B, M, N], odt, role="out")
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.open(f"if by * {bm} + i < {m_src} and bx * {bn} + j < {n_src}:")
    k.body.emit(f"O[bz, by * {bm} + i, bx * {bn} + j] = {e.text}")
    k.body.close(2)


def gen_cast_chain(k: Kernel) -> None:
    """A chain of T.copy between scopes, each step possibly changing dtype; T.fill and
    T.clear of every scope, whole and of a sub-region, before the copies overwrite or
    after, with the filled part stored too."""
    c = k.c
    tiling = _grid(k, c, c.choice([2, 2, 1]))
    is_int = c.flip(0.2)
    dt = "int32" if is_int else c.choice(_FLOATS)
    k.dtypes.add(dt)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, dt, values="ints" if c.flip(0.5) or is_int else "signed")
    cur_dt = dt if is_int or c.flip(0.5) else c.choice(_FLOATS)
    k.dtypes.add(cur_dt)
    cur = load_tile(k, tiling, X, c.choice(["fragment", "shared"]), cur_dt, "t")
    steps = c.int(1, 4)
    for _ in range(steps):
        scope = c.choice(["fragment", "shared"])
        ndt = cur_dt if c.flip(0.3) else c.choice(_FLOATS + (["int32"] if is_int else []))
        if is_int and c.flip(0.5):
            ndt = "int32"
        k.dtypes.add(ndt)
        nxt = k.alloc(scope, tiling.shape, ndt, "t")
        if c.flip(0.3):  # a fill the copy overwrites
            k.body.emit(f"T.clear({nxt})" if c.flip(0.5) else f"T.fill({nxt}, 7)")
        d0 = tiling.dims[0][0]
        rest = ", :" if len(tiling.dims) == 2 else ""
        split = c.flip(0.3) and d0 > 1
        if split and (scope == "shared" or _scope_of(k, cur) == "shared") and c.flip(0.5):
            # Rows moved down by h, the top h rows filled: parts at different offsets.
            h = c.int(1, d0 - 1)
            k.body.emit(f"T.copy({cur}[0:{d0 - h}{rest}], {nxt}[{h}:{d0}{rest}])")
            k.body.emit(f"T.fill({nxt}[0:{h}{rest}], 1)")
            k.features.add("copy_shifted_parts")
        elif split:
            h = c.int(1, d0 - 1)
            k.body.emit(f"T.copy({cur}[0:{h}{rest}], {nxt}[0:{h}{rest}])")
            k.body.emit(f"T.copy({cur}[{h}:{d0}{rest}], {nxt}[{h}:{d0}{rest}])")
            k.features.add("copy_in_parts")
        else:
            k.body.emit(f"T.copy({cur}, {nxt})")
        k.features.add(f"copy_cast_{_scope_of(k, cur)}_{scope}")
        if ndt != cur_dt:
            k.features.add("copy_changes_dtype")
        cur, cur_dt = nxt, ndt
    if c.flip(0.5):  # overwrite part of the tile with a fill
        d0 = tiling.dims[0][0]
        h = c.int(1, d0)
        scope = _scope_of(k, cur)
        rest = ", :" if len(tiling.dims) == 2 else ""
        val = c.choice(["3", "-1"]) if cur_dt == "int32" else c.choice(["1.5", "-0.25", "2"])
        if c.flip(0.5):
            k.body.emit(f"T.fill({cur}[0:{h}{rest}], {val})")
        else:
            k.body.emit(f"T.clear({cur}[{d0 - h}:{d0}{rest}])")
        k.features.add(f"fill_region_{scope}")
    if c.flip(0.3):  # a per-thread array filled whole, added everywhere
        loc = k.alloc("local", (c.int(1, 4),), cur_dt, "bias")
        k.body.emit(f"T.fill({loc}, 2)" if c.flip(0.6) else f"T.clear({loc})")
        k.body.open(tiling.parallel())
        k.body.emit(f"{cur}[{tiling.vars()}] = {cur}[{tiling.vars()}] + {loc}[0]")
        k.body.close()
        k.features.add("fill_local")
    odt = cur_dt if c.flip(0.5) else c.choice(_FLOATS)
    k.dtypes.add(odt)
    O = k.tensor("O", src_shape, shape, odt, role="out")
    store_tile(k, tiling, cur, O)


def _scope_of(k: Kernel, name: str) -> str:
    for line in k.body.lines:
        text = line.strip()
        if text.startswith(f"{name} = T.alloc_"):
            return text.split("T.alloc_")[1].split("(")[0]
    return "global"


def gen_swizzle(k: Kernel) -> None:
    """T.use_swizzle rasterisation and T.annotate_layout with make_swizzled_layout on
    shared tiles read along rows and along columns."""
    c = k.c
    dt = c.choice(["float16", "float32", "bfloat16"])
    k.dtypes.add(dt)
    chunk = 16 // (2 if dt != "float32" else 4)
    bn = chunk * c.choice([2, 4, 8])
    bm = c.choice([8, 16, 32])
    while bm * bn > 4096:
        bm //= 2
    M, N = _size(c, bm), _size(c, bn)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    k.header = (f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={_threads(c)}) "
                "as (bx, by):")
    if c.flip(0.6):
        k.body.emit(f"T.use_swizzle(panel_size={c.choice([1, 2, 4, 8])}"
                    + (", order=\"col\")" if c.flip(0.3) else ")"))
        k.features.add("use_swizzle")
    s = k.alloc("shared", (bm, bn), dt, "x_shared")
    if c.flip(0.8):
        k.body.emit(f"T.annotate_layout({{{s}: T.layout.make_swizzled_layout({s})}})")
        k.features.add("annotate_swizzled")
    tiling = Tiling([(bm, str(M), M, f"by * {bm}", "i"), (bn, str(N), N, f"bx * {bn}", "j")])
    how = c.choice(["corner", "slice", "parallel"])
    if how == "parallel":
        k.body.open(tiling.parallel())
        k.body.emit(f"{s}[i, j] = T.if_then_else({tiling.guard()}, X[{tiling.gidx()}], 0)")
        k.body.close()
    else:
        k.body.emit(f"T.copy({tiling.corner('X') if how == 'corner' else tiling.slice('X')}, {s})")
    out = c.choice(["copy", "transpose", "math"])
    k.features.add("swizzled_read_" + out)
    if out == "copy":
        O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
        if c.flip(0.5):
            f = k.alloc("fragment", (bm, bn), "float32", "x_frag")
            k.body.emit(f"T.copy({s}, {f})")
            k.dtypes.add("float32")
            store_tile(k, tiling, f, O)
        else:
            store_tile(k, tiling, s, O)
    elif out == "transpose":
        O = k.tensor("O", [str(N), str(M)], [N, M], dt, role="out")
        k.body.open(f"for j, i in T.Parallel({bn}, {bm}):")
        k.body.open(f"if by * {bm} + i < {M} and bx * {bn} + j < {N}:")
        k.body.emit(f"O[bx * {bn} + j, by * {bm} + i] = {s}[i, j]")
        k.body.close(2)
    else:
        t = k.alloc("shared", (bm, bn), dt, "y_shared")
        if c.flip(0.5):
            k.body.emit(f"T.annotate_layout({{{t}: T.layout.make_swizzled_layout({t})}})")
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        e = float_expr(k, [Val(f"{s}[i, {bn - 1} - j]", dt, 1.0, True), Val(f"{s}[i, j]", dt, 1.0, True)], 2)
        k.body.emit(f"{t}[i, j] = {e.text}")
        k.body.close()
        O = k.tensor("O", [str(M), str(N)], [M, N], "float32", role="out")
        k.dtypes.add("float32")
        store_tile(k, tiling, t, O)


def gen_shared_atomic(k: Kernel) -> None:
    """T.atomic_add into shared memory: a histogram of small integers (element adds at
    data-dependent indices) or a tile added into a shared accumulator, then copied out."""
    c = k.c
    tiling = _grid(k, c, 2)
    dt = c.choice(["int32", "float32"])
    k.dtypes.add(dt)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, "int32", values="ints")
    if c.flip(0.6):
        bins = k.alloc("shared", (17,), dt, "hist")
        k.body.emit(f"T.clear({bins})")
        k.body.open(tiling.parallel())
        k.body.open(f"if {tiling.guard()}:")
        w = c.choice(["1", f"X[{tiling.gidx()}] * X[{tiling.gidx()}]", "2"])
        k.body.emit(f"T.atomic_add({bins}[X[{tiling.gidx()}] + 8], {w})")
        k.body.close(2)
        nb = -(-tiling.dims[0][2] // tiling.dims[0][0]) * -(-tiling.dims[1][2] // tiling.dims[1][0])
        H = k.tensor("H", [str(nb), "17"], [nb, 17], dt, role="out")
        bid = "bx" if tiling.dims[0][3] == "0" else \
            f"by * T.ceildiv({tiling.dims[1][1]}, {tiling.dims[1][0]}) + bx"
        if tiling.dims[1][3] == "0":
            bid = "bx"
        if c.flip(0.5):
            k.body.emit(f"T.copy({bins}, {H}[{bid}, 0:17])")
        else:
            k.body.open("for q in T.Parallel(17):")
            k.body.emit(f"{H}[{bid}, q] = {bins}[q]")
            k.body.close()
        k.features.add("atomic_shared_histogram")
        return
    if c.flip(0.3):  # half-precision atomics (small integers stay exact)
        dt = c.choice(["float16", "bfloat16"])
        k.dtypes.add(dt)
    acc = k.alloc("shared", tiling.shape, dt, "acc")
    k.body.emit(f"T.fill({acc}, 1)")
    xf = load_tile(k, tiling, X, "fragment", dt, "x_tile")
    for _ in range(c.int(1, 2)):
        k.body.emit(f"T.atomic_add({acc}, {xf})")
    k.features.add("atomic_shared_tile")
    O = k.tensor("O", src_shape, shape, dt, role="out")
    store_tile(k, tiling, acc, O)


def gen_disjoint_writes(k: Kernel) -> None:
    """Several independent loops and copies writing disjoint parts of one output: the two
    halves of a row tile from different scopes and expressions, the first rows apart."""
    c = k.c
    bm = c.choice([8, 16, 4, 32])
    bn = c.choice([8, 16, 32])
    M = _size(c, bm)
    dt, is_int = _in_dtype(k)
    X = k.tensor("X", [str(M), str(bn)], [M, bn], dt)
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={_threads(c)}) as bx:"
    tiling = Tiling([(bm, str(M), M, f"bx * {bm}", "i"), (bn, str(bn), bn, "0", "j")])
    x = load_tile(k, tiling, X, c.choice(["fragment", "shared"]), dt, "x_tile")
    odt = dt if is_int else c.choice(["float32", dt])
    k.dtypes.add(odt)
    fill_global = c.flip(0.3)
    width = 3 * bn if fill_global else 2 * bn
    O = k.tensor("O", [str(M), str(width)], [M, width], odt, role="out")
    if fill_global:  # a third part filled in global memory directly (masked past the edge)
        val = c.choice(["3", "-1"]) if odt == "int32" else c.choice(["1.5", "-0.25"])
        k.body.emit(f"T.fill(O[bx * {bm}:bx * {bm} + {bm}, {2 * bn}:{3 * bn}], {val})")
        k.features.add("fill_global_region")
    leaf = Val(f"{x}[i, j]", dt, _bound(is_int), True)
    # Left half: a loop straight to global, masked by hand.
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.open(f"if bx * {bm} + i < {M}:")
    k.body.emit(f"O[bx * {bm} + i, j] = {expr(k, [leaf], c.int(1, 2), is_int).text}")
    k.body.close(2)
    # Right half: a tile computed in another scope, copied out as a slice.
    first_elems = c.flip(0.5)
    # Read at other indices than the loop's (y[0, q * ...]): a shared tile.
    y = k.alloc("shared" if first_elems else c.choice(["fragment", "shared"]), (bm, bn), odt, "y")
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.emit(f"{y}[i, j] = {expr(k, [leaf], c.int(1, 2), is_int).text}")
    k.body.close()
    if c.flip(0.4):  # a loop over the first rows only, written again
        h = c.int(1, bm)
        k.body.open(f"for i, j in T.Parallel({h}, {bn}):")
        k.body.emit(f"{y}[i, j] = {y}[i, j] * 2")
        k.body.close()
        k.features.add("loop_over_part_of_tile")
    if c.flip(0.5):
        k.body.emit(f"T.copy({y}, O[bx * {bm}:bx * {bm} + {bm}, {bn}:{2 * bn}])")
        k.features.add("copy_to_output_slice")
    else:
        k.body.emit(f"T.copy({y}, O[bx * {bm}, {bn}])")
    if first_elems:
        # A second output takes two elements of each block's first row.
        F = k.tensor("F", [f"T.ceildiv({M}, {bm})", "2"], [-(-M // bm), 2], odt, role="out")
        k.body.open("for q in T.Parallel(2):")
        k.body.emit(f"F[bx, q] = {y}[0, q * {bn - 1}]")
        k.body.close()
        k.features.add("disjoint_small_output")
    k.features.add("disjoint_writes")


def gen_shared_loops(k: Kernel) -> None:
    """Shared tiles reused across serial loops, where only barriers keep the program's
    order: a tree reduction written by hand (`if i < stride` per level), a chunk loop that
    overwrites a shared tile each iteration after reading it shifted (a write after read
    across iterations), and double buffering by `ko % 2`."""
    c = k.c
    kind = c.choice(["tree", "chunks", "double"])
    k.features.add("shared_loop_" + kind)
    dt = c.choice(["float32", "int32"])
    is_int = dt == "int32"
    k.dtypes.add(dt)
    threads = _threads(c)
    if kind == "tree":
        levels = c.int(1, 6)
        n = 1 << levels
        rows = c.choice([1, 2, 4])
        M = _size(c, rows, 3)
        X = k.tensor("X", [str(M), str(n)], [M, n], dt, values="ints" if is_int or c.flip(0.5) else "signed")
        k.header = f"with T.Kernel(T.ceildiv({M}, {rows}), threads={threads}) as bx:"
        sh = k.alloc("shared", (rows, n), dt, "buf")
        k.body.emit(f"T.copy(X[bx * {rows}, 0], {sh})")
        op = c.choice(["+", "max"])
        loop = c.choice(["T.unroll", "T.serial", "range"])
        k.body.open(f"for lvl in {loop}({levels}):")
        k.body.open(f"for r, i in T.Parallel({rows}, {n // 2}):")
        k.body.open(f"if i < ({n // 2} >> lvl):")
        other = f"{sh}[r, i + ({n // 2} >> lvl)]"
        k.body.emit(f"{sh}[r, i] = {sh}[r, i] + {other}" if op == "+" else
                    f"{sh}[r, i] = T.max({sh}[r, i], {other})")
        k.body.close(3)
        R = k.tensor("R", [str(M)], [M], dt, role="out")
        k.body.open(f"for r in T.Parallel({rows}):")
        k.body.open(f"if bx * {rows} + r < {M}:")
        k.body.emit(f"R[bx * {rows} + r] = {sh}[r, 0]")
        k.body.close(2)
        return
    bm = c.choice([4, 8, 16])
    bk = c.choice([8, 16, 32])
    nk = c.int(1, 4)
    M, K = _size(c, bm), nk * bk
    off = ""
    if kind == "chunks" and c.flip(0.3):  # chunks start at a run-time column: unaligned
        off = k.scalar("off", "int32", c.int(0, 3))
        k.features.add("scalar_offset_copy")
    X = k.tensor("X", [str(M), str(K + 3 if off else K)], [M, K + 3 if off else K], dt,
                 values="ints" if is_int else "signed")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={threads}) as bx:"
    acc = k.alloc(c.choice(["fragment", "shared"]), (bm, bk), dt, "acc")
    k.body.emit(f"T.clear({acc})")
    if kind == "chunks":
        sh = k.alloc("shared", (bm, bk), dt, "chunk")
        loop = c.choice(["T.serial", "range", "T.Pipelined"])
        stages = f", num_stages={c.int(1, 3)}" if loop == "T.Pipelined" else ""
        k.body.open(f"for ko in {loop}({nk}{stages}):")
        k.body.emit(f"T.copy(X[bx * {bm}, ko * {bk}{' + ' + off if off else ''}], {sh})")
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] += {sh}[i, ({bk} - 1 - j)] * (ko + 1)")
        k.body.close()
        if c.flip(0.5):  # rewritten in place, read again below
            k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
            k.body.emit(f"{sh}[i, j] = {sh}[i, j] * 2")
            k.body.close()
            k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
            k.body.emit(f"{acc}[i, j] += {sh}[({bm} - 1 - i), j]")
            k.body.close()
            k.features.add("shared_rewritten_in_loop")
        k.body.close()
    else:
        sh = k.alloc("shared", (2, bm, bk), dt, "stage")
        k.body.emit(f"T.copy(X[bx * {bm}, 0], {sh}[0, :, :])")
        k.body.open(f"for ko in T.serial({nk}):")
        k.body.open(f"if ko + 1 < {nk}:")
        k.body.emit(f"T.copy(X[bx * {bm}, (ko + 1) * {bk}], {sh}[(ko + 1) % 2, :, :])")
        k.body.close()
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] += {sh}[ko % 2, i, ({bk} - 1 - j)]")
        k.body.close(2)
    O = k.tensor("O", [str(M), str(bk)], [M, bk], dt, role="out")
    k.body.emit(f"T.copy({acc}, O[bx * {bm}, 0])")


FAMILIES: list = [(gen_masked_tail, 1), (gen_nested_loops, 1), (gen_shared_reorder, 1), (gen_grid3d, 1),
                  (gen_cast_chain, 1), (gen_swizzle, 1), (gen_shared_atomic, 1), (gen_disjoint_writes, 1),
                  (gen_shared_loops, 1)]
