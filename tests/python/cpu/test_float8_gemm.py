"""T.gemm on 8-bit floats on the CPU (tests/python/float8_programs.py; the GPU side in
gpu/test_float8_gemm_gpu.py): C = A Bᵀ of float8_e4m3fn / float8_e5m2 operands (and the two
mixed) into float32 agrees between the reference, the simulator (which models wgmma
m64nNk32 on sm_90a and mma.sync m16n8k32 on sm_89) and torch computing in float32 from the
same 8-bit values; the generated code compiles; the forms the tensor cores have no 8-bit
instruction for are errors at the T.gemm line; tilelang.language.fp8."""
import inspect
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula.language.fp8 import determine_fp8_type

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import float8_programs as fp  # noqa: E402

E4, E5 = "float8_e4m3fn", "float8_e5m2"
TYPES = [(E4, E4), (E5, E5), (E4, E5)]


def gemm_line():
    lines, first = inspect.getsourcelines(fp.refused_gemm_program)
    return first + next(i for i, line in enumerate(lines) if "# MARK-gemm" in line)


def check(kernel, M, N, K, a_dtype, b_dtype, seed):
    a, b = fp.gemm_operands(M, N, K, a_dtype, b_dtype, torch.Generator().manual_seed(seed))
    want = a.float() @ b.float().T
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(kernel, a, b), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("a_dtype,b_dtype", TYPES, ids=["e4m3", "e5m2", "e4m3xe5m2"])
@pytest.mark.parametrize("M,N,K", [(128, 64, 128), (72, 40, 100)], ids=["aligned", "ragged"])
def test_wgmma(a_dtype, b_dtype, M, N, K):
    k = tegula.compile(fp.gemm_program(M, N, K, a_dtype, b_dtype, block_M=64, block_N=64, block_K=64),
                       out_idx=[2], target="sm_90a")
    src = k.get_kernel_source()
    ty = {E4: "e4m3", E5: "e5m2"}
    assert f"m64n64k32.f32.{ty[a_dtype]}.{ty[b_dtype]}" in src
    check(k, M, N, K, a_dtype, b_dtype, seed=M + K)
    assert k.cubin()


@pytest.mark.parametrize("a_dtype,b_dtype", TYPES, ids=["e4m3", "e5m2", "e4m3xe5m2"])
@pytest.mark.parametrize("target", ["sm_89", "sm_90a"])
def test_mma_sync(a_dtype, b_dtype, target):
    # sm_90a runs mma.sync where wgmma does not fit: here 64 warps' rows per warpgroup do not
    # (block_M = 32), and wgmma is off for the whole kernel.
    k = tegula.compile(fp.gemm_program(45, 70, 96, a_dtype, b_dtype, block_M=32, block_N=64, block_K=32),
                       out_idx=[2], target=target)
    src = k.get_kernel_source()
    assert "tegula::gemm_ss<" in src and "wgmma" not in src
    check(k, 45, 70, 96, a_dtype, b_dtype, seed=7)
    assert k.cubin()


@pytest.mark.parametrize("block_K", [32, 128, 256])
def test_every_row_width_of_the_shared_operands(block_K):
    # 32- and 128-byte swizzled rows, and rows of two 128-byte panels.
    k = tegula.compile(fp.gemm_program(64, 64, 512, E4, block_M=64, block_N=64, block_K=block_K),
                       out_idx=[2], target="sm_90a")
    assert "wgmma_ss<" in k.get_kernel_source()
    check(k, 64, 64, 512, E4, E4, seed=block_K)
    assert k.cubin()


def test_two_accumulators_as_the_2xacc_examples_write_them():
    k = tegula.compile(fp.gemm_program(64, 64, 256, E4, block_M=64, block_N=64, block_K=64, accumulate_twice=True),
                       out_idx=[2], target="sm_90a")
    check(k, 64, 64, 256, E4, E4, seed=3)
    assert k.cubin()


REFUSALS = [
    (dict(transpose_B=False), "sm_90a", "K-major"),
    (dict(transpose_A=True), "sm_90a", "K-major"),
    (dict(transpose_A=True), "sm_89", "K-major"),
    (dict(a_in_registers=True), "sm_90a", "reads A from shared memory"),
    (dict(K=48), "sm_90a", "K a multiple of 32"),
    (dict(c_dtype="float16"), "sm_90a", "accumulates in float32"),
    (dict(b_dtype="float16"), "sm_90a", "8-bit float A and B"),
    (dict(), "sm_80", "needs sm_89 or newer"),
]


@pytest.mark.parametrize("kwargs,target,message", REFUSALS, ids=[m + "-" + t for _, t, m in REFUSALS])
def test_forms_without_an_8bit_instruction_are_refused_at_the_line(kwargs, target, message):
    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(fp.refused_gemm_program(**kwargs), target=target)
    assert message in str(info.value)
    assert info.value.line == gemm_line(), str(info.value)


def test_determine_fp8_type():
    assert determine_fp8_type() is T.float8_e4m3fn and determine_fp8_type("e4m3") == "float8_e4m3fn"
    assert determine_fp8_type("e5m2") is T.float8_e5m2
    with pytest.raises(ValueError, match="fp8_format"):
        determine_fp8_type("e3m4")
