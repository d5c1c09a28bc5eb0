"""T.gemm on integer operands on the CPU (tests/python/int_gemm_programs.py; the GPU side in
gpu/test_int_gemm_gpu.py): C = A Bᵀ into int32 of int8 / uint8 operands (any mix; wgmma
m64nNk32 .s32 on sm_90a, mma.sync m16n8k32 .s32 on sm_80 on) and of packed int4 / uint4
ones (any mix; mma.sync m16n8k64 everywhere) agrees exactly between the reference, the
simulator and torch's integer matmul of the same values; the PTX NVRTC makes of the
generated source holds the instruction; the cubin compiles; the forms the tensor cores
have no integer instruction for are errors at the T.gemm line; tilelang.language.fp8's
determine_torch_fp8_type."""
import ctypes
import ctypes.util
import glob
import inspect
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula.env import device_include_dir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import int_gemm_programs as ip  # noqa: E402

SUFFIX = {"int8": "s8", "uint8": "u8", "int4": "s4", "uint4": "u4"}


def gemm_line():
    lines, first = inspect.getsourcelines(ip.refused_gemm_program)
    return first + next(i for i, line in enumerate(lines) if "# MARK-gemm" in line)


def assert_matches_torch(kernel, M, N, K, a_dtype, b_dtype, seed):
    a, b, want = ip.operands(M, N, K, a_dtype, b_dtype, torch.Generator().manual_seed(seed))
    for run in (tt.reference, tt.simulate):
        got = run(kernel, a, b)
        assert got.dtype == torch.int32
        assert torch.equal(got, want), f"{run.__name__}: {(got.long() - want.long()).abs().max()} off"


def _nvrtc():
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", ctypes.util.find_library("nvrtc")]
    site = os.path.dirname(os.path.dirname(torch.__file__))
    names += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libnvrtc.so*")))
    names += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    for name in filter(None, names):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    pytest.skip("libnvrtc cannot be loaded with ctypes here")


def ptx(kernel, arch):
    """The PTX NVRTC makes of a kernel's generated source for compute_<arch>: where the
    device library's mma.sync calls become instructions."""
    lib = _nvrtc()
    includes = [device_include_dir()]
    for root in ("/usr/local/cuda/include", os.environ.get("CUDA_HOME", "") + "/include"):
        includes += [root, root + "/cccl"]
    includes += glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "*", "include"))
    flags = ["-std=c++17", f"--gpu-architecture=compute_{arch}", "-w"] + \
        [f"-I{d}" for d in includes if d and os.path.isdir(d)]
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), kernel.get_kernel_source().encode(), b"k.cu", 0, None, None) == 0
    argv = (ctypes.c_char_p * len(flags))(*[f.encode() for f in flags])
    rc = lib.nvrtcCompileProgram(prog, len(flags), argv)
    if rc != 0:
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        if "cannot open source file" in log.value.decode():
            pytest.skip("NVRTC finds no CUDA headers here")
        raise AssertionError(log.value.decode()[:2000])
    size = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    text = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, text)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return text.value.decode()


INT8_TYPES = [("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8"), ("uint8", "int8")]
INT8_IDS = ["s8", "u8", "s8xu8", "u8xs8"]
INT4_TYPES = [("int4", "int4"), ("uint4", "uint4"), ("int4", "uint4"), ("uint4", "int4")]
INT4_IDS = ["s4", "u4", "s4xu4", "u4xs4"]


@pytest.mark.parametrize("a_dtype,b_dtype", INT8_TYPES, ids=INT8_IDS)
@pytest.mark.parametrize("M,N,K", [(128, 64, 128), (72, 40, 100)], ids=["aligned", "ragged"])
def test_int8_wgmma(a_dtype, b_dtype, M, N, K):
    k = tegula.compile(ip.gemm_program(M, N, K, a_dtype, b_dtype, block_M=64, block_N=64, block_K=64),
                       out_idx=[2], target="sm_90a")
    src = k.get_kernel_source()
    assert f"wgmma.mma_async.sync.aligned.m64n64k32.s32.{SUFFIX[a_dtype]}.{SUFFIX[b_dtype]}" in src
    assert_matches_torch(k, M, N, K, a_dtype, b_dtype, seed=M + K)
    assert k.cubin()


@pytest.mark.parametrize("a_dtype,b_dtype", INT8_TYPES, ids=INT8_IDS)
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_int8_mma_sync(a_dtype, b_dtype, target):
    # block_M = 32 fits no warpgroup: mma.sync m16n8k32 on sm_90a too.
    k = tegula.compile(ip.gemm_program(45, 70, 96, a_dtype, b_dtype, block_M=32, block_N=64, block_K=32),
                       out_idx=[2], target=target)
    assert "tegula::gemm_ss<" in k.get_kernel_source() and "wgmma" not in k.get_kernel_source()
    assert_matches_torch(k, 45, 70, 96, a_dtype, b_dtype, seed=7)
    arch = target[3:5]
    assert f"mma.sync.aligned.m16n8k32.row.col.s32.{SUFFIX[a_dtype]}.{SUFFIX[b_dtype]}.s32" in ptx(k, arch)
    assert k.cubin()


def test_int8_wgmma_widths_the_integer_instruction_lacks_run_on_mma_sync():
    # A warpgroup tile 40 wide: wgmma's integer N is 8, 16, 24 or a multiple of 16.
    k = tegula.compile(ip.gemm_program(64, 40, 64, "int8", block_M=64, block_N=40, block_K=64),
                       out_idx=[2], target="sm_90a")
    assert "wgmma" not in k.get_kernel_source()
    assert_matches_torch(k, 64, 40, 64, "int8", "int8", seed=5)
    # 24 is one.
    k = tegula.compile(ip.gemm_program(64, 24, 64, "int8", block_M=64, block_N=24, block_K=64),
                       out_idx=[2], target="sm_90a")
    assert "m64n24k32.s32.s8.s8" in k.get_kernel_source()
    assert_matches_torch(k, 64, 24, 64, "int8", "int8", seed=6)


@pytest.mark.parametrize("a_dtype,b_dtype", INT4_TYPES, ids=INT4_IDS)
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_int4_mma_sync(a_dtype, b_dtype, target):
    k = tegula.compile(ip.gemm_program(45, 70, 130, a_dtype, b_dtype, block_M=32, block_N=64, block_K=64),
                       out_idx=[2], target=target)
    src = k.get_kernel_source()
    assert "tegula::gemm_ss<" in src and "wgmma" not in src
    assert_matches_torch(k, 45, 70, 130, a_dtype, b_dtype, seed=11)
    assert f"mma.sync.aligned.m16n8k64.row.col.s32.{SUFFIX[a_dtype]}.{SUFFIX[b_dtype]}.s32" in ptx(k, target[3:5])
    assert k.cubin()


@pytest.mark.parametrize("block_K", [64, 128, 256])
def test_int4_row_widths_and_double_buffered_fragments(block_K):
    # 64-, 128- and 256-byte rows in shared memory; a 4-warp 64 x 64 block keeps the next
    # k-step's fragments in registers (gemm.h's double buffer), the TileLang example's
    # 128 x 128 block streams them.
    k = tegula.compile(ip.gemm_program(64, 64, 256, "int4", block_M=64, block_N=64, block_K=block_K),
                       out_idx=[2], target="sm_90a")
    assert_matches_torch(k, 64, 64, 256, "int4", "int4", seed=block_K)
    assert k.cubin()


def test_tilelang_int4_example():
    # The example's program at a size the simulator runs quickly; its GPU test runs 1024^3.
    k = tegula.compile(ip.tilelang_int4_program(128, 128, 128, 128, 128, 64), out_idx=-1, target="sm_80")
    assert_matches_torch(k, 128, 128, 128, "int4", "int4", seed=3)
    assert k.cubin()
    assert tegula.compile(ip.tilelang_int4_program(1024, 1024, 1024, 128, 128, 64), out_idx=-1,
                          target="sm_90a").cubin()


def test_int32_wraps_as_the_tensor_cores_do():
    # 512 products of (-128)(-128) = 2^14 each: 2^23 a step of K, past 2^31 after 256 of them.
    k = tegula.compile(ip.gemm_program(64, 64, 2 ** 17, "int8", block_M=64, block_N=64, block_K=512, num_stages=1),
                       out_idx=[2], target="sm_90a")
    a = torch.full((64, 2 ** 17), -128, dtype=torch.int8)
    want = torch.full((64, 64), (2 ** 31) % 2 ** 32 - 2 ** 32, dtype=torch.int32)  # 2^31 wraps to -2^31
    assert torch.equal(tt.reference(k, a, a), want)


def test_clear_accum_every_step():
    k = tegula.compile(ip.gemm_program(64, 64, 192, "uint8", "int8", block_M=64, block_N=64, block_K=64,
                                       clear_accum=True), out_idx=[2], target="sm_90a")
    assert_matches_torch(k, 64, 64, 192, "uint8", "int8", seed=9)
    assert k.cubin()


REFUSALS = [
    (dict(transpose_B=False), "sm_90a", "K-major"),
    (dict(transpose_A=True), "sm_80", "K-major"),
    (dict(a_dtype="int4", b_dtype="int4", transpose_B=False), "sm_80", "K-major"),
    (dict(a_in_registers=True), "sm_90a", "reads A from shared memory"),
    (dict(a_dtype="uint4", b_dtype="int4", a_in_registers=True), "sm_80", "reads A from shared memory"),
    (dict(K=48), "sm_90a", "K a multiple of 32"),
    (dict(a_dtype="int4", b_dtype="int4", K=96), "sm_80", "K a multiple of 64"),
    (dict(c_dtype="float32"), "sm_90a", "accumulates in int32"),
    (dict(a_dtype="int4", b_dtype="int4", c_dtype="int16"), "sm_80", "accumulates in int32"),
    (dict(b_dtype="int4"), "sm_80", "packed 4-bit integer A and B"),
    (dict(b_dtype="float16"), "sm_80", "8-bit integer A and B"),
    (dict(a_dtype="int16", b_dtype="int16"), "sm_80", "8-bit integer A and B"),
    (dict(a_dtype="float16", b_dtype="float16", c_dtype="int32"), "sm_80", "int32 only for integer"),
    (dict(), "sm_75", "needs sm_80 or newer"),
]


@pytest.mark.parametrize("kwargs,target,message", REFUSALS,
                         ids=[f"{i}-{m}-{t}" for i, (_, t, m) in enumerate(REFUSALS)])
def test_forms_without_an_integer_instruction_are_refused_at_the_line(kwargs, target, message):
    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(ip.refused_gemm_program(**kwargs), target=target)
    assert message in str(info.value)
    assert info.value.line == gemm_line(), str(info.value)


def test_determine_torch_fp8_type():
    from tegula.language.fp8 import determine_torch_fp8_type

    assert determine_torch_fp8_type() is torch.float8_e4m3fn
    assert determine_torch_fp8_type("e4m3") is torch.float8_e4m3fn
    assert determine_torch_fp8_type("e5m2") is torch.float8_e5m2
    assert T.fp8.determine_torch_fp8_type is determine_torch_fp8_type  # TileLang's T.fp8.determine_torch_fp8_type
    with pytest.raises(ValueError, match="fp8_format"):
        determine_torch_fp8_type("e3m4")
