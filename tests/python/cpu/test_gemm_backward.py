"""matmul's backward without a GPU: the GEMM programs read either operand transposed in
place (trans_a: A stored (K, M); trans_b: B stored (N, K)) and compile to tensor cores on
both instruction paths, while the default layout's source is byte for byte what it was;
each layout's lowered code simulated thread by thread (and the program interpreted as
written) matches torch on ragged shapes; the activation-derivative and bias-gradient
kernel matches torch's autograd; and matmul_backward's dispatch, run end to end with every
kernel simulated, gives torch's gradients."""
import importlib

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

gemm = importlib.import_module("tegula.kernels.gemm")
gemm_bwd = importlib.import_module("tegula.kernels.gemm_backward")
apply_epilogue, parse_epilogue = gemm.apply_epilogue, gemm._parse_epilogue

LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]
# (target, engine path): sm_90a's default loads through TMA into warp-specialised
# pipelines, its legacy path through cp.async; sm_80 runs mma.sync.
TARGET_PATHS = [("sm_90a", "auto"), ("sm_90a", "legacy"), ("sm_80", "auto")]
# Tiles small enough to simulate; 64 rows keep sm_90a on wgmma (its smallest M).
TILE = dict(block_M=64, block_N=32, block_K=32, num_stages=2, threads=128)
SPLIT_TILE = dict(TILE, combine_M=16, combine_N=32, combine_threads=64)
GRAD_TILE = dict(block_M=16, block_N=64, threads=128, combine_N=64, combine_threads=64)
DECODE_TILE = dict(block_N=64, block_K=32, num_stages=2, threads=128)
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def stored(x, trans):
    """The logical matrix x as the kernel takes it: x itself, or its transpose, contiguous."""
    return x.t().contiguous() if trans else x.contiguous()


def assert_near(out, ref, dtype, what=""):
    assert not torch.isnan(out.float()).any(), f"{what}: an output element was never written (still poisoned)"
    torch.testing.assert_close(out.float(), ref.float(), rtol=TOL[dtype], atol=TOL[dtype], msg=lambda m: f"{what}: {m}")


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all(), "non-finite output"
    return ((out - ref).norm() / ref.norm()).item()


# ---- the default layout is today's program, unchanged ----

def frozen_matmul_program(M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128,
                          dtype="float16", accum_dtype="float32", epilogue="none", ldb=None, panel_size=4):
    """matmul_program as it was before the layouts (the reference its default must equal)."""
    ldb = N if ldb is None else ldb
    has_bias, act = parse_epilogue(epilogue)

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, ldb), dtype), Bias: T.Tensor((N,), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.use_swizzle(panel_size=panel_size)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            apply_epilogue(C_local, Bias, bx * block_N, block_M, block_N, has_bias, act, accum_dtype)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def frozen_splitk_program(M, N, K, splits, block_M=64, block_N=128, block_K=64, num_stages=4, threads=128,
                          dtype="float16", accum_dtype="float32", epilogue="none", ldb=None, combine_M=16,
                          combine_N=128, combine_threads=128):
    """matmul_splitk_program as it was before the layouts."""
    ldb = N if ldb is None else ldb
    has_bias, act = parse_epilogue(epilogue)
    k_steps = -(-K // block_K)
    per_slice = -(-k_steps // splits)

    @T.prim_func
    def gemm_splitk(A: T.Tensor((M, K), dtype), B: T.Tensor((K, ldb), dtype), Bias: T.Tensor((N,), dtype),
                    C: T.Tensor((M, N), dtype)):
        Partial = T.alloc_global((splits, M, N), accum_dtype)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            first = bz * per_slice
            for k in T.Pipelined(T.min(per_slice, k_steps - first), num_stages=num_stages):
                T.copy(A[by * block_M, (first + k) * block_K], A_shared)
                T.copy(B[(first + k) * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, Partial[bz, by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N])

        with T.Kernel(T.ceildiv(N, combine_N), T.ceildiv(M, combine_M), threads=combine_threads) as (bx, by):
            part = T.alloc_fragment((combine_M, combine_N), accum_dtype)
            acc = T.alloc_fragment((combine_M, combine_N), accum_dtype)
            T.clear(acc)
            for s in T.unroll(splits):
                T.copy(Partial[s, by * combine_M:(by + 1) * combine_M, bx * combine_N:(bx + 1) * combine_N], part)
                for i, j in T.Parallel(combine_M, combine_N):
                    acc[i, j] += part[i, j]
            apply_epilogue(acc, Bias, bx * combine_N, combine_M, combine_N, has_bias, act, accum_dtype)
            T.copy(acc, C[by * combine_M, bx * combine_N])

    return gemm_splitk


def _source(program, target, path):
    return tegula.compile(program, out_idx=[-1], target=target, pass_configs=gemm.PATHS[path]).get_kernel_source()


@pytest.mark.parametrize("target,path", TARGET_PATHS)
@pytest.mark.parametrize("case", ["tiled", "tiled_padded_gelu", "split_k", "split_k_padded_relu"])
def test_the_default_layout_compiles_to_the_same_source(case, target, path):
    tiled = dict(block_M=128, block_N=256, block_K=64, num_stages=4, threads=256, panel_size=8) \
        if target == "sm_90a" else {}
    shape, kw, new, old = {
        "tiled": ((2048, 2048, 2048), tiled, gemm.matmul_program, frozen_matmul_program),
        "tiled_padded_gelu": ((300, 36, 160), dict(ldb=40, epilogue="bias_gelu"), gemm.matmul_program,
                              frozen_matmul_program),
        "split_k": ((16, 4096, 4096, 8), gemm.SPLIT_K_CONFIG, gemm.matmul_splitk_program, frozen_splitk_program),
        "split_k_padded_relu": ((7, 36, 160, 2), dict(ldb=40, epilogue="bias_relu"), gemm.matmul_splitk_program,
                                frozen_splitk_program),
    }[case]
    reference = _source(old(*shape, **kw), target, path)
    assert _source(new(*shape, **kw), target, path) == reference
    assert _source(new(*shape, **kw, trans_a=False, trans_b=False), target, path) == reference


# ---- the transposed layouts ----

def _gemm_call(src):
    line = next(line for line in src.splitlines() if "wgmma_ss<" in line or "gemm_ss<" in line)
    return line[line.index("<") + 1:line.index(">")].split(", ")


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("ta,tb", LAYOUTS[1:])
def test_transposed_layouts_compile_to_tensor_cores(target, ta, tb):
    tiled = gemm.default_config(4096, 4096, 4096, wgmma=target == "sm_90a")
    for program in (gemm.matmul_program(4096, 4096, 4096, **tiled, trans_a=ta, trans_b=tb),
                    gemm.matmul_splitk_program(64, 4096, 4096, 8, **gemm.SPLIT_K_CONFIG, trans_a=ta, trans_b=tb)):
        k = tegula.compile(program, out_idx=[-1], target=target)
        src = k.get_kernel_source()
        args = _gemm_call(src)
        # The tile extents, the warp split, then the two transpose flags.
        assert args[5:7] == [str(int(ta)), str(int(tb))], args
        if target == "sm_90a":
            assert "tegula::wgmma_ss<" in src and k._lowered.warp_specialized and "tma_load" in src
        else:
            assert "tegula::gemm_ss<" in src and "wgmma" not in src and "cp_async_16" in src
        assert all(len(k.cubin(i)) > 0 for i in range(k.num_kernels))


def _inputs(M, N, K, ta, tb, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=gen).to(dtype)
    b = torch.randn(K, N, generator=gen).to(dtype)
    bias = torch.randn(N, generator=gen).to(dtype)
    return a, b, bias, stored(a, ta), stored(b, tb)


def _epilogue_reference(a, b, bias, epilogue):
    has_bias, act = parse_epilogue(epilogue)
    c = a.float() @ b.float() + (bias.float() if has_bias else 0.0)
    if act == "relu":
        c = torch.relu(c)
    if act == "gelu":
        c = torch.nn.functional.gelu(c, approximate="tanh")
    return c


@pytest.mark.parametrize("target,path", TARGET_PATHS)
@pytest.mark.parametrize("ta,tb", LAYOUTS)
@pytest.mark.parametrize("splits,epilogue,dtype", [(1, "none", torch.float16), (1, "bias_gelu", torch.bfloat16),
                                                   (2, "bias_relu", torch.float16)])
def test_layouts_simulated_and_reference_match_torch(target, path, ta, tb, splits, epilogue, dtype):
    """40 x 24 x 56: every extent ragged against the 64 x 32 x 32 tile (two K steps, the
    second partial), the split-K version cutting K into one step a slice."""
    M, N, K = 40, 24, 56
    a, b, bias, a_st, b_st = _inputs(M, N, K, ta, tb, dtype, seed=M + 2 * ta + tb + splits)
    kw = dict(dtype=gemm.dtype_name(dtype), epilogue=epilogue, trans_a=ta, trans_b=tb)
    if splits == 1:
        program = gemm.matmul_program(M, N, K, **TILE, **kw)
    else:
        program = gemm.matmul_splitk_program(M, N, K, splits, **SPLIT_TILE, **kw)
    k = tegula.compile(program, out_idx=[-1], target=target, pass_configs=gemm.PATHS[path])
    ref = _epilogue_reference(a, b, bias, epilogue)
    assert_near(tt.simulate(k, a_st, b_st, bias), ref, dtype, "simulated")
    assert_near(tt.reference(k, a_st, b_st, bias), ref, dtype, "reference")


@pytest.mark.parametrize("target,path", TARGET_PATHS)
def test_a_transposed_a_with_padded_rows_stores_only_m_rows(target, path):
    """lda > M (A stored (K, lda), its rows padded for 16-byte loads): the products of
    columns M..lda belong to rows of C that do not exist and are never stored; likewise ldb."""
    M, N, K, lda, ldb = 36, 20, 72, 40, 24
    gen = torch.Generator().manual_seed(5)
    a_st = torch.randn(K, lda, generator=gen).half()
    b_st = torch.randn(K, ldb, generator=gen).half()
    k = tegula.compile(gemm.matmul_program(M, N, K, **TILE, trans_a=True, lda=lda, ldb=ldb), out_idx=[-1],
                       target=target, pass_configs=gemm.PATHS[path])
    out = tt.simulate(k, a_st, b_st, torch.zeros(N).half())
    assert out.shape == (M, N)
    assert_near(out, a_st[:, :M].float().t() @ b_st[:, :N].float(), torch.float16)


def test_the_layout_arguments_are_checked():
    with pytest.raises(ValueError, match=r"matmul_program: lda .* needs trans_a=True, got lda=48"):
        gemm.matmul_program(40, 24, 56, lda=48)
    with pytest.raises(ValueError, match=r"matmul_splitk_program: ldb .* takes no ldb, got ldb=32"):
        gemm.matmul_splitk_program(16, 24, 256, 2, trans_b=True, ldb=32)
    with pytest.raises(ValueError, match="lda and ldb must be at least M=40 and N=24"):
        gemm.matmul_program(40, 24, 56, trans_a=True, lda=32)


# ---- where the operands are read from, and their padding ----

def test_a_transposed_view_is_read_in_place():
    x = torch.randn(24, 40).half()
    assert gemm._stored(x) == (x, False)
    st, trans = gemm._stored(x.t())
    assert trans and st.data_ptr() == x.data_ptr() and st.shape == (24, 40)
    for view in (x[:, 1:], x[::2], x[:1].expand(24, 40), x.t()[1:]):
        st, trans = gemm._stored(view)
        assert not trans and st.is_contiguous() and torch.equal(st, view)


@pytest.mark.parametrize("ta,tb", LAYOUTS)
@pytest.mark.parametrize("M,N,K", [(40, 24, 56), (37, 21, 53), (16, 44, 30), (48, 32, 19)])
def test_padding_keeps_the_product(monkeypatch, M, N, K, ta, tb):
    """Every stored row length padded to a multiple of 8 (K only where K is a row length, M
    through lda, N through ldb); the padded operands' product, cut to (M, N), is the product."""
    monkeypatch.setattr(gemm, "PAD_MIN_WORK", 0)
    gen = torch.Generator().manual_seed(M * N + K)
    a, b = torch.randn(M, K, generator=gen).half(), torch.randn(K, N, generator=gen).half()
    a_p, b_p, K_run, layout = gemm._aligned_operands(stored(a, ta), stored(b, tb), ta, tb)
    assert all(r % 8 == 0 for r in (a_p.shape[1], b_p.shape[1]))
    assert layout.get("trans_a", False) == ta and layout.get("trans_b", False) == tb
    assert (a_p.shape[0] if ta else a_p.shape[1]) == K_run == (b_p.shape[1] if tb else b_p.shape[0])
    if ta:
        assert layout["lda"] == a_p.shape[1] >= M
    if not tb:
        assert layout["ldb"] == b_p.shape[1] >= N
    else:
        assert "ldb" not in layout
    product = (a_p.float().t()[:M] if ta else a_p.float()) @ (b_p.float().t()[:, :N] if tb else b_p.float()[:, :N])
    assert torch.equal(product, a.float() @ b.float())


def test_the_forward_keeps_its_layout_arguments():
    a, b = torch.zeros(40, 56).half(), torch.zeros(56, 24).half()
    assert gemm._aligned_operands(a, b)[2:] == (56, {"ldb": 24})
    # The TN product of the backward: K is only a row count, so nothing to pad there.
    a_big, b_big = torch.zeros(4100, 1020).half(), torch.zeros(4100, 1023).half()
    a_p, b_p, K_run, layout = gemm._aligned_operands(a_big, b_big, True, False)
    assert K_run == 4100 and layout == {"trans_a": True, "lda": 1024, "ldb": 1024}
    assert a_p.shape == (4100, 1024) and b_p.shape == (4100, 1024)


# ---- dZ and dbias ----

def _activation_reference(dc, saved, activation, bias_grad):
    """torch's autograd in float32: relu's gradient gated by its output, gelu's from its
    input; dbias the column sums of dZ rounded to dC's dtype, as torch sums its dZ."""
    if activation == "none":
        dz = dc.float()
    elif activation == "relu":
        dz = torch.ops.aten.threshold_backward(dc.float(), saved.float(), 0.0)
    else:
        z = saved.float().requires_grad_()
        (dz,) = torch.autograd.grad(torch.nn.functional.gelu(z, approximate="tanh"), z, dc.float())
    return dz, (dz.to(dc.dtype).float().sum(0) if bias_grad else None)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("activation,bias_grad,splits,M,N,dtype", [
    ("relu", True, 1, 40, 24, torch.float16),
    ("relu", False, 3, 100, 72, torch.bfloat16),
    ("gelu", True, 3, 100, 72, torch.float16),      # 7 row tiles: slices of 3, 3 and 1
    ("gelu", False, 1, 33, 130, torch.bfloat16),
    ("none", True, 2, 100, 70, torch.float16),
    ("none", True, 1, 5, 24, torch.bfloat16),
])
def test_activation_grad_matches_torch_autograd(target, activation, bias_grad, splits, M, N, dtype):
    k = tegula.compile(gemm_bwd.activation_grad_program(M, N, activation, bias_grad, splits, dtype=gemm.dtype_name(dtype),
                                                    **GRAD_TILE), target=target)
    assert k.num_kernels == (2 if bias_grad and splits > 1 else 1)
    gen = torch.Generator().manual_seed(M + N + splits)
    dc = torch.randn(M, N, generator=gen).to(dtype)
    saved = torch.randn(M, N, generator=gen).to(dtype)
    if activation == "relu":
        saved = torch.relu(saved)
        saved[0, :3] = float("nan")   # a NaN output passes the gradient, as in torch
    dz_ref, dbias_ref = _activation_reference(dc, saved, activation, bias_grad)
    dz = torch.full((M, N), float("nan"), dtype=dtype)
    dbias = torch.full((N,), float("nan"), dtype=dtype)
    if activation == "none":
        tt.simulate(k, dc, dc, dc, dbias)
    else:
        tt.simulate(k, dc, saved, dz, dbias)
        assert_near(dz, dz_ref, dtype, "dz")
    if bias_grad:
        assert_near(dbias, dbias_ref, dtype, "dbias")
    else:
        assert torch.isnan(dbias.float()).all(), "dbias written though not asked for"


def test_the_activation_grad_arguments_are_checked():
    with pytest.raises(ValueError, match="activation must be 'none', 'relu' or 'gelu', got 'silu'"):
        gemm_bwd.activation_grad_program(64, 64, "silu", True, 1)
    with pytest.raises(ValueError, match="computes nothing"):
        gemm_bwd.activation_grad_program(64, 64, "none", False, 1)
    with pytest.raises(ValueError, match="splits must leave every slice"):
        gemm_bwd.activation_grad_program(128, 64, "relu", True, 3)   # 4 row tiles: 2 + 2 + 0


@pytest.mark.parametrize("M,N,sms,splits", [
    (8192, 4096, 132, 16),   # 16 column tiles want 17 slices; slices of 16 row tiles make 16
    (4096, 4096, 132, 16),   # 128 row tiles: 16 slices of 8
    (2048, 4096, 132, 8),    # 64 row tiles allow 8
    (64, 4096, 132, 1),      # 2 row tiles
    (8192, 65536, 132, 1),   # 256 column tiles already cover the SMs
])
def test_row_split_rule(M, N, sms, splits):
    assert gemm_bwd.grad_row_splits(M, N, sms) == splits


def test_row_split_rule_never_leaves_a_slice_empty():
    for M in (1, 31, 256, 1000, 4097, 8192, 65536):
        for N in (8, 1000, 4096, 11008):
            for sms in (16, 132):
                s = gemm_bwd.grad_row_splits(M, N, sms)
                tiles = -(-M // 32)
                assert s >= 1 and (s == 1 or (s - 1) * -(-tiles // s) < tiles), (M, N, sms, s)


def test_outer_products_take_a_short_pipeline():
    assert gemm_bwd.backward_config(4096, 4096, 16)["num_stages"] == 1
    assert gemm_bwd.backward_config(4096, 4096, 128)["num_stages"] == 2
    assert gemm_bwd.backward_config(4096, 4096, 4096) == {}
    assert gemm_bwd.backward_config(64, 4096, 16) == {}      # decode-shaped: split-K's rule


# ---- matmul_backward end to end, every kernel simulated ----

def _simulated_dispatch(monkeypatch, target="sm_90a"):
    """kernel_for and activation_grad_kernel_for with their real choices of program
    (sm_90a's: the decode kernel for M <= 64) and layout, on small tiles, each kernel run
    by the simulator; records the GEMMs' shapes and layouts, and the programs they ran."""
    calls = []

    def kernel_for(M, N, K, dtype, epilogue="none", sms=None, **config):
        layout = {k: config[k] for k in ("trans_a", "trans_b", "lda", "ldb") if k in config}
        kw = dict(dtype=gemm.dtype_name(dtype), epilogue=epilogue, **layout)
        if M <= gemm.DECODE_MAX_M and not set(config) - gemm.LAYOUT_KEYS:
            # the decode kernel (sm_90a's rule), on a small tile, with two K slices where K has two steps
            block_M = min(64, max(16, 1 << (M - 1).bit_length()))
            program = gemm.matmul_decode_program(M, N, K, min(2, -(-K // 32)), block_M=block_M, **DECODE_TILE, **kw)
        else:
            splits = gemm.split_k_slices(M, N, K, 4, block_M=64, block_N=32, block_K=32)
            program = (gemm.matmul_splitk_program(M, N, K, splits, **SPLIT_TILE, **kw) if splits > 1
                       else gemm.matmul_program(M, N, K, **TILE, **kw))
        k = tegula.compile(program, out_idx=[-1], target=target)
        calls.append((M, N, K, layout, k.prim_func.name))
        return lambda *args: tt.simulate(k, *args)

    def activation_grad_kernel_for(M, N, dtype, activation, bias_grad, sms=None):
        splits = gemm_bwd.grad_row_splits(M, N, 2, GRAD_TILE["block_M"], GRAD_TILE["block_N"])
        k = tegula.compile(gemm_bwd.activation_grad_program(M, N, activation, bias_grad, splits,
                                                        dtype=gemm.dtype_name(dtype), **GRAD_TILE), target=target)
        return lambda *args: tt.simulate(k, *args)

    monkeypatch.setattr(gemm, "kernel_for", kernel_for)
    monkeypatch.setattr(gemm_bwd, "activation_grad_kernel_for", activation_grad_kernel_for)
    return calls


def _autograd_reference(a, b, bias, activation, dc):
    """torch's gradients in float32 from the same rounded inputs, and the forward's output
    rounded to a's dtype (what relu's backward is given)."""
    a32, b32 = a.float().requires_grad_(), b.float().requires_grad_()
    inputs = [a32, b32]
    z = a32 @ b32
    if bias is not None:
        bias32 = bias.float().requires_grad_()
        inputs.append(bias32)
        z = z + bias32
    c = {"none": z, "relu": torch.relu(z),
         "gelu": torch.nn.functional.gelu(z, approximate="tanh")}[activation]
    grads = torch.autograd.grad(c, inputs, dc.float())
    return grads, c.detach().to(a.dtype)


@pytest.mark.parametrize("activation,with_bias,M,N,K,dtype", [
    ("none", False, 40, 24, 56, torch.float16),
    ("none", True, 40, 24, 56, torch.bfloat16),
    ("relu", True, 40, 24, 56, torch.float16),
    ("gelu", True, 37, 21, 53, torch.float16),      # every row length odd: all operands padded
    ("gelu", False, 72, 40, 24, torch.bfloat16),
    ("relu", False, 16, 40, 200, torch.float16),    # decode-shaped: dA runs the decode kernel
])
def test_matmul_backward_simulated_matches_torch_autograd(monkeypatch, activation, with_bias, M, N, K, dtype):
    calls = _simulated_dispatch(monkeypatch)
    monkeypatch.setattr(gemm, "PAD_MIN_WORK", 0)    # pad as a large problem would be
    gen = torch.Generator().manual_seed(M * N * K)
    a = torch.randn(M, K, generator=gen).to(dtype)
    b = torch.randn(K, N, generator=gen).to(dtype)
    bias = torch.randn(N, generator=gen).to(dtype) if with_bias else None
    dc = torch.randn(M, N, generator=gen).to(dtype)
    grads, c = _autograd_reference(a, b, bias, activation, dc)
    da, db, dbias = gemm_bwd._backward(dc, a, b, with_bias, activation, c, bias, (True, True, True), sms=4)
    tol = 3 * TOL[dtype]
    assert da.shape == (M, K) and db.shape == (K, N) and da.dtype == db.dtype == dtype
    assert rel_err(da, grads[0]) < tol and rel_err(db, grads[1]) < tol
    if with_bias:
        assert dbias.shape == (N,) and rel_err(dbias, grads[2]) < tol
    else:
        assert dbias is None
    # dA reads b transposed in place, dB reads a transposed in place; dZ is row-major.
    da_call, db_call = calls[-2], calls[-1]
    assert da_call[:3] == (M, K, -(-N // 8) * 8 if N % 8 else N) and da_call[3].get("trans_b") is True
    assert db_call[:3] == (K, N, M) and db_call[3].get("trans_a") is True
    assert not da_call[3].get("trans_a") and not db_call[3].get("trans_b")
    # decode-shaped outputs (M, or K for dB, at most 64 rows) take the decode kernel
    assert da_call[4].startswith("gemm_decode") == (M <= gemm.DECODE_MAX_M)
    assert db_call[4].startswith("gemm_decode") == (K <= gemm.DECODE_MAX_M)


def test_unwanted_gradients_are_not_computed(monkeypatch):
    calls = _simulated_dispatch(monkeypatch)
    M, N, K = 40, 24, 56
    gen = torch.Generator().manual_seed(3)
    a, b, dc = (torch.randn(*s, generator=gen).half() for s in ((M, K), (K, N), (M, N)))
    grads, _ = _autograd_reference(a, b, None, "none", dc)
    da, db, dbias = gemm_bwd._backward(dc, a, b, True, "none", None, None, (True, False, False), sms=4)
    assert db is None and dbias is None and len(calls) == 1 and rel_err(da, grads[0]) < 6e-3
    da, db, dbias = gemm_bwd._backward(dc, a, b, False, "none", None, None, (False, True, True), sms=4)
    assert da is None and dbias is None and len(calls) == 2 and rel_err(db, grads[1]) < 6e-3
    assert gemm_bwd._backward(dc, a, b, False, "relu", dc, None, (False, False, True), sms=4) == (None, None, None)
    assert len(calls) == 2


def test_a_transposed_or_expanded_gradient_is_taken_as_it_comes(monkeypatch):
    """dC as autograd may hand it over: a transposed view is read in place (trans_a for dA,
    trans_b for dB); a stride-0 expansion is copied once."""
    calls = _simulated_dispatch(monkeypatch)
    M, N, K = 40, 24, 56
    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(M, K, generator=gen).half(), torch.randn(K, N, generator=gen).half()
    dc_t = torch.randn(N, M, generator=gen).half().t()
    grads, _ = _autograd_reference(a, b, None, "none", dc_t)
    da, db, _ = gemm_bwd._backward(dc_t, a, b, False, "none", None, None, (True, True, True), sms=4)
    assert rel_err(da, grads[0]) < 6e-3 and rel_err(db, grads[1]) < 6e-3
    assert calls[-2][3].get("trans_a") is True and calls[-1][3].get("trans_b") is True
    ones = torch.ones(1, 1).half().expand(M, N)
    grads, _ = _autograd_reference(a, b, None, "none", ones)
    da, db, _ = gemm_bwd._backward(ones, a, b, False, "none", None, None, (True, True, True), sms=4)
    assert rel_err(da, grads[0]) < 6e-3 and rel_err(db, grads[1]) < 6e-3


@pytest.mark.parametrize("M,N,K", [(0, 24, 56), (40, 0, 56), (40, 24, 0)])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_empty_extents_give_torch_gradients(M, N, K, activation):
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(M, K, generator=gen).half(), torch.randn(K, N, generator=gen).half()
    bias, dc = torch.randn(N, generator=gen).half(), torch.randn(M, N, generator=gen).half()
    (ga, gb, gbias), c = _autograd_reference(a, b, bias, activation, dc)
    da, db, dbias = gemm_bwd._backward(dc, a, b, True, activation, c, bias, (True, True, True), sms=4)
    assert da.shape == (M, K) and db.shape == (K, N) and dbias.shape == (N,)
    torch.testing.assert_close(da.float(), ga) and torch.testing.assert_close(db.float(), gb)
    torch.testing.assert_close(dbias.float(), gbias, rtol=2e-3, atol=2e-3)


# ---- argument errors ----

def _args(**over):
    a, b = torch.zeros(8, 16).half(), torch.zeros(16, 24).half()
    args = dict(dc=torch.zeros(8, 24).half(), a=a, b=b, bias_needed=False, activation="none", c=None)
    args.update(over)
    return args


@pytest.mark.parametrize("over,error,pattern", [
    (dict(a=[1.0]), TypeError, r"matmul_backward: a must be a torch.Tensor"),
    (dict(a=torch.zeros(8, 16)), ValueError, r"a must be a float16/bfloat16 tensor"),
    (dict(b=torch.zeros(16, 24).bfloat16()), ValueError, r"b must be a float16 tensor \(the dtype of a\)"),
    (dict(b=torch.zeros(12, 24).half()), ValueError, r"b must have shape \(16, N\)"),
    (dict(dc=torch.zeros(24, 8).half()), ValueError, r"dc must have shape \(8, 24\) \(the gradient of the output\)"),
    (dict(dc=torch.zeros(8, 24)), ValueError, r"dc must be a float16 tensor"),
    (dict(activation="tanh"), ValueError, r"activation must be 'none', 'relu' or 'gelu', got 'tanh'"),
    (dict(bias_needed=1), TypeError, r"bias_needed must be a bool"),
    (dict(needs=(True, True)), ValueError, r"needs must be three bools"),
    (dict(activation="relu"), ValueError, r"activation 'relu' needs c, the forward's output"),
    (dict(activation="relu", c=torch.zeros(8, 16).half()), ValueError, r"c must have shape \(8, 24\)"),
    (dict(activation="gelu", bias_needed=True), ValueError, r"'gelu' with a bias needs bias"),
    (dict(activation="gelu", bias_needed=True, bias=torch.zeros(16).half()), ValueError,
     r"bias must have shape \(24,\)"),
    ({}, ValueError, r"a must be a CUDA tensor"),
])
def test_arguments_are_checked(over, error, pattern):
    with pytest.raises(error, match=pattern):
        gemm_bwd.matmul_backward(**_args(**over))
