"""T.Pipelined hand schedules whose computations run in several stages, on the GPU: TileLang's
FlashAttention-3 program (Q Kᵀ and the softmax in stage 0, the rescale and P V in stage 1),
whose warp-specialised consumer runs P V of one key tile while the softmax of the next
runs, and a loop with stages two apart, against torch in float32 with the outputs poisoned
(tests/python/cpu/test_pipelined_schedule.py has the same programs simulated)."""
import math

import pytest
import torch

import tegula
import tegula.language as T

pytestmark = pytest.mark.gpu

GROUPS = [[0], [1, 2], [3, 4, 5, 6, 7, 8, 9, 10, 11], [12], [13], [14]]


def fa3_program(batch, heads, seq, dim, causal, block_M, block_N, threads):
    """TileLang's example_mha_fwd_bshd_wgmma_pipelined.py, its imports changed."""
    scale = (1.0 / dim) ** 0.5 * 1.44269504
    shape = [batch, seq, heads, dim]

    @T.prim_func
    def main(Q: T.Tensor(shape, "float16"), K: T.Tensor(shape, "float16"), V: T.Tensor(shape, "float16"),
             Output: T.Tensor(shape, "float16")):
        with T.Kernel(T.ceildiv(seq, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], "float16")
            K_shared = T.alloc_shared([block_N, dim], "float16")
            V_shared = T.alloc_shared([block_N, dim], "float16")
            O_shared = T.alloc_shared([block_M, dim], "float16")
            acc_s = T.alloc_fragment([block_M, block_N], "float")
            acc_s_cast = T.alloc_fragment([block_M, block_N], "float16")
            acc_o = T.alloc_fragment([block_M, dim], "float")
            scores_max = T.alloc_fragment([block_M], "float")
            scores_max_prev = T.alloc_fragment([block_M], "float")
            scores_scale = T.alloc_fragment([block_M], "float")
            scores_sum = T.alloc_fragment([block_M], "float")
            logsum = T.alloc_fragment([block_M], "float")
            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity("float"))
            loop_range = (T.min(T.ceildiv(seq, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                          if causal else T.ceildiv(seq, block_N))
            for k in T.Pipelined(loop_range, num_stages=2, order=[-1, 0, 3, 1, -1, 2], stage=[-1, 0, 0, 1, -1, 1],
                                 group=GROUPS):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
                if causal:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0, -T.infinity("float"))
                else:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(k * block_N + j >= seq, -T.infinity("float"), 0)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(scores_max, scores_max_prev)
                T.fill(scores_max, -T.infinity("float"))
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


def attention_reference(q, k, v, causal):
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(1, 2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq, dim, block_M, block_N, threads", [
    (64, 64, 64, 64, 128),       # one key tile: the prologue and epilogue alone
    (200, 64, 64, 64, 128),      # ragged
    (1024, 128, 128, 128, 256),  # two consumer warpgroups, the loop in between
    (777, 128, 128, 64, 256),
])
def test_fa3_program_matches_torch(causal, seq, dim, block_M, block_N, threads):
    kernel = tegula.compile(fa3_program(2, 3, seq, dim, causal, block_M, block_N, threads))
    assert "wgmma_rs_held" in kernel.get_kernel_source() or torch.cuda.get_device_capability()[0] != 9
    gen = torch.Generator(device="cuda").manual_seed(seq * 7 + causal)
    q, k, v = (torch.randn(2, seq, 3, dim, generator=gen, device="cuda").half() for _ in range(3))
    out = torch.full_like(q, float("nan"))
    kernel(q, k, v, out)
    ref = attention_reference(q, k, v, causal)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert not out.isnan().any() and err < 2e-3, err


def test_fa3_program_propagates_nan_as_torch_does():
    """A NaN in one query row makes that row NaN and no other."""
    kernel = tegula.compile(fa3_program(1, 2, 256, 64, False, 64, 64, 128))
    gen = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(1, 256, 2, 64, generator=gen, device="cuda").half() for _ in range(3))
    q[0, 70, 1, 3] = float("nan")
    out = torch.zeros_like(q)
    kernel(q, k, v, out)
    nan_rows = out.isnan().any(dim=-1)
    assert nan_rows[0, 70, 1] and nan_rows.sum() == 1
    ref = attention_reference(q, k, v, False)
    keep = ~nan_rows.unsqueeze(-1).expand_as(out)
    assert torch.allclose(out.double()[keep], ref[keep], atol=2e-3, rtol=2e-3)


def counted_gemm(M, N, K):
    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            seen = T.alloc_fragment((64,), "float32")
            T.clear(C_l)
            T.clear(seen)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2, order=[0, 1, 2, 3], stage=[0, 0, 1, 3]):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_l)
                for i in T.Parallel(64):
                    seen[i] = seen[i] + 1
            for i, j in T.Parallel(64, 64):
                C_l[i, j] = C_l[i, j] + seen[i] * 1000
            T.copy(C_l, C[by * 64, bx * 64])

    return gemm


@pytest.mark.parametrize("K", [32, 64, 96, 200, 512])
def test_stages_two_apart_match_torch(K):
    """D = 2: one iteration at a time below two iterations, shifted from two on."""
    kernel = tegula.compile(counted_gemm(128, 192, K), out_idx=[2])
    gen = torch.Generator(device="cuda").manual_seed(K)
    a = torch.randn(128, K, generator=gen, device="cuda").half()
    b = torch.randn(K, 192, generator=gen, device="cuda").half()
    ref = a.float() @ b.float() + 1000 * math.ceil(K / 32)
    torch.testing.assert_close(kernel(a, b), ref, rtol=1e-3, atol=2e-2)
