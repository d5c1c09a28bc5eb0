"""The kernel language: `import tegula.language as T`, with TileLang's names and meaning.

    @T.prim_func
    def add(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), M, threads=128) as (bx, by):
            for i in T.Parallel(128):
                B[by, bx * 128 + i] = A[by, bx * 128 + i] + 1

  types.py     dtypes (T.float16, ...), T.Tensor / T.Buffer, T.StridedTensor, T.dynamic, T.GemmWarpPolicy
  builtins.py  math, casts, loops, allocations
  kernel.py    T.Kernel, T.get_thread_binding, T.launch_thread (TileLang's tilelang.language.kernel)
  intrinsics.py  warp reductions and votes, T.any_of / T.all_of, T.__ldg, T.assume, T.device_assert,
               T.shift_left / shift_right, T.pdl_*
  barriers.py  T.alloc_barrier / barrier_arrive / barrier_wait, T.tma_copy, T.wgmma_gemm, T.set_max_nreg,
               T.ptx_cp_async with T.access_ptr: explicit mbarriers and manual warp specialisation
  cluster.py   T.sync_grid, T.ClusterKernel and the cluster barrier, rank and shape
  ldst.py      T.reinterpret, explicit-width loads and stores (T.ldg128, T.sts64, ...), vector dtypes
  tileops.py   T.copy, T.fill, T.clear, T.gemm, T.gemm_sp, T.atomic_add, layouts, T.print
  reductions.py T.reduce, T.reduce_*
  scan.py      T.cumsum
  eager_ops.py T.const, T.empty, T.make_tensor (the body of an eager @tegula.jit function, and prim_funcs')
  pointers.py  T.ptr parameters, T.Tensor(shape, T.ptr) tables of addresses, T.make_tensor at an address
  source_kernel.py  T.CUDASourceCodeKernel: a kernel written in CUDA, launched with the prim_func's arguments
  tile_schedule.py  T.PersistentTileScheduler: the tile each block of a persistent kernel takes (a while loop)
  warpgroup.py T.ws / T.WarpSpecialize: a body only some warp groups of the block run
  views.py     T.reshape, T.view, T.Tensor(shape, dtype, buf.data): a buffer under another shape
  fp8.py       determine_fp8_type (TileLang's tilelang.language.fp8)
  dtypes.py    the dtypes and resolve_torch_storage_dtype (TileLang's tilelang.language.dtypes)

The language builds on the frontend (tegula/frontend) and nothing above it: what a T.* call
hands the parser (an allocation, a loop, T.Kernel) is a class of frontend/requests.py,
which the modules here make and, where a request does more, extend; T.prim_func, T.macro,
T.serial, T.ptr and T.Tensor's spec are the frontend's, named here.
"""
from .. import layout
from ..frontend import requests as _requests
from ..frontend.prim_func import Macro, PrimFunc, macro, prim_func
from . import barriers as _barriers, reducers as _reducers
from .builtins import (AllocRequest, Cast, LoopSpec, Parallel, Persistent, Pipelined, Select, abs, align_up, alloc_fragment,
                       alloc_global, alloc_local, alloc_shared, alloc_var, cast, ceildiv, clamp, cos, exp, exp2, floordiv,
                       floormod, if_then_else, infinity, isfinite, isinf, isnan, let, log, log2, max, max_value, min, min_value, parallel, rsqrt, serial,
                       sigmoid, sin, sqrt, sync_threads, tanh, unroll)
from .kernel import Kernel, KernelSpec, get_block_binding, get_thread_binding, launch_thread, thread_binding
from .builtins import Serial, Unroll, Vectorized, vectorized  # TileLang's loop aliases
from .barriers import (access_ptr, alloc_barrier, annotate_consumer_reg_alloc, annotate_producer_reg_dealloc, barrier_arrive, barrier_wait, cp_async_barrier_noinc,
                       disable_warp_group_reg_alloc, fence_proxy_async, mbarrier_arrive, mbarrier_wait_parity, no_set_max_nreg, ptx_commit_group, ptx_cp_async,
                       ptx_wait_group, set_max_nreg, tma_copy, wait_wgmma, wgmma_gemm)
from .cluster import (ClusterKernel, block_rank_in_cluster, cluster_arrive, cluster_arrive_relaxed, cluster_sync,
                      cluster_wait, get_cluster_dims, get_cluster_extent, get_cluster_extents, get_cluster_id,
                      get_cluster_ids, get_cluster_size, sync_grid)
from .eager_ops import const, empty, make_tensor
from .pointers import ptr
from .intrinsics import (activemask, all_of, all_sync, any_of, any_sync, assume, ballot, ballot_sync, device_assert, __ffs, __fns,
                         get_lane_idx, get_warp_group_idx, get_warp_idx, get_warp_idx_sync, __ldg, match_all_sync,
                         match_any_sync, pdl_sync, pdl_trigger, rng_init, rng_rand, rng_rand_float, shfl_down, shfl_sync, shfl_up, shfl_xor,
                         shift_left, shift_right, shuffle_elect, sync_warp, syncthreads_and, syncthreads_count, syncthreads_or, tvm_warp_shuffle,
                         tvm_warp_shuffle_down, tvm_warp_shuffle_up,
                         warp_reduce_bitand, warp_reduce_bitor, warp_reduce_max, warp_reduce_min, warp_reduce_sum)
from .views import reshape, view
from .source_kernel import CUDASourceCodeKernel
from .tile_schedule import PersistentTileScheduler
from .warpgroup import WarpSpecialize, ws
from . import dtypes, fp8  # tilelang.language.dtypes (resolve_torch_storage_dtype), .fp8 (determine_fp8_type)
from .ldst import (VECTOR_DTYPES as _VECTOR_DTYPES, ldg32, ldg64, ldg128, ldg256, lds32, lds64, lds128, reinterpret, stg32, stg64,
                   stg128, stg256, sts32, sts64, sts128)
from .scan import cumsum
from .reducers import alloc_reducer, finalize_reducer, reducer_init, reducer_update
from .tileops import (annotate_compile_flags, annotate_layout, annotate_min_blocks_per_sm, annotate_pass_configs, annotate_safe_value, atomic_add, atomic_addx2, atomic_addx4, c2d_im2col, clear, copy, evaluate, fill, gemm, gemm_sp, im2col, print, transpose,
                      use_swizzle)
from .reductions import (reduce, reduce_absmax, reduce_abssum, reduce_bitand, reduce_bitor, reduce_bitxor, reduce_max,
                         reduce_min, reduce_sum)
from .types import (Buffer, FragmentBuffer, GemmWarpPolicy, LocalBuffer, SharedBuffer, StridedTensor, Tensor, TensorSpec, bfloat16, bool, double,
                    dtype, dynamic, float, float4_e2m1fn, float4_e2m1fnx2, float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float16,
                    float32, float64, half, int4, int8, int16, int32, int64, symbolic, tfloat32, uint4, uint8, uint16, uint32, uint64)

globals().update(_VECTOR_DTYPES)  # T.float32x2, T.uint32x4, ... (ldst.py)

# What the parser checks at the end of every kernel body, in this order: a reducer
# initialised but never finalized, a T.tma_copy never followed by its barrier's arrival.
_requests.KERNEL_CHECKS[:] = [_reducers.check_finalized, _barriers.check_tma_arrivals]

make_swizzled_layout = layout.make_swizzled_layout

Fragment = layout.Fragment  # a user's register layout, for T.annotate_layout
Layout = layout.Layout  # where a global tensor's elements are stored, for T.annotate_layout
