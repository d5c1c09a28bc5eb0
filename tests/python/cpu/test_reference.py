"""tegula.testing.reference: the language's meaning, computed on the CPU, checked against
torch in float64 on random inputs. Kernels compile for sm_90a (no GPU needed); nothing is
launched. Outputs start poisoned (NaN), so an element the program never writes fails."""
import pytest
import torch

import replicated_programs

import tegula
import tegula.language as T

try:
    import tegula._C  # noqa: F401
    import tegula.testing as tt
except ImportError as err:  # pragma: no cover - the extension is not built
    pytest.skip(f"tegula._C is not built ({err})", allow_module_level=True)

with open(__file__, encoding="utf-8") as _f:
    _LINES = _f.read().splitlines()


def line_of(marker: str) -> int:
    hits = [n for n, line in enumerate(_LINES, 1) if marker in line and "line_of(" not in line]
    assert len(hits) == 1, f"marker {marker!r} must occur once in this file, found {len(hits)}"
    return hits[0]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def same(a, b) -> bool:
    """Bitwise-equal values, NaN matching NaN."""
    return a.dtype == b.dtype and torch.equal(torch.nan_to_num(a, nan=0.5), torch.nan_to_num(b, nan=0.5)) and \
        torch.equal(torch.isnan(a), torch.isnan(b))


def assert_close(out, ref, rtol, what="output"):
    out64, ref64 = out.double(), ref.double()
    assert not torch.isnan(out64).any(), f"{what}: NaN (an element never written?)"
    err = ((out64 - ref64).abs() / (ref64.abs() + 1e-30)).max().item()
    assert torch.allclose(out64, ref64, rtol=rtol, atol=rtol), f"{what}: max relative error {err:.3e}"


# ---- the program whose GPU code gets Y wrong: the reference must not ----

def center(M, N):
    return replicated_programs.center(M, N, target="sm_90a")


@pytest.mark.parametrize("M,N", [(4, 64), (7, 100)])
def test_center_is_exact_to_float32_rounding(M, N):
    X = torch.randn(M, N, generator=gen(1))
    Y, S = tt.reference(center(M, N), X)
    # The sum is exact in double, rounded once to float32; every later step is one float32 op.
    s = X.double().sum(1).float()
    mean = s / N
    assert torch.equal(S, mean)
    assert torch.equal(Y, X - mean[:, None])


# ---- elementwise, casts, 16-bit rounding ----

@tegula.jit(out_idx=[-1], target="sm_90a")
def scaled_exp(M, N, bm, bn):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), s: T.float32, B: T.Tensor((M, N), "bfloat16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a = T.alloc_shared((bm, bn), "float16")
            b = T.alloc_fragment((bm, bn), "bfloat16")
            T.copy(A[by * bm, bx * bn], a)
            for i, j in T.Parallel(bm, bn):
                b[i, j] = T.exp(T.cast(a[i, j], "float32")) * s + 1.0
            T.copy(b, B[by * bm, bx * bn])
    return main


def test_elementwise_with_casts_on_ragged_tiles():
    M, N = 50, 70  # not multiples of the 16 x 32 tile: the copies mask the edges
    A = torch.randn(M, N, generator=gen(2)).half()
    B = tt.reference(scaled_exp(M, N, 16, 32), A, 0.75)
    ref = (torch.exp(A.double()).float() * torch.tensor(0.75, dtype=torch.float32) + 1.0).to(torch.bfloat16)
    assert B.dtype == torch.bfloat16
    assert torch.equal(B, ref)


@tegula.jit(out_idx=[-3, -2, -1], target="sm_90a")
def half_math(N):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), H: T.Tensor((N,), "float16"), P: T.Tensor((N,), "float16"),
             Q: T.Tensor((N,), "bfloat16")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(N):
                h = T.cast(X[i], "float16")
                H[i] = h
                P[i] = h * h + h  # fp16 arithmetic: each op rounds to half
                Q[i] = T.cast(X[i], "bfloat16") * T.cast(3.0, "bfloat16")
    return main


def test_fp16_and_bf16_rounding():
    X = torch.cat([torch.randn(200, generator=gen(3)) * 100,
                   torch.tensor([70000.0, -1e6, 1e-6, -3e-7, 6.1e-5, 0.0, 65504.0, 65520.0])])
    N = X.numel()
    H, P, Q = tt.reference(half_math(N), X)
    h = X.half()
    assert torch.equal(H, h)  # overflow to inf, subnormals, ties to even
    assert same(P, (h * h).float().add(h.float()).half())
    assert torch.equal(Q, (X.bfloat16().float() * 3.0).bfloat16())


# ---- integer arithmetic, select, global masking ----

@tegula.jit(out_idx=[-1], target="sm_90a")
def int_ops(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32"), C: T.Tensor((5, N), "int32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(N):
                C[0, i] = A[i] / B[i]    # truncating, as in C
                C[1, i] = A[i] // B[i]   # floor
                C[2, i] = A[i] % B[i]    # floor modulo
                C[3, i] = A[i] * 65537   # wraps at 32 bits
                C[4, i] = T.if_then_else(A[i] > 0, A[i] >> 1, -A[i])
    return main


def test_int32_division_modulo_and_wrapping():
    N = 64
    A = torch.randint(-100000, 100000, (N,), generator=gen(4), dtype=torch.int32)
    B = torch.randint(1, 50, (N,), generator=gen(5), dtype=torch.int32) * (1 - 2 * (torch.arange(N) % 2)).int()
    C = tt.reference(int_ops(N), A, B)
    a, b = A.long(), B.long()
    assert torch.equal(C[0].long(), torch.div(a, b, rounding_mode="trunc"))
    assert torch.equal(C[1].long(), torch.div(a, b, rounding_mode="floor"))
    assert torch.equal(C[2].long(), a - torch.div(a, b, rounding_mode="floor") * b)
    wrapped = (a * 65537) % 2**32
    assert torch.equal(C[3].long(), torch.where(wrapped >= 2**31, wrapped - 2**32, wrapped))
    assert torch.equal(C[4].long(), torch.where(a > 0, a >> 1, -a))


@tegula.jit(out_idx=[-1], target="sm_90a")
def shifted(N, shift):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_shared((4,), "float32")
            T.fill(f, 1.0)
            for i in T.Parallel(N + shift):
                # a read past X's edge gives 0; a store past Y's edge is skipped; the
                # untaken side of a select is not evaluated (f[i] for i >= 4)
                Y[i] = X[i + shift] + T.if_then_else(i < 4, f[i], 0.0)
    return main


def test_global_accesses_past_the_edge_are_masked():
    N, shift = 37, 5
    X = torch.randn(N, generator=gen(6))
    Y = tt.reference(shifted(N, shift), X)
    ref = torch.zeros(N, dtype=torch.float64)
    ref[: N - shift] = X[shift:].double()
    ref[:4] += 1
    assert torch.equal(Y.double(), ref.float().double())


# ---- copies ----

@tegula.jit(out_idx=[-2, -1], target="sm_90a")
def tile_copies(M, N, bm, bn):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), R: T.Tensor((M, bn), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            s = T.alloc_shared((bm, bn), "float32")
            f = T.alloc_fragment((bm, bn), "float32")
            row = T.alloc_fragment((bn,), "float16")
            for k in T.serial(T.ceildiv(N, bn)):
                T.copy(X[bx * bm:(bx + 1) * bm, k * bn:(k + 1) * bn], s)  # slice form
                T.copy(s, f)
                T.copy(f, Y[bx * bm, k * bn])                              # corner form
            for r in T.serial(bm):
                # a 2-D corner into a 1-D fragment: the trailing dimension takes its extent
                T.copy(X[bx * bm + r, 0], row)
                T.copy(row, R[bx * bm + r, 0:bn])
    return main


@pytest.mark.parametrize("M,N", [(64, 64), (45, 70)])
def test_copies_with_ragged_edges(M, N):
    X = torch.randn(M, N, generator=gen(7))
    Y, R = tt.reference(tile_copies(M, N, 16, 32), X)
    assert torch.equal(Y, X)
    assert torch.equal(R, X[:, :32].half())


# ---- reductions ----

def reduce_kernel(kind, dim, clear):
    reducer = getattr(T, f"reduce_{kind}")

    @tegula.jit(out_idx=[-1], target="sm_90a")
    def k(M, N):
        out_len = M if dim == 1 else N

        @T.prim_func
        def main(X: T.Tensor((M, N), "float32"), Init: T.Tensor((out_len,), "float32"),
                 Out: T.Tensor((out_len,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((M, N), "float32")
                r = T.alloc_fragment((out_len,), "float32")
                T.copy(X, x)
                T.copy(Init, r)
                reducer(x, r, dim=dim, clear=clear)
                T.copy(r, Out)
        return main
    return k


TORCH_REDUCE = {
    "sum": lambda x, d: x.sum(d),
    "max": lambda x, d: x.amax(d),
    "min": lambda x, d: x.amin(d),
    "abssum": lambda x, d: x.abs().sum(d),
    "absmax": lambda x, d: x.abs().amax(d),
}


@pytest.mark.parametrize("kind", sorted(TORCH_REDUCE))
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("clear", [True, False])
def test_reductions(kind, dim, clear):
    M, N = 12, 40
    X = torch.randn(M, N, generator=gen(8))
    Init = torch.randn(M if dim == 1 else N, generator=gen(9))
    out = tt.reference(reduce_kernel(kind, dim, clear)(M, N), X, Init)
    red = TORCH_REDUCE[kind](X.double(), dim).float()
    if not clear:
        init = Init.double()
        red = {"max": torch.maximum, "absmax": torch.maximum, "min": torch.minimum}.get(
            kind, torch.add)(init, red.double()).float()
    assert_close(out, red, 1e-6, f"reduce_{kind}(dim={dim}, clear={clear})")


def test_max_and_reduce_max_propagate_nan():
    M, N = 4, 16
    X = torch.randn(M, N, generator=gen(10))
    X[1, 3] = float("nan")
    out = tt.reference(reduce_kernel("max", 1, True)(M, N), X, torch.zeros(M))
    assert torch.isnan(out[1]) and not torch.isnan(out[[0, 2, 3]]).any()
    assert torch.equal(out[[0, 2, 3]], X[[0, 2, 3]].amax(1))


# ---- gemm ----

@tegula.jit(out_idx=[-1], target="sm_90a")
def matmul(M, N, K, ta, tb, bm=64, bn=64, bk=32):
    a_shape = (K, M) if ta else (M, K)
    b_shape = (N, K) if tb else (K, N)
    a_tile = (bk, bm) if ta else (bm, bk)
    b_tile = (bn, bk) if tb else (bk, bn)

    @T.prim_func
    def main(A: T.Tensor(a_shape, "float16"), B: T.Tensor(b_shape, "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a = T.alloc_shared(a_tile, "float16")
            b = T.alloc_shared(b_tile, "float16")
            c = T.alloc_fragment((bm, bn), "float32")
            T.clear(c)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if ta:
                    T.copy(A[k * bk, by * bm], a)
                else:
                    T.copy(A[by * bm, k * bk], a)
                if tb:
                    T.copy(B[bx * bn, k * bk], b)
                else:
                    T.copy(B[k * bk, bx * bn], b)
                T.gemm(a, b, c, transpose_A=ta, transpose_B=tb)
            T.copy(c, C[by * bm, bx * bn])
    return main


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("M,N,K", [(64, 128, 64), (100, 72, 80)])
def test_gemm_fp16_in_fp32_accumulate(ta, tb, M, N, K):
    A = torch.randn(M, K, generator=gen(11)).half()
    B = torch.randn(K, N, generator=gen(12)).half()
    a = A.t().contiguous() if ta else A
    b = B.t().contiguous() if tb else B
    C = tt.reference(matmul(M, N, K, ta, tb), a, b)
    assert_close(C, A.double() @ B.double(), 1e-5, "C")


@tegula.jit(out_idx=[-1], target="sm_90a")
def gemm_clear_accum(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((M, K), "float16")
            b = T.alloc_shared((K, N), "float16")
            c = T.alloc_fragment((M, N), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.fill(c, 123.0)
            T.gemm(a, b, c, policy=T.GemmWarpPolicy.FullRow, clear_accum=True)  # drops the 123s
            T.gemm(a, b, c, policy=T.GemmWarpPolicy.FullRow)  # accumulates: 2 A @ B
            T.copy(c, C)
    return main


def test_gemm_from_a_fragment_with_clear_accum():
    M, N, K = 64, 32, 48
    A = torch.randn(M, K, generator=gen(13)).half()
    B = torch.randn(K, N, generator=gen(14)).half()
    C = tt.reference(gemm_clear_accum(M, N, K), A, B)
    assert_close(C, 2 * (A.double() @ B.double()), 1e-6, "C")


# ---- atomic_add, and norms built on the language ----

@tegula.jit(out_idx=[], target="sm_90a")
def column_sums(M, N, bm):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32"), Count: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            part = T.alloc_fragment((N,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_sum(x, part, dim=0)
            T.atomic_add(S[0:N], part)          # a region, elementwise
            T.atomic_add(Count[0], 1.0)         # one element
    return main


def test_atomic_add_accumulates_across_blocks():
    M, N, bm = 50, 24, 16
    X = torch.randn(M, N, generator=gen(15))
    S, Count = torch.full((N,), 0.5), torch.zeros(1)
    assert tt.reference(column_sums(M, N, bm), X, S, Count) is None
    assert_close(S, X.double().sum(0) + 0.5, 1e-6, "S")
    assert Count.item() == -(-M // bm)


@tegula.jit(out_idx=[-1], target="sm_90a")
def layernorm_fwd(M, N, blk_m, eps=1e-5):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"), Bias: T.Tensor((N,), "float32"),
             Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
            x = T.alloc_fragment((blk_m, N), "float32")
            sq = T.alloc_fragment((blk_m, N), "float32")
            mean = T.alloc_fragment((blk_m,), "float32")
            var = T.alloc_fragment((blk_m,), "float32")
            T.copy(X[bx * blk_m:(bx + 1) * blk_m, :], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(blk_m):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = x[i, j] - mean[i]
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, var, dim=1)
            for i in T.Parallel(blk_m):
                var[i] = T.rsqrt(var[i] / N + eps)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = x[i, j] * var[i] * W[j] + Bias[j]
            T.copy(x, Y[bx * blk_m:(bx + 1) * blk_m, :])
    return main


@pytest.mark.parametrize("M,N", [(32, 128), (37, 96)])
def test_layernorm_forward(M, N):
    X = torch.randn(M, N, generator=gen(16)) * 2 + 0.5
    W, Bias = torch.randn(N, generator=gen(17)), torch.randn(N, generator=gen(18))
    Y = tt.reference(layernorm_fwd(M, N, 8), X, W, Bias)
    ref = torch.nn.functional.layer_norm(X.double(), (N,), W.double(), Bias.double(), eps=1e-5)
    assert_close(Y, ref, 1e-5, "Y")


@tegula.jit(out_idx=[], target="sm_90a")
def rms_partial(M, N, splits):
    chunk = N // splits

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), SS: T.Tensor((M,), "float32")):
        with T.Kernel(splits, M, threads=128) as (bk, bm):
            x = T.alloc_fragment((1, chunk), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bm, bk * chunk], x)
            for i, j in T.Parallel(1, chunk):
                x[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(x, s, dim=1)
            for i in T.Parallel(1):
                T.atomic_add(SS[bm + i], s[i])
    return main


@tegula.jit(out_idx=[-1], target="sm_90a")
def rms_apply(M, N, blk_n, eps=1e-6):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), SS: T.Tensor((M,), "float32"), W: T.Tensor((N,), "float16"),
             Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, blk_n), M, threads=128) as (bn, bm):
            for j in T.Parallel(blk_n):
                Y[bm, bn * blk_n + j] = X[bm, bn * blk_n + j] * T.rsqrt(SS[bm] / N + eps) * W[bn * blk_n + j]
    return main


def test_split_k_rmsnorm():
    M, N, splits = 6, 256, 4
    X = torch.randn(M, N, generator=gen(19))
    W = torch.randn(N, generator=gen(20)).half()
    SS = torch.zeros(M)
    tt.reference(rms_partial(M, N, splits), X, SS)
    assert_close(SS, X.double().pow(2).sum(1), 1e-6, "SS")
    Y = tt.reference(rms_apply(M, N, 96), X, SS, W)  # 96 does not divide 256: masked edge
    x = X.double()
    ref = x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6) * W.double()
    assert_close(Y, ref, 2e-3, "Y")  # fp16 output


# ---- dynamic sizes and scalar arguments ----

def test_dynamic_sizes_and_scalar_arguments():
    m = T.dynamic("m")

    @tegula.jit(out_idx=[-1], target="sm_90a")
    def axpb():
        @T.prim_func
        def main(A: T.Tensor((m, 48), "float32"), s: T.float32, c: T.int32, B: T.Tensor((m, 48), "float32")):
            with T.Kernel(T.ceildiv(m, 16), threads=128) as bx:
                t = T.alloc_shared((16, 48), "float32")
                T.copy(A[bx * 16, 0], t)
                for i, j in T.Parallel(16, 48):
                    t[i, j] = t[i, j] * s + c
                T.copy(t, B[bx * 16, 0])
        return main

    kernel = axpb()
    for rows in (16, 45, 3):
        A = torch.randn(rows, 48, generator=gen(rows))
        B = tt.reference(kernel, A, 0.1, -3)
        assert B.shape == (rows, 48)
        ref = A * torch.tensor(0.1, dtype=torch.float32) + torch.tensor(-3.0)
        assert torch.equal(B, ref)


# ---- programs whose meaning is undefined ----

@tegula.jit(out_idx=[-1], target="sm_90a")
def indexed_by_argument(N, scope):
    # A fragment may only be indexed by T.Parallel variables (the compiler checks that), so
    # a data-dependent index, which only the reference can check, goes to shared or local.
    alloc = T.alloc_shared if scope == "shared" else T.alloc_local

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), pos: T.int32, Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = alloc((N,), "float32")
            for i in T.serial(N):
                f[i] = X[i]
            Y[0] = f[pos + 1]  # MARK-oob-read
    return main


@pytest.mark.parametrize("scope", ["shared", "local"])
def test_out_of_bounds_index_points_at_the_line(scope):
    kernel = indexed_by_argument(8, scope)
    X = torch.randn(8, generator=gen(21))
    assert tt.reference(kernel, X, 6).item() == X[7].item()
    with pytest.raises(tegula.TegulaCompileError) as info:
        tt.reference(kernel, X, 7)
    assert info.value.line == line_of("MARK-oob-read")
    assert "index 8 of 'f' is out of bounds for its shape (8,)" in str(info.value)


@tegula.jit(out_idx=[-1], target="sm_90a")
def uses_thread_index(N):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            Y[tx] = X[tx]  # MARK-thread-index
    return main


def test_programs_using_the_thread_index_are_refused():
    with pytest.raises(tegula.TegulaCompileError) as info:
        tt.reference(uses_thread_index(128), torch.randn(128))
    assert info.value.line == line_of("MARK-thread-index")
    assert "thread index" in str(info.value)


@tegula.jit(out_idx=[-1], target="sm_90a")
def hinted_copy(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 32), threads=128) as (bx, by):
            s = T.alloc_shared((32, 64), "float16")
            T.annotate_layout({s: T.layout.make_swizzled_layout(s)})
            T.use_swizzle(panel_size=4)
            T.copy(X[by * 32, bx * 64], s)
            T.print(s[0, 0], msg="first")
            T.copy(s, Y[by * 32, bx * 64])
    return main


def test_hints_and_print_do_not_change_values():
    X = torch.randn(64, 128, generator=gen(22)).half()
    assert torch.equal(tt.reference(hinted_copy(64, 128), X), X)
