"""The kernels Tegula ships, written in its own tile language, each behind a plain function
that takes and returns torch tensors:

    from tegula.kernels import rms_norm
    y = rms_norm(x, weight, eps=1e-6)

Each entry point is also a PyTorch operator, `torch.ops.tegula.<name>`, with a fake
implementation (torch.compile traces through it) and, for the norms, softmax, add,
transpose, row_sum, matmul and flash_attention, a backward written in the language
(kernels/_ops.py; the model kernels' operators are kernels/_model_ops.py's). The public
functions, here and in the modules (`tegula.kernels.flash_attention.flash_attention`,
`tegula.kernels.gemm.matmul`, `tegula.kernels.fused_norm.add_rms_norm`, ...), call those
operators.

The model kernels: `rope` (rotary embedding of q and k; `rope_cache` builds its cos/sin
tables), `swiglu` and `swiglu_linear` (the Llama MLP's activation, alone or fused into the
gate/up GEMM), `add_rms_norm` (residual add + RMSNorm), `grouped_gemm` (one GEMM per expert
over rows sorted by expert) and the mixture-of-experts routing around it,
`moe_align_block_size`, `moe_permute` and `moe_combine`.

The low-precision kernels: `fp8_gemm` (8-bit float operands with per-tensor, per-row or
DeepSeek-V3's blockwise scales), `quantize_fp8` and `rms_norm_quantize_fp8` (activations to
8-bit floats per token or per group, alone or fused into the norm before them) and
`w4a16_gemm` (4-bit INT4 or FP4 weights with group scales times 16-bit activations).

Every entry point checks its arguments (CUDA tensors of float16, bfloat16 or float32;
shapes; a ValueError or TypeError naming the argument otherwise), copies a view the kernel
cannot read in place (strided, or not starting on a 16-byte boundary) as torch's ops would
read it, answers an empty extent with torch's result without a launch, picks the tile
parameters, and calls a kernel compiled once per (hidden size, dtype, ...). NaN and inf
propagate as in torch: T.max / T.reduce_max keep a NaN. Each module
also exposes the TileLang form, `<name>_program` (the function of sizes returning a
`T.prim_func`) and `<name>_kernel` (that function under `tegula.jit(out_idx=[-1])`), and
`kernel_for(...)`, the cached jit kernel the entry point launches.

A module is named for what it computes, and no function of this package takes a module's
name: `from tegula.kernels import rope` is the function, `tegula.kernels.rotary_embedding`
the module that holds its kernel.

    module              its entry points (those in parentheses are the module's only)
    elementwise         add
    rmsnorm             rms_norm, rms_norm_silu
    layernorm           layer_norm
    row_softmax         softmax
    reduce              row_sum, row_max, row_min
    matrix_transpose    transpose
    gemm                matmul, matmul_tuned
    flash_attention     (flash_attention; its backward is flash_attention_bwd's)
    flash_decoding      flash_decode
    mla_decode          (mla_decode)
    rotary_embedding    rope, rope_cache
    gated_mlp           swiglu, swiglu_linear
    fused_norm          add_rms_norm
    expert_gemm         grouped_gemm
    moe                 moe_align_block_size, moe_permute, moe_combine
    scaled_gemm         fp8_gemm
    fp8_quantization    quantize_fp8, rms_norm_quantize_fp8
    dequant_gemm        w4a16_gemm

`DEMO_KERNELS` lists, for the demo command line, one `DemoKernel(name, make_inputs, run,
reference)` per kernel: `make_inputs(device, shape)` builds float16 inputs for a 2-D
`shape` (rows, hidden), `run(inputs)` calls the entry point, and `reference(inputs)`
computes the same result with torch in float32.
"""
from __future__ import annotations

import importlib as _importlib
import sys as _sys
from typing import Callable, NamedTuple

if __name__ != "tegula.kernels":
    # This directory imported under another name: a top-level `kernels`, which transformers
    # imports when it finds a package of that name (this repository's, with its root on
    # sys.path). That name becomes tegula.kernels itself, and the imports below resolve in
    # it, so no second copy of the modules registers every operator again.
    _sys.modules[__name__] = _importlib.import_module("tegula.kernels")
    __spec__, __package__ = _sys.modules[__name__].__spec__, "tegula.kernels"

import torch
import torch.nn.functional as F

from ._ops import (add, add_rms_norm, flash_decode, fp8_gemm, grouped_gemm, layer_norm, matmul, matmul_tuned,
                   moe_align_block_size, moe_combine, moe_permute, quantize_fp8, rms_norm, rms_norm_quantize_fp8,
                   rms_norm_silu, rope, row_max, row_min, row_sum, softmax, swiglu, swiglu_linear, transpose,
                   w4a16_gemm)
from .rotary_embedding import rope_cache

__all__ = [
    "add", "rms_norm", "rms_norm_silu", "softmax", "layer_norm", "row_sum", "row_max", "row_min",
    "transpose", "matmul", "matmul_tuned", "flash_decode",
    "rope", "rope_cache", "swiglu", "swiglu_linear", "add_rms_norm", "grouped_gemm",
    "moe_align_block_size", "moe_permute", "moe_combine",
    "fp8_gemm", "quantize_fp8", "rms_norm_quantize_fp8", "w4a16_gemm",
    "DemoKernel", "DEMO_KERNELS",
]


class DemoKernel(NamedTuple):
    name: str
    make_inputs: Callable
    run: Callable
    reference: Callable


DEMO_DTYPE = torch.float16


def _randn(device, shape, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(DEMO_DTYPE)


def _row_and_vector(device, shape):
    return _randn(device, shape, 1), _randn(device, (shape[-1],), 2)


def _norm_inputs(device, shape):
    x = _randn(device, shape, 1)
    weight = 1.0 + 0.1 * _randn(device, (shape[-1],), 2)
    bias = 0.1 * _randn(device, (shape[-1],), 3)
    return x, weight.to(DEMO_DTYPE), bias.to(DEMO_DTYPE)


def _rms_ref(x, w):
    return F.rms_norm(x.float(), (x.shape[-1],), w.float(), 1e-6)


def _ln_ref(x, w, b):
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5)


DEMO_KERNELS = [
    DemoKernel(
        "add", _row_and_vector,
        lambda inp: add(*inp),
        lambda inp: inp[0].float() + inp[1].float()),
    DemoKernel(
        "rms_norm", lambda d, s: _norm_inputs(d, s)[:2],
        lambda inp: rms_norm(inp[0], inp[1], 1e-6),
        lambda inp: _rms_ref(*inp)),
    DemoKernel(
        "rms_norm_silu", lambda d, s: _norm_inputs(d, s)[:2],
        lambda inp: rms_norm_silu(inp[0], inp[1], 1e-6),
        lambda inp: F.silu(_rms_ref(*inp))),
    DemoKernel(
        "softmax", lambda d, s: (_randn(d, s, 1),),
        lambda inp: softmax(inp[0]),
        lambda inp: torch.softmax(inp[0].float(), dim=-1)),
    DemoKernel(
        "layer_norm", _norm_inputs,
        lambda inp: layer_norm(inp[0], inp[1], inp[2], 1e-5),
        lambda inp: _ln_ref(*inp)),
    DemoKernel(
        "row_sum", lambda d, s: (_randn(d, s, 1),),
        lambda inp: row_sum(inp[0]),
        lambda inp: inp[0].float().sum(-1)),
    DemoKernel(
        "row_max", lambda d, s: (_randn(d, s, 1),),
        lambda inp: row_max(inp[0]),
        lambda inp: inp[0].float().amax(-1)),
    DemoKernel(
        "transpose", lambda d, s: (_randn(d, s, 1),),
        lambda inp: transpose(inp[0]),
        lambda inp: inp[0].float().t().contiguous()),
]
