"""The GEMM of the tensor-core milestone compiles without a GPU: its machine code uses the
tensor-core path (mma, ldmatrix, cp.async), and its generated source matches the golden
copy in tests/golden/ (regenerate with TEGULA_UPDATE_GOLDEN=1 when a change means to
change it)."""
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


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_tensor_core_instructions_in_the_machine_code(target, tmp_path):
    k = tegula.compile(issue_example(4096, 4096, 4096, 128, 128, 32), out_idx=[-1], target=target)
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
