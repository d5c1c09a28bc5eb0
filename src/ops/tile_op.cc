#include "ops/tile_op.h"

#include <unordered_map>

#include "support/error.h"

namespace tegula::ops {

const TileOp* copy_op();
const TileOp* fill_op();
const TileOp* im2col_op();
const TileOp* reduce_op();
const TileOp* atomic_add_op();
const TileOp* gemm_op();
const TileOp* gemm_sp_op();
const TileOp* annotation_op();
const TileOp* reducer_op();
const TileOp* cumsum_op();

ir::Stmt TileOp::lower(const ir::TileOpNode* op, transform::PassContext&, const ir::Kernel&) const {
  internal_error << op->op << " is expanded before lowering";
  return {};
}

const TileOp* find_tile_op(const std::string& name) {
  static const std::unordered_map<std::string, const TileOp*> table = {
      {"copy", copy_op()},          {"fill", fill_op()},          {"reduce", reduce_op()},
      {"atomic_add", atomic_add_op()}, {"gemm", gemm_op()},        {"annotate_layout", annotation_op()},
      {"use_swizzle", annotation_op()}, {"finalize_reducer", reducer_op()}, {"im2col", im2col_op()},
      {"cumsum", cumsum_op()},      {"gemm_sp", gemm_sp_op()},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

ir::Stmt make_parallel_nest(const std::vector<ir::Expr>& extents,
                            const std::function<ir::Stmt(const std::vector<ir::Expr>&)>& body,
                            const SourceLoc& loc) {
  static const char* names[] = {"i", "j", "k", "l", "m", "n"};
  std::vector<ir::Expr> vars;
  for (size_t d = 0; d < extents.size(); ++d) {
    vars.push_back(ir::make_var(d < 6 ? names[d] : "v" + std::to_string(d), ir::DataType::i32(), loc));
  }
  ir::Stmt s = body(vars);
  for (int d = int(extents.size()) - 1; d >= 0; --d) {
    s = ir::make_for(vars[d], ir::make_int(0), extents[d], ir::ForKind::Parallel, s, 0, loc);
  }
  return s;
}

std::vector<int64_t> const_shape(const ir::Buffer& b, const SourceLoc& loc, const char* what) {
  std::vector<int64_t> out;
  for (auto& d : b->shape) {
    const int64_t* v = ir::as_const_int(d);
    if (!v) user_error(loc) << what << ": the shape of '" << b->name << "' must be made of constants";
    out.push_back(*v);
  }
  return out;
}

bool require_fragment_layout(transform::LayoutMap& layouts, const ir::Buffer& buf, layout::FragmentPtr want,
                             const ir::TileOpNode* op) {
  auto have = layouts.fragment.find(buf.get());
  if (have != layouts.fragment.end()) {
    user_assert(have->second->same_as(*want), op->loc)
        << "layout conflict: T." << op->op << " needs " << want->describe() << " for '" << buf->name
        << "', which already has " << have->second->describe() << " (decided at line "
        << layouts.decided_at[buf.get()].line << ")";
    return false;
  }
  layouts.fragment[buf.get()] = want;
  layouts.decided_at[buf.get()] = op->loc;
  return true;
}

}  // namespace tegula::ops
