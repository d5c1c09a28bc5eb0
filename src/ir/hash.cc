#include "ir/hash.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>

namespace tegula::ir {
namespace {

// Writes a tree as a canonical stream of 64-bit tokens: equal trees give equal streams,
// so equality compares streams and the hash folds one. Every variable-length part is
// preceded by its length, so a stream decodes one way only and two different trees can
// never write the same stream.
//
// Example: `for i in serial(0, n): A[i] = 0` (n free) writes, in order, the For kind, the
// min and extent (n as "free var, int32, name 'n'"), the loop kind and stages, a binding of
// var #0, then the store whose index is "bound var #0" — the name `i` is never written.
class CanonicalWriter {
 public:
  std::vector<uint64_t> tokens;

  void expr(const Expr& e) {
    if (!e) return emit(kNull);
    emit(static_cast<uint64_t>(e.kind()));
    dtype(e.dtype());
    switch (e.kind()) {
#define EXPR(Name) \
  case NodeKind::Name: return write_##Name(static_cast<const Name##Node*>(e.get()));
#include "ir/node_kinds.def"
      default: return;
    }
  }

  void stmt(const Stmt& s) {
    if (!s) return emit(kNull);
    emit(static_cast<uint64_t>(s.kind()));
    switch (s.kind()) {
#define STMT(Name) \
  case NodeKind::Name: return write_##Name(static_cast<const Name##Node*>(s.get()));
#include "ir/node_kinds.def"
      default: return;
    }
  }

  void kernel(const Kernel& k) {
    str(k.name);
    // Every kernel-bound var first: buffer shapes and the grid may use them.
    emit(k.params.size());
    for (const Param& p : k.params) {
      emit(p.buffer ? 1 : 0);
      if (!p.buffer) bind(p.var);
    }
    exprs_bound(k.dynamic_vars);
    exprs_bound(k.block_vars);
    bind(k.thread_var);
    for (const Param& p : k.params) {
      if (p.buffer) buffer(p.buffer);
    }
    exprs(k.grid);
    emit(static_cast<uint64_t>(k.threads));
    emit(k.cluster_dims.size());
    for (int64_t d : k.cluster_dims) emit(static_cast<uint64_t>(d));
    emit(k.allocs.size());
    for (const Buffer& b : k.allocs) buffer(b);
    emit(k.views.size());
    for (const Buffer& b : k.views) buffer(b);
    emit(k.smem_offset.size());
    emit(static_cast<uint64_t>(k.smem_bytes));
    for (const Buffer& b : k.allocs) {
      auto it = k.smem_offset.find(b.get());
      emit(it == k.smem_offset.end() ? ~uint64_t{0} : static_cast<uint64_t>(it->second));
    }
    emit(static_cast<uint64_t>(k.panel_size));
    emit(static_cast<uint64_t>(k.min_blocks_per_sm));
    emit(k.swizzle_row_major ? 1 : 0);
    stmt(k.body);
  }

 private:
  // Markers; node kinds are below 256, so no marker is mistaken for a kind.
  enum : uint64_t { kNull = 0x1000, kBind, kBoundVar, kFreeVar, kNewBuffer, kBufferRef };

  void emit(uint64_t t) { tokens.push_back(t); }
  void dtype(DataType t) { emit(uint64_t{t.code} | uint64_t(t.bits) << 8 | uint64_t(uint32_t(t.lanes)) << 32); }
  void str(const std::string& s) {
    emit(s.size());
    for (size_t i = 0; i < s.size(); i += 8) {
      uint64_t w = 0;
      std::memcpy(&w, s.data() + i, std::min<size_t>(8, s.size() - i));
      emit(w);
    }
  }
  void exprs(const std::vector<Expr>& es) {
    emit(es.size());
    for (const Expr& e : es) expr(e);
  }
  void exprs_bound(const std::vector<Expr>& vars) {
    emit(vars.size());
    for (const Expr& v : vars) bind(v);
  }

  // Gives `var` the next binding number; returns what it shadowed, for unbind().
  std::optional<uint64_t> bind(const Expr& var) {
    if (!var) {
      emit(kNull);
      return std::nullopt;
    }
    emit(kBind);
    dtype(var.dtype());
    auto it = bound_.find(var.get());
    std::optional<uint64_t> shadowed;
    if (it != bound_.end()) shadowed = it->second;
    bound_[var.get()] = next_var_++;
    return shadowed;
  }
  void unbind(const Expr& var, std::optional<uint64_t> shadowed) {
    if (!var) return;
    if (shadowed) {
      bound_[var.get()] = *shadowed;
    } else {
      bound_.erase(var.get());
    }
  }

  void buffer(const Buffer& b) {
    if (!b) return emit(kNull);
    auto it = buffers_.find(b.get());
    if (it != buffers_.end()) return emit(kBufferRef), emit(it->second);
    uint64_t id = buffers_.size();
    buffers_.emplace(b.get(), id);
    emit(kNewBuffer);
    str(b->name);
    emit(static_cast<uint64_t>(b->scope));
    dtype(b->dtype);
    exprs(b->shape);
    emit(b->strides.size());
    exprs(b->strides);
    buffer(b->view_of);
    if (b->address) expr(b->address);
    else emit(kNull);
  }

  void write_IntImm(const IntImmNode* op) { emit(static_cast<uint64_t>(op->value)); }
  // Bit patterns, so -0.0 and 0.0 differ (they print differently) and a NaN equals itself.
  void float_bits(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    emit(bits);
  }
  void write_FloatImm(const FloatImmNode* op) { float_bits(op->value); }
  void write_Var(const VarNode* op) {
    auto it = bound_.find(op);
    if (it != bound_.end()) return emit(kBoundVar), emit(it->second);
    emit(kFreeVar);
    str(op->name);
  }
  void write_Binary(const BinaryNode* op) { emit(static_cast<uint64_t>(op->op)), expr(op->a), expr(op->b); }
  void write_Not(const NotNode* op) { expr(op->a); }
  void write_Select(const SelectNode* op) { expr(op->cond), expr(op->t), expr(op->f); }
  void write_Cast(const CastNode* op) { expr(op->value); }
  void write_Call(const CallNode* op) { str(op->op), exprs(op->args); }
  void write_BufferLoad(const BufferLoadNode* op) { buffer(op->buffer), exprs(op->indices); }

  void write_Evaluate(const EvaluateNode* op) { expr(op->value); }
  void write_BufferStore(const BufferStoreNode* op) { buffer(op->buffer), exprs(op->indices), expr(op->value); }
  void write_For(const ForNode* op) {
    expr(op->min), expr(op->extent);
    emit(static_cast<uint64_t>(op->for_kind)), emit(static_cast<uint64_t>(op->num_stages));
    auto shadowed = bind(op->var);
    stmt(op->body);
    unbind(op->var, shadowed);
  }
  void write_IfThenElse(const IfThenElseNode* op) { expr(op->cond), stmt(op->then_case), stmt(op->else_case); }
  void write_Seq(const SeqNode* op) {
    emit(op->seq.size());
    for (const Stmt& s : op->seq) stmt(s);
  }
  void write_LetStmt(const LetStmtNode* op) {
    expr(op->value);
    auto shadowed = bind(op->var);
    stmt(op->body);
    unbind(op->var, shadowed);
  }
  void write_TileOp(const TileOpNode* op) {
    str(op->op);
    emit(op->regions.size());
    for (const BufferRegion& r : op->regions) buffer(r.buffer), exprs(r.mins), exprs(r.extents);
    exprs(op->args);
    emit(op->attrs.size());
    for (const auto& [key, value] : op->attrs) {
      str(key);
      emit(value.index());
      if (auto* i = std::get_if<int64_t>(&value)) emit(static_cast<uint64_t>(*i));
      if (auto* d = std::get_if<double>(&value)) float_bits(*d);
      if (auto* s = std::get_if<std::string>(&value)) str(*s);
    }
  }
  void write_Sync(const SyncNode* op) { emit(uint64_t(op->barrier)), emit(uint64_t(op->threads)); }
  void write_While(const WhileNode* op) { expr(op->cond), stmt(op->body); }
  void write_LoopJump(const LoopJumpNode* op) { emit(uint64_t(op->is_continue)); }

  std::unordered_map<const ExprNode*, uint64_t> bound_;
  std::unordered_map<const BufferNode*, uint64_t> buffers_;
  uint64_t next_var_ = 0;
};

// splitmix64's finaliser: every input bit flips about half of the output bits.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fold(const std::vector<uint64_t>& tokens) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ tokens.size();
  for (uint64_t t : tokens) h = mix(h + 0x9e3779b97f4a7c15ULL + t);
  return h;
}

template <typename T>
std::vector<uint64_t> canonical(const T& node, void (CanonicalWriter::*write)(const T&)) {
  CanonicalWriter w;
  (w.*write)(node);
  return std::move(w.tokens);
}

}  // namespace

uint64_t structural_hash(const Expr& e) { return fold(canonical(e, &CanonicalWriter::expr)); }
uint64_t structural_hash(const Stmt& s) { return fold(canonical(s, &CanonicalWriter::stmt)); }
uint64_t structural_hash(const Kernel& k) { return fold(canonical(k, &CanonicalWriter::kernel)); }

bool structural_equal(const Expr& a, const Expr& b) {
  return canonical(a, &CanonicalWriter::expr) == canonical(b, &CanonicalWriter::expr);
}
bool structural_equal(const Stmt& a, const Stmt& b) {
  return canonical(a, &CanonicalWriter::stmt) == canonical(b, &CanonicalWriter::stmt);
}
bool structural_equal(const Kernel& a, const Kernel& b) {
  return canonical(a, &CanonicalWriter::kernel) == canonical(b, &CanonicalWriter::kernel);
}

}  // namespace tegula::ir
