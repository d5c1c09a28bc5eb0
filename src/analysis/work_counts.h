// Analysis: work_counts — what one kernel does over its whole grid, counted from its IR:
// tensor-core FLOPs, CUDA-core FLOPs, and the bytes it loads from and stores to each
// global tensor. tegula.tools.Analyzer presents them (tables, the roofline).
//
// Reads: the kernel after expand_tile_ops (transform/pipeline.cc), the last stage at which
// the program is still written per block (T.Parallel nests whole, T.gemm and T.reduce tile
// ops) while every copy has become the element accesses it performs. The later stages
// spread the same accesses over threads and make the masks at the tensors' edges
// explicit, which the in-bounds rule below reproduces. A kernel whose copies became bulk
// tensor copies (TMA, sm_90a) is counted from the same program lowered without them (the
// caller's choice): the copy engine moves the same in-bounds elements. With `per_thread`
// it reads a per-thread stage ("final") instead, statement by statement in every thread of
// every block: the bytes then are what the lowered code's own masks let through, which
// the tests compare with the per-block count.
//
// Every block of the grid is counted, every trip of every loop: loop bounds, branch
// conditions and indices are evaluated for each block (many blocks at once: lane_values.h),
// so a causal key loop whose length depends on the block counts each block's own trips.
//
// - Tensor-core FLOPs: a `T.gemm` whose C tile is M x N, reducing K, counts 2·M·N·K each
//   time it runs (T.gemm_sp the dense product's, as TileLang's sparse examples report it).
// - CUDA-core FLOPs: each floating-point +, -, *, /, //, %, min and max, each math function
//   call (exp, exp2, log, log2, sqrt, rsqrt, tanh, sin, cos, floor, ceil, trunc, rint, abs,
//   sigmoid), each negated non-constant float (a -inf among them) and each atomic add count
//   1; casts, selects, comparisons and integer (index) arithmetic count nothing, nor does
//   anything inside a load's indices. A statement counts each time it runs: once per block
//   outside T.Parallel, once per element of the nest inside it, padding included (the
//   lowered code computes the whole tile and masks only its memory accesses), under any
//   branch of the nest only where it is taken. A `T.reduce` of n elements into each of its
//   outputs counts n - 1 per output, one more when it accumulates into the output
//   (clear=0), and n more for abssum/absmax's |x|.
// - Bytes: each access of a global tensor (a parameter, a T.alloc_global workspace, a view
//   of either under the view's name, a tensor over a run-time address) counts its element
//   size (times its lanes) each time it runs, and only where its index lies inside the
//   tensor: the lowered code masks every access at the tensor's edges, so a ragged tile
//   moves its in-bounds part. Reading one element again counts again, as the lowered code
//   issues those loads; the same access twice in one statement counts once. An atomic add
//   counts a load and a store. A statement outside T.Parallel runs in many threads but
//   reads one address, which the hardware serves as one request per warp, so the
//   program's single access is what is counted.
// - A program that reads its thread index outside T.Parallel counts those statements in
//   every thread that depends on it (through a value, a branch or a loop bound), any other
//   statement once per block.
// - A nest whose guards or indices are not intervals of its loop variables (an im2col's
//   padding) is counted by enumerating its points in every block; past `dense_limit`
//   points, in evenly spaced blocks, scaled to all of them (a note says so).
// - A branch whose condition depends on values in registers or shared memory counts as
//   taken; a loop bound that does is taken at its largest where a select or a min bounds
//   it (notes say so). A bound, branch or index read from a tensor (sequence lengths, a
//   block table) is evaluated from that tensor's contents, which must then be given.
//
// Refuses (WorkCountError, naming the statement): a loop whose bound is known only while
// the kernel runs and not bounded, a while loop, break/continue, a bulk tensor copy, a
// value read from a tensor whose contents were not given, a dynamic size not given.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/lane_values.h"
#include "ir/stmt.h"

namespace tegula::analysis {

struct WorkCounts {
  int64_t tensor_flops = 0;
  int64_t cuda_flops = 0;
  std::map<std::string, int64_t> loads;   // global tensor -> bytes loaded
  std::map<std::string, int64_t> stores;  // global tensor -> bytes stored
  std::map<std::string, int64_t> sizes;   // global tensor -> its bytes
  std::set<std::string> notes;            // where the count estimated or assumed
  std::vector<int64_t> grid;              // the grid's extents
};

// A number the caller knows: a dynamic size or a scalar parameter.
struct Number {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
};

struct WorkInputs {
  std::map<std::string, Number> values;  // by name: dynamic sizes, scalar parameters
  // Tensor parameters whose contents may be asked for; `contents` gives them, or nullptr
  // when only the tensor's shape is known (then reading one is an error).
  std::set<std::string> tensors;
  std::function<const TensorContents*(const std::string&)> contents;
  bool per_thread = false;
  int64_t dense_limit = int64_t(1) << 22;
};

struct WorkCountError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

WorkCounts count_work(const ir::Kernel& kernel, const WorkInputs& inputs);

// The bits of one element of a dtype as the count weighs it (bool: 8).
int dtype_bits(const ir::DataType& t);

}  // namespace tegula::analysis
