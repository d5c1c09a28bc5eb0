"""`tilelang.carver.template.MatmulTemplate`: recommended GEMM tilings for a device.

TileLang's roller searches tilings with a cost model of TVM's IR. Tegula ranks a fixed
list of tensor-core tilings with a simple rule instead (documented in docs/porting.md):

- candidates: block (M, N) in 256x128, 128x256, 128x128, 128x64, 64x128, 64x64, block_K
  64 bytes' worth of inputs... as elements: 32 for 16-bit inputs, 64 for 8-bit ones; warps
  of 64x64 (32x32 for blocks with a side of 64), so 4 to 8 warps a block;
- kept where `stages * (block_M + block_N) * block_K * bytes` fits the device's shared
  memory (stages 3 where it fits, else 2);
- ranked by an estimate of the time: waves of blocks over the SMs, times a block's
  work (block_M * block_N), times 1 + 32 * (1/block_M + 1/block_N) for the loads that
  smaller tiles repeat; ties go to tiles that divide M and N. So large problems get large
  tiles and small ones the tiles that fill the SMs;
- rasterization: `Rasterization2DRow(4)` when the grid has more blocks than SMs, else
  `NoRasterization`.
"""
import math

from ..frontend.dtypes import itemsize, normalize_dtype
from .roller import Hint, NoRasterization, Rasterization2DRow

_BLOCKS = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))


class MatmulTemplate:
    """C[M, N] = A[M, K] @ B[N, K].T (trans_B, TileLang's default) in `in_dtype`,
    accumulated in `accum_dtype`. `.with_arch(arch)` then `.recommend_hints(topk)`."""

    def __init__(self, M=None, N=None, K=None, trans_A=False, trans_B=True, in_dtype="float16",
                 out_dtype="float16", accum_dtype="float16", with_bias=False):
        if not all(isinstance(v, int) and v > 0 for v in (M, N, K)):
            raise ValueError(f"MatmulTemplate: M, N and K must be positive ints, got {M}, {N}, {K}")
        self.M, self.N, self.K = M, N, K
        self.trans_A, self.trans_B, self.with_bias = trans_A, trans_B, with_bias
        self.in_dtype, self.out_dtype = normalize_dtype(in_dtype), normalize_dtype(out_dtype)
        self.accum_dtype = normalize_dtype(accum_dtype)
        self.arch = None

    def with_arch(self, arch):
        self.arch = arch
        return self

    def equivalent_function(self):
        """The GEMM as a T.prim_func with the first recommended tiling (TileLang gives its
        TIR computation; programs only check it is there)."""
        from .. import language as T

        hint = self.recommend_hints(topk=1)[0]
        bm, bn = hint.block
        bk = hint.rstep[0]
        M, N, K = self.M, self.N, self.K
        a_shape = (K, M) if self.trans_A else (M, K)
        b_shape = (N, K) if self.trans_B else (K, N)
        in_dt, out_dt, acc_dt = self.in_dtype, self.out_dtype, self.accum_dtype
        trans_A, trans_B = self.trans_A, self.trans_B
        a_tile = (bk, bm) if trans_A else (bm, bk)
        b_tile = (bn, bk) if trans_B else (bk, bn)
        threads = (bm // hint.warp[0]) * (bn // hint.warp[1]) * 32

        @T.prim_func
        def matmul(A: T.Tensor(a_shape, in_dt), B: T.Tensor(b_shape, in_dt), C: T.Tensor((M, N), out_dt)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
                A_s = T.alloc_shared(a_tile, in_dt)
                B_s = T.alloc_shared(b_tile, in_dt)
                C_l = T.alloc_fragment((bm, bn), acc_dt)
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=max(hint.pipeline_stage, 1)):
                    if trans_A:
                        T.copy(A[k * bk, by * bm], A_s)
                    else:
                        T.copy(A[by * bm, k * bk], A_s)
                    if trans_B:
                        T.copy(B[bx * bn, k * bk], B_s)
                    else:
                        T.copy(B[k * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, C_l, transpose_A=trans_A, transpose_B=trans_B)
                T.copy(C_l, C[by * bm, bx * bn])

        return matmul

    def _device(self):
        arch = self.arch
        if arch is None:
            from .arch import CUDA

            arch = self.arch = CUDA("cuda")
        smem = getattr(arch, "max_smem_usage", None) or 2 * arch.smem_cap
        return int(arch.compute_max_core), int(smem)

    def recommend_hints(self, topk=10):
        sms, smem = self._device()
        elem = itemsize(self.in_dtype)
        bk = 64 // elem
        ranked = []
        for bm, bn in _BLOCKS:
            stages = next((s for s in (3, 2) if s * (bm + bn) * bk * elem <= smem), None)
            if stages is None:
                continue
            tiles = math.ceil(self.M / bm) * math.ceil(self.N / bn)
            cost = math.ceil(tiles / sms) * bm * bn * (1 + 32 * (1 / bm + 1 / bn))
            ragged = (self.M % bm != 0) + (self.N % bn != 0)
            warp = (32, 32) if min(bm, bn) == 64 else (64, 64)
            plan = Rasterization2DRow(4) if tiles > sms else NoRasterization
            ranked.append(((cost, ragged), Hint((bm, bn), warp, (bk,), stages, plan)))
        ranked.sort(key=lambda item: item[0])
        return [hint for _, hint in ranked[:topk]]

    get_hardware_aware_configs = recommend_hints

    def params_as_dict(self):
        return {"M": self.M, "N": self.N, "K": self.K, "trans_A": self.trans_A, "trans_B": self.trans_B,
                "in_dtype": self.in_dtype, "out_dtype": self.out_dtype, "accum_dtype": self.accum_dtype,
                "with_bias": self.with_bias}


__all__ = ["MatmulTemplate"]
