"""T.gemm on regions of shared buffers on the GPU: the programs of
tests/python/gemm_region_programs.py against torch in float64, fresh random inputs,
ragged and aligned, on the instruction path the GPU takes (wgmma on sm_90a where the
region starts where a descriptor can, mma.sync otherwise) and on mma.sync forced
(tl.disable_wgmma); A in registers with transpose_A; the CPU side is
cpu/test_gemm_regions.py."""
import zlib

import pytest
import torch

import tegula
import gemm_region_programs as gp

pytestmark = pytest.mark.gpu

CASES = [
    ("split_k", (64, 64, 64, 32)),
    ("split_k", (100, 70, 128, 64)),
    ("split_k", (256, 192, 512, 64, 64, 64, 128, "bfloat16")),
    ("split_k", (130, 64, 512, 64, 64, 64, 256, "bfloat16")),
    ("region_as_b", (64, 64, 128, 64)),
    ("region_as_b", (64, 64, 96, 32)),
    ("sub_rectangle", (32, 32, 32, 16, 16, 64, 64)),
    ("sub_rectangle", (64, 32, 48, 32, 16, 128, 80)),
    ("pipelined_regions", (64, 96, 64, 32)),
    ("pipelined_regions", (64, 80, 64, 64)),
    ("pipelined_regions", (64, 256, 512, 64, 32, 256, "bfloat16", 2)),
    ("register_a_transposed", (64, 64, 64)),
    ("register_a_transposed", (32, 64, 128)),
    ("register_a_transposed", (64, 32, 64, 128, "float16", "FullRow")),
    ("register_a_transposed", (128, 64, 64, 256)),
]


@pytest.mark.parametrize("configs", [None, {"tl.disable_wgmma": True}], ids=["default", "mma_sync"])
@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{a[:4]}" for n, a in CASES])
def test_gemm_on_regions_against_torch(name, args, configs):
    prog, ref = getattr(gp, name)(*args)
    k = tegula.compile(prog, pass_configs=configs)
    g = torch.Generator().manual_seed(zlib.crc32(repr((name, args)).encode()))  # the same inputs in every process
    ins = [p for p in k.params if p.dtype_name != "float32"]
    outs = [p for p in k.params if p.dtype_name == "float32"]
    xs = [torch.randn([int(d) for d in p.shape], generator=g).to(getattr(torch, p.dtype_name)) for p in ins]
    ys = [torch.full([int(d) for d in p.shape], float("nan"), device="cuda") for p in outs]
    k(*[x.cuda() for x in xs], *ys)
    want = ref(*xs)
    for y, w in zip(ys, want if isinstance(want, tuple) else (want,)):
        # A float16 rounding of an intermediate that float32 and float64 products put on
        # either side of a tie moves an element by an ulp times its row of the next operand:
        # errors are measured against the output's scale.
        # bfloat16's ulp is 8 float16 ulps, and so is the move.
        scale = max(1.0, float(w.abs().max())) * (8 if "bfloat16" in args else 1)
        torch.testing.assert_close(y.cpu().double(), w, rtol=1e-3, atol=5e-2 + 2e-4 * scale)
