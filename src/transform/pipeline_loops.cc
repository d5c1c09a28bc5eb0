// Pass: pipeline_loops.
//
// Expects: lowered code in which the global->shared copies of a T.Pipelined(n,
// num_stages=S) loop are cp.async calls (vectorize.cc), each copy one unit. The copies
// may sit anywhere in the body (attention loads K, computes Q Kᵀ, then loads V): they read
// only global memory and the loop variable, so they can all be issued ahead.
// Guarantees: the loop overlaps loads with compute:
//   for s in 0..S-2:  copies(s) into stage s; commit              (prologue)
//   for k in 0..n-1:
//     wait until at most S-2 groups are in flight; barrier          (stage k % S has landed)
//     copies(k + S - 1) into stage (k + S - 1) % S; commit          (the stage compute(k-1) read)
//     compute(k) reading stage k % S, with its own barriers          (while those loads fly)
// (a compute that starts with a wgmma gemm issues it before the copies, and waits after;
// a compute that is only a wgmma gemm keeps one group running across iterations and
// loads S - 2 stages ahead (S >= 4): see the comment at split_async_issue's use)
//   wait for all; barrier
// Each staged buffer becomes S copies stacked along its first dimension. Loops of any
// other shape (one stage, or compute that writes a staged buffer, or a unit mixing copies
// with compute, such as a nested K loop) keep their order, each run of copies completed
// before the statement after it, at whatever depth the run stands.
// Within an iteration a gemm's wait moves down past the statements that do not need its
// result (sink_gemm_waits, gemm_waits.cc), so that work runs while the tensor cores do.
// Copies before a loop (partition_loops makes those ahead of a pipelined loop cp.async)
// are committed as a group after each run; the group is waited for at once unless the
// next unit touching shared memory is a staged loop, whose first wait then covers it:
// attention's Q tile loads while the first K and V tiles do.
// A hand schedule whose computations take several stages gets, in the warp-specialised
// form, a consumer that runs them shifted (pipeline_stages.cc); the other forms drop its
// marks and run the loop in the schedule's order.
#include <algorithm>
#include <map>
#include <set>

#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "transform/gemm_waits.h"
#include "transform/passes.h"
#include "transform/pipeline_stages.h"

namespace tegula::transform {

namespace {

using namespace ir;

bool has_async_copy(const Stmt& s) {
  bool found = false;
  post_order(s, nullptr, [&](const Expr& e) {
    if (auto* c = e.as<CallNode>()) found |= c->op == "cp_async";
  });
  return found;
}

// A copy unit fills shared memory from global memory only: cp.async calls, or plain
// stores where the addresses were not aligned enough for cp.async. It reads nothing but
// global memory (a store from registers to shared memory is compute: it cannot move).
bool is_copy_unit(const Stmt& s) {
  bool writes_shared = false, reads_other = false;
  std::vector<const BufferNode*> async_dst;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) {
      writes_shared |= st->buffer->scope == Scope::Shared;
      reads_other |= st->buffer->scope != Scope::Shared;
    }
  }, [&](const Expr& e) {
    if (auto* c = e.as<CallNode>()) {
      if (c->op == "cp_async") {
        writes_shared = true;
        async_dst.push_back(c->args[0].as<BufferLoadNode>()->buffer.get());
      }
    }
  });
  post_order(s, nullptr, [&](const Expr& e) {
    auto* ld = e.as<BufferLoadNode>();
    if (!ld || ld->buffer->scope == Scope::Global) return;
    bool is_dst = false;
    for (auto* b : async_dst) is_dst |= b == ld->buffer.get();
    reads_other |= !is_dst;
  });
  return writes_shared && !reads_other;
}

bool contains_pipelined(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* f = x.as<ForNode>()) found |= f->for_kind == ForKind::Pipelined;
  }, nullptr);
  return found;
}

bool touches_shared(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) found |= st->buffer->scope == Scope::Shared;
  }, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) found |= ld->buffer->scope == Scope::Shared;
  });
  return found;
}

Stmt call(const std::string& op, std::vector<Expr> args = {}) {
  return make_evaluate(make_call(op, std::move(args), DataType::i32()));
}

// Accesses of staged buffers move to the rows of one stage.
class Restage : public IRMutator {
 public:
  Restage(const std::map<const BufferNode*, std::pair<Buffer, int64_t>>& staged, Expr stage)
      : staged_(staged), stage_(std::move(stage)) {}
  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    Expr e = IRMutator::mutate_BufferLoad(self, op);
    auto it = staged_.find(op->buffer.get());
    if (it == staged_.end()) return e;
    auto idx = e.as<BufferLoadNode>()->indices;
    idx[0] = idx[0] + stage_ * it->second.second;
    return make_load(it->second.first, idx, op->loc, op->dtype.lanes);
  }
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
    Stmt s = IRMutator::mutate_BufferStore(self, op);
    auto* st = s.as<BufferStoreNode>();
    auto it = staged_.find(op->buffer.get());
    if (it == staged_.end()) return s;
    auto idx = st->indices;
    idx[0] = idx[0] + stage_ * it->second.second;
    return make_store(it->second.first, idx, st->value, op->loc);
  }

 private:
  const std::map<const BufferNode*, std::pair<Buffer, int64_t>>& staged_;
  Expr stage_;
};

// Completes each run of copy units nested inside a unit that also reads what they fill
// (a K loop of copies and a gemm inside the pipelined loop): commit and wait right after
// the run, at whatever depth it stands, so the reads after it see the tile. A staged loop
// nested inside is left as built: its own waits order its copies.
class CompleteNestedCopies : public IRMutator {
 public:
  explicit CompleteNestedCopies(const std::set<const StmtNode*>& staged) : staged_(staged) {}
  using IRMutator::mutate;
  Stmt mutate(const Stmt& s) override { return staged_.count(s.get()) ? s : IRMutator::mutate(s); }
  Stmt complete(const Stmt& s) {
    if (!has_async_copy(s) || !is_copy_unit(s)) return mutate(s);
    return make_seq({s, call("cp_async_commit"), call("cp_async_wait", {make_int(0)})});
  }
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    std::vector<Stmt> out;
    for (size_t i = 0; i < op->seq.size(); ++i) {
      const Stmt& s = op->seq[i];
      bool copy = has_async_copy(s) && is_copy_unit(s);
      out.push_back(copy ? s : mutate(s));
      bool next_copy = i + 1 < op->seq.size() && has_async_copy(op->seq[i + 1]) && is_copy_unit(op->seq[i + 1]);
      if (copy && !next_copy) {
        out.push_back(call("cp_async_commit"));
        out.push_back(call("cp_async_wait", {make_int(0)}));
      }
    }
    return make_seq(out, op->loc);
  }
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    return make_for(op->var, op->min, op->extent, op->for_kind, complete(op->body), op->num_stages, op->loc);
  }
  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    return make_if(op->cond, complete(op->then_case), op->else_case ? complete(op->else_case) : Stmt(), op->loc);
  }
  Stmt mutate_LetStmt(const Stmt& self, const LetStmtNode* op) override {
    return make_let(op->var, op->value, complete(op->body), op->loc);
  }

 private:
  const std::set<const StmtNode*>& staged_;
};

const Buffer& tma_dst(const Stmt& s) {
  return s.as<EvaluateNode>()->value.as<CallNode>()->args[0].as<BufferLoadNode>()->buffer;
}

Stmt mbar(const std::string& op, Expr bar, std::vector<Expr> more = {}) {
  std::vector<Expr> args = {std::move(bar)};
  args.insert(args.end(), more.begin(), more.end());
  return call(op, args);
}

bool reads_buffer(const Stmt& s, const BufferNode* b) {
  bool found = false;
  post_order(s, nullptr, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) found |= ld->buffer.get() == b;
  });
  return found;
}

class Pipeliner : public IRMutator {
 public:
  Pipeliner(Kernel& k, PassContext& ctx) : k_(k), ctx_(ctx) {}

  // The warp-specialised form of a T.Pipelined loop whose copies are tma_copy statements
  // (plan_bulk_copies): if (ws_producer) { producer loop } else { consumer loop }, which
  // warp_specialize then spreads over the whole kernel. Per stage s of S, one "full"
  // mbarrier per group of copies (the copies the same compute statement reads first) and
  // one "empty" mbarrier per group. Iteration i uses stage i % S with phase parity
  // (i / S) & 1:
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
  // Each buffer stacked S deep along its first dimension (declared in the kernel's place,
  // keeping its swizzle): buffer -> (the stacked buffer, rows of one stage).
  std::map<const BufferNode*, std::pair<Buffer, int64_t>> stack(const std::vector<Buffer>& filled, int S) {
    std::map<const BufferNode*, std::pair<Buffer, int64_t>> staged;
    for (const Buffer& b : filled) {
      if (staged.count(b.get())) continue;
      int64_t rows = *as_const_int(b->shape[0]);
      std::vector<Expr> shape = b->shape;
      shape[0] = make_int(rows * S);
      staged[b.get()] = {make_buffer(b->name, Scope::Shared, b->dtype, shape, b->loc), rows};
    }
    for (auto& b : k_.allocs) {
      auto it = staged.find(b.get());
      if (it == staged.end()) continue;
      if (ctx_.swizzled.erase(b.get())) ctx_.swizzled.insert(it->second.first.get());
      if (ctx_.panelled.erase(b.get())) ctx_.panelled.insert(it->second.first.get());
      b = it->second.first;
    }
    return staged;
  }

  // Stages of a warp-specialised loop: the author's num_stages, and one more where the
  // compute is a lone wgmma gemm kept running across iterations (below): its stage is
  // released an iteration late, so S buffers keep only S - 1 loads ahead, which a GEMM
  // whose tiles come from DRAM (the first pass, an L2 flushed between runs) waits on.
  // The extra stage is taken only while it fits and leaves as many blocks on an SM
  // (codegen::ws_registers: two blocks of 128 consumer threads when their pools fit).
  int stages_for(int S, const std::vector<Stmt>& compute, const std::vector<Buffer>& filled) {
    Stmt issue, rest, wait;
    if (S < 2 || compute.size() != 1 || !split_async_issue(compute[0], &issue, &rest) || !only_wait(rest, &wait)) {
      return S;
    }
    int64_t pool = 1024, stage = 0;  // 1 KB for the mbarriers and alignment
    std::set<const BufferNode*> seen;
    for (const Buffer& b : k_.allocs) {
      if (b->scope != Scope::Shared) continue;
      int64_t bytes = b->num_elements_const() * b->dtype.bytes();
      pool += (bytes + 127) / 128 * 128;
    }
    for (auto& b : filled) {
      if (seen.insert(b.get()).second) stage += b->num_elements_const() * b->dtype.bytes();
    }
    pool += (S - 1) * stage;  // the filled buffers are one stage deep until stacked
    constexpr int64_t kSmemPerSm = 228 * 1024, kLimit = 227 * 1024, kReserved = 1024;
    bool two_now = k_.threads == 128 && 2 * (pool + kReserved) <= kSmemPerSm;
    bool two_then = k_.threads == 128 && 2 * (pool + stage + kReserved) <= kSmemPerSm;
    if (pool + stage > kLimit || (two_now && !two_then)) return S;
    return S + 1;
  }

  // The registers a gemm with A in registers packs A into while its wait is moved
  // (gemm_waits.cc): 32-bit words, two 16-bit elements each.
  HoldRegisters hold_registers() {
    return [this](const Buffer& a) {
      int64_t words = (a->num_elements_const() * a->dtype.bytes() + 3) / 4;
      Buffer b = make_buffer(ctx_.fresh_name(a->name + "_held"), Scope::Local, DataType{DataType::UInt, 32, 1},
                             {make_int(words)}, a->loc);
      k_.allocs.push_back(b);
      return b;
    };
  }

  Stmt specialize(const ForNode* op, const std::vector<StageMark>& marks) {
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
    const int S = std::max<int>(stages_for(op->num_stages, compute, filled), int(D) + 1);
    auto staged = stack(filled, S);
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
    Buffer bars = make_buffer(ctx_.fresh_name("tma_bars"), Scope::Shared, DataType{DataType::UInt, 64, 1},
                              {make_int(2 * G * S)}, op->loc);
    k_.allocs.push_back(bars);
    for (int64_t i = 0; i < G * S; ++i) ctx_.mbarriers.push_back({bars, i, 1});
    for (int64_t i = 0; i < G * S; ++i) ctx_.mbarriers.push_back({bars, G * S + i, k_.threads});
    auto bar = [&](Expr idx) { return make_load(bars, {std::move(idx)}, op->loc); };
    // Nested in a persistent kernel's loop over tiles, iterations count on from those of
    // the tiles before (`done`, a counter each warp group keeps), so that the stages and
    // phases of the producer and the consumer stay in step across tiles.
    Buffer done;
    Expr it = op->var - op->min;
    if (ctx_.ws_nested) {
      done = make_buffer(ctx_.fresh_name("ws_iters"), Scope::Local, DataType::i32(), {make_int(1)}, op->loc);
      k_.allocs.push_back(done);
      ctx_.ws_counters.push_back(done);
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
      Stmt consumer = shifted_consumer(shifted, k_, hold_registers());
      Stmt unit = make_if(make_call("ws_producer", {}, DataType::boolean(), op->loc), producer, consumer, op->loc);
      staged_loops_.insert(unit.get());
      ws_loops_.insert(unit.get());
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
      sink_gemm_waits(body, k_.thread_var);
    }
    Stmt loop = place_barriers_in_loop(make_for(op->var, op->min, op->extent, ForKind::Serial, make_seq(body), 0, op->loc), k_);
    after.insert(after.begin(), loop);
    count_done(&after);
    // Closed to insert_barriers, as the cp.async form is.
    Stmt consumer = make_if(make_bool(true), make_seq(after), {}, op->loc);
    Stmt unit = make_if(make_call("ws_producer", {}, DataType::boolean(), op->loc), producer, consumer, op->loc);
    staged_loops_.insert(unit.get());
    ws_loops_.insert(unit.get());
    return unit;
  }

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    bool pipelined = op->for_kind == ForKind::Pipelined;
    if (pipelined) loop_ = self;
    in_pipelined_ += pipelined;
    Stmt inner = IRMutator::mutate_For(self, op);
    in_pipelined_ -= pipelined;
    op = inner.as<ForNode>();
    std::vector<StageMark> marks;
    if (op->for_kind == ForKind::Pipelined) {
      // Only the warp-specialised form shifts computations by stage; elsewhere the loop
      // runs one iteration at a time in the order the schedule emitted, which means the same.
      Stmt body = take_stage_marks(op->body, &marks);
      if (!marks.empty()) {
        inner = make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
        op = inner.as<ForNode>();
      }
    }
    if (op->for_kind == ForKind::Pipelined && ctx_.warp_specialize) {
      bool tma = false;
      for (auto& u : op->body.as<SeqNode>() ? op->body.as<SeqNode>()->seq : std::vector<Stmt>{op->body}) tma |= is_tma_copy(u);
      if (tma) return specialize(op, marks);
    }
    if (op->for_kind != ForKind::Pipelined || !has_async_copy(op->body)) return inner;
    auto* seq = op->body.as<SeqNode>();
    std::vector<Stmt> units = seq ? seq->seq : std::vector<Stmt>{op->body};
    std::vector<Stmt> copy_units, compute_units;
    // The shared buffers the copies fill, and the position of the last copy into each.
    std::vector<Buffer> filled;
    std::map<const BufferNode*, size_t> last_fill;
    std::vector<bool> is_copy(units.size());
    for (size_t i = 0; i < units.size(); ++i) {
      is_copy[i] = is_copy_unit(units[i]);
      if (!is_copy[i]) {
        compute_units.push_back(units[i]);
        continue;
      }
      copy_units.push_back(units[i]);
      post_order(units[i], [&](const Stmt& x) {
        auto* st = x.as<BufferStoreNode>();
        if (st && st->buffer->scope == Scope::Shared) filled.push_back(st->buffer), last_fill[st->buffer.get()] = i;
      }, [&](const Expr& e) {
        auto* c = e.as<CallNode>();
        if (c && c->op == "cp_async") {
          filled.push_back(c->args[0].as<BufferLoadNode>()->buffer);
          last_fill[filled.back().get()] = i;
        }
      });
    }
    bool shaped = !copy_units.empty() && !compute_units.empty() && op->num_stages >= 2;
    // A buffer staged S deep is a new allocation, which only the loop's own accesses are
    // moved to: one also touched outside the loop (an epilogue clearing it) is not staged.
    for (const Buffer& b : filled) shaped &= accesses(k_.body, b.get()) == accesses(loop_, b.get());
    // Compute may rewrite a staged buffer (zero a tail, say) only after its copy: the
    // copy moves ahead, the rewrite stays in place on the same stage.
    for (size_t i = 0; i < units.size(); ++i) {
      if (is_copy[i]) continue;
      shaped &= !has_async_copy(units[i]);
      post_order(units[i], [&](const Stmt& x) {
        auto* st = x.as<BufferStoreNode>();
        if (!st) return;
        auto it = last_fill.find(st->buffer.get());
        shaped &= it == last_fill.end() || it->second < i;
      }, nullptr);
    }
    if (!shaped) {
      // Keep the order; complete each run of copies before the unit that follows it.
      std::vector<Stmt> body;
      for (size_t i = 0; i < units.size(); ++i) {
        // A unit that mixes copies with reads of them completes its copies inside (and,
        // for any copy no smaller statement holds alone, after it).
        bool mixed = has_async_copy(units[i]) && !is_copy[i];
        body.push_back(mixed ? CompleteNestedCopies(staged_loops_).mutate(units[i]) : units[i]);
        bool next_async = i + 1 < units.size() && has_async_copy(units[i + 1]) && is_copy[i + 1];
        if (has_async_copy(units[i]) && !next_async) {
          body.push_back(call("cp_async_commit"));
          body.push_back(call("cp_async_wait", {make_int(0)}));
        }
      }
      return make_for(op->var, op->min, op->extent, ForKind::Serial, make_seq(body), 0, op->loc);
    }
    const size_t ncopy = copy_units.size();
    units = copy_units;
    units.insert(units.end(), compute_units.begin(), compute_units.end());
    int S = op->num_stages;
    // The shared buffers the copies fill, each stacked S deep.
    auto staged = stack(filled, S);
    Expr k = op->var, n = op->extent;
    auto copies = [&](Expr iter, Expr stage) {
      std::vector<Stmt> out;
      for (size_t i = 0; i < ncopy; ++i) {
        out.push_back(Restage(staged, stage).mutate(substitute(units[i], {{k, op->min + iter}})));
      }
      return make_seq(out);
    };
    Expr it = k - op->min;
    // The compute of one iteration touches one stage; barriers between its own units
    // (a rewrite of a staged tile before a gemm reads it) are placed here, since the loop
    // leaves this pass as one unit.
    std::vector<Stmt> compute;
    for (size_t i = ncopy; i < units.size(); ++i) {
      compute.push_back(Restage(staged, floormod(it, make_int(S))).mutate(units[i]));
    }
    // When the compute starts with an asynchronous gemm (wgmma), it is issued first and
    // the next stage's copies are issued while the tensor cores run: they fill another
    // stage, so only the gemm's wait has to follow them. When the gemm is all the compute
    // (a GEMM main loop: nothing reads its accumulator inside the loop), its wait lets
    // the latest group run on (wgmma_wait with 1 pending), so the tensor cores always have
    // the next group queued; the copies then fill the stage read two iterations back, the
    // one every thread's wait has released before this iteration's barrier.
    Stmt issue, rest, wait;
    bool async = split_async_issue(compute[0], &issue, &rest);
    bool deferred = async && compute.size() == 1 && S >= 4 && only_wait(rest, &wait);
    if (!deferred) {
      Stmt grouped = by_consumer(op, units, ncopy, compute, staged, S);
      if (grouped) return grouped;
    }
    const int dist = deferred ? S - 2 : S - 1;  // stages loaded ahead of the one computed
    std::vector<Stmt> prologue;
    for (int s = 0; s < dist; ++s) {
      prologue.push_back(make_if(make_binary(BinaryOp::LT, make_int(s), n), copies(make_int(s), make_int(s))));
      prologue.push_back(call("cp_async_commit"));
    }
    Expr ahead = it + int64_t(dist);
    std::vector<Stmt> body = {call("cp_async_wait", {make_int(dist - 1)}), make_sync()};
    if (async) {
      body.push_back(issue);
      compute[0] = rest;
      if (!deferred) sink_gemm_waits(compute, k_.thread_var, nullptr, is_call_stmt(issue, "wgmma_ss"));
    } else {
      sink_gemm_waits(compute, k_.thread_var);
    }
    if (deferred) body.push_back(with_pending(wait, 1));
    body.push_back(make_if(make_binary(BinaryOp::LT, ahead, n), copies(ahead, floormod(ahead, make_int(S)))));
    body.push_back(call("cp_async_commit"));
    if (!deferred) body.push_back(place_barriers(compute, k_));
    Stmt loop = make_for(op->var, op->min, op->extent, ForKind::Serial, make_seq(body), 0, op->loc);
    std::vector<Stmt> all = prologue;
    all.push_back(loop);
    if (deferred) all.push_back(wait);
    all.push_back(call("cp_async_wait", {make_int(0)}));
    all.push_back(make_sync());
    // One unit: insert_barriers places barriers around it, never inside.
    Stmt unit = make_if(make_bool(true), make_seq(all), {}, op->loc);
    staged_loops_.insert(unit.get());
    return unit;
  }

  // The schedule by consumer, for a loop whose copies fill buffers that different compute
  // statements read in turn (attention: Q Kᵀ reads K, then P V reads V), each group's
  // readers ending before the next group's begin. Copies are grouped by the statement
  // that first reads what they fill; tile t of a group lives in stage t % S, all S stages
  // loaded ahead:
  //   for s in 0..S-1: per group g: copies_g(s) into stage s; commit
  //   for k in 0..n-1: per group g, in order:
  //     wait until S * G - 1 groups are in flight; barrier           (g's tile k landed)
  //     the compute statements reading it
  //     (barrier) copies_g(k + S) into stage k % S; commit            (the stage just read)
  // so each tile is waited for only where it is first read (V loads on through Q Kᵀ and
  // the softmax) and reloaded as soon as it is last read: S tiles of each group in flight
  // where the order-of-issue schedule below keeps S - 1. Groups commit in the order they
  // are waited for, one group each time, which makes S * G - 1 the count after g's tile.
  // A null Stmt when the loop does not have that shape.
  Stmt by_consumer(const ForNode* op, const std::vector<Stmt>& units, size_t ncopy, const std::vector<Stmt>& compute,
                   const std::map<const BufferNode*, std::pair<Buffer, int64_t>>& staged, int S) {
    // Each copy unit's group: the first compute statement reading a buffer it fills.
    std::vector<size_t> first(ncopy, compute.size()), last(ncopy, 0);
    for (size_t i = 0; i < ncopy; ++i) {
      std::set<const BufferNode*> fills;
      post_order(units[i], [&](const Stmt& x) {
        auto* st = x.as<BufferStoreNode>();
        if (st && st->buffer->scope == Scope::Shared) fills.insert(st->buffer.get());
      }, [&](const Expr& e) {
        auto* c = e.as<CallNode>();
        if (c && c->op == "cp_async") fills.insert(c->args[0].as<BufferLoadNode>()->buffer.get());
      });
      for (size_t j = 0; j < compute.size(); ++j) {
        bool reads = false;
        for (auto* b : fills) {
          auto it = staged.find(b);
          reads |= reads_buffer(compute[j], it == staged.end() ? b : it->second.first.get());
        }
        if (!reads) continue;
        first[i] = std::min(first[i], j);
        last[i] = std::max(last[i], j);
      }
      if (first[i] == compute.size()) return Stmt();  // a tile nothing reads: keep the plain schedule
    }
    std::map<size_t, std::vector<size_t>> groups;  // first reader -> copy units
    std::map<size_t, size_t> release;              // first reader -> last reader of the group
    for (size_t i = 0; i < ncopy; ++i) {
      groups[first[i]].push_back(i);
      release[first[i]] = std::max(release[first[i]], last[i]);
    }
    if (groups.size() < 2) return Stmt();
    size_t prev_last = 0;
    bool started = false;
    for (auto& [f, l] : release) {
      if (started && f <= prev_last) return Stmt();  // readers of two groups interleave
      prev_last = l;
      started = true;
    }
    const int64_t G = int64_t(groups.size());
    Expr k = op->var, n = op->extent, it = k - op->min;
    auto copies = [&](const std::vector<size_t>& members, Expr iter, Expr stage) {
      std::vector<Stmt> out;
      for (size_t i : members) out.push_back(Restage(staged, stage).mutate(substitute(units[i], {{k, op->min + iter}})));
      return make_seq(out);
    };
    std::vector<Stmt> prologue;
    for (int s = 0; s < S; ++s) {
      for (auto& [f, members] : groups) {
        prologue.push_back(make_if(make_binary(BinaryOp::LT, make_int(s), n), copies(members, make_int(s), make_int(s))));
        prologue.push_back(call("cp_async_commit"));
      }
    }
    std::vector<Stmt> body;
    Expr ahead = it + int64_t(S);
    for (size_t j = 0; j < compute.size(); ++j) {
      if (groups.count(j)) {
        body.push_back(call("cp_async_wait", {make_int(S * G - 1)}));
        body.push_back(make_sync());
      }
      body.push_back(compute[j]);
      for (auto& [f, members] : groups) {
        if (release[f] != j) continue;
        // place_barriers puts a barrier between the reads just made and these writes.
        body.push_back(make_if(make_binary(BinaryOp::LT, ahead, n), copies(members, ahead, floormod(it, make_int(S)))));
        body.push_back(call("cp_async_commit"));
      }
    }
    Stmt loop = make_for(op->var, op->min, op->extent, ForKind::Serial, place_barriers(body, k_), 0, op->loc);
    std::vector<Stmt> all = prologue;
    all.push_back(loop);
    all.push_back(call("cp_async_wait", {make_int(0)}));
    all.push_back(make_sync());
    Stmt unit = make_if(make_bool(true), make_seq(all), {}, op->loc);
    staged_loops_.insert(unit.get());
    return unit;
  }

  // Outside pipelined loops, cp.async copies (those partition_loops issued ahead of a
  // pipelined loop) are committed as one group after each run of them. The group is
  // waited for at once, unless the next unit that touches shared memory is a cp.async
  // staged loop: then the loop's first wait covers it, since groups complete in order, and
  // the copy flies with the loop's first stages. A warp-specialised loop waits on its
  // mbarriers only, never on cp.async groups, so the copies before it are waited for here.
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    if (in_pipelined_) return IRMutator::mutate_Seq(self, op);  // the loop's own handling follows
    // A unit without a pipelined loop inside is left whole; one with a loop inside is
    // handled at its own level first.
    std::vector<Stmt> in;
    std::vector<bool> loose;
    for (const Stmt& s : op->seq) {
      bool has_loop = contains_pipelined(s);
      in.push_back(has_loop ? mutate(s) : s);
      loose.push_back(!has_loop && has_async_copy(s));
    }
    std::vector<Stmt> out;
    for (size_t i = 0; i < in.size(); ++i) {
      out.push_back(in[i]);
      if (!loose[i] || (i + 1 < in.size() && loose[i + 1])) continue;
      out.push_back(call("cp_async_commit"));
      bool overlap = false;
      for (size_t j = i + 1; j < in.size(); ++j) {
        if (staged_loops_.count(in[j].get())) {
          overlap = !ws_loops_.count(in[j].get());
          break;
        }
        if (touches_shared(in[j]) || contains_pipelined(op->seq[j])) break;
      }
      if (!overlap) out.push_back(call("cp_async_wait", {make_int(0)}));
    }
    return make_seq(out, op->loc);
  }

 private:
  Kernel& k_;
  PassContext& ctx_;
  std::set<const StmtNode*> staged_loops_;  // the staged loops this pass built
  std::set<const StmtNode*> ws_loops_;      // those of them that are warp-specialised
  int in_pipelined_ = 0;
  Stmt loop_;  // the pipelined loop being rewritten, as the kernel body holds it

  static int64_t accesses(const Stmt& s, const BufferNode* b) {
    int64_t n = 0;
    post_order(s, [&](const Stmt& x) {
      if (auto* st = x.as<BufferStoreNode>()) n += st->buffer.get() == b;
    }, [&](const Expr& e) {
      if (auto* ld = e.as<BufferLoadNode>()) n += ld->buffer.get() == b;
    });
    return n;
  }
};

}  // namespace

void pipeline_loops(Kernel& k, PassContext& ctx) { k.body = Pipeliner(k, ctx).mutate(k.body); }

}  // namespace tegula::transform
