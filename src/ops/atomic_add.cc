#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

// T.atomic_add(dst, value): an element, or a region added elementwise from a same-shaped source.
// Each element's add is the call atomic_add(dst element, value[, memory order]); the order
// (attr memory_order, TileLang's ids: relaxed 0, consume 1, acquire 2, release 3, acq_rel 4,
// seq_cst 5) is there only when the kernel gave one, and then printed as
// atomic_add<tegula::memory_order_...> (kernels/include/tegula/atomic.h).
class AtomicAdd : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, Kernel&, transform::PassContext&) const override {
    const SourceLoc& loc = op->loc;
    const BufferRegion& dst = op->regions.at(0);
    int64_t order = op->attr_int("memory_order", -1);
    user_assert(order >= -1 && order <= 5, loc) << "T.atomic_add: memory order id " << order << " is not one of 0..5";
    auto atomic = [&](std::vector<Expr> idx, Expr value) {
      std::vector<Expr> args = {make_load(dst.buffer, std::move(idx), loc), make_cast(dst.buffer->dtype, value)};
      if (order >= 0) args.push_back(make_int(order));
      return make_evaluate(make_call("atomic_add", std::move(args), dst.buffer->dtype, loc), loc);
    };
    DataType dt = dst.buffer->dtype;
    user_assert(dt.bits != 4 && dt.code != DataType::Float8E8M0, loc)
        << "T.atomic_add: the destination '" << dst.buffer->name << "' is " << dt.name()
        << ", which has no atomic add; accumulate in float32 (or int32) and cast";
    if (op->regions.size() == 1) {
      user_assert(op->args.size() == 1, loc) << "T.atomic_add takes a destination and a value";
      return atomic(dst.mins, op->args[0]);
    }
    BufferRegion src = op->regions[1];
    BufferRegion d = dst;
    if (all_ones(d) && !all_ones(src)) d = widen(d, src, loc);
    std::vector<int> sdims, ddims;
    std::vector<int64_t> se = squeeze(src.extents, &sdims), de = squeeze(d.extents, &ddims);
    user_assert(se == de, loc) << "T.atomic_add: source spans " << shape_str(se) << " but destination spans "
                               << shape_str(de);
    for (int64_t e : se) {
      user_assert(e > 0, loc) << "T.atomic_add: region extents must be constants (got a symbolic extent in '"
                              << src.buffer->name << "')";
    }
    // The loop runs over every dimension of the source, unit ones too, so that a fragment
    // source is indexed by exactly the loop variables and the loop takes its layout.
    return make_parallel_nest(
        src.extents,
        [&](const std::vector<Expr>& v) {
          std::vector<Expr> si = src.mins, di = d.mins;
          for (size_t s = 0; s < si.size(); ++s) si[s] = offset(si[s], v[s]);
          for (size_t k = 0; k < ddims.size(); ++k) di[ddims[k]] = offset(di[ddims[k]], v[sdims[k]]);
          return atomic(di, make_load(src.buffer, si, loc));
        },
        loc);
  }
};

}  // namespace

const TileOp* atomic_add_op() {
  static AtomicAdd op;
  return &op;
}

}  // namespace tegula::ops
