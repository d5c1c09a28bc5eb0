// Asynchronous gemm units and the sinking of their waits (gemm_waits.h), for
// pipeline_loops.cc.
#include "transform/gemm_waits.h"

#include "ir/functor.h"
#include "ir/thread_guard.h"

namespace tegula::transform {

using namespace ir;

// A unit that starts with the issue of an asynchronous gemm (a wgmma_ss / wgmma_rs call,
// its wait later in the unit): that issue, and the unit without it.
bool split_async_issue(const Stmt& unit, Stmt* issue, Stmt* rest) {
  auto* br = unit.as<IfThenElseNode>();
  if (br && br->else_case) return false;
  auto* seq = (br ? br->then_case : unit).as<SeqNode>();
  if (!seq || seq->seq.size() < 2) return false;
  auto* ev = seq->seq[0].as<EvaluateNode>();
  auto* c = ev ? ev->value.as<CallNode>() : nullptr;
  if (!c || (c->op != "wgmma_ss" && c->op != "wgmma_rs")) return false;
  *issue = seq->seq[0];
  Stmt tail = make_seq(std::vector<Stmt>(seq->seq.begin() + 1, seq->seq.end()), unit->loc);
  *rest = br ? make_if(br->cond, tail, {}, unit->loc) : tail;
  return true;
}

// A unit that is only an asynchronous gemm's wait: that wait statement.
bool only_wait(const Stmt& unit, Stmt* wait) {
  const Stmt* s = &unit;
  if (auto* br = unit.as<IfThenElseNode>()) s = &br->then_case;
  if (auto* seq = s->as<SeqNode>()) {
    if (seq->seq.size() != 1) return false;
    s = &seq->seq[0];
  }
  auto* ev = s->as<EvaluateNode>();
  auto* c = ev ? ev->value.as<CallNode>() : nullptr;
  if (!c || c->op != "wgmma_wait") return false;
  *wait = *s;
  return true;
}

// The wait, letting `pending` of the latest groups still run.
Stmt with_pending(const Stmt& wait, int pending) {
  auto* c = wait.as<EvaluateNode>()->value.as<CallNode>();
  return make_evaluate(make_call(c->op, {c->args[0], make_int(pending)}, c->dtype, c->loc), wait->loc);
}

// ---- sinking a wgmma wait past work that does not need it ----
//
// In an iteration's compute (the warp-specialised consumer's, or the cp.async form's when
// it is not a lone gemm kept in flight) every T.gemm is issued and waited for at once
// (wgmma_ss; wgmma_wait(acc, 0)). Statements after it that neither touch acc nor shared
// memory (a previous gemm's promotion into a second accumulator, scale arithmetic) may run
// while the tensor cores work, so the wait moves down to just before the first statement
// that does need it, together with the "empty" arrivals that release the gemm's stages
// (the gemm reads them until its wait: they may come later, never earlier; every wait of
// the iteration depends only on arrivals of earlier iterations, so a later arrival within
// the iteration cannot deadlock). Passed over, conservatively:
//   - mbar_wait (a stage's "full" barrier: waits for loads only);
//   - the issue of another shared-operand gemm on another accumulator (a wait already sunk
//     below it): one more group then runs after ours, and the wait lets it (pending + 1;
//     groups retire in issue order, so our group has retired when at most `pending` of the
//     newest are left);
//   - plain register work: stores to fragments and locals only, pure calls only (math,
//     min / max, select), loads of anything but acc; no Evaluate, barrier, tile op, while
//     or jump.
// Anything else stops it. Waits are sunk from the last gemm up, so a gemm's wait meets the
// later gemm's issue alone. A gemm with A in registers moves too, its A held (below).
bool is_call_stmt(const Stmt& s, const char* op) {
  auto* ev = s.as<EvaluateNode>();
  auto* c = ev ? ev->value.as<CallNode>() : nullptr;
  return c && c->op == op;
}

namespace {

bool touches_buffer(const Stmt& s, const BufferNode* b) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) found |= st->buffer.get() == b;
  }, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) found |= ld->buffer.get() == b;
  });
  return found;
}

// shuffles: whether warp shuffles count (they exchange registers within the warp: no
// memory, no tensor core).
bool plain_register_work(const Stmt& s, bool shuffles) {
  bool plain = true;
  post_order(s, [&](const Stmt& x) {
    switch (x.kind()) {
      case NodeKind::BufferStore: {
        Scope sc = x.as<BufferStoreNode>()->buffer->scope;
        plain &= sc == Scope::Fragment || sc == Scope::Local;
        break;
      }
      case NodeKind::Seq:
      case NodeKind::IfThenElse:
      case NodeKind::LetStmt:
        break;
      case NodeKind::For:
        plain &= x.as<ForNode>()->for_kind != ForKind::Pipelined;
        break;
      default:
        plain = false;  // Evaluate, Sync, TileOp, While, LoopJump
    }
  }, [&](const Expr& e) {
    if (auto* c = e.as<CallNode>()) plain &= pure_call(c->op) || (shuffles && c->op.rfind("shfl_", 0) == 0);
  });
  return plain;
}

// A unit { wgmma_ss(...) or wgmma_rs(...); wgmma_wait(acc, p) } (in an `if True` or
// bare): its issue and wait.
bool gemm_unit(const Stmt& unit, Stmt* issue, Stmt* wait) {
  if (auto* br = unit.as<IfThenElseNode>()) {
    const int64_t* v = as_const_int(br->cond);
    if (!v || *v == 0) return false;
  }
  Stmt rest;
  if (!split_async_issue(unit, issue, &rest) || !only_wait(rest, wait)) return false;
  auto* w = wait->as<EvaluateNode>()->value.as<CallNode>();
  return w->args.size() == 2 && as_const_int(w->args[1]) && w->args[0].as<BufferLoadNode>();
}

bool is_issue(const Stmt& s) { return is_call_stmt(s, "wgmma_ss") || is_call_stmt(s, "wgmma_rs"); }

}  // namespace

// `issued_first`: body[0] may be the lone wait of a shared-operand gemm issued before the
// body (the cp.async form issues a leading gemm ahead of the next stage's copies).
//
// A gemm with A in registers (wgmma_rs) reads them until its wait, but the compiler sees
// them read at the issue and may give them to other values after it. When its wait moves,
// the issue packs A into registers of their own, a local buffer `hold` makes, and the wait
// pins those too: the issue gains the thread index and the buffer (arguments 11 and 12),
// the wait the buffer and A (wgmma_wait(acc, pending, held, A)). Its wait stops before
// anything that touches A, as before anything touching the accumulator. With `hold` the
// waits also pass warp shuffles and the issues of gemms with A in registers; without it
// (every loop but the stage-shifted consumer's) the rules are the ones above.
void sink_gemm_waits(std::vector<Stmt>& body, const Expr& thread_var, const HoldRegisters& hold,
                     bool issued_first) {
  for (size_t i = body.size(); i-- > 0;) {
    Stmt issue, wait;
    bool lone = false;
    if (!gemm_unit(body[i], &issue, &wait)) {
      if (i != 0 || !issued_first || !only_wait(body[i], &wait)) continue;
      lone = true;
    }
    auto* w = wait.as<EvaluateNode>()->value.as<CallNode>();
    if (lone && (w->args.size() != 2 || !as_const_int(w->args[1]) || !w->args[0].as<BufferLoadNode>())) continue;
    const BufferNode* acc = w->args[0].as<BufferLoadNode>()->buffer.get();
    auto* ic = lone ? nullptr : issue.as<EvaluateNode>()->value.as<CallNode>();
    const bool regs_a = ic && ic->op == "wgmma_rs";
    // (A warp group's own thread index, T.ws's, keeps its wait: wgmma_rs_held counts from
    // threadIdx.x.)
    if (regs_a && (!hold || (ic->args.size() > 11 && !ic->args[11].same_as(thread_var)))) continue;
    const BufferNode* a = regs_a ? ic->args[8].as<BufferLoadNode>()->buffer.get() : nullptr;
    int pending = int(*as_const_int(w->args[1]));
    size_t j = i + 1;
    while (j < body.size() && is_call_stmt(body[j], "mbar_arrive")) ++j;
    size_t stop = j;
    int passed_issues = 0;
    while (stop < body.size()) {
      const Stmt& x = body[stop];
      if (touches_buffer(x, acc) || (a && touches_buffer(x, a))) break;
      if (is_call_stmt(x, "wgmma_ss") || (hold && is_issue(x))) {
        ++passed_issues;
      } else if (!is_call_stmt(x, "mbar_wait") && !plain_register_work(x, bool(hold))) {
        break;
      }
      ++stop;
    }
    if (stop == j) continue;  // the next statement needs the result: nothing to overlap
    Stmt moved = with_pending(wait, pending + passed_issues);
    if (regs_a) {
      Expr id = make_load(hold(ic->args[8].as<BufferLoadNode>()->buffer), {make_int(0)}, ic->loc);
      std::vector<Expr> args = ic->args;
      if (args.size() == 11) args.push_back(thread_var);
      args.push_back(id);
      issue = make_evaluate(make_call(ic->op, args, ic->dtype, ic->loc), issue->loc);
      auto* mc = moved.as<EvaluateNode>()->value.as<CallNode>();
      moved = make_evaluate(make_call(mc->op, {mc->args[0], mc->args[1], id, ic->args[8]}, mc->dtype, mc->loc),
                            moved->loc);
    }
    std::vector<Stmt> out(body.begin(), body.begin() + i);
    if (!lone) out.push_back(issue);
    out.insert(out.end(), body.begin() + j, body.begin() + stop);
    out.push_back(moved);
    out.insert(out.end(), body.begin() + i + 1, body.begin() + j);  // the stage releases
    out.insert(out.end(), body.begin() + stop, body.end());
    body = std::move(out);
  }
}

}  // namespace tegula::transform
