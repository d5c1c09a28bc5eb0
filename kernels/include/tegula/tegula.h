// The device library the generated kernels include: `#include "tegula/tegula.h"`.
//
// Header-only, for nvcc and NVRTC alike. The runtime hands these files to NVRTC in
// memory under the names "tegula/<file>.h" (the names the includes below use) and puts
// the toolkit include directory on the path for cuda_fp16.h and cuda_bf16.h. Because
// every file is part of the cache key, editing any of them recompiles every kernel.
//
//   config.h   qualifiers, fixed-width integers, half_t / bfloat16_t, traits, smem_addr
//   vec.h      Vec<T, N> and single-instruction vector loads and stores
//   cast.h     cast<To>(x) between every pair of element types, to_float
//   math.h     exp, log, max, ..., floordiv, ceildiv for every element type
//   fast_math.h  exp2_fast and the other single-instruction approximations
//   limits.h   infinity, ninfinity, max_value, min_value
//   reduce.h   warp shuffles and warp_reduce with SumOp, MaxOp, MinOp, AbsSumOp, AbsMaxOp
//   warp.h     warp_reduce_sum / _max / ..., shuffles, the PDL functions NVRTC lacks, max_num / min_num
//   random.h   Philox, the per-thread generator of T.rng_* (curand's Philox numbers)
//   atomic.h   atomic_add
//   print.h    print for T.print
//   iket.h     the event records of the instrumentation tool tegula.tools.cuda.iket
//   mma.h      ldmatrix, stmatrix, mma.sync, mma.sp (sm_80+)
//   async.h    cp.async, named barriers; fence.proxy.async and mbarrier (sm_90+)
//   gemm.h     the block GEMM on mma.sync that T.gemm lowers to; the operand swizzle
//   gemm_sp.h  the 2:4 sparse block GEMM on mma.sp that T.gemm_sp lowers to
//   wgmma.h    the block GEMM on wgmma (sm_90a); panelled operand layouts
//   tma.h      bulk tensor copies and the mbarriers of warp-specialised pipelines (sm_90a)
//   cluster.h  the cluster barrier and a block's rank in its cluster (sm_90+)
#pragma once

#include "tegula/config.h"
#include "tegula/small_types.h"
#include "tegula/vec.h"
#include "tegula/ldst.h"
#include "tegula/cast.h"
#include "tegula/math.h"
#include "tegula/fast_math.h"
#include "tegula/limits.h"
#include "tegula/reduce.h"
#include "tegula/warp.h"
#include "tegula/random.h"
#include "tegula/atomic.h"
#include "tegula/print.h"
#include "tegula/iket.h"
#include "tegula/mma.h"
#include "tegula/async.h"
#include "tegula/gemm.h"
#include "tegula/gemm_sp.h"
#include "tegula/wgmma.h"
#include "tegula/tma.h"
#include "tegula/cluster.h"
