"""TileLang's function attributes on the GPU: a body-declared prim_func returning its
T.empty output, with pass configs and compile flags from T.annotate_*, against torch (the
CPU side in cpu/test_function_attrs.py)."""
import pytest
import torch

import tegula
import tegula.language as T
from tegula.transform import PassConfigKey

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows,cols", [(64, 32), (50, 24), (1000, 64)])
def test_body_declared_function_against_torch(rows, cols):
    @T.prim_func
    def kernel(A):
        A: T.Tensor[[rows, cols], T.float32]
        T.annotate_pass_configs({PassConfigKey.TL_ENABLE_FAST_MATH: True})
        T.annotate_compile_flags(["--use_fast_math"])
        B = T.empty([rows, cols], T.float32)
        with T.Kernel(T.ceildiv(rows, 16), threads=128) as bx:
            for i, j in T.Parallel(16, cols):
                if bx * 16 + i < rows:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j] * 2.0 + 1.0
        return B

    compiled = tegula.compile(kernel)
    a = torch.randn(rows, cols, device="cuda")
    torch.testing.assert_close(compiled(a), a * 2 + 1)
