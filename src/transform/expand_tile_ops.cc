// Pass: expand_tile_ops, and read_annotations.
//
// read_annotations expects the frontend's IR; it records T.use_swizzle on the kernel.
// expand_tile_ops replaces copy, fill and atomic_add by the T.Parallel nests they stand
// for (ops/copy.cc), so that layout inference, partitioning, masking and vectorising
// treat them like the author's own loops. Guarantees: no copy/fill/atomic_add op left.
#include "ir/functor.h"
#include "ops/tile_op.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {
class Expander : public ir::IRMutator {
 public:
  explicit Expander(const ir::Kernel& k) : k_(k) {}
  ir::Stmt mutate_TileOp(const ir::Stmt& self, const ir::TileOpNode* op) override {
    const ops::TileOp* impl = ops::find_tile_op(op->op);
    user_assert(impl, op->loc) << "unknown tile operation '" << op->op << "'";
    ir::Stmt s = impl->expand(op, k_);
    return s ? s : self;
  }

 private:
  const ir::Kernel& k_;
};
}  // namespace

void read_annotations(ir::Kernel& k, PassContext&) {
  ir::post_order(k.body, [&](const ir::Stmt& s) {
    auto* op = s.as<ir::TileOpNode>();
    if (!op || op->op != "use_swizzle") return;
    if (op->attr_int("enable", 1)) {
      k.panel_size = int(op->attr_int("panel_size", 8));
      k.swizzle_row_major = op->attr_str("order", "row") == "row";
    }
  });
}

void expand_tile_ops(ir::Kernel& k, PassContext&) { k.body = Expander(k).mutate(k.body); }

}  // namespace tegula::transform
