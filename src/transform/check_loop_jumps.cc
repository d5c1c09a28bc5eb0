// Pass: check_loop_jumps.
//
// Expects: the tile-level program (tile ops not yet expanded); break / continue only in
// serial loops (the frontend refuses the others).
// Guarantees: nothing changes. A break or continue that some threads of the block take
// and others do not (it sits under a condition that may differ between threads, inside
// the loop it leaves) is refused at its line when that loop holds code the block's
// threads run together: a barrier, a tile op or a T.Parallel nest (both divided among
// the threads, with barriers around them), or a store or atomic into shared memory
// (insert_barriers fences those with barriers). The threads that stayed would wait at such a barrier for
// the ones that left. A jump every thread takes alike (a condition on values the same in
// every thread) may leave any loop.
//
//   for r in T.serial(4):                 for j in T.serial(n):
//       if remaining[0] <= 0:   # ok          if x[tx, j] < 0:   # differs by thread
//           break                                 break           # ok: no barrier in the loop
//       T.sync_threads()                      acc[0] += x[tx, j]
#include <string>

#include "ir/functor.h"
#include "ir/printer.h"
#include "ir/thread_guard.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

// Whether e reads a shared buffer.
bool reads_shared(const Expr& e) {
  bool found = false;
  post_order(make_evaluate(e), nullptr, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>(); ld && ld->buffer->scope == Scope::Shared) found = true;
  });
  return found;
}

// The first statement in s that the block's threads run together, or that insert_barriers
// may fence with a barrier inside the loop (a store into shared memory, an atomic on it);
// null when none. Loads of shared memory alone need no barrier between them.
const StmtNode* first_collective(const Stmt& s) {
  const StmtNode* found = nullptr;
  post_order(s, [&](const Stmt& x) {
    if (found) return;
    auto* f = x.as<ForNode>();
    bool hit = x.as<SyncNode>() || (f && f->for_kind == ForKind::Parallel && !thread_private_nest(x));
    if (auto* op = x.as<TileOpNode>()) hit |= op->op != "annotate_layout" && op->op != "use_swizzle";
    if (auto* st = x.as<BufferStoreNode>()) hit |= st->buffer->scope == Scope::Shared;
    if (auto* ev = x.as<EvaluateNode>()) hit |= reads_shared(ev->value);
    if (hit) found = x.get();
  });
  return found;
}

class JumpChecker : public IRVisitor {
 public:
  explicit JumpChecker(const Kernel& k) : uni_(k.thread_var) { uni_.learn(k.body); }

  void visit_LetStmt(const LetStmtNode* op) override {
    uni_.bind(op->var, op->value);
    IRVisitor::visit_LetStmt(op);
  }

  void visit(const Stmt& s) override {
    auto* op = s.as<ForNode>();
    if (!op) return IRVisitor::visit(s);
    bool divided = op->for_kind == ForKind::Parallel && !thread_private_nest(s);
    if (divided || !uni_.uniform(op->min) || !uni_.uniform(op->extent)) uni_.mark_varying(op->var);
    Loop saved = loop_;
    loop_ = Loop{op, nullptr};
    IRVisitor::visit_For(op);
    loop_ = saved;
  }
  using IRVisitor::visit;

  void visit_IfThenElse(const IfThenElseNode* op) override {
    visit(op->cond);
    const IfThenElseNode* saved = loop_.varying_if;
    if (!saved && !uni_.uniform(op->cond)) loop_.varying_if = op;
    visit(op->then_case);
    if (op->else_case) visit(op->else_case);
    loop_.varying_if = saved;
  }

  void visit_LoopJump(const LoopJumpNode* op) override {
    const char* word = op->is_continue ? "continue" : "break";
    internal_assert(loop_.loop) << word << " outside a loop at " << op->loc.str();
    if (!loop_.varying_if) return;
    const StmtNode* c = first_collective(loop_.loop->body);
    if (!c) return;
    user_assert(false, op->loc) << word << " under a condition that may differ between the block's threads ("
                                << to_string(loop_.varying_if->cond) << ", line " << loop_.varying_if->loc.line
                                << ") in a loop that holds code the threads run together (line " << c->loc.line
                                << "): the threads that stay would wait at its barriers for the ones that left. "
                                << "Make the condition the same in every thread (compute it once, e.g. in shared "
                                << "memory behind a barrier), or keep barriers, tile ops, T.Parallel loops and "
                                << "shared memory out of the loop";
  }

 private:
  struct Loop {
    const ForNode* loop = nullptr;               // the innermost loop around the code visited
    const IfThenElseNode* varying_if = nullptr;  // the outermost varying branch inside it
  };
  Uniformity uni_;
  Loop loop_;
};

}  // namespace

void check_loop_jumps(Kernel& k, PassContext&) {
  bool any = false;
  post_order(k.body, [&](const Stmt& s) { any |= s.as<LoopJumpNode>() != nullptr; });
  if (any && k.thread_var) JumpChecker(k).visit(k.body);
}

}  // namespace tegula::transform
