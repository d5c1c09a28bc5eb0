"""SwiGLU and the fused gate/up projection (tegula.kernels.gated_mlp) against torch in float32
on the GPU: swiglu on one joined tensor or two, swiglu_linear on separate and fused
weights, at Llama-8B's shapes and ragged ones, every element written (outputs poisoned
where the call takes them), every tile the benchmark's sweep times, NaN and inf, empty
extents and argument errors."""
import importlib

import pytest
import torch
import torch.nn.functional as F

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import assert_argument_error, assert_close, dtype_id, poison, randn, same_storage, seed_of
except ImportError:
    from _util import assert_argument_error, assert_close, dtype_id, poison, randn, same_storage, seed_of

pytestmark = pytest.mark.gpu

S = importlib.import_module("tegula.kernels.gated_mlp")

ALL = [torch.float16, torch.bfloat16, torch.float32]
HALF = [torch.float16, torch.bfloat16]
LLAMA = (14336, 4096)   # I, K


def swiglu_ref(gate, up):
    return F.silu(gate.double()) * up.double()


# ---- swiglu ----

# (rows, I): Llama-8B's prefill and decode, then widths that are no multiple of 8, one
# element, and rows not a multiple of the rows a block takes.
SHAPES = [(512, 14336), (8, 14336), (33, 1000), (17, 13), (3, 1), (1000, 24)]


@pytest.mark.parametrize("dtype", ALL, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_swiglu_joined_into_poisoned_output(shape, dtype):
    m, n = shape
    x = randn((m, 2 * n), dtype, seed_of("joined", shape, dtype), scale=2.0)
    out = poison((m, n), dtype)
    y = S.swiglu(x, out=out)
    assert same_storage(y, out)
    assert_close(y, swiglu_ref(x[:, :n], x[:, n:]), dtype, f"swiglu {shape}")


@pytest.mark.parametrize("dtype", ALL, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_swiglu_two_inputs(shape, dtype):
    gate = randn(shape, dtype, seed_of("gate", shape, dtype), scale=2.0)
    up = randn(shape, dtype, seed_of("up", shape, dtype))
    y = S.swiglu(gate, up)
    assert y.shape == shape and y.dtype == dtype
    assert_close(y, swiglu_ref(gate, up), dtype, f"swiglu(gate, up) {shape}")


def test_swiglu_rounds_once_like_torch_compile():
    """float32 silu(g)·u rounded once: within one rounding of torch's float32 result, where
    torch's eager bfloat16 code rounds silu(g) first."""
    x = randn((64, 2 * 4096), torch.bfloat16, seed_of("once"), scale=3.0)
    ours = S.swiglu(x)
    once = (F.silu(x[:, :4096].float()) * x[:, 4096:].float()).to(torch.bfloat16)
    # The same up to the last bit where the two exp routines round a tie differently.
    torch.testing.assert_close(ours, once, rtol=2 ** -7, atol=0)
    assert (ours != once).float().mean().item() < 0.01


def test_swiglu_leading_dims_views_and_new_row_counts():
    dtype = torch.float16
    x = randn((2, 3, 5, 2 * 520), dtype, seed_of("nd"))
    assert_close(S.swiglu(x), swiglu_ref(x[..., :520], x[..., 520:]), dtype, "swiglu 4-D")
    wide = randn((40, 3000), dtype, seed_of("wide"))
    gate, up = wide[:, :1000], wide[:, 1000:2000]         # strided views: copied first
    assert_close(S.swiglu(gate, up), swiglu_ref(gate, up), dtype, "swiglu strided views")
    flat = randn((1 + 7 * 2 * 64,), dtype, seed_of("flat"))[1:].view(7, 128)   # misaligned start
    assert_close(S.swiglu(flat), swiglu_ref(flat[:, :64], flat[:, 64:]), dtype, "swiglu misaligned")
    kernel = S.kernel_for(64, dtype, True)
    for m in (1, 9, 4097):   # M is dynamic: one kernel for every row count
        x = randn((m, 128), dtype, seed_of("rows", m))
        assert_close(S.swiglu(x), swiglu_ref(x[:, :64], x[:, 64:]), dtype, f"swiglu M={m}")
    assert S.kernel_for(64, dtype, True) is kernel
    returns_y = S.kernel_for(64, dtype, True, allocates_output=True)
    assert_close(returns_y(x, x), swiglu_ref(x[:, :64], x[:, 64:]), dtype, "swiglu out_idx=[-1]")


def test_swiglu_nan_and_inf_as_torch():
    gate = torch.tensor([[-float("inf"), float("inf"), float("nan"), -100.0, 0.0, 1.0, -1.0, 3.0]], device="cuda")
    up = torch.tensor([[1.0, 2.0, 1.0, 5.0, float("inf"), float("nan"), 2.0, -1.0]], device="cuda")
    for dtype in HALF:
        y = S.swiglu(gate.to(dtype), up.to(dtype))
        ref = F.silu(gate.to(dtype).float()) * up.to(dtype).float()
        assert torch.equal(y.isnan(), ref.isnan()) and torch.equal(y.isinf(), ref.isinf())
        torch.testing.assert_close(y.float(), ref, equal_nan=True, rtol=1e-2, atol=0)


def test_swiglu_empty_extents():
    assert S.swiglu(torch.empty((0, 128), device="cuda", dtype=torch.float16)).shape == (0, 64)
    assert S.swiglu(torch.empty((4, 0), device="cuda", dtype=torch.float16)).shape == (4, 0)
    empty = torch.empty((3, 0), device="cuda", dtype=torch.bfloat16)
    assert S.swiglu(empty, empty).shape == (3, 0)


def test_swiglu_argument_errors():
    x = randn((4, 64), torch.float16, seed_of("errors"))
    assert_argument_error(lambda: S.swiglu(x, out=poison((4, 64), torch.float16)), r"swiglu: out must have shape")
    assert_argument_error(lambda: S.swiglu(x, out=poison((4, 32), torch.float32)), r"swiglu: out must be a float16")
    assert_argument_error(lambda: S.swiglu(x, x.cpu()), r"swiglu: up must be a CUDA tensor")
    assert_argument_error(lambda: S.swiglu(x[:, :63]), r"swiglu: x alone must hold gate and up")


# ---- swiglu_linear ----

def linear_inputs(M, N, K, dtype, tag=""):
    x = randn((M, K), dtype, seed_of("x", M, N, K, dtype, tag))
    wg = randn((N, K), dtype, seed_of("wg", M, N, K, dtype, tag), scale=K ** -0.5)
    wu = randn((N, K), dtype, seed_of("wu", M, N, K, dtype, tag), scale=K ** -0.5)
    return x, wg, wu


def linear_ref(x, wg, wu):
    return F.silu(x.float() @ wg.float().T).double() * (x.float() @ wu.float().T).double()


# Llama-8B decode, a thin prefill (the 64 x 64 tile), prefill (the 128 x 128 tile), and
# ragged shapes of each regime.
LINEAR_SHAPES = [(8, *LLAMA), (256, *LLAMA), (1024, *LLAMA), (1, 8, 16), (33, 1000, 4100), (130, 520, 136),
                 (64, 4096, 4096), (300, 4104, 1000)]


@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
@pytest.mark.parametrize("M,N,K", LINEAR_SHAPES)
def test_swiglu_linear_matches_torch(M, N, K, dtype):
    x, wg, wu = linear_inputs(M, N, K, dtype)
    y = S.swiglu_linear(x, wg, wu)
    assert y.shape == (M, N) and y.dtype == dtype
    assert_close(y, linear_ref(x, wg, wu), dtype, f"swiglu_linear {M}x{N}x{K}")


@pytest.mark.parametrize("M", [8, 512])
def test_one_fused_weight_gives_the_same_result(M):
    dtype = torch.bfloat16
    x, wg, wu = linear_inputs(M, *LLAMA, dtype, "fused")
    fused = torch.cat([wg, wu])
    assert torch.equal(S.swiglu_linear(x, fused), S.swiglu_linear(x, wg, wu))
    # Halves whose I x K elements end off a 16-byte boundary: the up half is copied first.
    x, wg, wu = linear_inputs(9, 5, 3, torch.float16, "odd")
    y = S.swiglu_linear(x, torch.cat([wg, wu]))
    assert_close(y, linear_ref(x, wg, wu), torch.float16, "swiglu_linear I=5 K=3")


@pytest.mark.parametrize("M", [8, 1024])
def test_every_sweep_tile_writes_every_element(M):
    """Each tile bench_swiglu.py --sweep times, through an explicit launch into a poisoned
    output: right, and every element written."""
    dtype = torch.bfloat16
    N, K = 4104, 1000          # ragged in N and K at both M
    x, wg, wu = linear_inputs(M, N, K, dtype, "sweep")
    ref = linear_ref(x, wg, wu)
    for cfg in S.sweep_configs(M, N, K):
        kernel = S.linear_kernel_for(N, K, dtype, **cfg)
        out = poison((M, N), dtype)
        kernel.launch(x, wg, wu, out)
        torch.cuda.synchronize()
        assert_close(out, ref, dtype, f"swiglu_linear {cfg}")


def test_the_split_k_slices_are_summed_in_a_fixed_order():
    x, wg, wu = linear_inputs(8, 4096, 4096, torch.bfloat16, "order")
    kernel = S.linear_kernel_for(4096, 4096, torch.bfloat16, **dict(S.THIN_CONFIG, splits=8))
    first = kernel(x, wg, wu)
    assert_close(first, linear_ref(x, wg, wu), torch.bfloat16, "split-K x8")
    for _ in range(3):
        assert torch.equal(kernel(x, wg, wu), first)


def test_mma_sync_path_on_any_gpu():
    for M in (8, 1024):
        x, wg, wu = linear_inputs(M, 1000, 520, torch.float16, "mma")
        cfg = S.swiglu_linear_config(M, 1000, 520, wgmma=False)
        y = S.linear_kernel_for(1000, 520, torch.float16, mma_sync=True, **cfg)(x, wg, wu)
        assert_close(y, linear_ref(x, wg, wu), torch.float16, f"swiglu_linear mma.sync M={M}")


def test_swiglu_linear_leading_dims_views_nan_and_empty():
    dtype = torch.float16
    x, wg, wu = linear_inputs(24, 256, 128, dtype, "nd")
    y = S.swiglu_linear(x.view(2, 3, 4, 128), wg, wu)
    assert y.shape == (2, 3, 4, 256)
    assert_close(y.view(24, 256), linear_ref(x, wg, wu), dtype, "swiglu_linear 4-D")
    wt = wg.t().contiguous().t()              # a transposed view: copied first
    assert_close(S.swiglu_linear(x, wt, wu), linear_ref(x, wg, wu), dtype, "swiglu_linear strided weight")
    x = x.clone()
    x[3, 7] = float("nan")
    y = S.swiglu_linear(x, wg, wu)
    assert torch.isnan(y[3]).all() and not torch.isnan(y[torch.arange(24, device="cuda") != 3]).any()
    assert S.swiglu_linear(x[:0], wg, wu).shape == (0, 256)
    assert S.swiglu_linear(x, wg[:0], wu[:0]).shape == (24, 0)
    zero = S.swiglu_linear(x[:, :0], wg[:, :0], wu[:, :0])
    assert zero.shape == (24, 256) and torch.equal(zero, torch.zeros_like(zero))


def test_swiglu_linear_argument_errors():
    x, wg, wu = linear_inputs(4, 32, 64, torch.float16, "errors")
    assert_argument_error(lambda: S.swiglu_linear(x, wg, wu.cpu()), r"swiglu_linear: w_up must be a CUDA tensor")
    assert_argument_error(lambda: S.swiglu_linear(x, wg, wu[:, :32]), r"swiglu_linear: w_up must have the shape")
    assert_argument_error(lambda: S.swiglu_linear(x.float(), wg, wu), r"swiglu_linear: x must be a tensor of")
