// Shared by partition_loops.cc and vectorize.cc.
#pragma once
#include "ir/analyzer.h"
#include "transform/context.h"

namespace tegula::transform {

struct NestInfo {
  layout::FragmentPtr layout;
  std::vector<ir::Expr> vars;
  ir::Stmt body;
  SourceLoc loc;
  bool async = false;  // inside a T.Pipelined loop: global->shared copies may use cp.async
};

// The loop body for slot s: loop variables replaced by the thread's coordinates and
// fragment accesses by registers; with mask, global accesses past the edge are masked.
ir::Stmt slot_body(const NestInfo& n, int s, ir::Kernel& k, PassContext& ctx, const ir::Analyzer& an, bool mask);

// Condition under which idx lies inside buffer b (null when provably always).
ir::Expr in_bounds(const ir::Analyzer& an, const ir::Buffer& b, const std::vector<ir::Expr>& idx);

// value with its global loads masked (0 past the tensor's edge).
ir::Expr mask_loads(const ir::Analyzer& an, const ir::Expr& value);

// One vectorised copy of the body for slots [g, g+vec), or null when the accesses are not
// contiguous and aligned enough (the caller then emits the slots one by one).
ir::Stmt vectorize_group(const NestInfo& n, int g, int vec, ir::Kernel& k, PassContext& ctx, const ir::Analyzer& an);

}  // namespace tegula::transform
