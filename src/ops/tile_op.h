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
  // A loop nest equivalent to the op (or other tile ops standing for it, expanded in
  // turn; buffers they need are added to k.allocs), or an empty Stmt when the op lowers
  // itself.
  virtual ir::Stmt expand(const ir::TileOpNode* op, ir::Kernel& k, transform::PassContext& ctx) const { return {}; }
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

// Fixes `buf`'s layout to `want` for tile op `op` (T.gemm, T.gemm_sp): true when it was
// open; false when it already was `want`; a layout conflict at the op's line otherwise.
bool require_fragment_layout(transform::LayoutMap& layouts, const ir::Buffer& buf, layout::FragmentPtr want,
                             const ir::TileOpNode* op);

// for v0, v1, ... in T.Parallel(extents...): body(vars)
ir::Stmt make_parallel_nest(const std::vector<ir::Expr>& extents,
                            const std::function<ir::Stmt(const std::vector<ir::Expr>&)>& body,
                            const SourceLoc& loc);

// Whether wgmma could run this gemm on k's threads (operand types, a warpgroup split,
// operand rows the descriptors name).
bool wgmma_fits(const ir::TileOpNode* op, const ir::Kernel& k);

// The accumulators of the gemms that run on wgmma, decided per group: group_of maps a
// fragment to its group's representative, where fragments one statement relates (a
// T.Parallel nest, a tile op) are one group, since their layouts are decided together.
// A group runs on wgmma when each of its gemms fits (operand types, a warpgroup split,
// canonical operand rows) and none is under a thread guard (`guarded`); the others run on
// mma.sync, which reads wgmma's panelled shared operands too. So one gemm too small for a
// warpgroup (a 32-row dQ) no longer moves the kernel's other gemms off wgmma.
std::set<const ir::BufferNode*> wgmma_accumulators(
    const ir::Kernel& k, const transform::PassContext& ctx,
    const std::function<const ir::BufferNode*(const ir::BufferNode*)>& group_of,
    const std::set<const ir::TileOpNode*>& guarded);

// Whole-buffer region helper and the extents a region really spans.
std::vector<int64_t> const_shape(const ir::Buffer& b, const SourceLoc& loc, const char* what);

}  // namespace tegula::ops
