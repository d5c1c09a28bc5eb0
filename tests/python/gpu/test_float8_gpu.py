"""8-bit floats on the GPU (tests/python/float8_programs.py; the CPU side in
cpu/test_float8.py): every conversion pair against torch's rounding with CUDA's
saturation, outputs poisoned, ragged length; the per-row quantisation."""
import pytest
import torch

import tegula
import float8_programs as fp

pytestmark = pytest.mark.gpu


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.double().cpu().nan_to_num(123.0), b.double().cpu().nan_to_num(123.0))


@pytest.mark.parametrize("src,dst", fp.PAIRS)
@pytest.mark.parametrize("loop", [False, True], ids=["copy", "loop"])
def test_conversions(src, dst, loop):
    k = tegula.compile(fp.convert_program(1000, src, dst, loop), out_idx=[1])
    a = fp.sample(1000, src, torch.Generator().manual_seed(len(src + dst)))
    want = fp.saturating(a.double(), dst) if dst in fp.FLOAT8 else a.to(getattr(torch, dst))
    assert same(k(a.cuda()), want)


@pytest.mark.parametrize("dst", fp.FLOAT8)
def test_row_quantization(dst):
    k = tegula.compile(fp.quantize_program(6, 300, dst), out_idx=[1, 2])
    x = torch.randn(6, 300, device="cuda") * 5
    y, scale = k(x)
    s = x.abs().amax(1).clamp_min(1e-4) / fp.FINITE_MAX[dst]
    torch.testing.assert_close(scale, s)
    want = (x / s[:, None]).to(getattr(torch, dst))
    assert (y.float() != want.float()).sum() <= 2


@pytest.mark.parametrize("dtype", fp.FLOAT8)
def test_infinity_and_extreme_values(dtype):
    prog, expected = fp.special_values_program(dtype)
    k = tegula.compile(prog)
    a = torch.zeros(32, dtype=getattr(torch, dtype), device="cuda")
    k(a)
    assert torch.equal(a.cpu().float(), expected().float())
