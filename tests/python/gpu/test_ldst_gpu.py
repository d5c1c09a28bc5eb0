"""T.reinterpret and the explicit-width accesses on the GPU against torch: fresh random
inputs, aligned and ragged sizes, outputs poisoned; the programs are cpu/test_ldst.py's."""
import os
import sys

import pytest
import torch

import tegula

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import ldst_programs as lp  # noqa: E402

pytestmark = pytest.mark.gpu
POISON = 12345.0


def _rand(n, dtype):
    return torch.randn(n, device="cuda").to(getattr(torch, dtype))


@pytest.mark.parametrize("bits,dtype", [(32, "float32"), (64, "float32"), (128, "float32"), (256, "float32"),
                                        (64, "float16"), (128, "bfloat16"), (32, "float16")])
@pytest.mark.parametrize("N", [256, 130, 1000])
@pytest.mark.parametrize("pred_half", [False, True])
def test_load_reinterpret_store(bits, dtype, N, pred_half):
    k = tegula.compile(lp.copy_program(N, bits, dtype, pred_half))
    x = _rand(N, dtype)
    y = torch.full((N,), POISON, device="cuda").to(x.dtype)
    k(x, y)
    n = bits // (8 * x.element_size())
    blocks = (N + n - 1) // n
    full = N // n * n
    loaded = min((blocks // 2 if pred_half else blocks) * n, full)
    want = torch.zeros_like(x)
    want[:loaded] = x[:loaded]
    want[full:] = y[full:]  # past the last whole piece: masked, untouched
    assert torch.equal(y[:full], want[:full])
    assert torch.all(y[full:] == torch.tensor(POISON).to(x.dtype))


@pytest.mark.parametrize("bits", [32, 64, 128, 256])
@pytest.mark.parametrize("pred_half", [False, True])
def test_explicit_stores(bits, pred_half):
    N = 1024
    k = tegula.compile(lp.store_program(N, bits, "float32", pred_half))
    x, y = _rand(N, "float32"), torch.full((N,), POISON, device="cuda")
    k(x, y)
    want = x.clone()
    if pred_half:
        want[N // 2:] = POISON
    assert torch.equal(y, want)


@pytest.mark.parametrize("bits,dtype", [(32, "float32"), (64, "float32"), (128, "float32"), (128, "float16")])
def test_shared(bits, dtype):
    N = 1024
    k = tegula.compile(lp.shared_program(N, bits, dtype))
    x = _rand(N, dtype)
    y = torch.full((N,), POISON, device="cuda").to(x.dtype)
    k(x, y)
    n = bits // (8 * x.element_size())
    assert torch.equal(y, x.view(-1, n).flip(0).reshape(-1))


def test_bit_tricks():
    N = 256
    k = tegula.compile(lp.bits_program(N))
    a = _rand(N, "float32")
    e = torch.randint(-100, 100, (N,), dtype=torch.int32, device="cuda")
    b = torch.full((N,), 7, dtype=torch.int32, device="cuda").view(torch.uint32)
    c = torch.full((N,), POISON, device="cuda")
    h = torch.full((N,), 7, dtype=torch.int16, device="cuda").view(torch.uint16)
    k(a, e, b, c, h)
    assert torch.equal(b.view(torch.int32), a.view(torch.int32))
    assert torch.equal(c, torch.pow(2.0, e.double()).float())
    assert torch.equal(h.view(torch.int16), a.half().view(torch.int16))


@pytest.mark.parametrize("k_off", [0, 1, 2, 3])
def test_unaligned_offsets_never_fault(k_off):
    N = 4096
    k = tegula.compile(lp.offset_program(N))
    x, y = _rand(N, "float32"), torch.full((N,), POISON, device="cuda")
    k(x, y, k_off)
    torch.cuda.synchronize()
    m = N - 2
    # With k_off = 3 the last pair, x[N - 1 : N + 1], runs past the edge: masked whole, as
    # the reference and the simulator mask it (a load gives 0).
    whole = m if k_off + m <= N else m - 2
    assert torch.equal(y[:whole], x[k_off:k_off + whole])
    assert torch.equal(y[whole:m], torch.zeros(m - whole, device="cuda"))


def test_a_misaligned_tensor_view_is_refused_at_launch():
    N = 256
    k = tegula.compile(lp.copy_program(N, 128))
    base = _rand(N + 1, "float32")
    with pytest.raises(ValueError, match="aligned to 16 bytes"):
        k(base[1:], torch.empty(N, device="cuda"))
