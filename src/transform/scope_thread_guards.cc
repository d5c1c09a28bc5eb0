// Pass: scope_thread_guards.
//
// Expects: copies, fills and atomics expanded into T.Parallel nests (expand_tile_ops).
// Guarantees: tile code (a reduce or gemm, or a T.Parallel nest that is not one thread's
// own) under a branch on the thread index runs in a thread scope, TileLang's meaning:
//   if tx < 128:                  if tx < 128:
//       body              ->          tx_scope = thread_scope(tx, 0, 128)
//                                     body
// and the later passes partition body over the scope's 128 threads with tx_scope as
// their index (ScopedThreads), its barriers over those threads alone (insert_barriers).
// The branch must select one contiguous range of whole warps, known at compile time
// (ir/thread_guard.h); tile code under any other condition that may differ between the
// block's threads (a register's value, a range of threads in pieces) is an error at the
// branch's line, naming the condition. Nested guards narrow the enclosing scope. Inside a
// scope, a condition need only be the same in the scope's threads (a T.alloc_var a warp
// group sets for itself, ir/thread_guard.h's Uniformity::uniform_in).
#include "ir/functor.h"
#include "ir/printer.h"
#include "ir/thread_guard.h"
#include "transform/partition.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

// Code whose work is divided among the block's threads.
bool has_tile_code(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* op = x.as<TileOpNode>()) found |= op->op != "annotate_layout" && op->op != "use_swizzle";
    auto* f = x.as<ForNode>();
    if (f && f->for_kind == ForKind::Parallel && !thread_private_nest(x)) found = true;
  });
  return found;
}

class Scoper : public IRMutator {
 public:
  Scoper(const Kernel& k, PassContext& ctx)
      : k_(k), ctx_(ctx), uni_(k.thread_var, k.threads), range_{0, k.threads} {
    uni_.learn(k.body);
  }

  Stmt mutate_LetStmt(const Stmt& self, const LetStmtNode* op) override {
    uni_.bind(op->var, op->value);
    lets_.push_back({op->var, op->value});
    Stmt body = mutate(op->body);
    lets_.pop_back();
    return body.same_as(op->body) ? self : make_let(op->var, op->value, body, op->loc);
  }

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    bool divided = op->for_kind == ForKind::Parallel && !thread_private_nest(self);
    if (divided || !uni_.uniform(op->min) || !uni_.uniform(op->extent)) {
      uni_.mark_varying(op->var);
    }
    return IRMutator::mutate_For(self, op);
  }

  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    bool then_tile = has_tile_code(op->then_case), else_tile = op->else_case && has_tile_code(op->else_case);
    if (!then_tile && !else_tile) return self;
    GuardSplit g = split_guard(op->cond, k_.thread_var, range_, lets_);
    if (!g.reads_thread) {
      user_assert(uni_.uniform_in(op->cond, range_), op->loc)
          << "tile code under a condition that may differ between the block's threads (" << to_string(op->cond)
          << "): a tile operation is shared by the threads of a block, so they must all take the same branch, "
          << "or the branch must select a range of threads by the thread index";
      return IRMutator::mutate_IfThenElse(self, op);
    }
    user_assert(g.evaluable, op->loc)
        << "tile code under a branch on the thread index whose threads cannot be known at compile time ("
        << to_string(op->cond) << "): compare the thread index with constants only, e.g. `if tx < 128:`";
    user_assert(!g.uniform || uni_.uniform_in(g.uniform, range_), op->loc)
        << "tile code under a condition that may differ between the block's threads (" << to_string(g.uniform)
        << ")";
    user_assert(!else_tile || !g.uniform, op->loc)
        << "tile code in the else branch of a condition that mixes the thread index with other tests ("
        << to_string(op->cond) << "): the threads taking it are not one range; nest two branches instead";
    Stmt then_case = then_tile ? scoped(op->then_case, g, true, op) : mutate(op->then_case);
    Stmt else_case = else_tile ? scoped(op->else_case, g, false, op) : (op->else_case ? mutate(op->else_case) : Stmt());
    return make_if(op->cond, then_case, else_case, op->loc);
  }

 private:
  Stmt scoped(const Stmt& body, const GuardSplit& g, bool taken, const IfThenElseNode* op) {
    auto r = contiguous_range(g.takes, range_, taken);
    const char* which = taken ? "this branch" : "the else branch";
    user_assert(r.has_value(), op->loc)
        << "tile code under " << which << " of " << to_string(op->cond)
        << ": the threads taking it are not one contiguous range, so the tile code cannot be divided among them";
    user_assert(r->count() > 0, op->loc)
        << "tile code under " << which << " of " << to_string(op->cond) << ", which no thread of the block's "
        << range_.count() << " takes";
    user_assert(r->lo % 32 == 0 && r->count() % 32 == 0, op->loc)
        << "tile code under " << which << " of " << to_string(op->cond) << " runs on threads [" << r->lo << ", "
        << r->hi << "), which are not whole warps: a tile operation under a thread guard needs a range of whole "
        << "warps (multiples of 32)";
    ThreadRange saved = range_;
    range_ = *r;
    Stmt inner = mutate(body);
    range_ = saved;
    Expr var = make_var(ctx_.fresh_name(k_.thread_var.as<VarNode>()->name + "_scope"), DataType::i32(), op->loc);
    uni_.mark_varying(var);
    Expr value = make_call(kThreadScope, {k_.thread_var, make_int(r->lo), make_int(r->count())}, DataType::i32(),
                           op->loc);
    return make_let(var, value, inner, op->loc);
  }

  const Kernel& k_;
  PassContext& ctx_;
  Uniformity uni_;
  ThreadRange range_;
  std::vector<std::pair<Expr, Expr>> lets_;
};

}  // namespace

ScopedThreads::ScopedThreads(Kernel& k, const Expr& var, int64_t count) : k_(k), var_(k.thread_var), threads_(k.threads) {
  k.thread_var = var;
  k.threads = int(count);
}

ScopedThreads::~ScopedThreads() {
  k_.thread_var = var_;
  k_.threads = threads_;
}

void scope_thread_guards(Kernel& k, PassContext& ctx) {
  if (!k.thread_var) return;
  k.body = Scoper(k, ctx).mutate(k.body);
  bool scoped = false;
  post_order(k.body, [&](const Stmt& s) {
    auto* let = s.as<LetStmtNode>();
    scoped |= let && thread_scope_range(let->value).has_value();
  });
  // The warp-specialised form renumbers the block's threads around its producer; thread
  // scopes keep today's pipeline.
  if (scoped && ctx.warp_specialize) throw WarpSpecializationRefused{};
}

}  // namespace tegula::transform
