#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

// T.annotate_layout / T.use_swizzle: read by the passes that use them; nothing to emit.
class Annotation : public TileOp {
 public:
  Stmt lower(const TileOpNode*, transform::PassContext&, const Kernel&) const override { return {}; }
};

}  // namespace

const TileOp* annotation_op() {
  static Annotation op;
  return &op;
}

}  // namespace tegula::ops
