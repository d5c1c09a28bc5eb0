// T.copy(src, dst): expands to `for ... in T.Parallel(extents): dst[...] = src[...]`.
//
// Either side may be given in corner form (A[by*bM, k*bK], every extent 1): it then
// spans the other side's extents, aligned to its trailing dimensions. The non-unit
// extents of the two sides must agree, e.g. A[bx, 0:N] (extents 1, N) copies into a
// fragment of shape (N,) or (1, N).
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

std::vector<int64_t> squeeze(const std::vector<Expr>& extents, std::vector<int>* dims) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < extents.size(); ++d) {
    const int64_t* v = as_const_int(extents[d]);
    if (v && *v == 1) continue;
    out.push_back(v ? *v : -1);
    dims->push_back(int(d));
  }
  return out;
}

// min + v, written as plain v when min is 0 so that layout inference sees the loop
// variable itself as the index.
Expr offset(const Expr& min, const Expr& v) { return is_const_int(min, 0) ? v : min + v; }

bool all_ones(const BufferRegion& r) {
  for (auto& e : r.extents) {
    if (!is_const_int(e, 1)) return false;
  }
  return true;
}

// Gives a corner-form region the other side's extents, trailing dimensions aligned.
BufferRegion widen(const BufferRegion& corner, const BufferRegion& other, const SourceLoc& loc) {
  BufferRegion r = corner;
  std::vector<int> dims;
  std::vector<int64_t> sq = squeeze(other.extents, &dims);
  size_t rank = r.extents.size();
  if (sq.size() > rank) {
    user_error(loc) << "T.copy: '" << corner.buffer->name << "' has rank " << rank << " but the other side spans "
                    << sq.size() << " dimensions";
  }
  for (size_t k = 0; k < sq.size(); ++k) r.extents[rank - sq.size() + k] = make_int(sq[k]);
  return r;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return out + ")";
}

class Copy : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, const Kernel&) const override {
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
    return make_parallel_nest(
        extents,
        [&](const std::vector<Expr>& v) {
          auto index = [&](const BufferRegion& r, const std::vector<int>& dims, bool is_anchor) {
            std::vector<Expr> idx = r.mins;
            if (is_anchor) {
              for (size_t d = 0; d < idx.size(); ++d) idx[d] = offset(idx[d], v[d]);
            } else {
              for (size_t k = 0; k < dims.size(); ++k) idx[dims[k]] = offset(idx[dims[k]], v[adims[k]]);
            }
            return idx;
          };
          Expr value = make_load(src.buffer, index(src, sdims, !anchor_dst), loc);
          return make_store(dst.buffer, index(dst, ddims, anchor_dst), value, loc);
        },
        loc);
  }
  Stmt lower(const TileOpNode* op, transform::PassContext&, const Kernel&) const override {
    internal_error << "copy is expanded before lowering";
    return {};
  }
};

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
  Stmt lower(const TileOpNode*, transform::PassContext&, const Kernel&) const override {
    internal_error << "fill is expanded before lowering";
    return {};
  }
};

// T.atomic_add(dst, value): an element, or a region added elementwise from a same-shaped source.
class AtomicAdd : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, const Kernel&) const override {
    const SourceLoc& loc = op->loc;
    const BufferRegion& dst = op->regions.at(0);
    auto atomic = [&](std::vector<Expr> idx, Expr value) {
      Expr addr = make_load(dst.buffer, std::move(idx), loc);
      return make_evaluate(make_call("atomic_add", {addr, make_cast(dst.buffer->dtype, value)}, dst.buffer->dtype, loc),
                           loc);
    };
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
    std::vector<Expr> extents;
    for (int64_t e : se) extents.push_back(make_int(e));
    return make_parallel_nest(
        extents,
        [&](const std::vector<Expr>& v) {
          std::vector<Expr> si = src.mins, di = d.mins;
          for (size_t k = 0; k < v.size(); ++k) {
            si[sdims[k]] = offset(si[sdims[k]], v[k]);
            di[ddims[k]] = offset(di[ddims[k]], v[k]);
          }
          return atomic(di, make_load(src.buffer, si, loc));
        },
        loc);
  }
  Stmt lower(const TileOpNode*, transform::PassContext&, const Kernel&) const override {
    internal_error << "atomic_add is expanded before lowering";
    return {};
  }
};

// T.annotate_layout / T.use_swizzle: read by the passes that use them; nothing to emit.
class Annotation : public TileOp {
 public:
  Stmt lower(const TileOpNode*, transform::PassContext&, const Kernel&) const override { return {}; }
};

}  // namespace

const TileOp* copy_op() {
  static Copy op;
  return &op;
}
const TileOp* fill_op() {
  static Fill op;
  return &op;
}
const TileOp* atomic_add_op() {
  static AtomicAdd op;
  return &op;
}
const TileOp* annotation_op() {
  static Annotation op;
  return &op;
}

}  // namespace tegula::ops
