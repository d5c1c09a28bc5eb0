// Pass: flatten_stage_buffers.
//
// Expects: the frontend's IR (tile ops not yet expanded).
// Guarantees: a shared buffer of rank > 2 that a T.gemm reads (A or B) is a 2-D buffer of
// its rows stacked, so that the gemm's operand is a row range of a matrix, as the
// layouts (swizzle, panels) and the instructions take it:
//
//   KV_shared (2, 64, 576)                  ->  KV_shared (128, 576)
//   T.gemm(Q, KV_shared[s, :, :256], C)     ->  T.gemm(Q, KV_shared[s * 64 : s * 64 + 64, :256], C)
//   KV_shared[s, r, c] = v                  ->  KV_shared[s * 64 + r, c] = v
//
// Every region of such a buffer must take one index in each leading dimension (or be the
// whole buffer); a buffer with views keeps its shape.
#include <map>

#include "ir/analyzer.h"
#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {

using namespace ir;

// The row of the stacked matrix that indices idx[0..n-2] name.
Expr stacked_row(const Buffer& b, const std::vector<Expr>& idx) {
  Expr row = idx[0];
  for (size_t d = 1; d + 1 < b->shape.size(); ++d) row = row * b->shape[d] + idx[d];
  return Analyzer().simplify(row);
}

bool takes_one_index(const Buffer& b, const BufferRegion& r) {
  for (size_t d = 0; d + 2 < b->shape.size(); ++d) {
    if (!is_const_int(r.extents[d], 1)) return false;
  }
  return true;
}

bool is_whole_region(const Buffer& b, const BufferRegion& r) {
  for (size_t d = 0; d < b->shape.size(); ++d) {
    if (!is_const_int(r.mins[d], 0) || !is_const_int(r.extents[d], *as_const_int(b->shape[d]))) return false;
  }
  return true;
}

class Flatten : public IRMutator {
 public:
  explicit Flatten(std::map<const BufferNode*, Buffer> to) : to_(std::move(to)) {}

  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    auto it = to_.find(op->buffer.get());
    if (it == to_.end()) return IRMutator::mutate_BufferLoad(self, op);
    std::vector<Expr> idx = each(op->indices);
    return make_load(it->second, {stacked_row(op->buffer, idx), idx.back()}, op->loc, op->dtype.lanes);
  }
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
    auto it = to_.find(op->buffer.get());
    if (it == to_.end()) return IRMutator::mutate_BufferStore(self, op);
    std::vector<Expr> idx = each(op->indices);
    return make_store(it->second, {stacked_row(op->buffer, idx), idx.back()}, mutate(op->value), op->loc);
  }
  Stmt mutate_TileOp(const Stmt& self, const TileOpNode* op) override {
    std::vector<BufferRegion> regions = op->regions;
    bool changed = false;
    for (BufferRegion& r : regions) {
      auto it = to_.find(r.buffer.get());
      if (it == to_.end()) continue;
      const Buffer& b = r.buffer;
      size_t n = b->shape.size();
      std::vector<Expr> mins = each(r.mins);
      if (is_whole_region(b, r) && !takes_one_index(b, r)) {
        r = BufferRegion{it->second, {make_int(0), make_int(0)}, it->second->shape};
      } else {
        r = BufferRegion{it->second, {stacked_row(b, mins), mins[n - 1]}, {r.extents[n - 2], r.extents[n - 1]}};
      }
      changed = true;
    }
    std::vector<Expr> args = each(op->args);
    (void)changed;
    return make_tile_op(op->op, regions, args, op->attrs, op->loc);
  }

 private:
  std::vector<Expr> each(const std::vector<Expr>& v) {
    std::vector<Expr> out;
    for (const Expr& e : v) out.push_back(mutate(e));
    return out;
  }
  std::map<const BufferNode*, Buffer> to_;
};

}  // namespace

void flatten_stage_buffers(Kernel& k, PassContext&) {
  std::map<const BufferNode*, bool> candidate;  // buffer -> every region takes one index
  post_order(k.body, [&](const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    if (!op || op->op != "gemm") return;
    for (int i = 0; i < 2 && i < int(op->regions.size()); ++i) {
      const Buffer& b = op->regions[i].buffer;
      if (b->scope == Scope::Shared && b->shape.size() > 2 && !b->view_of && b->num_elements_const() > 0) {
        candidate[b.get()] = true;
      }
    }
  }, nullptr);
  if (candidate.empty()) return;
  for (const Buffer& v : k.views) candidate.erase(v->view_of.get());
  post_order(k.body, [&](const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    if (!op) return;
    for (const BufferRegion& r : op->regions) {
      auto it = candidate.find(r.buffer.get());
      if (it != candidate.end() && !takes_one_index(r.buffer, r) && !is_whole_region(r.buffer, r)) it->second = false;
    }
  }, nullptr);
  std::map<const BufferNode*, Buffer> to;
  for (Buffer& b : k.allocs) {
    auto it = candidate.find(b.get());
    if (it == candidate.end() || !it->second) continue;
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < b->shape.size(); ++d) rows *= *as_const_int(b->shape[d]);
    Buffer flat = make_buffer(b->name, b->scope, b->dtype, {make_int(rows), b->shape.back()}, b->loc);
    to[b.get()] = flat;
    b = flat;
  }
  if (!to.empty()) k.body = Flatten(std::move(to)).mutate(k.body);
}

}  // namespace tegula::transform
