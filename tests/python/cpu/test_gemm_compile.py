"""The GEMM of the tensor-core milestone compiles without a GPU: its machine code uses the
tensor-core path (mma, ldmatrix, cp.async; wgmma on sm_90a), and its generated source
matches the golden copy in tests/golden/ (regenerate with TEGULA_UPDATE_GOLDEN=1 when a
change means to change it)."""
import os
import shutil
import sys
import subprocess

import pytest

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lang_kernels import gemm_relu_program as issue_example  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "golden", "gemm_relu_sm80.cu")


def _sass(cubin: bytes, tmp_path) -> str:
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(tool):
        try:  # the triton package that comes with torch carries one
            import triton

            tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        except ImportError:
            pass
    if not os.path.exists(tool):
        pytest.skip("no cuobjdump (CUDA toolkit or triton) to disassemble with")
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    return subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("target,configs", [("sm_80", None), ("sm_90a", {"tl.disable_wgmma": True})])
def test_tensor_core_instructions_in_the_machine_code(target, configs, tmp_path):
    k = tegula.compile(issue_example(4096, 4096, 4096, 128, 128, 32), out_idx=[-1], target=target,
                       pass_configs=configs)
    src = k.get_kernel_source()
    assert "gemm_ss<" in src and "cp_async_16_pred" in src and "swizzle_offset" in src
    sass = _sass(k.cubin(), tmp_path)
    assert "HMMA" in sass, "no tensor-core instruction"
    assert "LDSM" in sass, "no ldmatrix"
    assert "LDGSTS" in sass, "no cp.async"


def test_golden_source():
    src = tegula.compile(issue_example(4096, 4096, 4096, 128, 128, 32), out_idx=[-1],
                         target="sm_80").get_kernel_source()
    if os.environ.get("TEGULA_UPDATE_GOLDEN") == "1" or not os.path.exists(GOLDEN):
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN, "w") as f:
            f.write(src)
        if os.environ.get("TEGULA_UPDATE_GOLDEN") != "1":
            pytest.fail(f"golden file was missing and has been written: {GOLDEN}; commit it")
    with open(GOLDEN) as f:
        golden = f.read()
    assert src == golden, "generated source changed; set TEGULA_UPDATE_GOLDEN=1 if the change is meant"


def test_gemm_errors_point_at_the_line():
    @T.prim_func
    def bad(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((64, 64), "float16")
            b = T.alloc_shared((32, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a)
            T.gemm(a, b, c)
            T.copy(c, C)

    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(bad, target="sm_90a")
    assert "shapes do not agree" in str(info.value)
    assert "T.gemm(a, b, c)" in str(info.value)


from lang_kernels import gemm_variant_program, swizzled_transpose_program  # noqa: E402


@pytest.mark.parametrize("kw,call", [
    (dict(transpose_A=True), "gemm_ss<64, 64, 32, 2, 2, 1, 0,"),
    (dict(transpose_A=True, transpose_B=True), "gemm_ss<64, 64, 32, 2, 2, 1, 1,"),
    (dict(a_in_registers=True), "gemm_rs<64, 64, 32, 4, 1, 0, 0,"),
    (dict(a_in_registers=True, transpose_B=True), "gemm_rs<64, 64, 32, 4, 1, 0, 1,"),
    (dict(accum_dtype="float16"), "gemm_ss<64, 64, 32, 2, 2, 0, 0,"),
])
def test_gemm_variants_compile_to_tensor_cores(kw, call, tmp_path):
    k = tegula.compile(gemm_variant_program(200, 136, 96, **kw), out_idx=[2], target="sm_80")
    src = k.get_kernel_source()
    assert call in src
    if kw.get("a_in_registers"):
        # A reaches the gemm as registers: the copy into it reads shared memory, no ldmatrix of A.
        assert "&A_local[0]" in src
    sass = _sass(k.cubin(), tmp_path)
    assert "HMMA" in sass and "LDSM" in sass
    if kw.get("accum_dtype") == "float16":
        assert "HMMA.16816.F16" in sass, "fp16 accumulation should use the f16 form of the instruction"
    else:
        assert "HMMA.16816.F32" in sass


def test_gemm_a_in_registers_with_the_columns_split_over_warps():
    """FullCol with A in registers: each column of the warp split holds all of A (on
    mma.sync here); simulated thread by thread against torch."""
    import torch
    from tegula.testing import simulate

    @T.prim_func
    def cols(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((64, 64), "float16")
            af = T.alloc_fragment((64, 64), "float16")
            b = T.alloc_shared((64, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.copy(a, af)
            T.gemm(af, b, c, policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
            T.copy(c, C)

    k = tegula.compile(cols, out_idx=[-1], target="sm_80")
    assert "gemm_rs<64, 64, 64, 1, 4" in k.get_kernel_source()
    gen = torch.Generator().manual_seed(11)
    a, b = torch.randn(64, 64, generator=gen).half(), torch.randn(64, 64, generator=gen).half()
    torch.testing.assert_close(simulate(k, a, b).double(), a.double() @ b.double(), rtol=1e-3, atol=1e-3)


def test_bfloat16_operands_cannot_accumulate_in_float16():
    with pytest.raises(tegula.TegulaCompileError, match="float16 for float16 operands"):
        tegula.compile(gemm_variant_program(64, 64, 64, dtype="bfloat16", accum_dtype="float16"), target="sm_80")


def test_annotate_layout_swizzles_the_shared_tile():
    swizzled = tegula.compile(swizzled_transpose_program(128, 256), out_idx=[1], target="sm_80").get_kernel_source()
    plain = tegula.compile(swizzled_transpose_program(128, 256, annotate=False), out_idx=[1],
                           target="sm_80").get_kernel_source()
    assert "swizzle_offset<64, 2>" in swizzled and "swizzle_offset" not in plain


def test_annotate_layout_refuses_a_tile_it_cannot_swizzle():
    @T.prim_func
    def bad(X: T.Tensor((64, 24), "float16"), Y: T.Tensor((64, 24), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tile = T.alloc_shared((64, 24), "float16")
            T.annotate_layout({tile: T.make_swizzled_layout(tile)})
            T.copy(X, tile)
            T.copy(tile, Y)

    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(bad, target="sm_80")
    assert "power of two" in str(info.value) and "annotate_layout" in str(info.value)


# ---- the wgmma path (sm_90a) ----

OFF = {"tl.disable_warp_specialized": True}


def _hopper(program, configs=None):
    return tegula.compile(program, target="sm_90a", pass_configs=configs)


def test_sm90a_gemm_runs_on_wgmma(tmp_path):
    k = _hopper(issue_example(4096, 4096, 4096, 128, 256, 64, num_stages=4, threads=256))
    src = k.get_kernel_source()
    # Two warpgroups along M, each one m64n256k16 per k-step; B (64 x 256, N-major) stored
    # in four 128-byte panels; operand buffers 1024-byte aligned for the hardware swizzle.
    assert "tegula::wgmma_ss<128, 256, 64, 2, 1, 0, 0, 0, 512, 256, wgmma_ss_n256_f16>" in src
    assert "struct wgmma_ss_n256_f16" in src and "m64n256k16.f32.f16.f16" in src
    assert "panel_offset<256, 2, 256>" in src and "__align__(1024)" in src
    # All operands arrive by the copy engine (sm_90a's default path): no proxy fence is
    # needed before the barriers.
    assert "sync_async_proxy();" not in src
    sass = _sass(k.cubin(), tmp_path)
    assert sass.count("HGMMA.64x256x16.F32") == 4, "one instruction per k-step of 16"
    assert "tnspB" in sass and "tnspA" not in sass, "B is N-major, A K-major"
    assert "HMMA" not in sass and "LDSM" not in sass, "wgmma reads the operands from shared memory itself"
    assert "UTMALDG" in sass and "LDGSTS" not in sass


def _loop(src):
    """The k loop and what follows it."""
    return src[src.index("for (int k = 0;"):]


def test_a_gemm_only_loop_keeps_one_wgmma_group_in_flight():
    # The cp.async pipeline (the warp-specialised one releases each stage the same way:
    # test_hopper_async.py).
    deep = _hopper(issue_example(4096, 4096, 4096, 128, 256, 64, num_stages=4, threads=256), OFF).get_kernel_source()
    loop = _loop(deep)
    body, after = loop.split("\n  }\n", 1)
    # Issued, then the copies S - 2 = 2 stages ahead, while one group runs on.
    assert body.index("tegula::wgmma_ss<") < body.index("wgmma_wait_regs<1, 128>") < body.index("cp_async_16_pred")
    assert "(k + 2)" in body and "wgmma_wait_regs<0, 128>" in after
    # Three stages: the copies go S - 1 ahead and each iteration's group completes in it.
    shallow = _loop(_hopper(issue_example(4096, 4096, 4096, 128, 256, 64, num_stages=3,
                                          threads=256), OFF).get_kernel_source())
    body = shallow.split("\n  }\n", 1)[0]
    assert body.index("tegula::wgmma_ss<") < body.index("cp_async_16_pred") < body.index("wgmma_wait_regs<0, 128>")
    assert "(k + 2)" in body


def test_plain_stores_into_an_operand_are_fenced_for_wgmma():
    # K = 4095: A's rows are not 16-byte aligned, so its tiles are stored by ordinary
    # stores, which the barriers in the loop fence for the wgmma reads after them.
    src = _hopper(issue_example(256, 256, 4095, 128, 256, 64, num_stages=4, threads=256)).get_kernel_source()
    assert "sync_async_proxy();" in _loop(src)


@pytest.mark.parametrize("kw,flags", [
    (dict(transpose_A=True), ("tnspA", "tnspB")),
    (dict(transpose_B=True), (None, None)),
    (dict(transpose_A=True, transpose_B=True), ("tnspA", None)),
    (dict(a_in_registers=True), (None, "tnspB")),
    (dict(a_in_registers=True, transpose_B=True), (None, None)),
    (dict(block_K=16), (None, "tnspB")),
    (dict(dtype="bfloat16"), (None, "tnspB")),
])
def test_wgmma_variants(kw, flags, tmp_path):
    k = _hopper(gemm_variant_program(200, 136, 96, **kw))
    src = k.get_kernel_source()
    assert ("tegula::wgmma_rs<" if kw.get("a_in_registers") else "tegula::wgmma_ss<") in src
    sass = _sass(k.cubin(), tmp_path)
    hgmma = [line for line in sass.splitlines() if "HGMMA.64x64x16.F32" in line]
    assert hgmma, "no wgmma in the machine code"
    if kw.get("dtype") == "bfloat16":
        assert all(".BF16" in line for line in hgmma)
    ta, tb = flags
    assert all(("tnspA" in line) == (ta is not None) and ("tnspB" in line) == (tb is not None) for line in hgmma)
    if kw.get("a_in_registers"):
        assert all("gdesc" in line and "R" in line.split("HGMMA")[1].split(",")[1] for line in hgmma)


@pytest.mark.parametrize("kw,why", [
    (dict(accum_dtype="float16"), "float16 accumulators"),
    (dict(block_M=32, block_N=64), "a 32-row tile is smaller than one m64 instruction"),
    (dict(block_K=48, K=96), "96-byte rows fit no wgmma swizzle"),
])
def test_gemms_wgmma_cannot_take_stay_on_mma_sync(kw, why, tmp_path):
    kw = dict(kw)
    K = kw.pop("K", 96)
    k = _hopper(gemm_variant_program(192, 128, K, **kw))
    src = k.get_kernel_source()
    assert "tegula::gemm_ss<" in src and "wgmma" not in src, why
    assert "HMMA" in _sass(k.cubin(), tmp_path)
