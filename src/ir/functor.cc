#include "ir/functor.h"

#include <functional>
#include <unordered_map>

namespace tegula::ir {

void IRVisitor::visit(const Expr& e) {
  if (!e) return;
  switch (e.kind()) {
#define EXPR(Name) \
  case NodeKind::Name: visit_##Name(static_cast<const Name##Node*>(e.get())); break;
#include "ir/node_kinds.def"
    default: internal_error << "not an expression";
  }
}

void IRVisitor::visit(const Stmt& s) {
  if (!s) return;
  switch (s.kind()) {
#define STMT(Name) \
  case NodeKind::Name: visit_##Name(static_cast<const Name##Node*>(s.get())); break;
#include "ir/node_kinds.def"
    default: internal_error << "not a statement";
  }
}

void IRVisitor::visit_region(const BufferRegion& r) {
  for (auto& e : r.mins) visit(e);
  for (auto& e : r.extents) visit(e);
}

void IRVisitor::visit_IntImm(const IntImmNode*) {}
void IRVisitor::visit_FloatImm(const FloatImmNode*) {}
void IRVisitor::visit_Var(const VarNode*) {}
void IRVisitor::visit_Binary(const BinaryNode* op) { visit(op->a), visit(op->b); }
void IRVisitor::visit_Not(const NotNode* op) { visit(op->a); }
void IRVisitor::visit_Select(const SelectNode* op) { visit(op->cond), visit(op->t), visit(op->f); }
void IRVisitor::visit_Cast(const CastNode* op) { visit(op->value); }
void IRVisitor::visit_Call(const CallNode* op) { for (auto& a : op->args) visit(a); }
void IRVisitor::visit_BufferLoad(const BufferLoadNode* op) { for (auto& i : op->indices) visit(i); }
void IRVisitor::visit_Evaluate(const EvaluateNode* op) { visit(op->value); }
void IRVisitor::visit_BufferStore(const BufferStoreNode* op) {
  for (auto& i : op->indices) visit(i);
  visit(op->value);
}
void IRVisitor::visit_For(const ForNode* op) { visit(op->min), visit(op->extent), visit(op->body); }
void IRVisitor::visit_IfThenElse(const IfThenElseNode* op) {
  visit(op->cond), visit(op->then_case), visit(op->else_case);
}
void IRVisitor::visit_Seq(const SeqNode* op) { for (auto& s : op->seq) visit(s); }
void IRVisitor::visit_LetStmt(const LetStmtNode* op) { visit(op->value), visit(op->body); }
void IRVisitor::visit_TileOp(const TileOpNode* op) {
  for (auto& r : op->regions) visit_region(r);
  for (auto& a : op->args) visit(a);
}
void IRVisitor::visit_Sync(const SyncNode*) {}
void IRVisitor::visit_While(const WhileNode* op) { visit(op->cond), visit(op->body); }
void IRVisitor::visit_LoopJump(const LoopJumpNode*) {}

// ---------------------------------------------------------------- mutator

Expr IRMutator::mutate(const Expr& e) {
  if (!e) return e;
  switch (e.kind()) {
#define EXPR(Name) \
  case NodeKind::Name: return mutate_##Name(e, static_cast<const Name##Node*>(e.get()));
#include "ir/node_kinds.def"
    default: internal_error << "not an expression";
  }
  return e;
}

Stmt IRMutator::mutate(const Stmt& s) {
  if (!s) return s;
  switch (s.kind()) {
#define STMT(Name) \
  case NodeKind::Name: return mutate_##Name(s, static_cast<const Name##Node*>(s.get()));
#include "ir/node_kinds.def"
    default: internal_error << "not a statement";
  }
  return s;
}

std::vector<Expr> IRMutator::mutate_all(const std::vector<Expr>& v, bool* changed) {
  std::vector<Expr> out;
  out.reserve(v.size());
  for (auto& e : v) {
    out.push_back(mutate(e));
    if (!out.back().same_as(e)) *changed = true;
  }
  return out;
}

BufferRegion IRMutator::mutate_region(const BufferRegion& r) {
  bool changed = false;
  return BufferRegion{r.buffer, mutate_all(r.mins, &changed), mutate_all(r.extents, &changed)};
}

Expr IRMutator::mutate_IntImm(const Expr& self, const IntImmNode*) { return self; }
Expr IRMutator::mutate_FloatImm(const Expr& self, const FloatImmNode*) { return self; }
Expr IRMutator::mutate_Var(const Expr& self, const VarNode*) { return self; }
Expr IRMutator::mutate_Binary(const Expr& self, const BinaryNode* op) {
  Expr a = mutate(op->a), b = mutate(op->b);
  if (a.same_as(op->a) && b.same_as(op->b)) return self;
  return make_binary(op->op, a, b, op->loc);
}
Expr IRMutator::mutate_Not(const Expr& self, const NotNode* op) {
  Expr a = mutate(op->a);
  return a.same_as(op->a) ? self : make_not(a, op->loc);
}
Expr IRMutator::mutate_Select(const Expr& self, const SelectNode* op) {
  Expr c = mutate(op->cond), t = mutate(op->t), f = mutate(op->f);
  if (c.same_as(op->cond) && t.same_as(op->t) && f.same_as(op->f)) return self;
  return make_select(c, t, f, op->loc);
}
Expr IRMutator::mutate_Cast(const Expr& self, const CastNode* op) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : make_cast(op->dtype, v, op->loc);
}
Expr IRMutator::mutate_Call(const Expr& self, const CallNode* op) {
  bool changed = false;
  auto args = mutate_all(op->args, &changed);
  return changed ? make_call(op->op, args, op->dtype, op->loc) : self;
}
Expr IRMutator::mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) {
  bool changed = false;
  auto idx = mutate_all(op->indices, &changed);
  return changed ? make_load(op->buffer, idx, op->loc, op->dtype.lanes) : self;
}

Stmt IRMutator::mutate_Evaluate(const Stmt& self, const EvaluateNode* op) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : make_evaluate(v, op->loc);
}
Stmt IRMutator::mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) {
  bool changed = false;
  auto idx = mutate_all(op->indices, &changed);
  Expr v = mutate(op->value);
  if (!changed && v.same_as(op->value)) return self;
  return make_store(op->buffer, idx, v, op->loc);
}
Stmt IRMutator::mutate_For(const Stmt& self, const ForNode* op) {
  Expr mn = mutate(op->min), ext = mutate(op->extent);
  Stmt body = mutate(op->body);
  if (mn.same_as(op->min) && ext.same_as(op->extent) && body.same_as(op->body)) return self;
  return make_for(op->var, mn, ext, op->for_kind, body, op->num_stages, op->loc);
}
Stmt IRMutator::mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) {
  Expr c = mutate(op->cond);
  Stmt t = mutate(op->then_case), e = mutate(op->else_case);
  if (c.same_as(op->cond) && t.same_as(op->then_case) && e.same_as(op->else_case)) return self;
  return make_if(c, t, e, op->loc);
}
Stmt IRMutator::mutate_While(const Stmt& self, const WhileNode* op) {
  Expr c = mutate(op->cond);
  Stmt b = mutate(op->body);
  if (c.same_as(op->cond) && b.same_as(op->body)) return self;
  return make_while(c, b, op->loc);
}
Stmt IRMutator::mutate_Seq(const Stmt& self, const SeqNode* op) {
  std::vector<Stmt> out;
  bool changed = false;
  for (auto& s : op->seq) {
    out.push_back(mutate(s));
    if (!out.back().same_as(s)) changed = true;
  }
  return changed ? make_seq(out, op->loc) : self;
}
Stmt IRMutator::mutate_LetStmt(const Stmt& self, const LetStmtNode* op) {
  Expr v = mutate(op->value);
  Stmt b = mutate(op->body);
  if (v.same_as(op->value) && b.same_as(op->body)) return self;
  return make_let(op->var, v, b, op->loc);
}
Stmt IRMutator::mutate_TileOp(const Stmt& self, const TileOpNode* op) {
  std::vector<BufferRegion> regions;
  for (auto& r : op->regions) regions.push_back(mutate_region(r));
  bool changed = false;
  for (size_t i = 0; i < regions.size(); ++i) {
    for (size_t d = 0; d < regions[i].mins.size(); ++d) {
      changed |= !regions[i].mins[d].same_as(op->regions[i].mins[d]) ||
                 !regions[i].extents[d].same_as(op->regions[i].extents[d]);
    }
  }
  auto args = mutate_all(op->args, &changed);
  return changed ? make_tile_op(op->op, regions, args, op->attrs, op->loc) : self;
}
Stmt IRMutator::mutate_Sync(const Stmt& self, const SyncNode*) { return self; }
Stmt IRMutator::mutate_LoopJump(const Stmt& self, const LoopJumpNode*) { return self; }

namespace {
class Substituter : public IRMutator {
 public:
  explicit Substituter(const std::vector<std::pair<Expr, Expr>>& map) {
    for (auto& [k, v] : map) map_[k.get()] = v;
  }
  Expr mutate_Var(const Expr& self, const VarNode* op) override {
    auto it = map_.find(op);
    return it == map_.end() ? self : it->second;
  }

 private:
  std::unordered_map<const ExprNode*, Expr> map_;
};

class PostOrder : public IRVisitor {
 public:
  PostOrder(const std::function<void(const Stmt&)>& s, const std::function<void(const Expr&)>& e) : s_(s), e_(e) {}
  void visit(const Expr& e) override {
    IRVisitor::visit(e);
    if (e && e_) e_(e);
  }
  void visit(const Stmt& s) override {
    IRVisitor::visit(s);
    if (s && s_) s_(s);
  }

 private:
  const std::function<void(const Stmt&)>& s_;
  const std::function<void(const Expr&)>& e_;
};
}  // namespace

Expr substitute(const Expr& e, const std::vector<std::pair<Expr, Expr>>& map) { return Substituter(map).mutate(e); }
Stmt substitute(const Stmt& s, const std::vector<std::pair<Expr, Expr>>& map) { return Substituter(map).mutate(s); }

void post_order(const Stmt& s, const std::function<void(const Stmt&)>& on_stmt,
                const std::function<void(const Expr&)>& on_expr) {
  PostOrder p(on_stmt, on_expr);
  p.visit(s);
}

}  // namespace tegula::ir
