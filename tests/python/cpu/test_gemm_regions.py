"""T.gemm on regions of shared buffers (T.gemm(Q_shared[:, :D], K, S) then the tail
Q_shared[:, D:]) on the CPU: the reference and the simulator agree with torch on every
program of gemm_region_programs.py, ragged and aligned, on the mma.sync path (sm_80) and
on sm_90a, where wgmma reads the region through its buffer's panels; the device code
compiles (NVRTC) with the region's row length and column offset; a region the tensor
cores cannot start at is an error at the user's line (the GPU side: gpu/test_gemm_regions_gpu.py)."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import gemm_region_programs as gp  # noqa: E402

CASES = [
    ("split_k", (64, 64, 64, 32)),          # 96-wide Q: mma.sync on every target
    ("split_k", (100, 70, 128, 64)),        # ragged M and N; 192-wide Q: wgmma on sm_90a
    ("split_k", (64, 64, 512, 64, 64, 64, 128, "bfloat16")),  # the sparse MLA tile: 576 wide
    ("region_as_b", (64, 64, 128, 64)),     # regions as N-major B, offset along N
    ("sub_rectangle", (32, 32, 32, 16, 16, 64, 64)),  # offset along both dimensions
    ("pipelined_regions", (64, 96, 64, 32)),
    ("pipelined_regions", (64, 80, 64, 64)),  # ragged N: the last block is partly past the edge
    ("register_a_transposed", (64, 64, 64)),  # A in registers, transpose_A (S^T K)
    ("register_a_transposed", (32, 64, 128)),
    ("register_a_transposed", (64, 32, 64, 128, "float16", "FullRow")),
]


def _run(name, args, target, run):
    prog, ref = getattr(gp, name)(*args)
    k = tegula.compile(prog, target=target)
    g = torch.Generator().manual_seed(len(name) + len(args))
    ins = [p for p in k.params if p.dtype_name != "float32"]
    outs = [p for p in k.params if p.dtype_name == "float32"]
    xs = [torch.randn([int(d) for d in p.shape], generator=g).to(getattr(torch, p.dtype_name)) for p in ins]
    ys = [torch.full([int(d) for d in p.shape], float("nan")) for p in outs]
    run(k, *xs, *ys)
    want = ref(*xs)
    return [(y.double(), w) for y, w in zip(ys, want if isinstance(want, tuple) else (want,))]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{a[:4]}" for n, a in CASES])
def test_gemm_on_regions_agrees_with_torch(name, args, target, run):
    for got, want in _run(name, args, target, run):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=2e-2)


def _calls(src):
    return re.findall(r"tegula::((?:gemm|wgmma)_[sr]s)<([^(]*)>\(", src)


def test_the_device_code_names_each_regions_row_length_and_column():
    prog, _ = gp.split_k(64, 64, 512, 64, 64, 64, 128, "bfloat16")
    for target, op in (("sm_80", "gemm_ss"), ("sm_90a", "wgmma_ss")):
        k = tegula.compile(prog, target=target)
        calls = _calls(k.get_kernel_source())
        assert [c[0] for c in calls] == [op, op]
        # Q is 576 wide: the first region starts at column 0, the tail at 512; K and
        # K_tail are whole buffers (row length and offset 0 of their own width).
        assert calls[0][1].endswith("576, 0, 512, 0") and calls[1][1].endswith("576, 512, 64, 0")
        assert len(k.cubin()) > 0  # NVRTC compiles it


def test_whole_buffers_print_as_before():
    prog, _ = gp.pipelined_regions(64, 96, 64, 32)
    calls = _calls(tegula.compile(prog, target="sm_80").get_kernel_source())
    assert calls[2][1] == "64, 64, 32, 4, 1, 0, 0, 0, true, true"  # S_shared @ KV: no region arguments


def test_a_region_wgmma_cannot_start_falls_back_to_mma_sync():
    # An N-major B region starting inside a 128-byte panel: no descriptor names it.
    prog, ref = gp.region_as_b(64, 64, 96, 32)
    k = tegula.compile(prog, target="sm_90a")
    assert {c[0] for c in _calls(k.get_kernel_source())} == {"gemm_ss"}
    for got, want in _run("region_as_b", (64, 64, 96, 32), "sm_90a", tt.simulate):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=2e-2)


def _compile_error(make):
    with pytest.raises(Exception) as info:
        tegula.compile(make(), target="sm_80")
    return str(info.value)


def test_a_transposed_register_a_is_read_as_its_transpose():
    # The register A of S^T K takes the transposed accumulator layout: the cast of S into
    # it crosses layouts through shared memory; the instruction reads the registers as
    # it reads an untransposed A.
    prog, _ = gp.register_a_transposed(64, 64, 64)
    k = tegula.compile(prog, target="sm_90a")
    assert k.layout_of("s_cast").description.startswith("transposed mma_accumulator(64, 64)")
    assert "s_cast_exchange" in k.get_ir("infer_layout")
    assert [c[0] for c in _calls(k.get_kernel_source())] == ["gemm_ss", "gemm_rs"]
    assert len(k.cubin()) > 0


def test_a_region_off_the_k_step_is_an_error_at_the_line():
    def make():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 48), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 64), "float16")
                b = T.alloc_shared((64, 48), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.copy(A, a)
                T.copy(B, b)
                T.gemm(a[:, 8:56], b, c, transpose_B=True, clear_accum=True)
                T.copy(c, C)
        return main

    msg = _compile_error(make)
    assert "T.gemm: A region of 'a' starts at [0, 8]" in msg and "K step" in msg and "test_gemm_regions.py" in msg


def test_a_region_of_the_accumulator_is_an_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                c = T.alloc_fragment((64, 128), "float32")
                T.copy(A, a)
                T.clear(c)
                T.gemm(a, a, c[:, 0:64], transpose_B=True)
                T.copy(c[:, 0:64], C)
        return main

    msg = _compile_error(make)
    assert "T.gemm: C ('c', in fragment) must be a whole buffer" in msg
