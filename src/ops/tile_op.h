// The tile operations. Each op implements its layout inference and its lowering; the
// loop-shaped ones (copy, fill, atomic_add) instead expand into T.Parallel nests before
// inference, so that one mechanism partitions, vectorises and masks all element loops.
#pragma once
#include <functional>

#include "ir/stmt.h"
#include "transform/context.h"

namespace tegula::ops {

enum class InferLevel { Strict, Common, Free };

class TileOp {
 public:
  virtual ~TileOp() = default;
  // A loop nest equivalent to the op, or an empty Stmt when the op lowers itself.
  virtual ir::Stmt expand(const ir::TileOpNode* op, const ir::Kernel& k) const { return {}; }
  // Fixes layouts (in ctx.layouts) it can at this level; returns true when it changed
  // something.
  virtual bool infer_layout(const ir::TileOpNode* op, InferLevel level, transform::PassContext& ctx,
                            const ir::Kernel& k) const {
    return false;
  }
  // The op's per-thread code. Ops that expand never reach lowering: by default this is an
  // internal error naming the op.
  virtual ir::Stmt lower(const ir::TileOpNode* op, transform::PassContext& ctx, const ir::Kernel& k) const;
};

// nullptr when no op has that name.
const TileOp* find_tile_op(const std::string& name);

// for v0, v1, ... in T.Parallel(extents...): body(vars)
ir::Stmt make_parallel_nest(const std::vector<ir::Expr>& extents,
                            const std::function<ir::Stmt(const std::vector<ir::Expr>&)>& body,
                            const SourceLoc& loc);

// Whether the kernel's gemms run on wgmma (sm_90a): all of them or none, since one
// gemm's accumulator can be the next one's A. Decided by infer_layout, into ctx.wgmma.
bool kernel_uses_wgmma(const ir::Kernel& k, const transform::PassContext& ctx);

// Whole-buffer region helper and the extents a region really spans.
std::vector<int64_t> const_shape(const ir::Buffer& b, const SourceLoc& loc, const char* what);

}  // namespace tegula::ops
