"""tegula.testing.simulate: the code after the last pass, run thread by thread on the CPU,
against torch in float64 on fresh random inputs, for both instruction paths (sm_90a:
wgmma; sm_80: mma.sync). No GPU needed. Also: what the simulator must refuse to call
sound (out-of-bounds accesses without the masks, a race in the user's program)."""
import importlib
import math
import os
import sys

import pytest
import torch

import replicated_programs

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import lang_kernels as lk  # noqa: E402
from tegula.kernels._common import plan_rows  # noqa: E402

TARGETS = ["sm_90a", "sm_80"]


def shipped(name):
    return importlib.import_module("tegula.kernels." + name)


def assert_near(out, ref, dtype):
    """out (any dtype) against a float64 reference, within what `dtype` can hold."""
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}[dtype]
    torch.testing.assert_close(out.double(), ref.double(), rtol=tol, atol=tol)


def jit(target, out_idx=(-1,), **kw):
    return tegula.jit(out_idx=list(out_idx), target=target, **kw)


# ------------------------------------------------------------------ elementwise and copies

@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_casts_and_selects(target):
    @jit(target)
    def program(M, N):
        @T.prim_func
        def f(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "bfloat16")):
            with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 16), threads=64) as (bx, by):
                x = T.alloc_fragment((16, 32), "float32")
                T.copy(X[by * 16, bx * 32], x)
                for i, j in T.Parallel(16, 32):
                    v = x[i, j] * 3.0 + 0.25
                    x[i, j] = T.if_then_else(v > 0, T.exp(-v), T.cast(T.cast(v, "int32"), "float32"))
                T.copy(x, Y[by * 16, bx * 32])
        return f

    x = torch.randn(37, 70, dtype=torch.float16)
    y = tt.simulate(program(37, 70), x)
    v = (x.float() * 3.0 + 0.25).double()
    assert_near(y, torch.where(v > 0, torch.exp(-v), torch.trunc(v)), torch.bfloat16)


@pytest.mark.parametrize("target", TARGETS)
def test_math_intrinsics(target):
    x = torch.randn(64, 128)
    y = tt.simulate(lk.math_mix(64, 128, target=target), x)
    assert_near(y, lk.math_mix_reference(x.double()), torch.float32)


@pytest.mark.parametrize("M,N", [(128, 128), (100, 72), (5, 9)])
def test_staged_copy_with_ragged_edges(M, N):
    x = torch.randn(M, N, dtype=torch.float16)
    y = tt.simulate(lk.staged_copy(M, N, target="sm_90a"), x)
    assert_near(y, x.double() * 2 + 1, torch.float16)


@pytest.mark.parametrize("n", [1, 100, 256, 300])
def test_dynamic_length_and_scalar_argument(n):
    k = lk.scaled_add(128, target="sm_90a")
    x, y = torch.randn(n), torch.randn(n)
    assert_near(tt.simulate(k, x, y, 0.75), 0.75 * x.double() + y.double(), torch.float32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M,N", [(64, 64), (100, 72)])
def test_shared_memory_transposes(target, M, N):
    x = torch.randn(M, N, dtype=torch.float16)
    k = jit(target)(shipped("matrix_transpose").transpose_program)(M, N, "float16", 32, 128, 1)
    assert torch.equal(tt.simulate(k, x), x.t())
    k = jit(target)(lk.swizzled_transpose_program)(M, N)
    assert torch.equal(tt.simulate(k, x), x.t())


# ------------------------------------------------------------------ reductions

@pytest.mark.parametrize("target", TARGETS)
def test_row_statistics_on_a_3d_grid(target):
    x = torch.randn(2, 3, 200)
    o = tt.simulate(lk.batched_row_stats(2, 3, 200, target=target), x)
    xd = x.double()
    ref = torch.stack([xd.amin(-1), xd.abs().amax(-1), 100 + xd.abs().sum(-1)], -1)
    assert_near(o, ref, torch.float32)


@pytest.mark.parametrize("M,N", [(64, 48), (37, 96)])
def test_column_reduction(M, N):
    @jit("sm_90a")
    def program(M, N, bm=16):
        @T.prim_func
        def f(X: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((bm, N), "float32")
                part = T.alloc_fragment((N,), "float32")
                acc = T.alloc_fragment((N,), "float32")
                T.clear(acc)
                for r in T.serial(T.ceildiv(M, bm)):
                    T.copy(X[r * bm, 0], x)
                    T.reduce_sum(x, part, dim=0)
                    for j in T.Parallel(N):
                        acc[j] += part[j]
                T.copy(acc, S[0])
        return f

    x = torch.randn(M, N)
    assert_near(tt.simulate(program(M, N), x), x.double().sum(0), torch.float32)


def test_column_sums_through_atomics():
    x = torch.randn(50, 64)
    s = torch.zeros(64)
    tt.simulate(lk.column_sums(50, 64, target="sm_90a"), x, s)
    assert_near(s, x.double().sum(0), torch.float32)


def test_serial_loop_into_a_variable():
    x = torch.randn(6, 40)
    y = torch.full((6,), float("nan"))
    tt.simulate(lk.serial_row_sums(6, 40, target="sm_80"), x, y)
    sign = torch.tensor([1.0, -1.0] * 3, dtype=torch.float64)
    assert_near(y, x.double().sum(1) * sign, torch.float32)


def test_center_rows_through_a_replicated_fragment():
    # A write to a replicated fragment inside a T.Parallel(1) loop must reach every copy.

    x = torch.randn(4, 256)
    y, s = tt.simulate(replicated_programs.center(4, 256, target="sm_90a"), x)
    mean = x.double().mean(1)
    assert_near(s, mean, torch.float32)
    assert_near(y, x.double() - mean[:, None], torch.float32)


# ------------------------------------------------------------------ shipped row kernels

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,dtype", [(100, torch.float16), (256, torch.float32), (520, torch.bfloat16)])
def test_shipped_row_kernels(target, n, dtype):
    name = {torch.float16: "float16", torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    plan = plan_rows(n, torch.finfo(dtype).bits // 8)
    rows = 13  # ragged against every blk_m
    x, w, b = torch.randn(rows, n).to(dtype), torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    xd, wd, bd = x.double(), w.double(), b.double()

    k = jit(target)(shipped("row_softmax").softmax_program)(n, name, plan.blk_m, plan.threads, plan.n_pad)
    assert_near(tt.simulate(k, x), torch.softmax(xd, -1), dtype)

    k = jit(target)(shipped("rmsnorm").rms_norm_program)(n, name, 1e-6, False, plan.blk_m, plan.threads, plan.n_pad)
    assert_near(tt.simulate(k, x, w), xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd, dtype)

    k = jit(target)(shipped("layernorm").layer_norm_program)(n, name, 1e-5, plan.blk_m, plan.threads, plan.n_pad)
    assert_near(tt.simulate(k, x, w, b), torch.nn.functional.layer_norm(xd, (n,), wd, bd, 1e-5), dtype)


def test_softmax_dynamic_rows_share_one_compilation():
    plan = plan_rows(64, 2)
    k = jit("sm_90a")(shipped("row_softmax").softmax_program)(64, "float16", plan.blk_m, plan.threads, plan.n_pad)
    for rows in (1, 7, 33):
        x = torch.randn(rows, 64, dtype=torch.float16)
        assert_near(tt.simulate(k, x), torch.softmax(x.double(), -1), torch.float16)


# ------------------------------------------------------------------ tensor cores

def gemm_reference(a, b, ta=False, tb=False):
    a, b = a.double(), b.double()
    return (a.t() if ta else a) @ (b.t() if tb else b)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M,N,K,stages", [(128, 128, 64, 2), (100, 72, 40, 2), (128, 64, 256, 4), (256, 320, 32, 2)])
def test_pipelined_gemm(target, M, N, K, stages):
    # The last: a 5 x 4 grid, which T.use_swizzle(panel_size=4) rasterises in a full
    # panel and a partial one; a block mapped twice would leave poisoned tiles.
    k = jit(target)(shipped("gemm").matmul_program)(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=stages)
    a, b, bias = torch.randn(M, K).half(), torch.randn(K, N).half(), torch.randn(N).half()
    assert_near(tt.simulate(k, a, b, bias), gemm_reference(a, b), torch.float16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("variant", [dict(transpose_A=True), dict(transpose_B=True), dict(a_in_registers=True),
                                     dict(a_in_registers=True, transpose_B=True),
                                     dict(accum_dtype="float16", transpose_B=True)])
def test_gemm_operand_layouts(target, variant):
    M, N, K = 128, 64, 96
    ta, tb = variant.get("transpose_A", False), variant.get("transpose_B", False)
    k = jit(target)(lk.gemm_variant_program)(M, N, K, **variant)
    a = torch.randn(K, M) if ta else torch.randn(M, K)
    b = torch.randn(N, K) if tb else torch.randn(K, N)
    a, b = a.half(), b.half()
    out, ref = tt.simulate(k, a, b), gemm_reference(a, b, ta, tb)
    if variant.get("accum_dtype") == "float16":  # rounded after every block_K step
        torch.testing.assert_close(out.double(), ref, rtol=4e-3, atol=3e-2)
    else:
        assert_near(out, ref, torch.float16)


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_relu_bfloat16(target):
    k = jit(target)(lk.gemm_relu_program)(64, 128, 64, 64, 64, 32, dtype="bfloat16", num_stages=2)
    a, b = torch.randn(64, 64).bfloat16(), torch.randn(64, 128).bfloat16()
    assert_near(tt.simulate(k, a, b), gemm_reference(a, b).clamp(min=0), torch.bfloat16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("causal,seq_q,seq_kv", [(False, 64, 64), (True, 64, 96), (False, 40, 72)])
def test_flash_attention(target, causal, seq_q, seq_kv):
    B, H, HKV, D = 1, 2, 1, 64
    k = jit(target, out_idx=(3, 4))(shipped("flash_attention").flash_attention_program)(
        B, H, HKV, seq_q, seq_kv, D, is_causal=causal, block_M=64, block_N=32, threads=128, num_stages=2)
    q = torch.randn(B, seq_q, H, D).half()
    kk, v = torch.randn(B, seq_kv, HKV, D).half(), torch.randn(B, seq_kv, HKV, D).half()
    o, lse = tt.simulate(k, q, kk, v)
    qd = q.double().transpose(1, 2)
    kd = kk.double().transpose(1, 2).repeat_interleave(H // HKV, 1)
    vd = v.double().transpose(1, 2).repeat_interleave(H // HKV, 1)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(D)
    if causal:  # query i sees keys j <= i + seq_kv - seq_q
        s = s.masked_fill(torch.ones(seq_q, seq_kv).triu(seq_kv - seq_q + 1).bool(), float("-inf"))
    assert_near(o, (torch.softmax(s, -1) @ vd).transpose(1, 2), torch.float16)
    assert_near(lse, torch.logsumexp(s, -1), torch.float16)


@pytest.mark.parametrize("target", TARGETS)
def test_flash_decoding_split_and_combine(target):
    fd = shipped("flash_decoding")
    B, H, HKV, S, D, splits = 2, 8, 2, 150, 64, 3
    split = jit(target, out_idx=(4, 5))(fd.decode_split_program)(B, H, HKV, S, D, splits)
    combine = jit(target)(fd.decode_combine_program)(B, H, D, splits)
    q = torch.randn(B, H, D).half()
    k, v = torch.randn(B, S, HKV, D).half(), torch.randn(B, S, HKV, D).half()
    lens = torch.tensor([150, 37], dtype=torch.int32)  # the second leaves a split empty
    out = tt.simulate(combine, *tt.simulate(split, q, k, v, lens))
    for b in range(B):
        n = int(lens[b])
        kb = k[b, :n].double().repeat_interleave(H // HKV, 1).transpose(0, 1)
        vb = v[b, :n].double().repeat_interleave(H // HKV, 1).transpose(0, 1)
        s = (q[b].double()[:, None, :] @ kb.transpose(-1, -2))[:, 0] / math.sqrt(D)
        assert_near(out[b], (torch.softmax(s, -1)[:, None, :] @ vb)[:, 0], torch.float16)


# ------------------------------------------------------------------ what must be reported

def test_out_of_bounds_without_the_masks_is_reported():
    k = tegula.jit(out_idx=[-1], target="sm_90a",
                   pass_configs={tegula.PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS: True})(
        shipped("gemm").matmul_program)(100, 72, 40, block_M=64, block_N=64, block_K=32, num_stages=2)
    a, b, bias = torch.randn(100, 40).half(), torch.randn(40, 72).half(), torch.randn(72).half()
    with pytest.raises(tt.SimulationError, match="out of bounds"):
        tt.simulate(k, a, b, bias)
    tt.simulate(k, a, b, bias, check=False)  # without the check, the outputs come back


def test_a_race_in_the_program_is_reported():
    @jit("sm_90a")
    def program(N):
        @T.prim_func
        def f(X: T.Tensor((N,), "float32"), Y: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=N) as bx:
                s = T.alloc_shared((1,), "float32")
                for i in T.Parallel(N):
                    s[0] = X[i]  # every thread writes the one element
                for i in T.Parallel(1):
                    Y[i] = s[0]
        return f

    with pytest.raises(tt.SimulationError, match="write-after-write race on s"):
        tt.simulate(program(64), torch.randn(64))
