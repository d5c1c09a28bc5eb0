"""TileLang's function attributes on the GPU: a body-declared prim_func returning its
T.empty output, with pass configs and compile flags from T.annotate_*, against torch (the
CPU side in cpu/test_function_attrs.py)."""
import pytest
import torch

import tegula
import function_attrs_programs as fp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows,cols", [(64, 32), (50, 24), (1000, 64)])
def test_body_declared_function_against_torch(rows, cols):
    compiled = tegula.compile(fp.doubling(rows, cols))
    a = torch.randn(rows, cols, device="cuda")
    torch.testing.assert_close(compiled(a), a * 2 + 1)
