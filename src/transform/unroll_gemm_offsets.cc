// Pass: unroll_gemm_offsets.
//
// Expects: the frontend's IR. Guarantees: a T.unroll loop of constant bounds whose body
// holds a gemm reading an operand region that starts at the loop's variable
//   for j in T.unroll(4):
//       T.gemm(Q_shared[:, j * 64:(j + 1) * 64], K_shared[:, j * 64:(j + 1) * 64], S, ...)
// is unrolled here, j a constant in each copy: where a shared operand starts in its buffer
// is a constant of the device code (ops/gemm.cc). T.unroll asks for the copies anyway; the
// lets and loops inside each copy get variables of their own.
#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

// Loops unrolled here at most; a longer one keeps its loop (and gets the region error).
constexpr int64_t kMaxCopies = 64;

bool gemm_region_reads(const Stmt& body, const Expr& var) {
  bool found = false;
  post_order(body, [&](const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    if (!op || op->op != "gemm") return;
    for (const BufferRegion& r : op->regions) {
      for (const Expr& m : r.mins) found |= reads_var(m, var);
    }
  }, [](const Expr&) {});
  return found;
}

bool has_jump(const Stmt& body) {
  bool found = false;
  post_order(body, [&](const Stmt& s) { found |= bool(s.as<LoopJumpNode>()); }, [](const Expr&) {});
  return found;
}

// One copy of a loop body: the loop variable a constant, every variable the body binds
// (lets, loops) a fresh one.
class Copy : public IRMutator {
 public:
  Copy(const Expr& var, Expr value) { map_[var.get()] = std::move(value); }
  Expr mutate_Var(const Expr& self, const VarNode*) override {
    auto it = map_.find(self.get());
    return it == map_.end() ? self : it->second;
  }
  Stmt mutate_LetStmt(const Stmt&, const LetStmtNode* op) override {
    Expr value = mutate(op->value);
    Expr var = fresh(op->var);
    return make_let(var, value, mutate(op->body), op->loc);
  }
  Stmt mutate_For(const Stmt&, const ForNode* op) override {
    Expr mn = mutate(op->min), ext = mutate(op->extent);
    Expr var = fresh(op->var);
    return make_for(var, mn, ext, op->for_kind, mutate(op->body), op->num_stages, op->loc);
  }

 private:
  Expr fresh(const Expr& var) {
    Expr v = make_var(var.as<VarNode>()->name, var.dtype(), var->loc);
    map_[var.get()] = v;
    return v;
  }
  std::map<const ExprNode*, Expr> map_;
};

class Unroller : public IRMutator {
 public:
  explicit Unroller(const Kernel& k) : k_(k) {}
  Stmt mutate_For(const Stmt& self, const ForNode* op0) override {
    Stmt s = IRMutator::mutate_For(self, op0);
    auto* op = s.as<ForNode>();
    const int64_t* lo = as_const_int(op->min);
    const int64_t* n = as_const_int(op->extent);
    if (op->for_kind != ForKind::Unrolled || !lo || !n || *n > kMaxCopies || !gemm_region_reads(op->body, op->var) ||
        has_jump(op->body)) {
      return s;
    }
    std::vector<Stmt> copies;
    for (int64_t i = 0; i < *n; ++i) {
      copies.push_back(Copy(op->var, make_int(*lo + i, op->var.dtype())).mutate(op->body));
    }
    return kernel_analyzer(k_).simplify(make_seq(copies, op->loc));
  }

 private:
  const Kernel& k_;
};

}  // namespace

void unroll_gemm_offsets(Kernel& k, PassContext&) { k.body = Unroller(k).mutate(k.body); }

}  // namespace tegula::transform
