// The warp-specialised form of a T.Pipelined loop (pipeline_loops.cc calls
// warp_specialized_loop for a loop whose copies are tma_copy statements of
// plan_bulk_copies). The result,
//   if (ws_producer) { producer loop } else { consumer loop },
// warp_specialize then spreads over the whole kernel.
//
// Per stage s of S, one "full" mbarrier per group of copies (the copies the same compute
// statement reads first) and one "empty" mbarrier per group. Iteration i uses stage
// i % S with phase parity (i / S) & 1:
//   producer: per group: wait empty[g][s] (parity ^ 1: the first pass finds it free),
//             arrive on full[g][s] with the group's bytes expected, issue its copies
//   consumer: before the first statement reading a group: wait full[g][s] (parity);
//             after the last statement reading it: arrive on empty[g][s] (every
//             consumer thread: count = threads)
// so a group is reloaded as soon as the compute is done with it: in FlashAttention's
// loop the next K tile loads during this iteration's softmax and P @ V, even with one
// stage.
// A compute that is only a wgmma gemm keeps one gemm running across iterations: stage
// s is released after the next iteration's gemm has been issued and the previous one
// has finished (wgmma_wait with 1 pending), as the cp.async path does; stages_for gives
// such a loop one buffer more.
#include <algorithm>
#include <map>
#include <set>

#include "ir/thread_guard.h"
#include "transform/gemm_waits.h"
#include "transform/passes.h"
#include "transform/pipeline_forms.h"

namespace tegula::transform {

namespace {

using namespace ir;

const Buffer& tma_dst(const Stmt& s) {
  return s.as<EvaluateNode>()->value.as<CallNode>()->args[0].as<BufferLoadNode>()->buffer;
}

Stmt mbar(const std::string& op, Expr bar, std::vector<Expr> more = {}) {
  std::vector<Expr> args = {std::move(bar)};
  args.insert(args.end(), more.begin(), more.end());
  return call(op, args);
}


// Stages of a warp-specialised loop: the author's num_stages, and one more where the
// compute is a lone wgmma gemm kept running across iterations (below): its stage is
// released an iteration late, so S buffers keep only S - 1 loads ahead, which a GEMM
// whose tiles come from DRAM (the first pass, an L2 flushed between runs) waits on.
// The extra stage is taken only while it fits and leaves as many blocks on an SM
// (codegen::ws_registers: two blocks of 128 consumer threads when their pools fit).
int stages_for(const Kernel& k, int S, const std::vector<Stmt>& compute, const std::vector<Buffer>& filled) {
  Stmt issue, rest, wait;
  if (S < 2 || compute.size() != 1 || !split_async_issue(compute[0], &issue, &rest) || !only_wait(rest, &wait)) {
    return S;
  }
  int64_t pool = 1024, stage = 0;  // 1 KB for the mbarriers and alignment
  std::set<const BufferNode*> seen;
  for (const Buffer& b : k.allocs) {
    if (b->scope != Scope::Shared) continue;
    int64_t bytes = b->num_elements_const() * b->dtype.bytes();
    pool += (bytes + 127) / 128 * 128;
  }
  for (auto& b : filled) {
    if (seen.insert(b.get()).second) stage += b->num_elements_const() * b->dtype.bytes();
  }
  pool += (S - 1) * stage;  // the filled buffers are one stage deep until stacked
  constexpr int64_t kSmemPerSm = 228 * 1024, kLimit = 227 * 1024, kReserved = 1024;
  bool two_now = k.threads == 128 && 2 * (pool + kReserved) <= kSmemPerSm;
  bool two_then = k.threads == 128 && 2 * (pool + stage + kReserved) <= kSmemPerSm;
  if (pool + stage > kLimit || (two_now && !two_then)) return S;
  return S + 1;
}

// The registers a gemm with A in registers packs A into while its wait is moved
// (gemm_waits.cc): 32-bit words, two 16-bit elements each.
HoldRegisters hold_registers(Kernel& k, PassContext& ctx) {
  return [&k, &ctx](const Buffer& a) {
    int64_t words = (a->num_elements_const() * a->dtype.bytes() + 3) / 4;
    Buffer b = make_buffer(ctx.fresh_name(a->name + "_held"), Scope::Local, DataType{DataType::UInt, 32, 1},
                           {make_int(words)}, a->loc);
    k.allocs.push_back(b);
    return b;
  };
}

}  // namespace

Stmt warp_specialized_loop(const ForNode* op, const std::vector<StageMark>& marks, Kernel& k, PassContext& ctx) {
  auto* seq = op->body.as<SeqNode>();
  std::vector<Stmt> units = seq ? seq->seq : std::vector<Stmt>{op->body};
  std::vector<Stmt> copies, compute;
  std::vector<StageMark> compute_marks;
  for (size_t u = 0; u < units.size(); ++u) {
    if (is_tma_copy(units[u])) {
      copies.push_back(units[u]);
    } else {
      compute.push_back(units[u]);
      compute_marks.push_back(marks.empty() ? StageMark{} : marks[u]);
    }
  }
  internal_assert(!copies.empty() && !compute.empty()) << "a warp-specialised loop has copies and compute";
  std::vector<Buffer> filled;
  for (auto& c : copies) filled.push_back(tma_dst(c));
  int64_t D = 0;  // how many iterations the last computation runs behind the first
  for (auto& m : compute_marks) D = std::max(D, m.stage);
  // A tile is released D iterations after it is first read, so D + 1 stages at least
  // keep the producer from waiting on a release the consumer has not reached.
  const int S = std::max<int>(stages_for(k, op->num_stages, compute, filled), int(D) + 1);
  auto staged = stack_buffers(k, ctx, filled, S);
  // Groups: by the compute statement that first reads the copy's buffer.
  std::map<size_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < copies.size(); ++i) {
    size_t first = 0;
    for (size_t j = 0; j < compute.size(); ++j) {
      if (reads_buffer(compute[j], tma_dst(copies[i]).get())) {
        first = j;
        break;
      }
    }
    groups[first].push_back(i);
  }
  const int64_t G = int64_t(groups.size());
  Buffer bars = make_buffer(ctx.fresh_name("tma_bars"), Scope::Shared, DataType{DataType::UInt, 64, 1},
                            {make_int(2 * G * S)}, op->loc);
  k.allocs.push_back(bars);
  for (int64_t i = 0; i < G * S; ++i) ctx.mbarriers.push_back({bars, i, 1});
  for (int64_t i = 0; i < G * S; ++i) ctx.mbarriers.push_back({bars, G * S + i, k.threads});
  auto bar = [&](Expr idx) { return make_load(bars, {std::move(idx)}, op->loc); };
  // Nested in a persistent kernel's loop over tiles, iterations count on from those of
  // the tiles before (`done`, a counter each warp group keeps), so that the stages and
  // phases of the producer and the consumer stay in step across tiles.
  Buffer done;
  Expr it = op->var - op->min;
  if (ctx.ws_nested) {
    done = make_buffer(ctx.fresh_name("ws_iters"), Scope::Local, DataType::i32(), {make_int(1)}, op->loc);
    k.allocs.push_back(done);
    ctx.ws_counters.push_back(done);
    it = make_load(done, {make_int(0)}, op->loc) + it;
  }
  // After the loop: the counter moves past its iterations.
  auto count_done = [&](std::vector<Stmt>* out) {
    if (done) out->push_back(make_store(done, {make_int(0)}, make_load(done, {make_int(0)}, op->loc) + op->extent, op->loc));
  };
  Expr stage = floormod(it, make_int(S));
  Expr parity = floormod(floordiv(it, make_int(S)), make_int(2));
  auto full = [&](int64_t g) { return bar(make_int(g * S) + stage); };
  auto empty = [&](int64_t g, Expr st) { return bar(make_int(G * S + g * S) + st); };
  // reads[g][j]: compute statement j reads group g's buffers. The last one that does is
  // where g's stage is released.
  std::vector<std::vector<bool>> reads;
  std::vector<size_t> last_reader;
  for (auto& [first, members] : groups) {
    reads.emplace_back();
    size_t last = first;
    for (size_t j = 0; j < compute.size(); ++j) {
      bool any = false;
      for (size_t i : members) any |= reads_buffer(compute[j], tma_dst(copies[i]).get());
      reads.back().push_back(any);
      if (any) last = std::max(last, j);
    }
    last_reader.push_back(last);
  }
  // Producer.
  std::vector<Stmt> prod;
  int64_t g = 0;
  for (auto& [first, members] : groups) {
    int64_t bytes = 0;
    for (size_t i : members) bytes += tma_bytes(copies[i]);
    prod.push_back(mbar("mbar_wait", empty(g, stage), {make_int(1) - parity}));
    prod.push_back(mbar("mbar_arrive_expect_tx", full(g), {make_int(bytes)}));
    for (size_t i : members) prod.push_back(with_barrier(Restage(staged, stage).mutate(copies[i]), full(g)));
    ++g;
  }
  std::vector<Stmt> producer_side = {make_for(op->var, op->min, op->extent, ForKind::Serial, make_seq(prod), 0, op->loc)};
  count_done(&producer_side);
  Stmt producer = make_seq(producer_side, op->loc);
  if (D > 0) {
    internal_assert(!done) << "a nested warp-specialised loop runs each iteration on one stage (plan_bulk_copies)";
    // Each statement on its own iteration's stage (pipeline_stages.cc).
    auto stage_of = [S](Expr iter) { return floormod(iter, make_int(S)); };
    ShiftedLoop shifted{op, compute, compute_marks, reads};
    shifted.at = [&, op](size_t j, Expr iter) {
      return Restage(staged, stage_of(iter)).mutate(substitute(compute[j], {{op->var, op->min + iter}}));
    };
    shifted.wait = [&](int64_t gi, Expr iter) {
      return mbar("mbar_wait", bar(make_int(gi * S) + stage_of(iter)),
                  {floormod(floordiv(iter, make_int(S)), make_int(2))});
    };
    shifted.release = [&](int64_t gi, Expr iter) { return mbar("mbar_arrive", empty(gi, stage_of(iter))); };
    Stmt consumer = shifted_consumer(shifted, k, hold_registers(k, ctx));
    Stmt unit = make_if(make_call("ws_producer", {}, DataType::boolean(), op->loc), producer, consumer, op->loc);
    return unit;
  }
  // Consumer.
  std::vector<Stmt> body;
  std::vector<Stmt> restaged;
  for (auto& c : compute) restaged.push_back(Restage(staged, stage).mutate(c));
  Stmt issue, rest, wait;
  bool async = split_async_issue(restaged[0], &issue, &rest);
  // (With one stage the release must come before the next wait for it.)
  bool deferred = async && restaged.size() == 1 && S >= 2 && only_wait(rest, &wait);
  std::vector<Stmt> after;
  if (deferred) {
    for (int64_t gi = 0; gi < G; ++gi) body.push_back(mbar("mbar_wait", full(gi), {parity}));
    body.push_back(issue);
    body.push_back(with_pending(wait, 1));
    Expr prev = floormod(it + int64_t(S - 1), make_int(S));
    std::vector<Stmt> release;
    for (int64_t gi = 0; gi < G; ++gi) release.push_back(mbar("mbar_arrive", empty(gi, prev)));
    body.push_back(make_if(make_binary(BinaryOp::GT, op->var - op->min, make_int(0)), make_seq(release)));
    after.push_back(wait);
    if (done) {
      // The last iteration's stage, which no next iteration of this loop releases: the
      // producer refills it for a later tile.
      std::vector<Stmt> last;
      Expr stage_last = floormod(make_load(done, {make_int(0)}, op->loc) + op->extent + int64_t(-1), make_int(S));
      for (int64_t gi = 0; gi < G; ++gi) last.push_back(mbar("mbar_arrive", empty(gi, stage_last)));
      after.push_back(make_if(make_binary(BinaryOp::GT, op->extent, make_int(0)), make_seq(last)));
    }
  } else {
    for (size_t j = 0; j < restaged.size(); ++j) {
      int64_t gi = 0;
      for (auto& kv : groups) {
        if (kv.first == j) body.push_back(mbar("mbar_wait", full(gi), {parity}));
        ++gi;
      }
      body.push_back(restaged[j]);
      for (gi = 0; gi < G; ++gi) {
        if (last_reader[gi] == j) body.push_back(mbar("mbar_arrive", empty(gi, stage)));
      }
    }
    sink_gemm_waits(body, k.thread_var);
  }
  Stmt loop = place_barriers_in_loop(make_for(op->var, op->min, op->extent, ForKind::Serial, make_seq(body), 0, op->loc), k);
  after.insert(after.begin(), loop);
  count_done(&after);
  // Closed to insert_barriers, as the cp.async form is.
  Stmt consumer = make_if(make_bool(true), make_seq(after), {}, op->loc);
  Stmt unit = make_if(make_call("ws_producer", {}, DataType::boolean(), op->loc), producer, consumer, op->loc);
  return unit;
}

}  // namespace tegula::transform
