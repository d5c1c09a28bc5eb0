"""TileLang's T.tvm_warp_shuffle / _up / _down without a GPU: the programs of
warp_shuffle_programs.py compile with NVRTC for sm_80 and sm_90a into the device library's
warp shuffles, the simulator agrees with torch on fresh random inputs (aligned and ragged
sizes, outputs poisoned), the reference refuses them with its reason (a tile program is one
logical thread per block), and bad arguments are errors naming the argument."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula.frontend.errors import TegulaCompileError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import warp_shuffle_programs as wp  # noqa: E402

SIZES = [256, 200, 37]


def _x(N, dtype):
    if dtype == "int32":
        return torch.randint(-1000, 1000, (N,), dtype=torch.int32)
    return torch.randn(N).to(getattr(torch, dtype))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_tvm_shuffles_print_the_warp_shuffles(target):
    k = tegula.compile(wp.moves_program(256, 16, "float32", 3, 5), out_idx=[-1], target=target)
    assert k.cubin()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    for name in ("shfl_idx(", "shfl_up(", "shfl_down("):
        assert name in src, name


@pytest.mark.parametrize("N", SIZES)
@pytest.mark.parametrize("width,up,down", [(32, 1, 2), (16, 3, 5), (8, 0, 7), (4, 2, 1), (1, 0, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_moves_simulated(N, width, up, down, dtype):
    k = tegula.compile(wp.moves_program(N, width, dtype, up, down), out_idx=[-1], target="sm_80")
    x = _x(N, dtype)
    y = tt.simulate(k, x)
    assert torch.equal(y, wp.expected_moves(x, N, width, up, down))


def test_warp_size_is_unused_on_cuda():
    # TileLang's hadamard example passes the group width as warp_size: CUDA takes no such
    # argument, and the result is the same as with 32.
    x = _x(200, "float32")
    ys = [tt.simulate(tegula.compile(wp.moves_program(200, 8, "float32", 1, 3, warp_size=ws), out_idx=[-1]), x)
          for ws in (8, 32)]
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], wp.expected_moves(x, 200, 8, 1, 3))


@pytest.mark.parametrize("N", SIZES)
@pytest.mark.parametrize("width", [2, 8, 32])
def test_butterfly_is_a_hadamard_transform(N, width):
    k = tegula.compile(wp.butterfly_program(N, width), out_idx=[-1], target="sm_90a")
    x = torch.randn(N)
    y = tt.simulate(k, x)
    torch.testing.assert_close(y.double(), wp.expected_butterfly(x, N, width), rtol=1e-5, atol=1e-5)


def test_the_reference_refuses_them():
    k = tegula.compile(wp.butterfly_program(64, 4), out_idx=[-1])
    with pytest.raises(TegulaCompileError, match="reference cannot run"):
        tt.reference(k, torch.randn(64))


def _shuffle_call(call):
    @T.prim_func
    def f(X: T.Tensor((32,), "float32"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_var("float32")
            v = X[tx]
            Y[tx] = call(v, tx)

    return f


@pytest.mark.parametrize("call,arg,match", [
    (lambda v, tx: T.tvm_warp_shuffle(0xFFFFFFFF, v, tx, 12, 32), "width", "power of two up to 32"),
    (lambda v, tx: T.tvm_warp_shuffle(0xFFFFFFFF, v, tx, tx, 32), "width", "power of two up to 32"),
    (lambda v, tx: T.tvm_warp_shuffle(0xFFFFFFFF, v, 1.5, 32, 32), "warp_id", "must be an integer"),
    (lambda v, tx: T.tvm_warp_shuffle_up(0xFFFFFFFF, v, v, 32, 32), "offset", "must be an integer"),
    (lambda v, tx: T.tvm_warp_shuffle_down(0x1FFFFFFFF, v, 1, 32, 32), "mask", "32-bit lane mask"),
    (lambda v, tx: T.tvm_warp_shuffle_down(0xFFFFFFFF, v, 1, 32, 0), "warp_size", "positive int"),
    (lambda v, tx: T.tvm_warp_shuffle(0xFFFFFFFF, "x", 1, 32, 32), "value", "number or a kernel expression"),
])
def test_bad_arguments_name_the_argument(call, arg, match):
    with pytest.raises(TegulaCompileError, match=match) as info:
        _shuffle_call(call)
    assert f"'{arg}'" in str(info.value) or f"{arg} " in str(info.value), str(info.value)
    assert "Y[tx] = call(v, tx)" in info.value.source_line
