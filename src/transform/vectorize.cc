// Vector accesses for one group of consecutive slots of a partitioned loop.
//
// A blocked layout gives each thread `vec` consecutive elements of the last loop
// dimension in consecutive slots. When the body is one store whose global/shared
// accesses move along that dimension one element per slot, and their addresses are
// aligned, the group becomes:
//   tmp_k[p:p+w_k] = src_k[base_k+p : +w_k]      loads of the widest vector src_k's alignment allows
//   out[v] = f(tmp_k[v], ...)                    scalar math, v = 0..vec-1
//   dst[base+p : +w] = out[p:p+w]                stores of the widest vector dst's alignment allows
// so a 16-byte global load can feed 4-byte stores into a padded shared tile.
// A relaxed T.atomic_add into global memory groups the same way, its stores being
// atomic_add(dst[base+p : +w], out[p:p+w]): w = 4 for float, 2 for half and bfloat16
// (red.global.add.v4.f32 and friends; each lane's add is atomic on its own, as the
// elementwise op promises), the value not reading dst.
// Masks are per vector: each buffer's last dimension is a multiple of its width, so a
// vector is wholly inside or wholly outside the tensor. Global loads inside an access's
// indices (a gather C[Pos[s], i], a scatter) are masked one by one before the access's
// own test, which reads them.
#include <numeric>

#include "ir/functor.h"
#include "ir/hash.h"
#include "transform/partition.h"

namespace tegula::transform {

using namespace ir;

bool is_memory(const Buffer& b) { return b->scope == Scope::Global || b->scope == Scope::Shared; }

bool vectorizable(const Kernel& k, const Buffer& b) {
  if (k.global_layouts.count(b.get())) return false;
  if (b->scope == Scope::Global && b->dtype.is_packed()) return false;
  if (b->strides.empty()) return true;
  const int64_t* last = as_const_int(b->strides.back());
  return last && *last == 1;
}

Expr flat_offset(const Buffer& b, const std::vector<Expr>& idx) {
  Expr flat;
  for (size_t d = 0; d < idx.size(); ++d) {
    if (!b->strides.empty()) {  // T.StridedTensor: a dynamic stride has no known divisor
      Expr term = make_binary(BinaryOp::Mul, idx[d], b->strides[d]);
      flat = flat ? flat + term : term;
    } else {
      flat = flat ? make_binary(BinaryOp::Mul, flat, b->shape[d]) + idx[d] : idx[d];
    }
  }
  return flat;
}

namespace {

class MemoryLoads : public IRVisitor {
 public:
  std::vector<const BufferLoadNode*> loads;
  void visit_BufferLoad(const BufferLoadNode* op) override {
    if (is_memory(op->buffer)) loads.push_back(op);
    IRVisitor::visit_BufferLoad(op);
  }
};

// Replaces the k-th memory load (pre-order, as MemoryLoads counts) by replacement[k] when set.
class ReplaceLoads : public IRMutator {
 public:
  explicit ReplaceLoads(const std::vector<Expr>& r) : r_(r) {}
  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    if (!is_memory(op->buffer)) return IRMutator::mutate_BufferLoad(self, op);
    size_t k = next_++;
    if (k < r_.size() && r_[k]) return r_[k];
    return IRMutator::mutate_BufferLoad(self, op);
  }

 private:
  const std::vector<Expr>& r_;
  size_t next_ = 0;
};

// 1 when idx(v) - idx(0) is (0, ..., 0, v) for every v; 0 when it is all zeros; -1 otherwise.
int classify(const Analyzer& an, const std::vector<std::vector<Expr>>& idx) {
  bool contiguous = true, uniform = true;
  size_t last = idx[0].size() - 1;
  for (size_t v = 1; v < idx.size(); ++v) {
    for (size_t d = 0; d <= last; ++d) {
      Expr diff = an.simplify(make_binary(BinaryOp::Sub, idx[v][d], idx[0][d]));
      const int64_t* c = as_const_int(diff);
      if (!c) return -1;
      if (*c != 0) uniform = false;
      if (*c != (d == last ? int64_t(v) : 0)) contiguous = false;
    }
  }
  return contiguous ? 1 : uniform ? 0 : -1;
}

// Widest w (a power of two, at most `limit`) for which accesses at idx are aligned.
int aligned_width(const Analyzer& an, const Buffer& b, const std::vector<Expr>& idx, int limit, int dyn_align) {
  int w = std::min(limit, std::max(1, 16 / b->dtype.bytes()));
  Expr flat = flat_offset(b, idx);
  int64_t last_div = 1;
  const int64_t* last = as_const_int(b->shape.back());
  last_div = last ? *last : dyn_align;
  int64_t div = an.known_divisor(an.simplify(flat));
  if (div == 0) div = int64_t(1) << 30;
  while (w > 1 && (div % w != 0 || last_div % w != 0)) w /= 2;
  return w;
}

}  // namespace

Stmt vectorize_group(const NestInfo& n, int g, int vec, Kernel& k, PassContext& ctx, const Analyzer& an) {
  std::vector<const BufferStoreNode*> stores;
  std::vector<Stmt> bodies;
  // A store under branches whose conditions are the same in every slot of the group (they
  // do not read the vectorised dimension: `if row < n: out[row, j] = ...`) runs as one
  // vector store under those branches.
  std::vector<Expr> conds;
  // A relaxed atomic add (T.atomic_add's element form, no memory order) into global memory
  // is read as the store dst[i] = value: the group adds with the packed atomics
  // (atomic_add_x2 / _x4, ops of each lane atomic on its own).
  bool atomic = false;
  for (int v = 0; v < vec; ++v) {
    Stmt b = slot_body(n, g + v, k, ctx, an, false);
    std::vector<Expr> cv;
    while (auto* br = b.as<IfThenElseNode>()) {
      if (br->else_case) return {};
      cv.push_back(br->cond);
      b = br->then_case;
    }
    if (v == 0) conds = cv;
    if (cv.size() != conds.size()) return {};
    for (size_t c = 0; c < cv.size(); ++c) {
      if (!structural_equal(cv[c], conds[c])) return {};
    }
    auto* ev = b.as<EvaluateNode>();
    auto* call = ev ? ev->value.as<CallNode>() : nullptr;
    auto* addr = call && call->op == "atomic_add" && call->args.size() == 2 ? call->args[0].as<BufferLoadNode>() : nullptr;
    if (v > 0 && atomic != bool(addr)) return {};
    if (addr) {
      if (addr->buffer->scope != Scope::Global || addr->dtype.lanes != 1) return {};
      atomic = true;
      b = make_store(addr->buffer, addr->indices, call->args[1], ev->loc);
    }
    bodies.push_back(b);
    auto* st = bodies.back().as<BufferStoreNode>();
    if (!st) return {};
    stores.push_back(st);
  }
  // (A condition reading the stored buffer would see the lanes' stores one by one.)
  for (const Expr& c : conds) {
    bool reads_dst = false;
    post_order(make_evaluate(c), [](const Stmt&) {}, [&](const Expr& e) {
      auto* ld = e.as<BufferLoadNode>();
      reads_dst |= ld && ld->buffer == stores[0]->buffer;
    });
    if (reads_dst) return {};
  }
  bool masked = !ctx.options.disable_safe_memory;
  auto guarded = [&](Stmt body) {
    for (size_t c = conds.size(); c-- > 0;) {
      body = make_if(masked ? an.simplify(mask_loads(an, n.facts, conds[c])) : conds[c], body, {}, n.loc);
    }
    return body;
  };
  const Buffer& dst = stores[0]->buffer;
  std::vector<MemoryLoads> loads(vec);
  for (int v = 0; v < vec; ++v) loads[v].visit(stores[v]->value);
  size_t nloads = loads[0].loads.size();
  for (int v = 1; v < vec; ++v) {
    if (loads[v].loads.size() != nloads) return {};
  }

  // Each contiguous access gets the widest vector its own alignment allows.
  bool any_vector = false;
  std::vector<int> load_kind(nloads), load_width(nloads, 1);
  for (size_t j = 0; j < nloads; ++j) {
    std::vector<std::vector<Expr>> idx;
    for (int v = 0; v < vec; ++v) idx.push_back(loads[v].loads[j]->indices);
    // A global tensor with a T.Layout: its neighbours in the index are not in memory.
    load_kind[j] = vectorizable(k, loads[0].loads[j]->buffer) ? classify(an, idx) : -1;
    if (load_kind[j] == 1) {
      load_width[j] = aligned_width(an, loads[0].loads[j]->buffer, idx[0], vec, ctx.options.dynamic_alignment);
      any_vector |= load_width[j] > 1;
    }
  }
  bool dst_memory = is_memory(dst);
  int store_width = 1;
  if (atomic) {
    // The value must not read what the group adds to; the packed adds exist for float (4
    // lanes) and the 16-bit floats (2), any other type adds lane by lane.
    for (size_t j = 0; j < nloads; ++j) {
      if (loads[0].loads[j]->buffer == dst) return {};
    }
  }
  if (dst_memory) {
    if (!vectorizable(k, dst)) return {};
    std::vector<std::vector<Expr>> idx;
    for (int v = 0; v < vec; ++v) idx.push_back(stores[v]->indices);
    if (classify(an, idx) != 1) return {};
    int limit = vec;
    if (atomic) {
      DataType t = dst->dtype.element();
      limit = t == DataType::f32() ? std::min(vec, 4) : (t.is_float() && t.bits == 16) ? std::min(vec, 2) : 1;
    }
    store_width = aligned_width(an, dst, idx[0], limit, ctx.options.dynamic_alignment);
    any_vector |= store_width > 1;
  } else {
    for (int v = 0; v < vec; ++v) {
      const int64_t* s0 = as_const_int(stores[0]->indices[0]);
      const int64_t* sv = as_const_int(stores[v]->indices[0]);
      if (!s0 || !sv || *sv != *s0 + v) return {};
    }
  }
  if (!any_vector) return {};

  bool mask = !ctx.options.disable_safe_memory;
  auto indices = [&](const std::vector<Expr>& idx) { return mask ? mask_index_loads(an, n.facts, idx) : idx; };
  std::vector<Stmt> out;
  // Inside T.Pipelined, a plain 16-byte global->shared copy becomes cp.async, which the
  // pipeline_loops pass then overlaps with the loop's compute.
  // (Loads in the source's indices, a paged cache's block table, are the thread's own.)
  if (n.async && dst->scope == Scope::Shared && nloads >= 1 && load_kind[0] == 1 &&
      loads[0].loads[0]->buffer->scope == Scope::Global && loads[0].loads[0]->buffer->dtype == dst->dtype &&
      stores[0]->value.get() == static_cast<const ExprNode*>(loads[0].loads[0]) &&
      load_width[0] * dst->dtype.bytes() == 16 && store_width * dst->dtype.bytes() == 16) {
    for (int p = 0; p < vec; p += store_width) {
      const BufferLoadNode* ld = loads[p].loads[0];
      std::vector<Expr> idx = indices(ld->indices);
      Expr src = make_load(ld->buffer, idx, ld->loc);
      Expr cond = mask ? in_bounds(an, ld->buffer, idx) : Expr();
      Expr at = make_load(dst, indices(stores[p]->indices), stores[p]->loc);
      out.push_back(make_evaluate(make_call("cp_async", {at, src, cond ? cond : make_bool(true)}, DataType::i32(),
                                            stores[p]->loc), stores[p]->loc));
    }
    Expr valid;
    n.layout->coords_expr(k.thread_var, g, &valid);
    Stmt body = guarded(make_seq(out, n.loc));
    return valid ? make_if(an.simplify(valid), body, {}, n.loc) : body;
  }
  std::vector<std::vector<Expr>> replacement(vec, std::vector<Expr>(nloads));
  for (size_t j = 0; j < nloads; ++j) {
    if (load_kind[j] != 1) continue;
    const Buffer& src = loads[0].loads[j]->buffer;
    Buffer tmp = make_buffer(ctx.fresh_name("vld"), Scope::Local, src->dtype, {make_int(vec)}, n.loc);
    ctx.extra_locals.push_back(tmp);
    int w = load_width[j];
    for (int p = 0; p < vec; p += w) {
      const BufferLoadNode* ld = loads[p].loads[j];
      std::vector<Expr> idx = indices(ld->indices);
      Stmt load = make_store(tmp, {make_int(p)}, make_load(src, idx, ld->loc, w), ld->loc);
      Expr cond = mask && src->scope == Scope::Global ? in_bounds(an, src, idx) : Expr();
      if (cond) {
        std::vector<Stmt> zeros;
        for (int v = p; v < p + w; ++v) zeros.push_back(make_store(tmp, {make_int(v)}, make_int(0), ld->loc));
        load = make_if(cond, load, make_seq(zeros), ld->loc);
      }
      out.push_back(load);
    }
    for (int v = 0; v < vec; ++v) replacement[v][j] = make_load(tmp, {make_int(v)}, loads[v].loads[j]->loc);
  }
  Buffer out_tmp;
  if (dst_memory) {
    out_tmp = make_buffer(ctx.fresh_name("vst"), Scope::Local, dst->dtype, {make_int(vec)}, n.loc);
    ctx.extra_locals.push_back(out_tmp);
  }
  for (int v = 0; v < vec; ++v) {
    const BufferStoreNode* st = stores[v];
    Expr value = ReplaceLoads(replacement[v]).mutate(st->value);
    // Remaining (scattered or repeated) loads are masked one by one.
    if (mask) value = an.simplify(mask_loads(an, n.facts, value));
    out.push_back(dst_memory ? make_store(out_tmp, {make_int(v)}, value, st->loc)
                             : make_store(st->buffer, st->indices, value, st->loc));
  }
  if (dst_memory) {
    for (int p = 0; p < vec; p += store_width) {
      const BufferStoreNode* st = stores[p];
      std::vector<Expr> idx = indices(st->indices);
      Expr value = make_load(out_tmp, {make_int(p)}, st->loc, store_width);
      Stmt store = atomic ? make_evaluate(make_call("atomic_add", {make_load(dst, idx, st->loc, store_width), value},
                                                    value.dtype(), st->loc), st->loc)
                          : make_store(dst, idx, value, st->loc);
      Expr cond = mask && dst->scope == Scope::Global ? in_bounds(an, dst, idx) : Expr();
      out.push_back(cond ? make_if(cond, store, {}, st->loc) : store);
    }
  }
  Expr valid;
  n.layout->coords_expr(k.thread_var, g, &valid);
  Stmt body = guarded(make_seq(out, n.loc));
  return valid ? make_if(an.simplify(valid), body, {}, n.loc) : body;
}

}  // namespace tegula::transform
