// Pass: warp_specialize (sm_90a).
//
// Expects: pipeline_loops left, as a direct statement of the kernel body (under the lets
// plan_bulk_copies lifted to its top), or nested in one (ctx.ws_nested: a persistent
// kernel's loop over tiles), the
// warp-specialised loop `if (ws_producer()) { producer loop } else { consumer loop }`
// (ctx.warp_specialize); bulk copies ahead of it are tma_copy statements of the body.
// Guarantees: the kernel runs one more warpgroup. The body becomes
//   if (tx == 0) { init every mbarrier; fence }   sync_all()
//   if (ws_producer()) {                         threads [T, T + 128)
//     setmaxnreg_dec<P>()
//     if (ws_leader()) { the copies ahead of the loop, each completing on its own
//                        mbarrier; the producer loop (nested: the outer loops, lets
//                        and ifs down to it, nothing else) }
//   } else {                                     threads [0, T): the program as written
//     setmaxnreg_inc<C>()
//     the body, each copy ahead of the loop replaced by a wait for its mbarrier, the
//     loop by the consumer loop
//   }
// k.consumer_threads = T, k.threads = T + 128. Consumer code keeps every thread index it
// had; its barriers are printed as a named barrier of T threads (the producer never
// meets one). The register counts of setmaxnreg are the printer's
// (codegen::ws_registers): they depend on the blocks per SM the shared memory allows.
#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {

using namespace ir;

Stmt call(const std::string& op, std::vector<Expr> args = {}) {
  return make_evaluate(make_call(op, std::move(args), DataType::i32()));
}

bool is_unit(const Stmt& s) {
  auto* br = s.as<IfThenElseNode>();
  auto* c = br ? br->cond.as<CallNode>() : nullptr;
  return c && c->op == "ws_producer";
}

bool has_unit(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) { found |= is_unit(x); }, nullptr);
  return found;
}

// One warp group's copy of a statement holding the unit (a persistent kernel's loop over
// its tiles, with its lets and the if that skips a tile past the end): the producer keeps
// only the way down to its loop, the consumer every statement, the unit by its loop.
Stmt side(const Stmt& s, bool producer) {
  if (auto* br = s.as<IfThenElseNode>()) {
    if (is_unit(s)) return producer ? br->then_case : br->else_case;
    return make_if(br->cond, side(br->then_case, producer), producer ? Stmt() : br->else_case, s->loc);
  }
  if (auto* f = s.as<ForNode>()) return make_for(f->var, f->min, f->extent, f->for_kind, side(f->body, producer), f->num_stages, s->loc);
  if (auto* let = s.as<LetStmtNode>()) return make_let(let->var, let->value, side(let->body, producer), s->loc);
  auto* seq = s.as<SeqNode>();
  internal_assert(seq) << "warp_specialize: the way to the specialised loop is loops, lets, ifs and lists";
  std::vector<Stmt> out;
  for (const Stmt& x : seq->seq) {
    if (has_unit(x)) {
      out.push_back(side(x, producer));
    } else if (!producer) {
      out.push_back(x);
    }
  }
  return make_seq(out, s->loc);
}

}  // namespace

void warp_specialize(Kernel& k, PassContext& ctx) {
  if (!ctx.warp_specialize) return;
  // plan_bulk_copies lifted the block-invariant lets above the loop: both sides see them.
  std::vector<const LetStmtNode*> lets;
  Stmt inner = k.body;
  while (auto* let = inner.as<LetStmtNode>()) {
    lets.push_back(let);
    inner = let->body;
  }
  auto* seq = inner.as<SeqNode>();
  std::vector<Stmt> top = seq ? seq->seq : std::vector<Stmt>{inner};
  int at = -1;
  for (size_t i = 0; i < top.size(); ++i) {
    if (has_unit(top[i])) at = int(i);
  }
  internal_assert(at >= 0 && (ctx.ws_nested || is_unit(top[at])))
      << "warp_specialize: the specialised loop is not a statement of the kernel body";
  int npre = 0;
  for (int i = 0; i < at; ++i) npre += is_tma_copy(top[i]);
  Buffer pre;
  if (npre > 0) {
    pre = make_buffer(ctx.fresh_name("tma_bars"), Scope::Shared, DataType{DataType::UInt, 64, 1}, {make_int(npre)}, k.loc);
    k.allocs.push_back(pre);
    for (int i = 0; i < npre; ++i) ctx.mbarriers.push_back({pre, i, 1});
  }
  // The counters of a nested loop's iterations start at 0 on both sides.
  std::vector<Stmt> producer, consumer;
  for (const Buffer& c : ctx.ws_counters) {
    producer.push_back(make_store(c, {make_int(0)}, make_int(0)));
    consumer.push_back(make_store(c, {make_int(0)}, make_int(0)));
  }
  int j = 0;
  for (int i = 0; i < at; ++i) {
    if (!is_tma_copy(top[i])) {
      consumer.push_back(top[i]);
      continue;
    }
    Expr bar = make_load(pre, {make_int(j++)}, top[i]->loc);
    producer.push_back(call("mbar_arrive_expect_tx", {bar, make_int(tma_bytes(top[i]))}));
    producer.push_back(with_barrier(top[i], bar));
    consumer.push_back(call("mbar_wait", {bar, make_int(0)}));
  }
  producer.push_back(side(top[at], true));
  consumer.push_back(side(top[at], false));
  for (size_t i = at + 1; i < top.size(); ++i) consumer.push_back(top[i]);

  const int T = k.threads;
  const int total = T + 128;
  // The register counts depend on how many blocks share an SM, which the storage plan
  // decides: the printer fills them in (codegen::ws_registers).
  std::vector<Stmt> prod_side, cons_side;
  prod_side.push_back(call("setmaxnreg_dec"));
  prod_side.push_back(make_if(make_call("ws_leader", {}, DataType::boolean()), make_seq(producer)));
  cons_side.push_back(call("setmaxnreg_inc"));
  cons_side.push_back(make_seq(consumer));

  std::vector<Stmt> init;
  for (auto& m : ctx.mbarriers) init.push_back(call("mbar_init", {make_load(m.buffer, {make_int(m.index)}), make_int(m.count)}));
  init.push_back(call("fence_barrier_init"));
  std::vector<Stmt> body = {
      make_if(make_binary(BinaryOp::EQ, k.thread_var, make_int(0)), make_seq(init)), call("sync_all"),
      make_if(make_call("ws_producer", {}, DataType::boolean(), top[at]->loc), make_seq(prod_side), make_seq(cons_side),
              top[at]->loc)};
  Stmt out = make_seq(body, k.body->loc);
  for (auto it = lets.rbegin(); it != lets.rend(); ++it) out = make_let((*it)->var, (*it)->value, out, (*it)->loc);
  k.body = out;
  k.consumer_threads = T;
  k.threads = total;
}

}  // namespace tegula::transform
