#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

// T.fill(dst, value) / T.clear(dst)
class Fill : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, const Kernel&) const override {
    user_assert(op->regions.size() == 1 && op->args.size() == 1, op->loc) << "T.fill takes a buffer and a value";
    const BufferRegion& r = op->regions[0];
    return make_parallel_nest(
        r.extents,
        [&](const std::vector<Expr>& v) {
          std::vector<Expr> idx;
          for (size_t k = 0; k < v.size(); ++k) idx.push_back(offset(r.mins[k], v[k]));
          return make_store(r.buffer, idx, make_cast(r.buffer->dtype, op->args[0]), op->loc);
        },
        op->loc);
  }
};

}  // namespace

const TileOp* fill_op() {
  static Fill op;
  return &op;
}

}  // namespace tegula::ops
