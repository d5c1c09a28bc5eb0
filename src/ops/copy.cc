// T.copy(src, dst): expands to `for ... in T.Parallel(extents): dst[...] = src[...]`.
//
// Either side may be given in corner form (A[by*bM, k*bK], every extent 1): it then
// spans the other side's extents, aligned to its trailing dimensions. The non-unit
// extents of the two sides must agree, e.g. A[bx, 0:N] (extents 1, N) copies into a
// fragment of shape (N,) or (1, N).
#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

class Copy : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, Kernel&, transform::PassContext&) const override {
    const SourceLoc& loc = op->loc;
    user_assert(op->regions.size() == 2, loc) << "T.copy takes a source and a destination";
    BufferRegion src = op->regions[0], dst = op->regions[1];
    bool src_corner = all_ones(src), dst_corner = all_ones(dst);
    if (src_corner && !dst_corner) src = widen(src, dst, loc);
    if (dst_corner && !src_corner) dst = widen(dst, src, loc);
    std::vector<int> sdims, ddims;
    std::vector<int64_t> se = squeeze(src.extents, &sdims), de = squeeze(dst.extents, &ddims);
    if (se != de) {
      user_error(loc) << "T.copy: the source region of '" << src.buffer->name << "' spans " << shape_str(se)
                      << " but the destination region of '" << dst.buffer->name << "' spans " << shape_str(de);
    }
    for (int64_t e : se) {
      user_assert(e > 0, loc) << "T.copy: region extents must be constants (got a symbolic extent in '"
                              << src.buffer->name << "')";
    }
    // The loop runs over every dimension of the register/shared side (unit ones too), so
    // that side is indexed by exactly the loop variables and layout inference can match
    // the loop with the buffer's layout.
    bool anchor_dst = dst.buffer->scope != Scope::Global &&
                      (src.buffer->scope == Scope::Global || dst.buffer->scope == Scope::Fragment);
    const BufferRegion& anchor = anchor_dst ? dst : src;
    const std::vector<int>& adims = anchor_dst ? ddims : sdims;
    std::vector<Expr> extents = anchor.extents;
    // Regions of one shape (a (1, N) fragment into another) are both indexed by every
    // loop variable, unit dimensions included: each then reads as the loop's own layout,
    // which inference can match with either buffer's.
    bool same_shape = src.extents.size() == dst.extents.size();
    for (size_t d = 0; same_shape && d < src.extents.size(); ++d) {
      const int64_t* a = as_const_int(src.extents[d]);
      const int64_t* b = as_const_int(dst.extents[d]);
      same_shape = a && b && *a == *b;
    }
    // Part of a fragment (f[4:8, :]): the loop runs over the whole fragment, indexed by
    // its variables alone so that it takes the fragment's layout, and moves the elements
    // inside the region only.
    bool part_of_fragment = anchor.buffer->scope == Scope::Fragment && !is_whole(anchor);
    if (part_of_fragment) extents = anchor.buffer->shape;
    return make_parallel_nest(
        extents,
        [&](const std::vector<Expr>& loop_vars) {
          std::vector<Expr> v = loop_vars;  // positions relative to the regions' mins
          if (part_of_fragment) {
            for (size_t d = 0; d < v.size(); ++d) {
              if (!is_const_int(anchor.mins[d], 0)) v[d] = loop_vars[d] - anchor.mins[d];
            }
          }
          auto index = [&](const BufferRegion& r, const std::vector<int>& dims, bool is_anchor) {
            if (is_anchor && part_of_fragment) return loop_vars;
            std::vector<Expr> idx = r.mins;
            if (is_anchor || same_shape) {
              for (size_t d = 0; d < idx.size(); ++d) idx[d] = offset(idx[d], v[d]);
            } else {
              for (size_t k = 0; k < dims.size(); ++k) idx[dims[k]] = offset(idx[dims[k]], v[adims[k]]);
            }
            return idx;
          };
          Expr value = make_load(src.buffer, index(src, sdims, !anchor_dst), loc);
          Stmt s = make_store(dst.buffer, index(dst, ddims, anchor_dst), value, loc);
          return part_of_fragment ? make_if(inside(anchor, loop_vars), s, {}, loc) : s;
        },
        loc);
  }
};

}  // namespace

const TileOp* copy_op() {
  static Copy op;
  return &op;
}

}  // namespace tegula::ops
