"""Programs whose names are C++ keywords, CUDA built-ins, device-library names, names the
printer emits or reserved identifiers (tests/python/cpu/test_cuda_names.py compiles and
simulates them, tests/python/gpu/test_cuda_names_gpu.py runs them)."""
import torch

import tegula.language as T


def keyword_program(M):
    """An elementwise program: every kind of name is a keyword, built-in or printer name."""

    @T.prim_func
    def do(int: T.Tensor((M, 64), "float32"), threadIdx: T.Tensor((M, 64), "float32"), tx: T.float32,
           __x: T.int32):
        with T.Kernel(T.ceildiv(M, 16), threads=128) as blockIdx:
            tegula_smem = T.alloc_shared((16, 64), "float32")
            auto = T.alloc_fragment((16, 64), "float32")
            half = T.alloc_local((4,), "float32")
            _Tile = T.alloc_local((4,), "float32")
            for cast in T.serial(4):
                half[cast] = T.cast(cast, "float32") * tx
                _Tile[cast] = half[cast] + 1.0
            T.copy(int[blockIdx * 16, 0], tegula_smem)
            for max, min in T.Parallel(16, 64):
                float = tegula_smem[max, min] * 2.0  # a let named float
                auto[max, min] = float + _Tile[min % 4] + T.cast(__x, "float32")
            T.copy(auto, threadIdx[blockIdx * 16, 0])

    return do


def keyword_expected(x, tx, xx):
    tile = torch.arange(4, dtype=torch.float64, device=x.device) * tx + 1.0
    return x.double() * 2.0 + tile.repeat(16)[None, :] + xx


def gemm_program(M, N, K):
    """A pipelined GEMM whose operands take the names of the wgmma instruction structs and
    of the tensor maps the printer declares (wgmma_ss_n64_f16, tegula_tmap_0)."""

    @T.prim_func
    def gemm(tegula_tmap_0: T.Tensor((M, K), "float16"), Vec: T.Tensor((K, N), "float16"),
             struct: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (tegula_by, tegula_bz):
            wgmma_ss_n64_f16 = T.alloc_shared((64, 32), "float16")
            this = T.alloc_shared((32, 64), "float16")
            new = T.alloc_fragment((64, 64), "float32")
            T.clear(new)
            for switch in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(tegula_tmap_0[tegula_bz * 64, switch * 32], wgmma_ss_n64_f16)
                T.copy(Vec[switch * 32, tegula_by * 64], this)
                T.gemm(wgmma_ss_n64_f16, this, new)
            T.copy(new, struct[tegula_bz * 64, tegula_by * 64])

    return gemm
