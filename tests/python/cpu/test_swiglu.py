"""SwiGLU (tegula.kernels.gated_mlp) without a GPU: swiglu compiles to 16-byte accesses at
Llama-8B's width; swiglu_linear runs both products on tensor cores (wgmma fed by TMA on
sm_90a, mma.sync elsewhere) and the tiles swiglu_linear_config picks keep 0 bytes of stack;
the lowered code of both, simulated thread by thread (and the programs interpreted as
written), matches torch on ragged shapes, with NaN and inf propagating as in torch; the
entry points name a bad argument."""
import importlib
import re
import warnings

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")

import tegula.testing as tt  # noqa: E402
from tegula import registers  # noqa: E402
from tegula.kernels._common import dtype_name, plan_tile  # noqa: E402

S = importlib.import_module("tegula.kernels.gated_mlp")
F = torch.nn.functional

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}
# (target, held to mma.sync): sm_90a's wgmma path, mma.sync on the same part, and sm_80.
PATHS = [("sm_90a", False), ("sm_90a", True), ("sm_80", False)]
LLAMA = (14336, 4096)   # Llama-8B's intermediate size I and hidden size K


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def swiglu_compiled(n, dtype, joined, target="sm_90a"):
    p = plan_tile(n, torch.finfo(dtype).bits // 8)
    return tegula.compile(S.swiglu_program(n, dtype_name(dtype), joined, p.block_m, p.block_n, p.threads),
                          out_idx=[-1], target=target)


def gate_up(x, up, n):
    """gate and up in float32 as swiglu reads them: x's two halves, or x and up."""
    return (x[:, :n].float(), x[:, n:].float()) if up is None else (x.float(), up.float())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("joined", [True, False])
def test_swiglu_moves_16_byte_vectors_at_llama_width(target, joined):
    k = swiglu_compiled(LLAMA[0], torch.bfloat16, joined, target)
    src = k.get_kernel_source()
    assert len(k.cubin()) > 0
    for name in ("G", "U", "Y"):
        accesses = re.findall(rf"Vec<bfloat16_t, (\d+)>\*>\(&{name}\[", src)
        assert accesses and set(accesses) == {"8"}, f"{name}: accesses of {accesses} elements"
    # The up half of a joined row starts I columns in: the offset is in the index, not a copy.
    if joined:
        assert f"+ {LLAMA[0]})]" in src


@pytest.mark.parametrize("shape", [(5, 13), (3, 1000), (7, 1), (4, 24), (2, 520)], ids=str)
@pytest.mark.parametrize("joined", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_name)
def test_swiglu_simulated_and_reference_match_torch(shape, joined, dtype):
    m, n = shape
    k = swiglu_compiled(n, dtype, joined)
    gen = torch.Generator().manual_seed(m * 1000 + n + joined)
    x = (2 * torch.randn(m, 2 * n if joined else n, generator=gen)).to(dtype)
    up = None if joined else torch.randn(m, n, generator=gen).to(dtype)
    gate, u = gate_up(x, up, n)
    ref = F.silu(gate) * u
    args = (x, x) if joined else (x, up)
    assert rel_err(tt.simulate(k, *args), ref) <= TOL[dtype]
    assert rel_err(tt.reference(k, *args), ref) <= TOL[dtype]


def test_swiglu_nan_and_inf_propagate_as_in_torch():
    n = 8
    gate = torch.tensor([[-float("inf"), float("inf"), float("nan"), -100.0, 0.0, 1.0, -1.0, 3.0]])
    up = torch.tensor([[1.0, 2.0, 1.0, 5.0, float("inf"), float("nan"), 2.0, -1.0]])
    x = torch.cat([gate, up], dim=1).half()
    out = tt.simulate(swiglu_compiled(n, torch.float16, True), x, x)
    ref = (F.silu(gate) * up).half()
    torch.testing.assert_close(out, ref, equal_nan=True, rtol=1e-3, atol=0)
    assert torch.isnan(out[0, [0, 2, 4, 5]]).all() and out[0, 1] == float("inf")


# ---- swiglu_linear ----

SMALL = dict(block_M=64, block_N=32, block_K=32, num_stages=2, threads=128)
SMALL_COMBINE = dict(combine_M=16, combine_N=32, combine_threads=64)


def linear_reference(a, wg, wu):
    return F.silu(a.float() @ wg.float().T) * (a.float() @ wu.float().T)


def compile_linear(target, mma, N, K, splits, dtype, **tile):
    if splits > 1:
        tile = {key: value for key, value in tile.items() if key != "panel_size"}
        program = S.swiglu_linear_splitk_program(N, K, splits, dtype=dtype_name(dtype), **tile)
    else:
        program = S.swiglu_linear_program(N, K, dtype=dtype_name(dtype), **tile)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tegula.compile(program, out_idx=[-1], target=target, pass_configs=S.MMA_SYNC if mma else None)
    return kernel, [w for w in caught if issubclass(w.category, tegula.RegisterPressureWarning)]


@pytest.mark.parametrize("target,mma", PATHS)
@pytest.mark.parametrize("M", [8, 256, 8192])
def test_swiglu_linear_configs_run_on_tensor_cores_without_spills(target, mma, M):
    wgmma = target == "sm_90a" and not mma
    cfg = S.swiglu_linear_config(M, *LLAMA, wgmma=wgmma, sms=132,
                                 max_shared=(227 if target == "sm_90a" else 163) * 1024)
    kernel, pressure = compile_linear(target, mma, *LLAMA, cfg.pop("splits"), torch.bfloat16, **cfg)
    assert pressure == []
    src = kernel.get_kernel_source()
    if wgmma:
        assert "tegula::wgmma_ss<" in src and "tma_load" in src
    else:
        assert "tegula::gemm_ss<" in src and "wgmma" not in src
    # Two GEMMs a k step, one per weight, and one store: the (M, I) result alone.
    assert src.count("wgmma_ss<" if wgmma else "gemm_ss<") >= 2
    for i in range(kernel.num_kernels):
        (regs, stack), = registers.compiled_resources(kernel.cubin(i)).values()
        assert stack == 0 and regs <= 255, (cfg, regs, stack)


@pytest.mark.parametrize("target,mma", PATHS)
@pytest.mark.parametrize("M", [8, 8192])
def test_every_sweep_config_keeps_its_accumulators_in_registers(target, mma, M):
    wgmma = target == "sm_90a" and not mma
    shared = (227 if target == "sm_90a" else 163) * 1024
    configs = S.sweep_configs(M, *LLAMA, wgmma=wgmma, max_shared=shared)
    assert configs[0] == S.swiglu_linear_config(M, *LLAMA, wgmma=wgmma, max_shared=shared)
    assert len(configs) >= 6 and len({tuple(sorted(c.items())) for c in configs}) == len(configs)
    for cfg in configs:
        cfg = dict(cfg)
        kernel, pressure = compile_linear(target, mma, *LLAMA, cfg.pop("splits"), torch.bfloat16, **cfg)
        assert pressure == [], cfg
        for i in range(kernel.num_kernels):
            (regs, stack), = registers.compiled_resources(kernel.cubin(i)).values()
            assert stack == 0, (cfg, regs, stack)


@pytest.mark.parametrize("target,mma", PATHS)
def test_forced_split_k_compiles_to_two_kernels_without_spills(target, mma):
    cfg = dict(S.THIN_CONFIG)
    kernel, pressure = compile_linear(target, mma, *LLAMA, 4, torch.bfloat16, **cfg)
    assert pressure == [] and kernel.num_kernels == 2
    (ws,) = kernel.prim_func.workspaces
    assert (ws.shape[0], ws.shape[1], ws.shape[3]) == (2, 4, LLAMA[0]) and ws.dtype == "float32"
    for i in range(2):
        (regs, stack), = registers.compiled_resources(kernel.cubin(i)).values()
        assert stack == 0


@pytest.mark.parametrize("target,mma", PATHS)
@pytest.mark.parametrize("M,N,K,splits,dtype", [
    (70, 36, 96, 1, torch.float16),      # two M tiles, the second ragged; N not a multiple of 8
    (5, 40, 200, 3, torch.float16),      # 7 steps of 32: slices of 3, 3 and 1; ragged K
    (33, 72, 129, 2, torch.bfloat16),    # K not a multiple of 8: narrower loads
    (1, 8, 32, 1, torch.bfloat16),       # one row, one k step
])
def test_swiglu_linear_simulated_and_reference_match_torch(target, mma, M, N, K, splits, dtype):
    kernel, _ = compile_linear(target, mma, N, K, splits, dtype, **SMALL, **(SMALL_COMBINE if splits > 1 else {}))
    gen = torch.Generator().manual_seed(M * 1000 + N + K + splits)
    a = torch.randn(M, K, generator=gen).to(dtype)
    wg = (torch.randn(N, K, generator=gen) / K ** 0.5).to(dtype)
    wu = (torch.randn(N, K, generator=gen) / K ** 0.5).to(dtype)
    ref = linear_reference(a, wg, wu)
    assert rel_err(tt.simulate(kernel, a, wg, wu), ref) <= TOL[dtype]
    assert rel_err(tt.reference(kernel, a, wg, wu), ref) <= TOL[dtype]


def test_swiglu_linear_reads_the_halves_of_one_weight():
    """The halves of a (2I, K) weight, as views of it, through the one-kernel program; and
    a NaN or inf in x reaching the outputs as torch's two GEMMs give them."""
    M, N, K = 6, 24, 64
    kernel, _ = compile_linear("sm_90a", False, N, K, 1, torch.float16, **SMALL)
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(M, K, generator=gen).half()
    w = (torch.randn(2 * N, K, generator=gen) / 8).half()
    a[2, 5] = float("nan")
    a[4, 0] = float("inf")
    n, gate, up = S._weights("swiglu_linear", a, w, None)
    assert n == N and gate.data_ptr() == w.data_ptr() and up.data_ptr() == w[N:].data_ptr()
    out = tt.simulate(kernel, a, gate, up)
    ref = linear_reference(a, w[:N], w[N:])
    torch.testing.assert_close(out.float(), ref, equal_nan=True, rtol=2e-3, atol=2e-3)
    assert torch.isnan(out[2]).all() and not torch.isnan(out[[0, 1, 3, 5]]).any()


@pytest.mark.parametrize("M,expect", [
    (8, dict(S.THIN_CONFIG, splits=1)),                  # 224 tiles: 1.7 blocks an SM already
    (64, dict(S.THIN_CONFIG, splits=1)),
    (256, dict(S.THIN_CONFIG, panel_size=8, splits=1)),  # 224 tiles of 128 x 128: too few
    (8192, dict(S.TILED_CONFIG, splits=1)),
])
def test_config_rule_at_llama_shapes(M, expect):
    assert S.swiglu_linear_config(M, *LLAMA, wgmma=True, sms=132, max_shared=227 * 1024) == expect


def test_config_rule_splits_thin_outputs_and_fits_shared_memory():
    # 8 x 4096 x 4096: 64 tiles on 132 SMs -> 4 slices of 16 steps.
    assert S.swiglu_linear_config(8, 4096, 4096, wgmma=True, sms=132, max_shared=227 * 1024)["splits"] == 4
    assert S.swiglu_linear_config(8192, *LLAMA, wgmma=False, sms=108, max_shared=163 * 1024)["num_stages"] == 3
    # 99 KiB (sm_86/sm_89): 48 KiB stages of the large tile fit twice; the thin tile's four do.
    small = S.swiglu_linear_config(8192, 8192, 4096, wgmma=False, sms=84, max_shared=99 * 1024)
    assert small["block_N"] == 128 and small["num_stages"] == 2
    assert S.swiglu_linear_config(8, *LLAMA, wgmma=False, sms=84, max_shared=99 * 1024)["num_stages"] == 4


def test_linear_kernel_for_dispatch():
    split = S.linear_kernel_for(4096, 4096, torch.bfloat16, splits=4, **S.THIN_CONFIG)
    assert split.prim_func.name == "swiglu_linear_splitk" and split.num_kernels == 2
    tiled = S.linear_kernel_for(4096, 4096, torch.bfloat16, **S.TILED_CONFIG)
    assert tiled.prim_func.name == "swiglu_linear" and tiled.num_kernels == 1
    assert S.linear_kernel_for(4096, 4096, torch.bfloat16, **S.TILED_CONFIG) is tiled


def test_an_empty_slice_is_refused():
    with pytest.raises(ValueError, match="splits must leave every slice"):
        S.swiglu_linear_splitk_program(128, 256, 3, block_K=64)


x16 = torch.randn(4, 64).half()
w16 = torch.randn(32, 64).half()

ERRORS = {
    "swiglu-None": (lambda: S.swiglu(None), TypeError, r"swiglu: x must be a torch\.Tensor"),
    "swiglu-int": (lambda: S.swiglu(x16.int()), ValueError, r"swiglu: x must be a tensor of float16"),
    "swiglu-up-dtype": (lambda: S.swiglu(x16, x16.float()), ValueError, r"swiglu: up must be a float16 tensor"),
    "swiglu-up-shape": (lambda: S.swiglu(x16, x16[:, :32]), ValueError, r"swiglu: up must have the shape \(4, 64\)"),
    "swiglu-odd": (lambda: S.swiglu(x16[:, :63]), ValueError, r"swiglu: x alone must hold gate and up"),
    "swiglu-scalar": (lambda: S.swiglu(x16[0, 0]), ValueError, r"swiglu: x must have at least one dimension"),
    "swiglu-cpu": (lambda: S.swiglu(x16), ValueError, r"swiglu: x must be a CUDA tensor"),
    "linear-x-float32": (lambda: S.swiglu_linear(x16.float(), w16), ValueError,
                         r"swiglu_linear: x must be a tensor of float16/bfloat16"),
    "linear-w-dtype": (lambda: S.swiglu_linear(x16, w16.bfloat16()), ValueError,
                       r"swiglu_linear: w_gate must be a float16 tensor"),
    "linear-w-None": (lambda: S.swiglu_linear(x16, None), TypeError, r"swiglu_linear: w_gate must be a torch\.Tensor"),
    "linear-w-up-dtype": (lambda: S.swiglu_linear(x16, w16, w16.float()), ValueError,
                          r"swiglu_linear: w_up must be a float16 tensor"),
    "linear-w-rank": (lambda: S.swiglu_linear(x16, w16[0]), ValueError, r"swiglu_linear: w_gate must be 2-D"),
    "linear-fused-odd": (lambda: S.swiglu_linear(x16, w16[:31]), ValueError,
                         r"swiglu_linear: a single weight must have shape \(2I, 64\)"),
    "linear-fused-K": (lambda: S.swiglu_linear(x16, w16[:, :32]), ValueError,
                       r"swiglu_linear: a single weight must have shape \(2I, 64\)"),
    "linear-w-K": (lambda: S.swiglu_linear(x16, w16[:, :32], w16[:, :32]), ValueError,
                   r"swiglu_linear: w_gate must have shape \(I, 64\)"),
    "linear-w-up-shape": (lambda: S.swiglu_linear(x16, w16, w16[:16]), ValueError,
                          r"swiglu_linear: w_up must have the shape \(32, 64\) of w_gate"),
    "linear-scalar": (lambda: S.swiglu_linear(x16[0, 0], w16), ValueError,
                      r"swiglu_linear: x must have at least one dimension"),
    "linear-cpu": (lambda: S.swiglu_linear(x16, w16), ValueError, r"swiglu_linear: x must be a CUDA tensor"),
    "linear-grad": (lambda: S.swiglu_linear(x16, w16.clone().requires_grad_()), RuntimeError,
                    r"swiglu_linear: w_gate requires grad, but swiglu_linear has no backward yet"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_argument_errors_name_the_argument(name):
    fn, exc, pattern = ERRORS[name]
    with pytest.raises(exc, match=pattern):
        fn()
