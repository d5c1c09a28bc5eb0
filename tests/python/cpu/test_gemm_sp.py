"""T.gemm_sp on the CPU (tests/python/gemm_sp_programs.py; the GPU side in
gpu/test_gemm_sp_gpu.py): C = A @ B with A 2:4 sparse along K, given as kept elements and
metadata. The reference (the language's meaning: A decompressed, then multiplied) and the
simulator (the lowered mma.sp code at tile level) against torch in float64 from the dense
A, fresh random inputs, aligned and ragged M and N; the lowering (gemm_sp_ss on sm_80 and
sm_90a, HMMA.SP in the SASS); the compressor kernel against torch; each mistake an error
naming what is wrong."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import gemm_sp_programs as sp  # noqa: E402

RUNS = [tt.reference, tt.simulate]
IDS = ["reference", "simulate"]

# (M, N, K, gemm_sp_program keywords)
GEMMS = [
    (128, 128, 128, dict(block_M=128, block_N=128, block_K=64)),
    (80, 72, 192, dict()),
    (64, 64, 128, dict(trans_A=True)),
    (96, 40, 64, dict(trans_B=True, block_K=32, num_stages=1)),
    (64, 64, 128, dict(e_dtype="int8")),
    (70, 64, 256, dict(e_dtype="int32", trans_A=True, trans_B=True, block_K=128)),
    (64, 100, 64, dict(e_dtype="uint16", policy="FullCol", threads=256, block_N=128)),
    (48, 64, 128, dict(dtype="bfloat16", policy="FullRow", block_M=64, block_N=32)),
    (128, 64, 64, dict(clear_accum=True, block_K=32, threads=64)),
    (32, 16, 96, dict(block_M=32, block_N=16, block_K=32, threads=32)),
    (100, 64, 128, dict(a_in_registers=True, policy="FullRow")),
    (64, 128, 64, dict(a_in_registers=True, trans_A=True, trans_B=True, block_N=128, block_K=32)),
    (64, 72, 128, dict(a_in_registers=True, dtype="bfloat16", e_dtype="int8", threads=64)),
]


def case_id(case):
    M, N, K, kw = case
    return f"{M}x{N}x{K}-" + "-".join(f"{k}={v}" for k, v in kw.items())


def operands_for(M, N, K, kw, seed):
    g = torch.Generator().manual_seed(seed)
    return sp.operands(M, N, K, kw.get("dtype", "float16"), kw.get("e_dtype", "int16"), kw.get("trans_A", False),
                       kw.get("trans_B", False), g)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("case", GEMMS, ids=[case_id(c) for c in GEMMS])
def test_gemm_sp_matches_the_dense_product(run, case):
    M, N, K, kw = case
    k = tegula.compile(sp.gemm_sp_program(M, N, K, **kw), out_idx=[3], target="sm_90a")
    a, e, b, dense = operands_for(M, N, K, kw, M * N + K)
    want = dense.double() @ (b.double().T if kw.get("trans_B") else b.double())
    c = run(k, a, e, b)
    # Summed in double, rounded once into float32: only that rounding is left.
    torch.testing.assert_close(c.double(), want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_gemm_sp_accumulates_in_float16(run):
    M, N, K = 64, 64, 256
    k = tegula.compile(sp.gemm_sp_program(M, N, K, accum="float16"), out_idx=[3], target="sm_90a")
    a, e, b, dense = operands_for(M, N, K, {}, 5)
    c = run(k, a, e, b)
    # Each K tile's sum is rounded into the float16 accumulator: 4 roundings of |C| <~ 50.
    torch.testing.assert_close(c.double(), dense.double() @ b.double(), rtol=4e-3, atol=0.1)
    other = tt.simulate(k, a, e, b) if run is tt.reference else tt.reference(k, a, e, b)
    assert torch.equal(c, other)  # the same roundings in the same order


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_groups_naming_one_position_twice_read_as_zero_and_one(run):
    # Zero metadata (what the masked copy pads a tile with) must not change the product;
    # a group the user gives as (p, p) is positions (0, 1).
    M, N, K = 64, 64, 64
    k = tegula.compile(sp.gemm_sp_program(M, N, K, block_K=64), out_idx=[3], target="sm_90a")
    a, e, b, _ = operands_for(M, N, K, {}, 3)
    e[5] = 0
    e[9, 1] = 0b1111_0101_1010_0000 - 2**16  # four groups, each naming one position twice
    c = run(k, a, e, b)
    torch.testing.assert_close(c.double(), sp.decompress(a, e).double() @ b.double(), rtol=1e-6, atol=1e-5)
    dense = sp.decompress(a, e)
    assert torch.equal(dense[9, 16:32].reshape(4, 4)[:, 2:], torch.zeros(4, 2, dtype=dense.dtype))


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_positions_out_of_order_are_reported(run):
    M, N, K = 32, 32, 64
    k = tegula.compile(sp.gemm_sp_program(M, N, K, block_M=32, block_N=32, threads=64), out_idx=[3], target="sm_90a")
    a, e, b, _ = operands_for(M, N, K, {}, 4)
    e[3, 2] = 0b0010_0100_0100_0100  # group 3: positions (2, 0)
    error = tegula.TegulaCompileError if run is tt.reference else tt.SimulationError
    with pytest.raises(error, match=r"positions \(2, 0\).*increasing order"):
        run(k, a, e, b)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kw", [dict(), dict(dtype="bfloat16", trans_A=True, e_dtype="int8"),
                                dict(accum="float16", trans_B=True, e_dtype="int32"),
                                dict(a_in_registers=True, policy="FullRow")], ids=["f16", "bf16", "f16acc", "registers"])
def test_gemm_sp_lowers_to_mma_sp(target, kw, tmp_path):
    from test_gemm_compile import _sass

    k = tegula.compile(sp.gemm_sp_program(128, 128, 256, block_M=128, block_N=128, **kw), out_idx=[3], target=target)
    src = k.get_kernel_source()
    call = "tegula::gemm_sp_rs<128, 128, 64, 4, 1, " if kw.get("a_in_registers") else "tegula::gemm_sp_ss<128, 128, 64, 2, 2, "
    assert call in src and "wgmma" not in src
    sass = _sass(k.cubin(), tmp_path)
    assert ("HMMA.SP.16832.F16" if kw.get("accum") == "float16" else "HMMA.SP.16832.F32") in sass
    assert "STL" not in sass, "registers spilled to local memory"


@pytest.mark.parametrize("e_dtype", ["int8", "int16", "int32", "uint8"])
@pytest.mark.parametrize("S", [16, 48])
def test_compress_kernel_matches_torch(e_dtype, S):
    # The compressor reads the thread index (a 2-D block): the simulator runs it.
    K = 128
    k = tegula.compile(sp.compress_program(K, e_dtype, block_K=64), out_idx=[1, 2], target="sm_90a")
    dense = sp.semi_sparse(S, K, generator=torch.Generator().manual_seed(S), sparser=0.3)
    kept, e = tt.simulate(k, dense)
    want_kept, want_e = sp.compress(dense, e_dtype)
    assert torch.equal(kept, want_kept) and torch.equal(e, want_e)
    assert torch.equal(sp.decompress(kept, e), dense)


def test_compress_kernel_asserts_two_non_zeros_a_group():
    k = tegula.compile(sp.compress_program(64, "int16"), out_idx=[1, 2], target="sm_90a")
    dense = sp.semi_sparse(16, 64, generator=torch.Generator().manual_seed(1))
    dense[4, 8:12] = torch.tensor([1.0, 2.0, 3.0, 0.0])
    with pytest.raises(tt.SimulationError, match="more than two non-zeros in a group of four"):
        tt.simulate(k, dense)


def test_the_analyzer_counts_the_dense_product():
    from tegula.tools import Analyzer

    M, N, K = 256, 128, 512
    k = tegula.compile(sp.gemm_sp_program(M, N, K, block_M=128, block_N=128), out_idx=[3], target="sm_90a")
    assert Analyzer.analysis(k, compile=False).tensor_flops == 2 * M * N * K


def test_e_factor_and_the_torch_dtype_table():
    from tegula.cuda.intrinsics.sparse_layout import GROUP_CONFIG, get_e_factor, get_e_replicate_factor
    from tegula.language.dtypes import _TORCH_DTYPE_TO_STR, dtype

    assert [get_e_factor(T.float16, t) for t in (T.int8, T.int16, T.int32)] == [8, 16, 32]
    assert get_e_factor(T.float32, T.int16) == 8 and get_e_factor("bfloat16", "uint8") == 8
    assert GROUP_CONFIG[torch.float16] == GROUP_CONFIG["half"] == (2, 4) and GROUP_CONFIG[T.float] == (1, 2)
    assert get_e_replicate_factor(T.float16) == 2 and get_e_replicate_factor(T.float8_e4m3) == 1
    assert dtype(_TORCH_DTYPE_TO_STR[torch.half]) == T.float16 and _TORCH_DTYPE_TO_STR[torch.int16] == "int16"
    assert T.int16.as_torch() == torch.int16


def _bad(**changes):
    """A gemm_sp kernel with one thing wrong; returns the error's text."""
    spec = dict(a=((64, 32), "float16", "shared"), e=((64, 4), "int16", "shared"), b=((64, 64), "float16", "shared"),
                c=((64, 64), "float32"), threads=128, target="sm_90a")
    spec.update(changes)
    (a_shape, a_dt, a_scope), (e_shape, e_dt, e_scope), (b_shape, b_dt, b_scope) = spec["a"], spec["e"], spec["b"]
    alloc = {"shared": T.alloc_shared, "fragment": T.alloc_fragment}

    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def bad(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=spec["threads"]):
                a = alloc[a_scope](a_shape, a_dt)
                e = alloc[e_scope](e_shape, e_dt)
                b = alloc[b_scope](b_shape, b_dt)
                c = T.alloc_fragment(*spec["c"])
                T.clear(a)
                T.clear(e)
                T.clear(b)
                T.clear(c)
                T.gemm_sp(a, e, b, c)
                T.copy(c, C)

        tegula.compile(bad, target=spec["target"]).cubin()
    return str(info.value)


@pytest.mark.parametrize("changes,message", [
    (dict(e=((64, 8), "int16", "shared")), r"E must be 64x4 \(M x K/16 for int16 metadata\), got 'e' 64x8"),
    (dict(a=((64, 8), "float16", "shared"), e=((64, 1), "int16", "shared"), b=((16, 64), "float16", "shared")),
     "K a multiple of 32"),
    (dict(a=((64, 32), "float32", "shared"), b=((64, 64), "float32", "shared")), "float16 or bfloat16"),
    (dict(e=((64, 4), "float16", "shared")), "integer of 8, 16 or 32 bits"),
    (dict(e=((64, 4), "int16", "fragment")), "'E' must be a shared tile"),
    (dict(c=((64, 64), "bfloat16")), "accumulates in float32"),
    (dict(b=((64, 32), "float16", "shared")), "shapes do not agree"),
    (dict(threads=96), "cannot split a 64x64 tile"),
    (dict(target="sm_75"), "needs sm_80 or newer"),
])
def test_mistakes_are_errors_at_the_line(changes, message):
    text = _bad(**changes)
    assert "T.gemm_sp" in text and "T.gemm_sp(a, e, b, c)" in text  # the caret's line
    assert re.search(message, text), text
