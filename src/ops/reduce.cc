// T.reduce_{max,min,sum,abssum,absmax,bitand,bitor,bitxor}(src, dst, dim, clear) over fragments.
//
// A source or destination in shared memory (TileLang's meaning) is staged through a
// fragment the op allocates (expand): a shared (M, N) source reduced along 1 into a
// shared (M,) destination becomes
//   T.copy(src, src_frag)                  # (M, N) fragment
//   T.copy(dst, dst_frag)                  # only with clear=False
//   T.reduce(src_frag, dst_frag, dim=1)    # (M,) fragment, every holder of a row gets it
//   T.copy(dst_frag, dst)
// The copies are T.Parallel nests like the author's, so insert_barriers fences the
// shared reads and writes, and layout inference lays the staged fragments out (an
// output fragment held otherwise than its rows is reached through an exchange).
//
// Layout: dst is src with `dim` removed; each dst element is then held by every thread
// that held part of its row (replication).
// Lowering, per thread: fold its own slots into one partial per dst slot; combine the
// partials of the threads sharing an element with xor-shuffles inside a warp, then
// through a shared-memory scratch across warps, so every copy ends with the full result.
#include <algorithm>

#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

struct Combiner {
  BinaryOp op;
  bool abs_first;
};

Combiner combiner_of(const std::string& kind, const SourceLoc& loc) {
  if (kind == "sum") return {BinaryOp::Add, false};
  if (kind == "abssum") return {BinaryOp::Add, true};
  if (kind == "max") return {BinaryOp::Max, false};
  if (kind == "absmax") return {BinaryOp::Max, true};
  if (kind == "min") return {BinaryOp::Min, false};
  if (kind == "bitand") return {BinaryOp::BitAnd, false};
  if (kind == "bitor") return {BinaryOp::BitOr, false};
  if (kind == "bitxor") return {BinaryOp::BitXor, false};
  user_error(loc) << "unknown reduction '" << kind
                  << "' (expected max, min, sum, abssum, absmax, bitand, bitor or bitxor)";
  return {};
}

Expr identity(const std::string& kind, DataType t) {
  if (kind == "bitand") return make_cast(t, make_int(-1));  // every bit set
  if (kind == "bitor" || kind == "bitxor") return make_cast(t, make_int(0));
  if (kind == "sum" || kind == "abssum") return make_cast(t, make_float(0.0, DataType::f32()));
  if (kind == "max" || kind == "absmax") {
    if (kind == "absmax") return make_cast(t, make_float(0.0, DataType::f32()));
    return t.is_float() ? make_call("ninfinity", {}, t) : make_call("min_value", {}, t);
  }
  return t.is_float() ? make_call("infinity", {}, t) : make_call("max_value", {}, t);
}

// A fragment of the region's extents (a 1-D source's one result: (1,)), or of the
// extents without `drop`.
Buffer staging_fragment(const BufferRegion& r, int drop, const std::string& name, transform::PassContext& ctx,
                        const SourceLoc& loc) {
  std::vector<Expr> shape;
  for (int d = 0; d < int(r.extents.size()); ++d) {
    const int64_t* e = as_const_int(r.extents[d]);
    user_assert(e && *e > 0, loc) << "T.reduce: the region of shared buffer '" << r.buffer->name
                                  << "' must have constant extents (dimension " << d << " is not)";
    if (d != drop) shape.push_back(r.extents[d]);
  }
  if (shape.empty()) shape.push_back(make_int(1));
  return make_buffer(ctx.fresh_name(name), Scope::Fragment, r.buffer->dtype, shape, loc);
}

BufferRegion whole(const Buffer& b) {
  std::vector<Expr> mins(b->shape.size(), make_int(0));
  return {b, mins, b->shape};
}

class Reduce : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, Kernel& k, transform::PassContext& ctx) const override {
    const SourceLoc& loc = op->loc;
    user_assert(op->regions.size() == 2, loc) << "T.reduce takes a source and a destination";
    BufferRegion src = op->regions[0], dst = op->regions[1];
    for (const BufferRegion* r : {&src, &dst}) {
      Scope sc = r->buffer->scope;
      user_assert(sc == Scope::Fragment || sc == Scope::Shared, loc)
          << "T.reduce works on fragments and shared memory ('" << src.buffer->name << "' is "
          << scope_name(src.buffer->scope) << ", '" << dst.buffer->name << "' is " << scope_name(dst.buffer->scope)
          << ")";
    }
    bool src_shared = src.buffer->scope == Scope::Shared, dst_shared = dst.buffer->scope == Scope::Shared;
    if (!src_shared && !dst_shared) return {};
    int dim = int(op->attr_int("dim", 0));
    user_assert(dim >= 0 && dim < int(src.extents.size()), loc)
        << "T.reduce: dim " << dim << " of the " << src.extents.size() << "-d '" << src.buffer->name << "'";
    std::vector<Stmt> out;
    BufferRegion red_src = src, red_dst = dst;
    if (src_shared) {
      Buffer f = staging_fragment(src, -1, src.buffer->name + "_frag", ctx, loc);
      k.allocs.push_back(f);
      red_src = whole(f);
      out.push_back(make_tile_op("copy", {src, red_src}, {}, {}, loc));
    }
    if (dst_shared) {
      Buffer f = staging_fragment(red_src, dim, dst.buffer->name + "_frag", ctx, loc);
      std::vector<int> unused;
      std::vector<int64_t> want = squeeze(f->shape, &unused), got = squeeze(dst.extents, &unused);
      user_assert(want == got, loc) << "T.reduce: the region of '" << dst.buffer->name << "' spans "
                                    << shape_str(got) << ", but '" << src.buffer->name << "' without dimension "
                                    << dim << " spans " << shape_str(want);
      k.allocs.push_back(f);
      red_dst = whole(f);
      if (op->attr_int("clear", 1) == 0) out.push_back(make_tile_op("copy", {dst, red_dst}, {}, {}, loc));
    }
    std::map<std::string, TileAttr> attrs = op->attrs;
    if (src_shared) attrs["staged"] = int64_t(1);  // lay_out_staged_source
    out.push_back(make_tile_op(op->op, {red_src, red_dst}, op->args, attrs, loc));
    if (dst_shared) out.push_back(make_tile_op("copy", {red_dst, dst}, {}, {}, loc));
    return make_seq(out, loc);
  }

  bool infer_layout(const TileOpNode* op, InferLevel level, transform::PassContext& ctx,
                    const Kernel& k) const override {
    if (level == InferLevel::Free) return lay_out_staged_source(op, ctx, k);
    if (level != InferLevel::Common) return false;
    transform::LayoutMap& layouts = ctx.layouts;
    const Buffer& src = op->regions.at(0).buffer;
    const Buffer& dst = op->regions.at(1).buffer;
    auto s = layouts.fragment.find(src.get());
    if (s == layouts.fragment.end() || layouts.fragment.count(dst.get())) return false;
    int dim = int(op->attr_int("dim", 0));
    std::vector<int> keep;
    for (int d = 0; d < int(src->shape.size()); ++d) {
      if (d != dim) keep.push_back(d);
    }
    auto derived = layout::make_projected(s->second, keep, op->loc);
    user_assert(derived->num_elements() == dst->num_elements_const(), op->loc)
        << "T.reduce: '" << dst->name << "' must hold " << derived->num_elements() << " elements (the shape of '"
        << src->name << "' without dimension " << dim << ")";
    layouts.fragment[dst.get()] = derived;
    layouts.decided_at[dst.get()] = op->loc;
    return true;
  }

  // A source the op staged (expand) and reduces along another dimension than its last:
  // its rows along `dim` go to power-of-two groups of consecutive threads (row_blocked with
  // `dim` moved last), so each result is a butterfly over a group's low bits and its copies
  // are such a group, which a store to shared memory needs. Chosen freely, a row_blocked
  // tile of three dimensions reduced along the first spreads a result's copies otherwise.
  static bool lay_out_staged_source(const TileOpNode* op, transform::PassContext& ctx, const Kernel& k) {
    const Buffer& src = op->regions.at(0).buffer;
    int dim = int(op->attr_int("dim", 0)), rank = int(src->shape.size());
    if (!op->attr_int("staged", 0) || dim == rank - 1 || ctx.layouts.fragment.count(src.get())) return false;
    std::vector<int64_t> shape = const_shape(src, op->loc, "T.reduce");
    std::vector<int> order;
    std::vector<int64_t> base_shape;
    for (int d = 0; d < rank; ++d) {
      if (d != dim) order.push_back(d), base_shape.push_back(shape[size_t(d)]);
    }
    order.push_back(dim);
    base_shape.push_back(shape[size_t(dim)]);
    int vec = layout::choose_row_vector(base_shape.back(), src->dtype.bytes());
    ctx.layouts.fragment[src.get()] = layout::make_permuted(layout::make_row_blocked(base_shape, k.threads, vec), order);
    ctx.layouts.decided_at[src.get()] = op->loc;
    return true;
  }

  Stmt lower(const TileOpNode* op, transform::PassContext& ctx, const Kernel& k) const override {
    const SourceLoc& loc = op->loc;
    const Buffer& src = op->regions.at(0).buffer;
    const Buffer& dst = op->regions.at(1).buffer;
    user_assert(src->scope == Scope::Fragment && dst->scope == Scope::Fragment, loc)
        << "T.reduce works on fragments ('" << src->name << "' is " << scope_name(src->scope) << ", '" << dst->name
        << "' is " << scope_name(dst->scope) << ")";
    std::string kind = op->attr_str("kind", "sum");
    Combiner comb = combiner_of(kind, loc);
    bool bitwise = comb.op == BinaryOp::BitAnd || comb.op == BinaryOp::BitOr || comb.op == BinaryOp::BitXor;
    auto integral = [](DataType t) { return t.is_int() || t.is_bool(); };
    user_assert(!bitwise || (integral(src->dtype) && integral(dst->dtype)), loc)
        << "T.reduce_" << kind << " takes integer or bool buffers ('" << src->name << "' is " << src->dtype.name() << ", '"
        << dst->name << "' is " << dst->dtype.name() << ")";
    bool clear = op->attr_int("clear", 1) != 0;
    int dim = int(op->attr_int("dim", 0));
    auto ls = ctx.layouts.fragment.at(src.get());
    auto ld = ctx.layouts.fragment.at(dst.get());
    Buffer sreg = ctx.registers.at(src.get()), dreg = ctx.registers.at(dst.get());
    DataType acc_t = dst->dtype;

    // Which dst slot each src slot folds into, identical for every thread.
    std::vector<int> to_dst(ls->slots(), -1);
    std::vector<int64_t> c(src->shape.size()), dc;
    int group_mask = 0;
    std::vector<int> first_holder(ld->num_elements(), -1);
    for (int t = 0; t < ls->threads(); ++t) {
      for (int s = 0; s < ls->slots(); ++s) {
        if (!ls->coords(t, s, c.data())) continue;
        dc.clear();
        for (int d = 0; d < int(c.size()); ++d) {
          if (d != dim) dc.push_back(c[d]);
        }
        if (dc.empty()) dc.push_back(0);
        int64_t flat = ld->flatten(dc.data());
        int p = ld->slot_of(t, flat);
        user_assert(p >= 0 && (to_dst[s] == -1 || to_dst[s] == p), loc)
            << "T.reduce: the layout of '" << dst->name << "' (" << ld->describe()
            << ") does not match the rows of '" << src->name << "' (" << ls->describe() << ")";
        to_dst[s] = p;
        if (first_holder[flat] < 0) first_holder[flat] = t;
        group_mask |= t ^ first_holder[flat];
      }
    }
    // A source element several threads hold (a replicated source: the result of an earlier
    // reduction, a broadcast) must enter a sum or an xor once, not once per copy: only the
    // copy whose thread has the replica bits clear folds it in (max, min, and, or are
    // idempotent and fold every copy). The copies must be a power-of-two group of threads
    // differing only in those bits, or the op is refused.
    int replica_mask = 0;
    bool idempotent = comb.op == BinaryOp::Max || comb.op == BinaryOp::Min || comb.op == BinaryOp::BitAnd ||
                      comb.op == BinaryOp::BitOr;
    if (!idempotent) {
      std::vector<int> src_first(size_t(ls->num_elements()), -1);
      std::vector<std::vector<int>> holders(size_t(ls->num_elements()));
      for (int t = 0; t < ls->threads(); ++t) {
        for (int s = 0; s < ls->slots(); ++s) {
          if (!ls->coords(t, s, c.data())) continue;
          int64_t flat = ls->flatten(c.data());
          if (src_first[size_t(flat)] < 0) src_first[size_t(flat)] = t;
          if (holders[size_t(flat)].empty() || holders[size_t(flat)].back() != t) holders[size_t(flat)].push_back(t);
          replica_mask |= t ^ src_first[size_t(flat)];
        }
      }
      if (replica_mask) {
        for (size_t e = 0; e < holders.size(); ++e) {
          bool group = !holders[e].empty() && (holders[e][0] & replica_mask) == 0 &&
                       int64_t(holders[e].size()) == (int64_t(1) << __builtin_popcount(unsigned(replica_mask)));
          for (int t : holders[e]) group = group && (t & ~replica_mask) == (holders[e][0] & ~replica_mask);
          user_assert(group, loc) << "T.reduce_" << kind << " over '" << src->name << "' (layout " << ls->describe()
                                  << "): its elements are held by several threads each, and not as a power-of-two "
                                     "group the reduction can count once; copy it to a fragment of its own layout "
                                     "first";
        }
      }
    }
    user_assert(ld->xor_groups_consistent(group_mask, false), loc)
        << "T.reduce over dimension " << dim << " of '" << src->name << "' (layout " << ls->describe()
        << ") is not supported: the threads sharing one result are not a power-of-two group of threads; "
           "reduce over the last dimension, or lay the reduced dimension out last";
    int lane_mask = group_mask & 31, warp_mask = group_mask >> 5;

    Buffer part = make_buffer(ctx.fresh_name(dst->name + "_part"), Scope::Local, acc_t,
                              {make_int(ld->slots())}, loc);
    ctx.extra_locals.push_back(part);
    std::vector<Stmt> body;
    for (int p = 0; p < ld->slots(); ++p) body.push_back(make_store(part, {make_int(p)}, identity(kind, acc_t), loc));
    // nan_propagate=0 (TileLang's nan_propagate=False): max and min of floats drop a NaN.
    bool drop_nan = op->attr_int("nan_propagate", 1) == 0 && acc_t.is_float() && comb.op != BinaryOp::Add;
    auto combine = [&](Expr a, Expr b) {
      if (drop_nan) return make_call(comb.op == BinaryOp::Max ? "max_num" : "min_num", {a, b}, acc_t, loc);
      return make_binary(comb.op, a, b, loc);
    };
    for (int s = 0; s < ls->slots(); ++s) {
      if (to_dst[s] < 0) continue;
      Expr v = make_cast(acc_t, make_load(sreg, {make_int(s)}, loc));
      if (comb.abs_first) v = make_call("abs", {v}, acc_t, loc);
      Expr cur = make_load(part, {make_int(to_dst[s])}, loc);
      Stmt st = make_store(part, {make_int(to_dst[s])}, combine(cur, v), loc);
      if (ls->slots() * ls->threads() > ls->num_elements()) {
        // Slots some threads leave empty contribute nothing.
        Expr valid;
        ls->coords_expr(k.thread_var, s, &valid);
        if (valid) st = make_if(valid, st, {}, loc);
      }
      if (replica_mask) {
        Expr owner = make_binary(BinaryOp::EQ, make_binary(BinaryOp::BitAnd, k.thread_var, make_int(replica_mask), loc),
                                 make_int(0), loc);
        st = make_if(owner, st, {}, loc);
      }
      body.push_back(st);
    }
    for (int p = 0; p < ld->slots(); ++p) {
      for (int bit = 1; bit < 32; bit <<= 1) {
        if (!(lane_mask & bit)) continue;
        Expr cur = make_load(part, {make_int(p)}, loc);
        Expr other = make_call("shfl_xor", {cur, make_int(bit)}, acc_t, loc);
        body.push_back(make_store(part, {make_int(p)}, combine(cur, other), loc));
      }
    }
    if (warp_mask) {
      // Across warps through shared memory. After the shuffles every thread of a lane
      // group holds its group's value, so when the lane bits are one run (a quad: bits
      // 0-1) one thread per group writes, at its index with those bits squeezed out.
      int T = k.threads;
      int run_lo = 0, run_len = 0;
      if (lane_mask) {
        while (!((lane_mask >> run_lo) & 1)) ++run_lo;
        while ((lane_mask >> (run_lo + run_len)) & 1) ++run_len;
      }
      bool squeeze = lane_mask && lane_mask == (((1 << run_len) - 1) << run_lo);
      auto slot_index = [&](const Expr& t) -> Expr {
        if (!squeeze) return t;
        Expr high_part = make_binary(BinaryOp::Shr, t, make_int(run_lo + run_len), loc);
        Expr out = make_binary(BinaryOp::Shl, high_part, make_int(run_lo), loc);
        if (run_lo) out = make_binary(BinaryOp::BitOr, out, make_binary(BinaryOp::BitAnd, t, make_int((1 << run_lo) - 1), loc), loc);
        return out;
      };
      int per_slot = squeeze ? T >> run_len : T;
      Buffer scratch = make_buffer(ctx.fresh_name("red_buf"), Scope::Shared, acc_t,
                                   {make_int(int64_t(ld->slots()) * per_slot)}, loc);
      ctx.extra_shared.push_back(scratch);
      std::vector<Stmt> writes;
      for (int p = 0; p < ld->slots(); ++p) {
        writes.push_back(make_store(scratch, {slot_index(k.thread_var) + int64_t(p) * per_slot},
                                    make_load(part, {make_int(p)}, loc), loc));
      }
      Stmt write = make_seq(writes, loc);
      if (squeeze) {
        Expr first = make_binary(BinaryOp::EQ, make_binary(BinaryOp::BitAnd, k.thread_var, make_int(lane_mask), loc),
                                 make_int(0), loc);
        write = make_if(first, write, {}, loc);
      }
      body.push_back(write);
      body.push_back(make_sync(loc));
      int high = warp_mask << 5;
      Expr base = make_binary(BinaryOp::BitAnd, k.thread_var, make_int(~high), loc);
      for (int p = 0; p < ld->slots(); ++p) {
        Expr acc;
        // Every subset of the warp bits names one warp of the group.
        for (int sub = high;; sub = (sub - 1) & high) {
          Expr t = make_binary(BinaryOp::BitOr, base, make_int(sub), loc);
          Expr v;
          if (!(T & (T - 1))) {
            v = make_load(scratch, {slot_index(t) + int64_t(p) * per_slot}, loc);
          } else {
            // A block of a thread count that is not a power of two: the group's bits can
            // name warps past the last one, which hold nothing (their slot would be past
            // the scratch); they add the identity.
            Expr in = make_binary(BinaryOp::LT, t, make_int(T), loc);
            Expr safe = make_binary(BinaryOp::Min, t, make_int(T - 1), loc);
            v = make_select(in, make_load(scratch, {slot_index(safe) + int64_t(p) * per_slot}, loc),
                            identity(kind, acc_t), loc);
          }
          acc = acc ? combine(acc, v) : v;
          if (sub == 0) break;
        }
        body.push_back(make_store(part, {make_int(p)}, acc, loc));
      }
    }
    for (int p = 0; p < ld->slots(); ++p) {
      Expr r = make_load(part, {make_int(p)}, loc);
      if (!clear) r = combine(make_cast(acc_t, make_load(dreg, {make_int(p)}, loc)), r);
      body.push_back(make_store(dreg, {make_int(p)}, r, loc));
    }
    return make_seq(body, loc);
  }
};

}  // namespace

const TileOp* reduce_op() {
  static Reduce op;
  return &op;
}

}  // namespace tegula::ops
