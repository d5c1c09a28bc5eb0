#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

// T.fill(dst, value) / T.clear(dst)
class Fill : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, Kernel&, transform::PassContext&) const override {
    user_assert(op->regions.size() == 1 && op->args.size() == 1, op->loc) << "T.fill takes a buffer and a value";
    const BufferRegion& r = op->regions[0];
    auto store = [&](const std::vector<Expr>& v) {
      std::vector<Expr> idx;
      for (size_t k = 0; k < v.size(); ++k) idx.push_back(offset(r.mins[k], v[k]));
      return make_store(r.buffer, idx, make_cast(r.buffer->dtype, op->args[0]), op->loc);
    };
    if (r.buffer->scope == Scope::Fragment && !is_whole(r)) {
      // Part of a fragment (T.clear(acc[8:16, :])): a loop over the whole fragment,
      // indexed by its variables alone so that it runs with the fragment's layout,
      // storing inside the region only.
      return make_parallel_nest(
          r.buffer->shape,
          [&](const std::vector<Expr>& v) {
            Stmt s = make_store(r.buffer, v, make_cast(r.buffer->dtype, op->args[0]), op->loc);
            return make_if(inside(r, v), s, {}, op->loc);
          },
          op->loc);
    }
    if (r.buffer->scope != Scope::Local) return make_parallel_nest(r.extents, store, op->loc);
    // A local buffer is every thread's own: each thread fills all of it (TileLang's Fill
    // of a "local" buffer), in unrolled loops that keep it in registers.
    std::vector<Expr> vars;
    for (size_t d = 0; d < r.extents.size(); ++d) {
      vars.push_back(make_var("v" + std::to_string(d), DataType::i32(), op->loc));
    }
    Stmt s = store(vars);
    for (int d = int(vars.size()) - 1; d >= 0; --d) {
      s = make_for(vars[d], make_int(0), r.extents[d], ForKind::Unrolled, s, 0, op->loc);
    }
    return s;
  }
};

}  // namespace

const TileOp* fill_op() {
  static Fill op;
  return &op;
}

}  // namespace tegula::ops
