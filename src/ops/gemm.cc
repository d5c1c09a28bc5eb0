// T.gemm: tensor-core lowering is the next milestone; until then the op is refused with
// a clear error at the author's line rather than computed some slow way.
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

class Gemm : public TileOp {
 public:
  Stmt lower(const TileOpNode* op, transform::PassContext&, const Kernel&) const override {
    user_error(op->loc) << "T.gemm is not supported by this version of Tegula yet";
    return {};
  }
};

}  // namespace

const TileOp* gemm_op() {
  static Gemm op;
  return &op;
}

}  // namespace tegula::ops
