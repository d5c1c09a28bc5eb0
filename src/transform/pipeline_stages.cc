// The stage marks and the shifted consumer (pipeline_stages.h).
//
// At time t the statements of stage r run for iteration t - r, in order of place:
// FlashAttention-3's Q Kᵀ of iteration t, then the rescale and P V of t - 1, then the
// softmax of t. A statement waits for its tiles of its own iteration, and releases them,
// with that iteration's stage and parity:
//   if (n >= D) {
//     t = 0 .. D-1:   the statements with r <= t                        (prologue)
//     for t in D..n-1: every statement
//     t = n .. n+D-1: the statements with r > t - n                     (epilogue)
//   } else { the loop one iteration at a time }      (only when D > 1: n < 1 runs nothing)
// Each time step's gemm waits then sink past the work that does not need them
// (sink_gemm_waits), which is where the overlap comes from. The schedule keeps the loop's
// meaning (pipeline_schedule.py checks it), so every form computes the same.
#include "transform/pipeline_stages.h"

#include <algorithm>
#include <tuple>

#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

bool is_stage_mark(const Stmt& s, StageMark* mark) {
  auto* ev = s.as<EvaluateNode>();
  auto* c = ev ? ev->value.as<CallNode>() : nullptr;
  if (!c || c->op != "pipeline_stage") return false;
  internal_assert(c->args.size() == 2 && as_const_int(c->args[0]) && as_const_int(c->args[1]))
      << "pipeline_stage(stage, order) takes two constants";
  *mark = {*as_const_int(c->args[0]), *as_const_int(c->args[1])};
  return true;
}

}  // namespace

Stmt take_stage_marks(const Stmt& body, std::vector<StageMark>* marks) {
  auto* seq = body.as<SeqNode>();
  if (!seq) return body;
  std::vector<Stmt> kept;
  std::vector<StageMark> of;
  StageMark current;
  bool any = false;
  for (const Stmt& s : seq->seq) {
    StageMark m;
    if (is_stage_mark(s, &m)) {
      current = m, any = true;
      continue;
    }
    kept.push_back(s);
    of.push_back(is_tma_copy(s) || !any ? StageMark{} : current);
  }
  if (!any) return body;
  *marks = std::move(of);
  return make_seq(kept, body->loc);
}

Stmt shifted_consumer(const ShiftedLoop& loop, const Kernel& k, const HoldRegisters& hold) {
  const ForNode* op = loop.loop;
  const auto& marks = loop.marks;
  const size_t n_stmt = loop.compute.size();
  int64_t D = 0;
  for (auto& m : marks) D = std::max(D, m.stage);
  // Iteration-time order of the statements: (stage, place, position in the body).
  auto before = [&](size_t a, size_t b) {
    return std::make_tuple(marks[a].stage, marks[a].order, a) < std::make_tuple(marks[b].stage, marks[b].order, b);
  };
  // Each group's tiles are waited for before the first statement (in that order) reading
  // them, and released after the last.
  const int64_t G = int64_t(loop.reads.size());
  std::vector<size_t> first_of(G), last_of(G);
  for (int64_t g = 0; g < G; ++g) {
    bool found = false;
    for (size_t j = 0; j < n_stmt; ++j) {
      if (!loop.reads[g][j]) continue;
      if (!found || before(j, first_of[g])) first_of[g] = j;
      if (!found || before(last_of[g], j)) last_of[g] = j;
      found = true;
    }
    internal_assert(found) << "every group of copies has a reader";
  }
  // Statement j for iteration `iter` (counted from 0): waits, the statement, releases.
  auto emit = [&](size_t j, Expr iter, std::vector<Stmt>& out) {
    for (int64_t g = 0; g < G; ++g) {
      if (first_of[g] == j) out.push_back(loop.wait(g, iter));
    }
    out.push_back(loop.at(j, iter));
    for (int64_t g = 0; g < G; ++g) {
      if (last_of[g] == j) out.push_back(loop.release(g, iter));
    }
  };
  // One time step: the statements whose stage r satisfies `runs`, in order of place.
  std::vector<size_t> by_place(n_stmt);
  for (size_t j = 0; j < n_stmt; ++j) by_place[j] = j;
  std::stable_sort(by_place.begin(), by_place.end(), [&](size_t a, size_t b) { return marks[a].order < marks[b].order; });
  auto step = [&](Expr t, const std::function<bool(int64_t)>& runs) {
    std::vector<Stmt> out;
    for (size_t j : by_place) {
      if (runs(marks[j].stage)) emit(j, t + (-marks[j].stage), out);
    }
    sink_gemm_waits(out, k.thread_var, hold);
    return out;
  };
  Expr n = op->extent;
  std::vector<Stmt> all;
  for (int64_t t = 0; t < D; ++t) {
    auto part = step(make_int(t), [&](int64_t r) { return r <= t; });
    all.insert(all.end(), part.begin(), part.end());
  }
  Expr tv = make_var(op->var.as<VarNode>()->name + "_t", op->var.dtype(), op->loc);
  all.push_back(make_for(tv, make_int(D), n + (-D), ForKind::Serial, make_seq(step(tv, [](int64_t) { return true; })),
                         0, op->loc));
  for (int64_t e = 0; e < D; ++e) {
    auto part = step(n + e, [&](int64_t r) { return r > e; });
    all.insert(all.end(), part.begin(), part.end());
  }
  Stmt shifted = place_barriers(all, k);
  Stmt plain;
  if (D > 1) {
    std::vector<size_t> in_order(n_stmt);
    for (size_t j = 0; j < n_stmt; ++j) in_order[j] = j;
    std::stable_sort(in_order.begin(), in_order.end(), before);
    Expr it = make_var(op->var.as<VarNode>()->name + "_i", op->var.dtype(), op->loc);
    std::vector<Stmt> body;
    for (size_t j : in_order) emit(j, it, body);
    sink_gemm_waits(body, k.thread_var, hold);
    plain = place_barriers_in_loop(make_for(it, make_int(0), n, ForKind::Serial, make_seq(body), 0, op->loc), k);
  }
  Stmt region = make_if(make_binary(BinaryOp::GE, n, make_int(D)), shifted, plain, op->loc);
  // Closed to insert_barriers, as pipeline_loops' other forms are.
  return make_if(make_bool(true), region, {}, op->loc);
}

}  // namespace tegula::transform
