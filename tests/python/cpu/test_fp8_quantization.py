"""FP8 activation quantization (tegula.kernels.fp8_quantization) without a GPU: the kernels
compile for sm_90a with 16-byte loads and no stack; simulated thread by thread (and
interpreted as written) they give the module's torch formula bit for bit, q's bytes and
the scales, per token and per group (dividing and ragged), chunked rows, both fp8 types,
UE8M0 scales, zero rows, NaN and inf; the fused RMSNorm matches the formula applied to
F.rms_norm in float32 (see `test_fused_norm_matches_the_float32_pipeline` for the one
tolerance); bad arguments are errors naming them; the fakes give the outputs' shapes."""
import importlib
import re

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")

import tegula.testing as tt  # noqa: E402
from tegula import registers  # noqa: E402

FQ = importlib.import_module("tegula.kernels.fp8_quantization")
F = torch.nn.functional
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


def sample(m, k, dtype, seed, specials=True):
    """Values of several magnitudes; row 1 zero, a NaN in row 2 and an inf in row 3 when
    there are rows for them."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen) * torch.logspace(-2, 2, k)[torch.randperm(k, generator=gen)]
    x = x.to(dtype)
    if specials and m > 3:
        x[1] = 0
        x[2, k // 3] = float("nan")
        x[3, k - 1] = float("-inf")
    return x


def poisoned(x, group_size, dtype):
    q, s = FQ._empty_outputs(x, group_size, dtype)
    q.view(torch.uint8).fill_(0x7F)   # NaN in both fp8 types
    s.fill_(float("nan"))
    return q, s


def assert_same(q, s, ref_q, ref_s):
    """q bit for bit except NaN's sign bit (torch's NaN sign differs by platform and
    operation; the interpreter's NaNs are positive), NaN where the formula gives NaN, and
    the scales exactly."""
    nan = ref_q.float().isnan()
    assert torch.equal(q.float().isnan(), nan)
    assert torch.equal(q.view(torch.uint8)[~nan], ref_q.view(torch.uint8)[~nan])
    assert torch.equal(s.isnan(), ref_s.isnan())
    assert torch.equal(s.nan_to_num(-1.0), ref_s.nan_to_num(-1.0))


def run_quantize(x, group_size, dtype, ue8m0, runner=tt.simulate):
    q, s = poisoned(x, group_size, dtype)
    launches = FQ.quantize_fp8_launches("t", x, q, s, group_size, dtype, ue8m0)
    assert launches
    for kernel, args in launches:
        runner(kernel, *args)
    return q, s


@pytest.mark.parametrize("n,group,dtype", [(7168, None, torch.bfloat16), (4096, None, torch.float32),
                                           (128, None, torch.float16), (7000, 128, torch.bfloat16)])
def test_compiles_with_16_byte_loads_and_no_stack(n, group, dtype):
    kernel = FQ.kernel_for(n, dtype, E4M3, group)
    src = kernel.get_kernel_source()
    loads = re.findall(r"(Vec<\w+, \d+>|float4)\*>\(&X\[", src)
    assert loads and all(v == "float4" or v.endswith(f", {16 // dtype.itemsize}>") for v in loads), loads
    # One store of the 8-bit values of each 16-byte load (8 bytes for 16-bit inputs).
    assert re.search(rf"Vec<fp8_e4m3_t, {16 // dtype.itemsize}>\*>\(&Q\[", src)
    (_, stack), = registers.compiled_resources(kernel.cubin()).values()
    assert stack == 0


@pytest.mark.parametrize("n,group", [(7168, None), (7168, 128), (2048, 128)])
def test_fused_norm_compiles_without_stack(n, group):
    kernel = FQ.kernel_for(n, torch.bfloat16, E4M3, group, False, 1e-6, torch.bfloat16)
    (_, stack), = registers.compiled_resources(kernel.cubin()).values()
    assert stack == 0


@pytest.mark.parametrize("n,group", [(7168, None), (7168, 128), (2048, None), (2048, 128)])
def test_fused_norm_loads_the_weight_in_16_byte_vectors(n, group):
    """The weight is loaded with x (before the sum of squares) and laid out as x, in one
    16-byte load per 8 elements: a fragment shared by the rows would be replicated and
    loaded an element at a time."""
    kernel = FQ.kernel_for(n, torch.bfloat16, E4M3, group, False, 1e-6, torch.bfloat16)
    src = kernel.get_kernel_source()
    assert re.search(r"Vec<bfloat16_t, 8>\*>\(&W\[", src), src
    assert not re.search(r"= W\[", src), src
    # both loads come before the first barrier (the sum of squares' cross-warp step)
    body = src[src.find('extern "C"'):]
    assert body.find("&W[") < body.find("__syncthreads") and body.find("&X[") < body.find("__syncthreads")


def test_exact_row_plans():
    p = FQ.exact_row_plan(7168, 16)
    assert (p.blk_m, p.threads, p.n_pad, p.per_thread, p.chunks) == (1, 448, 7168, 16, 1)
    assert FQ.exact_row_plan(7168, 32).threads == 224
    assert FQ.exact_row_plan(7168, 56).threads == 128
    assert FQ.exact_row_plan(7168, 12) is None      # not whole 16-byte vectors
    assert FQ.exact_row_plan(7000, 8) is None       # 875 threads: not whole warps
    assert FQ.exact_row_plan(65536, 16) is None     # 4096 threads
    # a one-row tile of a per-token row takes it; the plan's padded width otherwise
    assert FQ.kernel_for(7168, torch.bfloat16, E4M3, tile=(1, 32)).get_kernel_source().count(
        "__launch_bounds__(224)") == 1
    # by default a padded row takes an exact plan of a power of two of threads where one exists
    for n, eps, threads in [(7168, None, 128), (7168, 1e-6, 128), (5120, None, 128), (4096, None, 128),
                            (2880, None, 256)]:
        src = FQ.kernel_for(n, torch.bfloat16, E4M3, eps=eps).get_kernel_source()
        assert f"__launch_bounds__({threads})" in src, (n, eps)


@pytest.mark.parametrize("tile", [None, (1, 16), (1, 32), (1, 56)], ids=["plan", "1x16", "1x32", "1x56"])
def test_token_rows_of_7168_match_the_formula(tile):
    x = sample(3, 7168, torch.bfloat16, seed=7)
    x[1, 5] = float("nan")
    x[2, 7000] = float("inf")
    q, s = poisoned(x, None, E4M3)
    for kernel, args in FQ.quantize_fp8_launches("t", x, q, s, None, E4M3, False, tile):
        tt.simulate(kernel, *args)
    assert_same(q, s, *FQ.quantize_fp8_reference(x, None, E4M3, False))


def test_plans():
    # Per group with a dividing K: rows of one group, 8 threads x 16, 32 rows a block.
    p = FQ.plan_quantize(128, 128, 2)
    assert (p.blk_m, p.threads, p.n_pad, p.chunks) == (32, 256, 128, 1)
    assert FQ.plan_quantize(7000, 128, 2) == FQ.plan_group_tile(128)
    assert FQ.plan_quantize(32768, 32768, 2).chunks > 1
    # DeepSeek-V3's hidden size: 56 groups of 8 threads, one row a block.
    p = FQ.plan_norm_groups(7168, 128)
    assert (p.blk_m, p.threads, p.n_pad, p.chunks) == (1, 448, 7168, 1)
    p = FQ.plan_norm_groups(16384, 128)
    assert p.chunks == 2 and p.threads == 512
    assert FQ.plan_norm_groups(384, 128).threads % 32 == 0


CASES = [  # (M, K, group_size, x dtype, fp8 dtype)
    (5, 300, None, torch.bfloat16, E4M3),        # odd M, ragged against the vectors
    (4, 256, 128, torch.float16, E5M2),          # groups dividing K: rows of one group
    (5, 300, 128, torch.bfloat16, E4M3),         # ragged last group of 44 columns
    (4, 1000, 64, torch.float32, E5M2),
    (4, 96, 32, torch.float32, E4M3),
    (1, 13, None, torch.float16, E4M3),
]


@pytest.mark.parametrize("ue8m0", [False, True], ids=["float32-scale", "ue8m0"])
@pytest.mark.parametrize("m,k,group,dtype,fp8", CASES, ids=[f"{c[0]}x{c[1]}-g{c[2]}-{c[4][-4:]}" for c in CASES])
def test_quantize_matches_the_formula_bit_for_bit(m, k, group, dtype, fp8, ue8m0):
    x = sample(m, k, dtype, seed=m * k + ue8m0)
    ref = FQ.quantize_fp8_reference(x, group, fp8, ue8m0)
    assert_same(*run_quantize(x, group, fp8, ue8m0), *ref)
    if m * k <= 1500:
        assert_same(*run_quantize(x, group, fp8, ue8m0, tt.reference), *ref)


def test_specials_follow_the_formula():
    x = sample(5, 64, torch.float32, seed=1)
    q, s = run_quantize(x, None, E4M3, False)
    top = FQ.FP8_MAX[E4M3]
    assert s[1, 0] == torch.tensor(FQ.AMAX_FLOOR) / top and (q[1].float() == 0).all()  # zero row
    assert s[2].isnan().all() and q[2].float().isnan().all()                             # NaN row
    assert s[3].isinf().all() and q[3, -1].float().isnan()                               # inf row
    assert (q[3, :-1].float() == 0).all()
    assert q[0].float().abs().max() == top          # the largest value maps to fp8_max
    s_ue = run_quantize(x, None, E4M3, True)[1]
    finite = s_ue.isfinite()
    assert torch.equal(torch.frexp(s_ue[finite]).mantissa, torch.full_like(s_ue[finite], 0.5))
    assert (s_ue[finite] >= s[finite]).all() and (s_ue[finite] < 2 * s[finite]).all()


def test_saturation_clips_the_rounding_past_fp8_max():
    # 448 * (1 + 2^-23)-like quotients round to 448, never to NaN as torch's .to() would.
    x = torch.tensor([[3.0e-4, -3.0e-4, 1.0e-4] * 32], dtype=torch.float32)
    q, _ = run_quantize(x, None, E4M3, False)
    assert not q.float().isnan().any() and q.float().abs().max() == 448


def test_chunked_rows():
    """Per token, a row walked in 3 chunks of 256 columns (plan_rows does so past 16384)."""
    x = sample(3, 600, torch.bfloat16, seed=5, specials=False)
    x[1, 599] = 1000.0   # the amax in the last chunk
    for ue8m0 in (False, True):
        program = FQ.quantize_fp8_program(600, "bfloat16", E4M3, 600, ue8m0, 1, 32, 256, 3)
        kernel = tegula.compile(program, target="sm_90a")
        q, s = poisoned(x, None, E4M3)
        tt.simulate(kernel, x, q, s)
        assert_same(q, s, *FQ.quantize_fp8_reference(x, None, E4M3, ue8m0))


def run_fused(x, w, group, fp8, ue8m0, program_args=None, eps=1e-6):
    q, s = poisoned(x, group, fp8)
    if program_args is None:
        for kernel, args in FQ.rms_norm_quantize_fp8_launches("t", x, w, q, s, eps, group, fp8, ue8m0):
            tt.simulate(kernel, *args)
        return q, s
    kernel = tegula.compile(FQ.rms_norm_quantize_fp8_program(*program_args), target="sm_90a")
    if group is None:
        tt.simulate(kernel, x, w, q, s)
    else:
        tt.simulate(kernel, x.view(x.shape[0], -1, group), w.view(-1, group), q.view(x.shape[0], -1, group), s)
    return q, s


def assert_close_fused(q, s, ref_q, ref_s, fp8):
    """The fused kernel sums the squares in another order than F.rms_norm, so the rms (and
    with it every normalised value and the float32 scale) may differ by a float32 ulp or
    two: scales to 4 ulps, and q equal but where a value sits on an fp8 rounding boundary,
    there at most one fp8 step apart. UE8M0 scales are powers of two: exact."""
    assert torch.equal(s.isnan(), ref_s.isnan())
    torch.testing.assert_close(s, ref_s, rtol=5e-7, atol=0, equal_nan=True)
    nan = ref_q.float().isnan()
    assert torch.equal(q.float().isnan(), nan)
    a = q.view(torch.uint8)[~nan].int()
    b = ref_q.view(torch.uint8)[~nan].int()
    assert (a != b).sum() <= max(2, a.numel() // 1000)
    assert ((a - b).abs() <= 1).all()


FUSED = [  # (M, K, group_size, x dtype, weight dtype, fp8 dtype)
    (5, 300, None, torch.bfloat16, torch.bfloat16, E4M3),
    (3, 512, 128, torch.float16, torch.float32, E4M3),
    (2, 7168, 128, torch.bfloat16, torch.bfloat16, E5M2),   # DeepSeek-V3's hidden size, 448 threads
    (3, 96, 32, torch.float32, torch.bfloat16, E4M3),
    (5, 48, 16, torch.bfloat16, torch.bfloat16, E4M3),
]


@pytest.mark.parametrize("ue8m0", [False, True], ids=["float32-scale", "ue8m0"])
@pytest.mark.parametrize("m,k,group,dtype,wdtype,fp8", FUSED, ids=[f"{c[0]}x{c[1]}-g{c[2]}" for c in FUSED])
def test_fused_norm_matches_the_float32_pipeline(m, k, group, dtype, wdtype, fp8, ue8m0):
    x = sample(m, k, dtype, seed=k + ue8m0)
    w = (1 + 0.1 * torch.randn(k, generator=torch.Generator().manual_seed(k))).to(wdtype)
    q, s = run_fused(x, w, group, fp8, ue8m0)
    assert_close_fused(q, s, *FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, group, fp8, ue8m0), fp8)
    if m > 3:   # F.rms_norm's specials: a zero row stays 0; NaN spreads over its row (through
        # the sum of squares); an inf's row normalises to 0 but the inf itself (inf · 0 = NaN),
        # so its group (per token: the row) is NaN and the other groups 0.
        assert (q[1].float() == 0).all() and (s[1] == s[1, 0]).all()
        assert q[2].float().isnan().all() and s[2].isnan().all()
        inf_group = q[3].view(-1, group or k)[-1]
        assert inf_group.float().isnan().all() and (q[3, :k - inf_group.numel()].float() == 0).all()


def test_fused_norm_is_not_rounded_to_the_input_dtype():
    """The normalised value stays float32: on rows where rounding it to bfloat16 first would
    move q, the kernel agrees with the float32 pipeline, not the bfloat16 one."""
    x = sample(4, 1024, torch.bfloat16, seed=11, specials=False)
    w = torch.ones(1024, dtype=torch.bfloat16)
    q, s = run_fused(x, w, None, E4M3, False)
    ref32 = FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, None, E4M3)
    y16 = F.rms_norm(x, (1024,), w, 1e-6)
    ref16 = FQ.quantize_fp8_reference(y16, None, E4M3)
    differs = (ref16[0].view(torch.uint8) != ref32[0].view(torch.uint8)).sum().item()
    assert differs > 0   # the two pipelines do differ on this input
    mine = (q.view(torch.uint8) != ref32[0].view(torch.uint8)).sum().item()
    assert mine < differs


@pytest.mark.parametrize("group", [None, 128])
def test_fused_norm_chunked(group):
    """Rows walked in chunks: per token 3 passes over 3 chunks of 256 columns; per group
    2 passes over chunks of 2 groups (the last one of 1)."""
    k = 640 if group else 600
    x = sample(3, k, torch.bfloat16, seed=3, specials=False)
    w = (1 + 0.1 * torch.randn(k, generator=torch.Generator().manual_seed(1))).bfloat16()
    for ue8m0 in (False, True):
        if group is None:
            args = (k, "bfloat16", "bfloat16", E4M3, k, ue8m0, 1e-6, 1, 32, 256, 3)
        else:
            args = (k, "bfloat16", "bfloat16", E4M3, group, ue8m0, 1e-6, 1, 32, 256, 3)
        q, s = run_fused(x, w, group, E4M3, ue8m0, args)
        assert_close_fused(q, s, *FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, group, E4M3, ue8m0), E4M3)


x16 = torch.randn(4, 256).half()
w16 = torch.ones(256).half()
Q, RQ = FQ.quantize_fp8, FQ.rms_norm_quantize_fp8

ERRORS = {
    "x-None": (lambda: Q(None), TypeError, r"quantize_fp8: x must be a torch\.Tensor"),
    "x-int": (lambda: Q(x16.int()), ValueError, r"quantize_fp8: x must be a tensor of float16"),
    "x-scalar": (lambda: Q(x16[0, 0]), ValueError, r"quantize_fp8: x must have at least one dimension"),
    "x-empty-row": (lambda: Q(x16[:, :0]), ValueError, r"quantize_fp8: the last dimension of x must be positive"),
    "group-type": (lambda: Q(x16, group_size=128.0), TypeError, r"quantize_fp8: group_size must be None or an int"),
    "group-bool": (lambda: Q(x16, group_size=True), TypeError, r"quantize_fp8: group_size must be None or an int"),
    "group-zero": (lambda: Q(x16, group_size=0), ValueError, r"quantize_fp8: group_size must be positive"),
    "group-ragged": (lambda: Q(x16, group_size=96), ValueError, r"quantize_fp8: group_size 96 does not divide"),
    "dtype": (lambda: Q(x16, dtype="float8"), ValueError, r"quantize_fp8: dtype must be one of"),
    "ue8m0": (lambda: Q(x16, scale_ue8m0=1), TypeError, r"quantize_fp8: scale_ue8m0 must be a bool"),
    "cpu": (lambda: Q(x16), ValueError, r"quantize_fp8: x must be a CUDA tensor"),
    "grad": (lambda: Q(x16.clone().requires_grad_()), RuntimeError, r"quantize_fp8: x requires grad"),
    "norm-weight-shape": (lambda: RQ(x16, w16[:128]), ValueError,
                          r"rms_norm_quantize_fp8: weight must have shape \(256,\)"),
    "norm-weight-dtype": (lambda: RQ(x16, w16.int()), ValueError, r"rms_norm_quantize_fp8: weight must be a tensor"),
    "norm-eps": (lambda: RQ(x16, w16, eps=-1.0), ValueError, r"rms_norm_quantize_fp8: eps"),
    "norm-group": (lambda: RQ(x16, w16, group_size=96), ValueError,
                   r"rms_norm_quantize_fp8: group_size must divide the last dimension of x \(256\)"),
    "norm-cpu": (lambda: RQ(x16, w16), ValueError, r"rms_norm_quantize_fp8: x must be a CUDA tensor"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_argument_errors_name_the_argument(name):
    fn, exc, pattern = ERRORS[name]
    with pytest.raises(exc, match=pattern):
        fn()


@pytest.mark.parametrize("shape,group,scales", [((2, 3, 300), None, (2, 3, 1)), ((7, 300), 128, (7, 3)),
                                                ((7, 256), 128, (7, 2)), ((0, 512), 128, (0, 4)),
                                                ((5, 100), 128, (5, 1))])
def test_fakes_give_the_outputs_shapes(shape, group, scales):
    x = torch.empty(shape, dtype=torch.bfloat16, device="meta")
    for fp8 in (E4M3, E5M2):
        q, s = FQ.quantize_fp8_fake(x, group, fp8, False)
        assert q.shape == x.shape and q.dtype == FQ.FP8_DTYPES[fp8] and q.is_contiguous() and q.is_meta
        assert s.shape == scales and s.dtype == torch.float32 and s.is_contiguous() and s.is_meta
    if group is None or shape[-1] % group == 0 or group >= shape[-1]:
        w = torch.empty(shape[-1], dtype=torch.float32, device="meta")
        q, s = FQ.rms_norm_quantize_fp8_fake(x, w, 1e-6, group, E4M3, True)
        assert q.shape == x.shape and s.shape == scales and q.dtype == torch.float8_e4m3fn
    with pytest.raises(ValueError, match="dtype must be one of"):
        FQ.quantize_fp8_fake(x, group, "int8", False)


@pytest.mark.parametrize("m,k,group,tile", [(9, 256, 128, (64, 32)), (3, 512, None, (2, 32)), (5, 300, 128, (32, 32))],
                         ids=["group-rows-64x32", "token-2x32", "ragged-32x32"])
def test_tiles_match_the_formula(m, k, group, tile):
    """The benchmark's tile knob: other rows a block and elements a thread (four 16-byte
    loads a thread here) give the same bits."""
    x = sample(m, k, torch.bfloat16, seed=m + k)
    q, s = poisoned(x, group, E4M3)
    for kernel, args in FQ.quantize_fp8_launches("t", x, q, s, group, E4M3, False, tile):
        tt.simulate(kernel, *args)
    assert_same(q, s, *FQ.quantize_fp8_reference(x, group, E4M3, False))


def test_fused_tile_matches_the_float32_pipeline():
    x = sample(5, 512, torch.bfloat16, seed=2)
    w = (1 + 0.1 * torch.randn(512, generator=torch.Generator().manual_seed(2))).bfloat16()
    q, s = poisoned(x, 128, E4M3)
    for kernel, args in FQ.rms_norm_quantize_fp8_launches("t", x, w, q, s, 1e-6, 128, E4M3, True, (2, 32)):
        tt.simulate(kernel, *args)
    assert_close_fused(q, s, *FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, 128, E4M3, True), E4M3)


def test_apply_tile():
    p = FQ.apply_tile(FQ.plan_quantize(128, 128, 2), (64, 32))
    assert (p.blk_m, p.threads, p.n_pad, p.per_thread) == (64, 256, 128, 32)
    p = FQ.apply_tile(FQ.plan_norm_groups(7168, 128), (1, 32), 128)
    assert (p.blk_m, p.threads, p.n_pad) == (1, 224, 7168)
    assert FQ.apply_tile(p, None) is p
    with pytest.raises(ValueError, match="apply_tile: tile 1x24 needs positive rows and elements dividing 128"):
        FQ.apply_tile(FQ.plan_quantize(128, 128, 2), (1, 24))
    with pytest.raises(ValueError, match="apply_tile: tile 2x16 gives 896 threads"):
        FQ.apply_tile(FQ.plan_norm_groups(7168, 128), (2, 16), 128)


def test_scales_are_the_correctly_rounded_quotient():
    """scale = amax / fp8_max rounded once (the kernels' IEEE division), on the device the
    formula runs on: torch's CUDA division by a Python number would multiply by 1 / 448
    and miss it by an ulp; the formula divides by a tensor."""
    x = sample(64, 96, torch.float32, seed=4, specials=False)
    _, s = FQ.quantize_fp8_reference(x, 32, E4M3)
    amax = x.unflatten(-1, (3, 32)).abs().amax(-1).clamp(min=FQ.AMAX_FLOOR)
    assert torch.equal(s, (amax.double() / 448).float())
