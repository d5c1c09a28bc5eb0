"""Every shipped operator with small ragged inputs on the current CUDA device, as data:
name -> (torch.ops.tegula.<op>, its arguments), the tensors that have a backward made with
requires_grad; and a user's @jit kernel. test_torch_ops_gpu.py runs torch.library.opcheck
over them; the two-GPU tests run each on a second device."""
import torch

import tegula
import tegula.kernels as K
import tegula.language as T

try:
    from ._util import seed_of
except ImportError:
    from _util import seed_of

H = torch.float16
B16 = torch.bfloat16

OPCHECK = ["rms_norm", "rms_norm_silu", "layer_norm", "softmax", "add", "row_sum", "row_max", "transpose", "matmul",
           "flash_attention", "flash_decode", "mla_decode"]
MODEL_OPCHECK = ["rope", "rope-bhsd-view-computed", "rope_", "swiglu", "swiglu-pair", "swiglu_linear",
                 "swiglu_linear-two-weights", "add_rms_norm", "add_rms_norm_", "grouped_gemm", "moe_align_block_size",
                 "moe_permute", "moe_combine"]
QUANT_OPCHECK = ["fp8_gemm", "fp8_gemm-block", "quantize_fp8", "quantize_fp8-group", "rms_norm_quantize_fp8",
                 "w4a16_gemm"]


def rand(shape, dtype, *tag, scale=1.0, offset=0.0, grad=False):
    gen = torch.Generator(device="cuda").manual_seed(seed_of(*tag, shape))
    t = (torch.randn(shape, generator=gen, device="cuda") * scale + offset).to(dtype)
    return t.requires_grad_(grad)


def lens(b, s):
    return torch.randint(1, s + 1, (b,), dtype=torch.int32, device="cuda")


def opcheck_cases():
    r = rand
    return {
        "rms_norm": (torch.ops.tegula.rms_norm, (r((5, 72), H, 1, grad=True), r((72,), H, 2, offset=1, grad=True),
                                                 1e-6)),
        "rms_norm_silu": (torch.ops.tegula.rms_norm_silu, (r((5, 72), H, 3, grad=True),
                                                           r((72,), H, 4, offset=1, grad=True), 1e-6)),
        "layer_norm": (torch.ops.tegula.layer_norm, (r((5, 72), H, 5, grad=True), r((72,), H, 6, grad=True),
                                                     r((72,), H, 7, grad=True), 1e-5)),
        "softmax": (torch.ops.tegula.softmax, (r((5, 72), H, 8, grad=True),)),
        "add": (torch.ops.tegula.add, (r((5, 72), H, 9, grad=True), r((72,), H, 10, grad=True))),
        "row_sum": (torch.ops.tegula.row_sum, (r((5, 72), H, 11, grad=True),)),
        "row_max": (torch.ops.tegula.row_max, (r((5, 72), H, 12),)),
        "transpose": (torch.ops.tegula.transpose, (r((40, 24), H, 13, grad=True),)),
        "matmul": (torch.ops.tegula.matmul, (r((40, 24), H, 14, grad=True), r((24, 56), H, 15, grad=True),
                                             r((56,), H, 16, grad=True), "none")),
        "flash_attention": (torch.ops.tegula.flash_attention,
                            (r((1, 33, 4, 64), H, 17, grad=True), r((1, 47, 2, 64), H, 18, grad=True),
                             r((1, 47, 2, 64), H, 19, grad=True), True, None, "bshd", None)),
        "flash_decode": (torch.ops.tegula.flash_decode, (r((2, 8, 64), H, 20), r((2, 40, 2, 64), H, 21),
                                                         r((2, 40, 2, 64), H, 22), lens(2, 40), None, None)),
        "mla_decode": (torch.ops.tegula.mla_decode, (r((2, 16, 576), H, 23), r((2, 64, 576), H, 24),
                                                     lens(2, 64), None, None, None)),
    }


def routed(t, k, e, *tag):
    """Top-k expert ids (t, k) int32 as a router gives them: k distinct experts a token."""
    gen = torch.Generator(device="cuda").manual_seed(seed_of(*tag))
    return torch.topk(torch.randn(t, e, generator=gen, device="cuda"), k, dim=-1).indices.int()


def model_opcheck_cases():
    """The model kernels' ops at ragged sizes: rope in both layouts (a "bhsd" view of a
    contiguous "bshd" tensor, read in place, checks the fake's strides), with and without
    tables, and in place; both forms of swiglu and of add_rms_norm; the grouped GEMM with
    an empty expert; the MoE routing from one alignment."""
    r = rand
    cos, sin = (t.cuda() for t in K.rope_cache(64, 64, device="cpu"))
    ids = routed(37, 2, 8, "ids")
    align = K.moe_align_block_size(ids, 8, 16)
    slots = align.sorted_token_ids.shape[0]
    offsets = torch.tensor([0, 20, 20, 70, 100], dtype=torch.int32, device="cuda")   # expert 1 empty
    positions = torch.randint(0, 64, (2, 33), dtype=torch.int32, device="cuda")
    return {
        "rope": (torch.ops.tegula.rope, (r((2, 33, 4, 64), B16, 30), r((2, 33, 2, 64), B16, 31), cos, sin, None,
                                         False, "bshd", 10000.0)),
        "rope-bhsd-view-computed": (torch.ops.tegula.rope, (r((2, 33, 4, 64), B16, 32).transpose(1, 2), None, None,
                                                            None, positions, True, "bhsd", 500000.0)),
        "rope_": (torch.ops.tegula.rope_, (r((2, 33, 4, 64), B16, 33), r((2, 33, 2, 64), B16, 34), cos, sin, None,
                                           True, "bshd", 10000.0)),
        "swiglu": (torch.ops.tegula.swiglu, (r((37, 400), B16, 35), None)),
        "swiglu-pair": (torch.ops.tegula.swiglu, (r((3, 37, 200), H, 36), r((3, 37, 200), H, 37))),
        "swiglu_linear": (torch.ops.tegula.swiglu_linear, (r((37, 256), B16, 38, scale=0.25),
                                                           r((384, 256), B16, 39, scale=0.25), None)),
        "swiglu_linear-two-weights": (torch.ops.tegula.swiglu_linear, (r((5, 256), H, 40, scale=0.25),
                                                                       r((192, 256), H, 41, scale=0.25),
                                                                       r((192, 256), H, 42, scale=0.25))),
        "add_rms_norm": (torch.ops.tegula.add_rms_norm, (r((37, 1000), B16, 43), r((37, 1000), B16, 44),
                                                         r((1000,), B16, 45, offset=1), 1e-6)),
        "add_rms_norm_": (torch.ops.tegula.add_rms_norm_, (r((37, 1000), H, 46), r((37, 1000), H, 47),
                                                           r((1000,), H, 48, offset=1), 1e-5)),
        "grouped_gemm": (torch.ops.tegula.grouped_gemm, (r((100, 128), B16, 49, scale=0.25),
                                                         r((4, 192, 128), B16, 50, scale=0.25), offsets, True)),
        "moe_align_block_size": (torch.ops.tegula.moe_align_block_size, (ids, 8, 16)),
        "moe_permute": (torch.ops.tegula.moe_permute, (r((37, 256), B16, 51), align.sorted_token_ids, 2)),
        "moe_combine": (torch.ops.tegula.moe_combine, (r((slots, 256), B16, 52), torch.rand(37, 2, device="cuda"),
                                                       align.token_positions)),
    }


def quant_opcheck_cases():
    """The low-precision ops on small ragged inputs (kernels/_quant_ops.py)."""
    from tegula.kernels import dequant_gemm
    f8 = torch.float8_e4m3fn
    a, b = rand((37, 96), H, 60).to(f8), rand((72, 96), H, 61).to(f8)
    one = torch.ones(1, device="cuda")
    w = rand((72, 256), H, 62)
    qweight, scales, _ = dequant_gemm.quantize_int4(w, 128)
    return {
        "fp8_gemm": (torch.ops.tegula.fp8_gemm, (a, b, one * 0.5, one * 2.0, None, "bfloat16")),
        "fp8_gemm-block": (torch.ops.tegula.fp8_gemm, (a, b, torch.rand(37, 1, device="cuda"),
                                                       torch.rand(1, 1, device="cuda"), None, "float32")),
        "quantize_fp8": (torch.ops.tegula.quantize_fp8, (rand((37, 200), B16, 63), None, "float8_e4m3fn", False)),
        "quantize_fp8-group": (torch.ops.tegula.quantize_fp8, (rand((37, 256), B16, 64), 128, "float8_e4m3fn",
                                                               True)),
        "rms_norm_quantize_fp8": (torch.ops.tegula.rms_norm_quantize_fp8,
                                  (rand((37, 256), B16, 65), rand((256,), B16, 66, offset=1), 1e-6, 128,
                                   "float8_e4m3fn", False)),
        "w4a16_gemm": (torch.ops.tegula.w4a16_gemm, (rand((5, 256), H, 67), qweight, scales, None, 128, "int4")),
    }


def case(name):
    """(op, arguments) of the case called `name` in any of the three tables."""
    for names, make in ((OPCHECK, opcheck_cases), (MODEL_OPCHECK, model_opcheck_cases),
                        (QUANT_OPCHECK, quant_opcheck_cases)):
        if name in names:
            return make()[name]
    raise KeyError(name)


@tegula.jit(out_idx=[-1])
def scale_add(N):
    """A user's kernel: Z = X * s + Y, rows of N float32 (a multiply-add the kernel fuses)."""
    M = T.dynamic("m")

    @T.prim_func
    def scale_add(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), s: T.float32,
                  Z: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=128) as bx:
            for j in T.Parallel(N):
                Z[bx, j] = X[bx, j] * s + Y[bx, j]

    return scale_add
