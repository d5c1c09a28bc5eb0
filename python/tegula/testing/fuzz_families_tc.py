"""More families of valid programs for tegula.testing.fuzz: tensor-core programs: chained
gemms, attention-shaped loops, warp policies.
Each family is a function of a fuzz_gen.Kernel, listed in FAMILIES with its weight
(fuzz_families.all_families() adds them to the others).

  * gen_attention: FlashAttention's loop: S = Q Kᵀ into a fragment (K stored either
    way), ragged and causal masks by T.if_then_else, an online softmax (T.reduce_max
    with clear=False, or a fresh max folded in by T.max), exp2, the accumulator rescaled
    by a per-row factor, P cast into an fp16/bf16 fragment (A from registers; by T.copy
    or by the exp loop itself) or staged through shared memory, P V; T.Pipelined or
    T.serial over key tiles, the causal loop bound a run-time value, the key length
    sometimes T.dynamic; 2-D tensors or heads ("bhsd"/"bshd", GQA groups); the output
    normalised, optionally the log-sum-exp.
  * gen_chained_gemm: a fused MLP: per hidden chunk H = act(X W1 [+ bias]) (clear_accum
    on one K step, or an inner K loop nested in the pipelined loop), H cast to registers
    or shared, Y += H W2 (W1, W2 either way round).
  * gen_gemm_tc: one gemm under every warp policy, 4 and 8 warps, 32..128 blocks, K
    tiles of 32/64, transposes, ragged and T.dynamic sizes, A from registers (from shared
    or global), a float16 accumulator, the accumulator started by clear, clear_accum
    (also on every step: C is the last tile's product) or a global tile; epilogues
    reading the accumulator (bias, per-row scale, relu, row and column reductions, a
    transposed store), split-K by T.atomic_add into float32, two accumulators sharing A.
  Sometimes T.annotate_layout(make_swizzled_layout) on operand tiles and T.use_swizzle.

Every gemm's warp split is one the engine's mma.sync path takes (each warp whole 16x8
tiles; a register A needs FullRow), and fragments that meet in one T.Parallel loop or
copy come from gemms that split the warps alike (TileLang reports a layout conflict
otherwise, as the engine does). Operands lie in [-1, 1], so scores and products stay
small and the exp2 arguments bounded; staged tiles stay within 96 KiB.
"""
from __future__ import annotations

from .fuzz_gen import Kernel

POLICIES = ("Square", "FullRow", "FullCol")


def _split(m: int, n: int, warps: int, policy: str):
    """The (warps along M, warps along N) the engine takes, or None: the rule of
    layout::gemm_warps."""
    def fits(a, b):
        return m % (16 * a) == 0 and n % (8 * b) == 0

    if policy == "FullRow":
        return (warps, 1) if fits(warps, 1) else None
    if policy == "FullCol":
        return (1, warps) if fits(1, warps) else None
    best, pick = -1.0, None
    a = 1
    while a <= warps:
        b = warps // a
        if a * b == warps and fits(a, b):
            ratio = (m / a) / (n / b)
            score = 1 / ratio if ratio > 1 else ratio
            if score > best:
                best, pick = score, (a, b)
        a *= 2
    return pick


def _policies(m: int, n: int, warps: int, a_regs: bool = False) -> list:
    if a_regs:  # every warp owns whole rows
        return ["FullRow"] if _split(m, n, warps, "FullRow") else []
    return [p for p in POLICIES if _split(m, n, warps, p)]


def _ragged(c, tile: int, count_max: int) -> int:
    """An extent of 1..count_max tiles, ragged (not a multiple of 16) half of the time."""
    n = c.int(1, count_max) * tile
    if c.flip(0.5):
        n -= c.int(1, tile - 1)
    return n


def _annotate(k: Kernel, tiles: list) -> None:
    """Sometimes T.annotate_layout(make_swizzled_layout) on some gemm operand tiles, as
    TileLang's examples do (the engine swizzles operands itself; the two must agree)."""
    c = k.c
    if not c.flip(0.2):
        return
    picked = [t for t in tiles if t and c.flip(0.6)] or [tiles[0]]
    k.body.emit("T.annotate_layout({" + ", ".join(f"{t}: T.layout.make_swizzled_layout({t})" for t in picked) + "})")
    k.features.add("tc_annotate_swizzled")


def _raster(k: Kernel) -> None:
    """Sometimes T.use_swizzle: the blocks of a 2-D grid visited in panels."""
    c = k.c
    if c.flip(0.15):
        k.body.emit(f"T.use_swizzle(panel_size={c.choice([2, 4, 8])}" + (", order=\"col\")" if c.flip(0.3) else ")"))
        k.features.add("tc_use_swizzle")


def gen_attention(k: Kernel) -> None:
    """One block of query rows streams key/value tiles through an online softmax."""
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    k.dtypes.update({dt, "float32"})
    threads = c.choice([128, 128, 256])
    warps = threads // 32
    bm = c.choice([m for m in (64, 128) if m % (16 * warps) == 0])
    bn = c.choice([32, 64])
    d = c.choice([32, 64])
    dv = c.choice([d, 32, 64])
    sq = _ragged(c, bm, 2 if bm == 64 else 1)
    skv = _ragged(c, bn, 3)
    causal = c.flip(0.4)
    k_major = c.flip(0.25)  # K stored (d, Skv): S = Q K without transpose_B
    p_shared = c.flip(0.3)  # P through shared memory, so P V may take any policy
    online = c.flip(0.7)
    lse = c.flip(0.3)
    scale = c.choice([0.125, 0.25, 0.18033688011112042])  # the last: log2(e) / 8
    # Heads: none (2-D tensors), or a head dimension first ("bhsd") or second ("bshd"),
    # the key/value heads shared by groups of query heads (GQA).
    heads = c.choice([None, None, 2])
    bhsd = c.flip(0.5) or k_major
    kv_heads = heads // c.choice([1, 2]) if heads else None

    def shape(rows, width, nh):
        if nh is None:
            return [rows, width]
        return [nh, rows, width] if bhsd else [rows, nh, width]

    def rows(name, start, ext, head, corner_ok=True):
        """The tile of `ext` rows from `start` (of head `head`) of a sequence tensor."""
        if head is None:
            if corner_ok and c.flip(0.5):
                return f"{name}[{start}, 0]"
            return f"{name}[{start}:{start} + {ext}, :]"
        return f"{name}[{head}, {start}:{start} + {ext}, :]" if bhsd else f"{name}[{start}:{start} + {ext}, {head}, :]"

    # The key length known only at run time, sometimes: then every key tile is masked.
    skv_src = str(skv)
    if c.flip(0.15):
        k.module_lines.append('skv = T.dynamic("skv")')
        skv_src = "skv"
        k.features.add("attention_dynamic_kv")

    def tensor(name, rows_, width, nh, dtype, role="in"):
        sh = shape(rows_, width, nh)
        src = [skv_src if x is skv_mark else str(x) for x in shape(skv_mark if rows_ is skv else rows_, width, nh)]
        return k.tensor(name, src, sh, dtype, role=role)

    skv_mark = object()
    tensor("Q", sq, d, heads, dt)
    if k_major:
        sh = [d, skv] if heads is None else [kv_heads, d, skv]
        k.tensor("K", [str(x) for x in sh[:-1]] + [skv_src], sh, dt)
        k.features.add("attention_k_major")
    else:
        tensor("K", skv, d, kv_heads, dt)
    tensor("V", skv, dv, kv_heads, dt)
    out_dt = c.choice([dt, "float32"])
    tensor("O", sq, dv, heads, out_dt, role="out")
    if heads is None:
        k.header = f"with T.Kernel(T.ceildiv({sq}, {bm}), threads={threads}) as bx:"
        hq = hkv = None
    else:
        k.header = f"with T.Kernel(T.ceildiv({sq}, {bm}), {heads}, threads={threads}) as (bx, by):"
        hq, hkv = "by", ("by" if kv_heads == heads else f"by // {heads // kv_heads}")
        k.features.add(f"attention_heads_{'bhsd' if bhsd else 'bshd'}{'_gqa' if kv_heads != heads else ''}")
    # A bias per key, its tile copied each iteration into a 1-D shared row (the copy engine
    # fills it when the loop is warp specialised, as attention's backward reads its lse).
    key_bias = c.flip(0.25)
    if key_bias:
        k.tensor("KeyBias", [skv_src], [skv], "float32")
    Qs = k.alloc("shared", (bm, d), dt, "Q_shared")
    Ks = k.alloc("shared", (d, bn) if k_major else (bn, d), dt, "K_shared")
    Vs = k.alloc("shared", (bn, dv), dt, "V_shared")
    S = k.alloc("fragment", (bm, bn), "float32", "acc_s")
    P = k.alloc("shared" if p_shared else "fragment", (bm, bn), dt, "acc_s_cast")
    acc = k.alloc("fragment", (bm, dv), "float32", "acc_o")
    m = k.alloc("fragment", (bm,), "float32", "scores_max")
    mp = k.alloc("fragment", (bm,), "float32", "scores_max_prev")
    sc = k.alloc("fragment", (bm,), "float32", "scores_scale")
    ss = k.alloc("fragment", (bm,), "float32", "scores_sum")
    ls = k.alloc("fragment", (bm,), "float32", "logsum")
    if not online:
        mn = k.alloc("fragment", (bm,), "float32", "block_max")
    if key_bias:
        kbs = k.alloc("shared", (bn,), "float32", "key_bias")
    _annotate(k, [Qs, Ks, Vs, P if p_shared else None])
    b = k.body
    b.emit(f"T.copy({rows('Q', f'bx * {bm}', bm, hq)}, {Qs})")
    b.emit(f"T.fill({acc}, 0)" if c.flip() else f"T.clear({acc})")
    b.emit(f"T.fill({ls}, 0)")
    b.emit(f"T.fill({m}, -1e30)" if online or c.flip() else f"T.fill({m}, -T.infinity(\"float32\"))")
    # Causal: query i sees keys j <= i; the blocks past the diagonal are skipped.
    if causal and c.flip(0.6):
        trips = f"T.ceildiv(T.min({skv_src}, (bx + 1) * {bm}), {bn})"
        k.features.add("attention_causal_bound")
    else:
        trips = f"T.ceildiv({skv_src}, {bn})"
    if c.flip(0.75):
        b.open(f"for kb in T.Pipelined({trips}, num_stages={c.int(1, 3)}):")
        k.features.add("attention_pipelined")
    else:
        b.open(f"for kb in T.serial({trips}):")
    if k_major:
        b.emit(f"T.copy(K[0, kb * {bn}], {Ks})" if hkv is None else
               f"T.copy(K[{hkv}, :, kb * {bn}:kb * {bn} + {bn}], {Ks})")
    else:
        b.emit(f"T.copy({rows('K', f'kb * {bn}', bn, hkv)}, {Ks})")
    b.emit(f"T.copy({rows('V', f'kb * {bn}', bn, hkv)}, {Vs})")
    if key_bias:
        b.emit(f"T.copy(KeyBias[kb * {bn}:kb * {bn} + {bn}], {kbs})")
        k.features.add("attention_key_bias_row")
    # S's rows and O's rows must sit in the same threads (the per-row max, scale and sum
    # of S rescale O): both gemms split the warps alike; a register P needs FullRow.
    pairs = [(p, q) for p in _policies(bm, bn, warps) for q in _policies(bm, dv, warps, a_regs=not p_shared)
             if _split(bm, bn, warps, p) == _split(bm, dv, warps, q)]
    qk_pol, pv_pol = c.choice(pairs)
    flags = "" if k_major else ", transpose_B=True"
    if c.flip(0.7):
        b.emit(f"T.gemm({Qs}, {Ks}, {S}{flags}, clear_accum=True, policy=T.GemmWarpPolicy.{qk_pol})")
    else:
        b.emit(f"T.clear({S})")
        b.emit(f"T.gemm({Qs}, {Ks}, {S}{flags}, policy=T.GemmWarpPolicy.{qk_pol})")
    k.features.add(f"attention_qk_{qk_pol}")
    if key_bias:
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{S}[i, j] = {S}[i, j] + {kbs}[j]")
        b.close()
    ragged_kv = skv % bn != 0 or skv_src != str(skv)
    if causal or ragged_kv:
        conds = []
        if ragged_kv:
            conds.append(f"kb * {bn} + j < {skv_src}")
        if causal:
            conds.append(f"kb * {bn} + j <= bx * {bm} + i")
            k.features.add("attention_causal")
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{S}[i, j] = T.if_then_else({' and '.join(conds)}, {S}[i, j], -T.infinity(\"float32\"))")
        b.close()
        k.features.add("attention_mask")
    if online:
        b.emit(f"T.copy({m}, {mp})")
        b.emit(f"T.reduce_max({S}, {m}, dim=1, clear=False)")
        k.features.add("attention_online_max")
    else:
        b.emit(f"T.reduce_max({S}, {mn}, dim=1)")
        b.open(f"for i in T.Parallel({bm}):")
        b.emit(f"{mp}[i] = {m}[i]")
        b.emit(f"{m}[i] = T.max({m}[i], {mn}[i])")
        b.close()
        k.features.add("attention_fold_max")
    b.open(f"for i in T.Parallel({bm}):")
    if online:
        b.emit(f"{sc}[i] = T.exp2(({mp}[i] - {m}[i]) * {scale})")
    else:
        # The first block's previous max is -inf: a row's scale is then 0, not NaN.
        b.emit(f"{sc}[i] = T.if_then_else({mp}[i] == {m}[i], 1.0, T.exp2(({mp}[i] - {m}[i]) * {scale}))")
    b.close()
    b.open(f"for i, j in T.Parallel({bm}, {dv}):")
    b.emit(f"{acc}[i, j] *= {sc}[i]" if c.flip() else f"{acc}[i, j] = {acc}[i, j] * {sc}[i]")
    b.close()
    fused_cast = c.flip(0.3)  # P written by the exp loop itself, no T.copy
    b.open(f"for i, j in T.Parallel({bm}, {bn}):")
    b.emit(f"{S}[i, j] = T.exp2({S}[i, j] * {scale} - {m}[i] * {scale})")
    if fused_cast:
        b.emit(f"{P}[i, j] = {S}[i, j]" if c.flip() else f"{P}[i, j] = T.cast({S}[i, j], \"{dt}\")")
        k.features.add("attention_p_fused_cast")
    b.close()
    if c.flip(0.5):
        b.emit(f"T.reduce_sum({S}, {ss}, dim=1)")
        b.open(f"for i in T.Parallel({bm}):")
        b.emit(f"{ls}[i] = {ls}[i] * {sc}[i] + {ss}[i]")
        b.close()
    else:  # rescale the running sum first, then add the block's into it
        b.open(f"for i in T.Parallel({bm}):")
        b.emit(f"{ls}[i] *= {sc}[i]")
        b.close()
        b.emit(f"T.reduce_sum({S}, {ls}, dim=1, clear=False)")
        k.features.add("attention_sum_accumulate")
    if not fused_cast:
        b.emit(f"T.copy({S}, {P})")
    b.emit(f"T.gemm({P}, {Vs}, {acc}, policy=T.GemmWarpPolicy.{pv_pol})")
    k.features.add("attention_p_shared" if p_shared else "attention_p_registers")
    k.features.add(f"attention_{k.target}")
    b.close()
    b.open(f"for i, j in T.Parallel({bm}, {dv}):")
    b.emit(f"{acc}[i, j] = {acc}[i, j] / {ls}[i]")
    b.close()
    if c.flip(0.3):
        Os = k.alloc("shared", (bm, dv), out_dt, "O_shared")
        b.emit(f"T.copy({acc}, {Os})")
        b.emit(f"T.copy({Os}, {rows('O', f'bx * {bm}', bm, hq)})")
        k.features.add("attention_store_via_shared")
    else:
        b.emit(f"T.copy({acc}, {rows('O', f'bx * {bm}', bm, hq)})")
    if lse:
        sh = [sq] if heads is None else [heads, sq]
        k.tensor("L", [str(x) for x in sh], sh, "float32", role="out")
        lrow = "L[" if heads is None else "L[by, "
        b.open(f"for i in T.Parallel({bm}):")
        b.emit(f"{ls}[i] = T.log2({ls}[i]) + {m}[i] * {scale}")
        b.close()
        if c.flip():
            b.emit(f"T.copy({ls}, {lrow}bx * {bm}:bx * {bm} + {bm}])")
        else:
            b.open(f"for i in T.Parallel({bm}):")
            b.open(f"if bx * {bm} + i < {sq}:")
            b.emit(f"{lrow}bx * {bm} + i] = {ls}[i]")
            b.close(2)
        k.features.add("attention_lse")
    k.features.add("attention_causal" if causal else "attention_full")



def _bias_tile(k: Kernel, bias: str, base: str, n: int, extent: int) -> str:
    """A per-column bias as an expression of j: a fragment loaded by a (masked) copy, or
    the global read behind a bounds test."""
    c = k.c
    if c.flip(0.5):
        bf = k.alloc("fragment", (n,), "float32", "bias_frag")
        k.body.emit(f"T.copy({bias}[{base}], {bf})")
        k.features.add("tc_bias_fragment")
        return f"{bf}[j]"
    k.features.add("tc_bias_global")
    return f"T.if_then_else({base} + j < {extent}, {bias}[{base} + j], 0.0)"


def gen_chained_gemm(k: Kernel) -> None:
    """A fused MLP: for each hidden chunk, H = act(X W1 [+ b]); Y += cast(H) W2."""
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    k.dtypes.update({dt, "float32"})
    threads = c.choice([128, 128, 256])
    warps = threads // 32
    bm = c.choice([m for m in (64, 128) if m % (16 * warps) == 0])
    bk = c.choice([32, 64])
    bh = c.choice([32, 64])
    bn = c.choice([32, 64])
    h_shared = c.flip(0.35)
    one_k = c.flip(0.5)
    M = _ragged(c, bm, 2 if bm == 64 else 1)
    K1 = _ragged(c, bk, 1 if one_k else 2)
    Hd = _ragged(c, bh, 3)
    N = _ragged(c, bn, 2)
    tw1 = c.flip(0.3)
    X = k.tensor("X", [str(M), str(K1)], [M, K1], dt)
    W1 = k.tensor("W1", [str(Hd), str(K1)] if tw1 else [str(K1), str(Hd)], [Hd, K1] if tw1 else [K1, Hd], dt)
    tw2 = c.flip(0.3)
    W2 = k.tensor("W2", [str(N), str(Hd)] if tw2 else [str(Hd), str(N)], [N, Hd] if tw2 else [Hd, N], dt)
    use_bias = c.flip(0.4)
    if use_bias:
        Bias = k.tensor("Bias", [str(Hd)], [Hd], "float32")
    out_dt = c.choice(["float32", dt])
    Y = k.tensor("Y", [str(M), str(N)], [M, N], out_dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    Xs = k.alloc("shared", (bm, bk), dt, "X_shared")
    W1s = k.alloc("shared", (bh, bk) if tw1 else (bk, bh), dt, "W1_shared")
    W2s = k.alloc("shared", (bn, bh) if tw2 else (bh, bn), dt, "W2_shared")
    H = k.alloc("fragment", (bm, bh), "float32", "H_local")
    Hc = k.alloc("shared" if h_shared else "fragment", (bm, bh), dt, "H_cast")
    Yf = k.alloc("fragment", (bm, bn), "float32", "Y_local")
    _raster(k)
    _annotate(k, [Xs, W1s, W2s, Hc if h_shared else None])
    b = k.body
    b.emit(f"T.clear({Yf})")
    w1_copy = (f"T.copy(W1[h * {bh}, {{ko}}], {W1s})" if tw1 else f"T.copy(W1[{{ko}}, h * {bh}], {W1s})")
    flags = ", transpose_B=True" if tw1 else ""
    # A register H is the first gemm's accumulator read as the second's A: both FullRow.
    pol1 = c.choice(_policies(bm, bh, warps, a_regs=not h_shared))
    if one_k:
        b.emit(f"T.copy(X[by * {bm}, 0], {Xs})")
    if c.flip(0.6):
        b.open(f"for h in T.Pipelined(T.ceildiv({Hd}, {bh}), num_stages={c.int(1, 3)}):")
        k.features.add("chain_pipelined")
    else:
        b.open(f"for h in T.serial(T.ceildiv({Hd}, {bh})):")
    if one_k:
        b.emit(w1_copy.format(ko="0"))
        b.emit(f"T.gemm({Xs}, {W1s}, {H}{flags}, clear_accum=True, policy=T.GemmWarpPolicy.{pol1})")
        k.features.add("chain_clear_accum")
    else:
        b.emit(f"T.clear({H})")
        b.open(f"for ko in T.serial(T.ceildiv({K1}, {bk})):")
        b.emit(f"T.copy(X[by * {bm}, ko * {bk}], {Xs})")
        b.emit(w1_copy.format(ko=f"ko * {bk}"))
        b.emit(f"T.gemm({Xs}, {W1s}, {H}{flags}, policy=T.GemmWarpPolicy.{pol1})")
        b.close()
        k.features.add("chain_inner_k_loop")
    bias = _bias_tile(k, "Bias", f"h * {bh}", bh, Hd) if use_bias else None
    act = c.choice(["relu", "scale", "none", "square"])
    if act != "none" or bias:
        e = f"{H}[i, j]" + (f" + {bias}" if bias else "")
        e = {"relu": f"T.max({e}, 0.0)", "scale": f"({e}) * 0.5", "none": e, "square": f"({e}) * ({e}) * 0.125"}[act]
        b.open(f"for i, j in T.Parallel({bm}, {bh}):")
        b.emit(f"{H}[i, j] = {e}")
        b.close()
        k.features.add(f"chain_act_{act}")
    b.emit(f"T.copy({H}, {Hc})")
    b.emit(f"T.copy(W2[bx * {bn}, h * {bh}], {W2s})" if tw2 else f"T.copy(W2[h * {bh}, bx * {bn}], {W2s})")
    pol2 = c.choice(_policies(bm, bn, warps, a_regs=not h_shared))
    b.emit(f"T.gemm({Hc}, {W2s}, {Yf}{', transpose_B=True' if tw2 else ''}, policy=T.GemmWarpPolicy.{pol2})")
    if tw2:
        k.features.add("chain_w2_transposed")
    b.close()
    k.features.add("chain_h_shared" if h_shared else "chain_h_registers")
    k.features.add(f"chain_{k.target}")
    b.emit(f"T.copy({Yf}, Y[by * {bm}, bx * {bn}])")


def gen_gemm_tc(k: Kernel) -> None:
    """One block tile of C = A B under every policy, with epilogues, split-K or a second
    accumulator."""
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    k.dtypes.update({dt, "float32"})
    threads = c.choice([128, 256])
    warps = threads // 32
    bm, bn = c.choice([(64, 64), (64, 128), (128, 64), (64, 32), (32, 64)])
    bk = c.choice([32, 64])
    pols = _policies(bm, bn, warps)
    if not pols:
        threads, warps = 128, 4
        pols = _policies(bm, bn, warps)
    ta, tb = c.flip(0.25), c.flip(0.35)
    a_regs = not ta and "FullRow" in pols and c.flip(0.25)
    policy = "FullRow" if a_regs else c.choice(pols)
    mode = c.choice(["plain", "plain", "splitk", "dual"])
    splits = c.int(2, 3) if mode == "splitk" else 1
    per = c.int(1, 2)  # K tiles per block (per split)
    M, N = _ragged(c, bm, 2), _ragged(c, bn, 2)
    K = _ragged(c, bk, per * splits)
    if splits > 1:
        K = max(K, (splits - 1) * per * bk + 1)  # every split has some of K
    # Sizes known only at run time: M (rows of A and C) or K.
    Ms, Ks = str(M), str(K)
    dyn = c.choice([None, None, None, "m", "k"])
    if dyn == "m":
        k.module_lines.append('m = T.dynamic("m")')
        Ms = "m"
    elif dyn == "k" and splits == 1:
        k.module_lines.append('kk = T.dynamic("kk")')
        Ks = "kk"
    if Ms != str(M) or Ks != str(K):
        k.features.add("tc_dynamic_" + ("m" if Ms == "m" else "k"))
    a_shape, a_tile = ((K, M), (bk, bm)) if ta else ((M, K), (bm, bk))
    a_src = [Ks, Ms] if ta else [Ms, Ks]
    b_shape, b_tile = ((N, K), (bn, bk)) if tb else ((K, N), (bk, bn))
    b_src = [str(N), Ks] if tb else [Ks, str(N)]
    A = k.tensor("A", a_src, a_shape, dt)
    Bt = k.tensor("B", b_src, b_shape, dt)
    B2 = k.tensor("B2", b_src, b_shape, dt) if mode == "dual" else None
    c16 = mode == "plain" and dt == "float16" and c.flip(0.15)
    acc_dt = "float16" if c16 else "float32"
    if c16:
        k.features.add("tc_accumulate_f16")
    grid = f"T.ceildiv({N}, {bn}), T.ceildiv({Ms}, {bm})"
    if splits > 1:
        k.header = f"with T.Kernel({grid}, {splits}, threads={threads}) as (bx, by, bz):"
        k0 = f"bz * {per * bk} + ko * {bk}"
        trips = str(per)
    else:
        k.header = f"with T.Kernel({grid}, threads={threads}) as (bx, by):"
        k0 = f"ko * {bk}"
        trips = f"T.ceildiv({Ks}, {bk})"
    a_global = a_regs and c.flip(0.5)
    As = None if a_global else k.alloc("shared", a_tile, dt, "A_shared")
    Af = k.alloc("fragment", a_tile, dt, "A_local") if a_regs else None
    Bs = k.alloc("shared", b_tile, dt, "B_shared")
    B2s = k.alloc("shared", b_tile, dt, "B2_shared") if B2 else None
    Cf = k.alloc("fragment", (bm, bn), acc_dt, "C_local")
    C2f = k.alloc("fragment", (bm, bn), "float32", "C2_local") if B2 else None
    _raster(k)
    _annotate(k, [As or Bs, Bs, B2s])
    b = k.body
    single = trips in ("1", f"T.ceildiv({Ks}, {bk})") and K <= bk
    clear_in_gemm = (single and c.flip(0.5)) or (mode == "plain" and c.flip(0.08))
    if clear_in_gemm:
        k.features.add("tc_clear_accum" if single else "tc_clear_accum_every_step")
    elif mode == "plain" and not c16 and c.flip(0.2):
        D = k.tensor("D", [Ms, str(N)], [M, N], c.choice(["float32", dt]))
        b.emit(f"T.copy(D[by * {bm}, bx * {bn}], {Cf})")
        k.features.add("tc_accumulator_from_global")
    else:
        b.emit(f"T.clear({Cf})")
        if C2f:
            b.emit(f"T.fill({C2f}, 0)")
    # A block-sparse K loop: a K tile runs only where its mask entry (a fragment every
    # thread holds whole, read at the loop's index) is positive: tile code under a branch
    # every thread takes alike, with its barriers inside.
    mask = None
    if splits == 1 and Ks == str(K) and not clear_in_gemm and c.flip(0.25):
        kt = -(-K // bk)
        k.tensor("BlockMask", [str(-(-M // bm)), str(kt)], [-(-M // bm), kt], "int8")
        mask = k.alloc("fragment", (kt,), "int8", "block_mask")
        b.emit(f"T.copy(BlockMask[by, 0], {mask})")
        k.features.add("tc_block_mask_branch")
    # Stages within a modest shared-memory budget (the staged tiles stack that deep).
    stage_bytes = 2 * (bm * bk + bn * bk * (2 if B2 else 1))
    if c.flip(0.75):
        b.open(f"for ko in T.Pipelined({trips}, num_stages={c.int(1, max(1, min(4, 96 * 1024 // stage_bytes)))}):")
    else:
        b.open(f"for ko in T.serial({trips}):")
    if mask:
        b.open(f"if {mask}[ko] > 0:")
    if a_global:
        b.emit(f"T.copy(A[by * {bm}, {k0}], {Af})")
        k.features.add("tc_a_registers_from_global")
    else:
        b.emit(f"T.copy(A[{k0}, by * {bm}], {As})" if ta else f"T.copy(A[by * {bm}, {k0}], {As})")
    if a_regs and not a_global:
        b.emit(f"T.copy({As}, {Af})")
        k.features.add("tc_a_registers_from_shared")
    a_op = Af if a_regs else As
    for g, s in ((Bt, Bs), (B2, B2s)):
        if g:
            b.emit(f"T.copy({g}[bx * {bn}, {k0}], {s})" if tb else f"T.copy({g}[{k0}, bx * {bn}], {s})")
    flags = (", transpose_A=True" if ta else "") + (", transpose_B=True" if tb else "")
    flags += ", clear_accum=True" if clear_in_gemm else ""
    b.emit(f"T.gemm({a_op}, {Bs}, {Cf}{flags}, policy=T.GemmWarpPolicy.{policy})")
    if B2:
        # C and C2 meet elementwise, so they split the warps alike.
        pol2 = c.choice([p for p in pols if _split(bm, bn, warps, p) == _split(bm, bn, warps, policy)])
        b.emit(f"T.gemm({a_op}, {B2s}, {C2f}{flags}, policy=T.GemmWarpPolicy.{pol2})")
        k.features.add("tc_two_accumulators")
    b.close(2 if mask else 1)
    k.features.add(f"tc_{policy}_{warps}warps_{k.target}")
    k.features.add(f"tc_{'tA' if ta else ''}{'tB' if tb else ''}{bm}x{bn}x{bk}")
    if B2:
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{Cf}[i, j] = {Cf}[i, j] * T.max({C2f}[i, j], 0.0) * 0.25")
        b.close()
    if splits > 1:
        C = k.tensor("C", [Ms, str(N)], [M, N], "float32", role="inout", values="zeros")
        b.emit(f"T.atomic_add(C[by * {bm}, bx * {bn}], {Cf})")
        k.features.add("tc_split_k_atomic")
        return
    if c.flip(0.5) and not c16:
        if c.flip(0.5):
            Bias = k.tensor("Bias", [str(N)], [N], "float32")
            bias = _bias_tile(k, "Bias", f"bx * {bn}", bn, N)
            b.open(f"for i, j in T.Parallel({bm}, {bn}):")
            b.emit(f"{Cf}[i, j] = {Cf}[i, j] + {bias}")
            b.close()
        if c.flip(0.3):  # a per-row scale: a 1-D fragment every thread of a row reads
            k.tensor("RowScale", [Ms], [M], "float32")
            rs = k.alloc("fragment", (bm,), "float32", "row_scale")
            if c.flip(0.5):
                b.emit(f"T.copy(RowScale[by * {bm}], {rs})")
            else:
                b.open(f"for i in T.Parallel({bm}):")
                b.emit(f"{rs}[i] = T.if_then_else(by * {bm} + i < {Ms}, RowScale[by * {bm} + i], 1.0)")
                b.close()
            b.open(f"for i, j in T.Parallel({bm}, {bn}):")
            b.emit(f"{Cf}[i, j] = {Cf}[i, j] * {rs}[i]")
            b.close()
            k.features.add("tc_row_scale")
        if c.flip(0.5):
            b.open(f"for i, j in T.Parallel({bm}, {bn}):")
            b.emit(f"{Cf}[i, j] = T.max({Cf}[i, j], 0.0)")
            b.close()
            k.features.add("tc_relu")
    if c.flip(0.45) and not c16:
        kind = c.choice(["sum", "max", "absmax", "min"])
        if c.flip(0.6):
            r = k.alloc("fragment", (bm,), "float32", "row_red")
            b.emit(f"T.reduce_{kind}({Cf}, {r}, dim=1)")
            nblk = -(-N // bn)
            R = k.tensor("R", [Ms, str(nblk)], [M, nblk], "float32", role="out")
            b.open(f"for i in T.Parallel({bm}):")
            b.open(f"if by * {bm} + i < {Ms}:")
            b.emit(f"R[by * {bm} + i, bx] = {r}[i]")
            b.close(2)
            k.features.add(f"tc_row_reduce_{kind}")
        else:  # across the warps that split M
            r = k.alloc("fragment", (bn,), "float32", "col_red")
            b.emit(f"T.reduce_{kind}({Cf}, {r}, dim=0)")
            nblk = -(-M // bm)
            R = k.tensor("R", [str(nblk), str(N)], [nblk, N], "float32", role="out")
            b.open(f"for j in T.Parallel({bn}):")
            b.open(f"if bx * {bn} + j < {N}:")
            b.emit(f"R[by, bx * {bn} + j] = {r}[j]")
            b.close(2)
            k.features.add(f"tc_col_reduce_{kind}")
    out_dt = c.choice(["float32", dt]) if not c16 else "float16"
    if c.flip(0.12):  # C transposed on the way out, through shared memory
        C = k.tensor("Ct", [str(N), Ms], [N, M], out_dt, role="out")
        Cs = k.alloc("shared", (bm, bn), out_dt, "C_shared")
        b.emit(f"T.copy({Cf}, {Cs})")
        b.open(f"for j, i in T.Parallel({bn}, {bm}):")
        b.open(f"if bx * {bn} + j < {N} and by * {bm} + i < {Ms}:")
        b.emit(f"Ct[bx * {bn} + j, by * {bm} + i] = {Cs}[i, j]")
        b.close(2)
        k.features.add("tc_store_transposed")
        return
    C = k.tensor("C", [Ms, str(N)], [M, N], out_dt, role="out")
    if c.flip(0.3):
        Cs = k.alloc("shared", (bm, bn), out_dt, "C_shared")
        b.emit(f"T.copy({Cf}, {Cs})")
        b.emit(f"T.copy({Cs}, C[by * {bm}, bx * {bn}])")
        k.features.add("tc_store_via_shared")
    else:
        b.emit(f"T.copy({Cf}, C[by * {bm}, bx * {bn}])")


FAMILIES: list = [(gen_attention, 2), (gen_chained_gemm, 2), (gen_gemm_tc, 2)]
