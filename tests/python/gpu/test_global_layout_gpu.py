"""Global tensors stored in a T.Layout's order, on the GPU (the programs of
tests/python/global_layout_programs.py; the CPU side in cpu/test_global_layout.py): the
atomics of one kernel land in fragment order, a second kernel reads them back, and a
whole dimension moves under a dynamic size, ragged and aligned, against torch, outputs
poisoned."""
import pytest
import torch

import tegula
from global_layout_programs import accumulate_program, convert_program, placed, transposed_store_program

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("shape", [(2, 64, 2, 32), (1, 128, 3, 64)])
def test_accumulate_then_convert(shape):
    acc = tegula.compile(accumulate_program(shape))
    conv = tegula.compile(convert_program(shape), out_idx=[1])
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g)
    dq = torch.zeros(shape, device="cuda")
    acc(x.cuda(), dq)
    acc(x.cuda(), dq)  # the atomics accumulate: twice 2 * x
    assert torch.equal(placed(dq.cpu()), 4 * x)
    out = conv(dq)
    torch.testing.assert_close(out.float().cpu(), (4 * x).half().float(), rtol=0, atol=0)


@pytest.mark.parametrize("L", [64, 100, 1000])
def test_head_major_store_under_a_dynamic_length(L):
    k = tegula.compile(transposed_store_program(), out_idx=[1])
    x = torch.randn(L, 4, 32, device="cuda")
    y = k(x)
    torch.testing.assert_close(y.reshape(4, L, 32), (x + 1).permute(1, 0, 2), rtol=0, atol=0)
