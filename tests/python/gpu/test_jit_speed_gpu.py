"""The fast JIT paths on a GPU: a kernel from the persistent index launches and computes
what the freshly lowered one does, in a new process; a launched program that was saved
and loaded gives the same result; DLPack and __cuda_array_interface__ arguments launch
without a copy; the launcher's vectorcall path returns outputs and refuses keywords."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tegula
import tegula.language as T
from tegula import env

pytestmark = pytest.mark.gpu


@tegula.jit(out_idx=[-1])
def _axpy(N, dtype="float32", block=256):
    @T.prim_func
    def axpy(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), alpha: T.float32, Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Z[bx * block + i] = X[bx * block + i] * alpha + Y[bx * block + i]

    return axpy


@pytest.mark.parametrize("n", [1024, 1000, 1])
def test_saved_program_launches_the_same(n):
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    kernel = _axpy(n)
    expected = x * 2.5 + y
    z = kernel(x, y, 2.5)
    torch.testing.assert_close(z, expected)
    loaded = env.native().load_program(kernel._program.save())
    z2 = loaded.launcher(x, y, 2.5)
    torch.testing.assert_close(z2, expected)
    assert torch.equal(z, z2)


class _CudaArray:
    """An object offering only __cuda_array_interface__ (as numba's device arrays do)."""

    def __init__(self, tensor):
        self._tensor = tensor  # keeps the memory alive
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


class _DLPackOnly:
    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, stream=None):
        return self._tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


@pytest.mark.parametrize("wrap", [_CudaArray, _DLPackOnly], ids=["cuda_array_interface", "dlpack"])
def test_foreign_arrays_launch_without_copy(wrap):
    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    z = _axpy(n)(wrap(x), wrap(y), -1.0)
    assert isinstance(z, torch.Tensor)
    torch.testing.assert_close(z, y - x)
    # Given outputs are written in place through the view.
    out = torch.full((n,), float("nan"), device="cuda")
    tegula.compile(_axpy.fn(n), target="auto").launch(x, y, -1.0, wrap(out))
    torch.cuda.synchronize()
    torch.testing.assert_close(out, y - x)


def test_foreign_array_on_cpu_named():
    np = pytest.importorskip("numpy")
    n = 256
    with pytest.raises(ValueError, match="argument 'X' must be on a CUDA device"):
        _axpy(n)(np.zeros(n, dtype=np.float32), torch.zeros(n, device="cuda"), 1.0)


def test_launcher_refuses_keywords():
    kernel = _axpy(256)
    x = torch.zeros(256, device="cuda")
    with pytest.raises(TypeError, match="by position only"):
        kernel(x, x, alpha=1.0)


CHILD = textwrap.dedent('''
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    import axpy_mod
    k = axpy_mod.axpy(3000)
    x = torch.arange(3000, device="cuda", dtype=torch.float32)
    y = torch.ones(3000, device="cuda")
    z = k(x, y)
    assert torch.equal(z, x * 3 + y), "wrong result"
    print("FAST", "_rebuild" in k.__dict__)
''')

MODULE = textwrap.dedent('''
    import tegula
    import tegula.language as T

    @tegula.jit(out_idx=[-1])
    def axpy(N, block=128):
        @T.prim_func
        def k(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < N:
                        Z[bx * block + i] = X[bx * block + i] * 3.0 + Y[bx * block + i]
        return k
''')


def test_index_kernel_launches_in_a_new_process(tmp_path):
    (tmp_path / "axpy_mod.py").write_text(MODULE)
    environ = dict(os.environ, TEGULA_CACHE_DIR=str(tmp_path / "cache"))
    for var in ("TEGULA_DISABLE_CACHE", "TEGULA_JIT_INDEX", "TEGULA_TARGET"):
        environ.pop(var, None)
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], env=environ, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(proc.stdout)
    assert "FAST False" in runs[0] and "FAST True" in runs[1], runs
