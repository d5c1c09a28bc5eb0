"""Open GPU mismatches the differential fuzzer (scripts/fuzz_gpu.py) found: the reference
and the simulator agree with each other, the GPU does not. Each is pinned as a strict
xfail, so the fix is noticed (the test then passes and must lose its mark). Programs are
the generator's own (tegula.testing.fuzz), kept verbatim."""
import importlib.util

import pytest
import torch

from tegula.testing import fuzz
import tegula.testing as tt

pytestmark = pytest.mark.gpu

INT_MIN_CHAIN = """import tegula
import tegula.language as T

TARGET = "sm_90a"

@tegula.jit(out_idx=[2, 3], target=TARGET)
def make():
    @T.prim_func
    def fuzz_elementwise(X: T.Tensor((192,), "int32"), s: T.int32, R: T.Tensor((3,), "int32"), O: T.Tensor((192,), "int32")):
        with T.Kernel(T.ceildiv(192, 64), threads=64) as bx:
            x_tile = T.alloc_shared((64,), "int32")
            T.copy(X[bx * 64], x_tile)
            z = T.alloc_fragment((64,), "int32")
            for j in T.Parallel(64):
                z[j] = ((((T.int32(2) + T.int32(2)) >> 3) - T.if_then_else(T.int32(2) != 2, (x_tile[j] & x_tile[j]), x_tile[j])) - T.min(((x_tile[j] * T.int32(2)) | T.if_then_else(x_tile[j] == -2, T.int32(2), T.int32(2))), s))
            zf = T.alloc_fragment((64,), "int32")
            T.copy(z, zf)
            red = T.alloc_fragment((1,), "int32")
            T.reduce_min(zf, red, dim=0)
            for q in T.Parallel(1):
                red[0] = red[0] * 2 + 1
            for j in T.Parallel(64):
                zf[j] = zf[j] + red[0]
            for q in T.Parallel(1):
                R[bx] = red[0]
            T.copy(zf, O[bx * 64:bx * 64 + 64])
    return fuzz_elementwise
"""

ATTENTION_8_KEYS_WS = """import tegula
import tegula.language as T

TARGET = "sm_90a"

@tegula.jit(out_idx=[3], target=TARGET)
def make():
    @T.prim_func
    def fuzz_attention(Q: T.Tensor((2, 98, 64,), "float16"), K: T.Tensor((2, 8, 64,), "float16"), V: T.Tensor((2, 8, 64,), "float16"), O: T.Tensor((2, 98, 64,), "float16")):
        with T.Kernel(T.ceildiv(98, 64), 2, threads=128) as (bx, by):
            Q_shared = T.alloc_shared((64, 64,), "float16")
            K_shared = T.alloc_shared((32, 64,), "float16")
            V_shared = T.alloc_shared((32, 64,), "float16")
            acc_s = T.alloc_fragment((64, 32,), "float32")
            acc_s_cast = T.alloc_fragment((64, 32,), "float16")
            acc_o = T.alloc_fragment((64, 64,), "float32")
            scores_max = T.alloc_fragment((64,), "float32")
            scores_max_prev = T.alloc_fragment((64,), "float32")
            scores_scale = T.alloc_fragment((64,), "float32")
            scores_sum = T.alloc_fragment((64,), "float32")
            logsum = T.alloc_fragment((64,), "float32")
            T.annotate_layout({Q_shared: T.layout.make_swizzled_layout(Q_shared)})
            T.copy(Q[by, bx * 64:bx * 64 + 64, :], Q_shared)
            T.clear(acc_o)
            T.fill(logsum, 0)
            T.fill(scores_max, -1e30)
            for kb in T.Pipelined(T.ceildiv(T.min(8, (bx + 1) * 64), 32), num_stages=2):
                T.copy(K[by, kb * 32:kb * 32 + 32, :], K_shared)
                T.copy(V[by, kb * 32:kb * 32 + 32, :], V_shared)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(64, 32):
                    acc_s[i, j] = T.if_then_else(kb * 32 + j < 8 and kb * 32 + j <= bx * 64 + i, acc_s[i, j], -T.infinity("float32"))
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(64):
                    scores_scale[i] = T.exp2((scores_max_prev[i] - scores_max[i]) * 0.18033688011112042)
                for i, j in T.Parallel(64, 64):
                    acc_o[i, j] = acc_o[i, j] * scores_scale[i]
                for i, j in T.Parallel(64, 32):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * 0.18033688011112042 - scores_max[i] * 0.18033688011112042)
                for i in T.Parallel(64):
                    logsum[i] *= scores_scale[i]
                T.reduce_sum(acc_s, logsum, dim=1, clear=False)
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(64, 64):
                acc_o[i, j] = acc_o[i, j] / logsum[i]
            T.copy(acc_o, O[by, bx * 64:bx * 64 + 64, :])
    return fuzz_attention
"""


def _kernel(tmp_path, source, name):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make()


@pytest.mark.xfail(strict=True, reason="open: GPU's row minimum differs (sm_90a); reference and simulate agree")
def test_int32_chain_and_row_minimum(tmp_path):
    kernel = _kernel(tmp_path, INT_MIN_CHAIN, "int_min_chain")
    x = torch.randint(-39, 41, (192,), dtype=torch.int32)
    r_ref, o_ref = tt.reference(kernel, x, -2)
    r, o = kernel(x.cuda(), -2)
    assert torch.equal(r.cpu(), r_ref) and torch.equal(o.cpu(), o_ref)


@pytest.mark.xfail(strict=True, reason="open: the warp-specialised path gives 2-7e-2 relative error with 8 keys "
                                      "in a 32-key tile; without warp specialisation or TMA it agrees")
def test_attention_eight_keys_warp_specialised(tmp_path):
    kernel = _kernel(tmp_path, ATTENTION_8_KEYS_WS, "attention_8_keys")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g).half() for s in ((2, 98, 64), (2, 8, 64), (2, 8, 64)))
    ref = tt.reference(kernel, q, k, v)
    out = kernel(q.cuda(), k.cuda(), v.cuda()).cpu()
    assert fuzz.compare(ref, out, 5e-3) is None
