// The simulator's T.alloc_barrier mbarriers (language/barriers.py), thread by thread.
//
// Each thread that runs T.barrier_arrive makes one arrival; T.cp_async_barrier_noinc lands
// the thread's cp.async copies, then arrives. The sides of a divergent branch run as
// coroutines (interp/coop.h): T.barrier_wait lets the others run until the phase of its
// parity has completed. A completed phase orders what its arrivals did before it against
// what the waiters do after: the race tracking's epoch moves (for every thread: races
// between warpgroups across an unrelated phase go unseen).
#include "interp/simt_machine.h"

namespace tegula::interp::simt {

using namespace ir;

bool Machine::barrier_statement(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  if (f == "fence_barrier_init") return true;
  if (f.rfind("mbar_", 0) != 0) return false;
  if (ts.empty()) return true;
  auto* ld = op->args.at(0).as<BufferLoadNode>();
  if (!ld) cannot("an mbarrier call whose barrier is not a buffer element");
  Storage* st = storage(ld->buffer);
  std::vector<Vals> idx = eval_indices(ld->indices, ts);
  int64_t at = flat_index(st, idx, 0, 1, ts[0]);
  for (size_t i = 1; i < ts.size(); ++i) {
    if (flat_index(st, idx, i, 1, ts[i]) != at) cannot("an mbarrier call whose barrier differs between threads");
  }
  if (at < 0) return true;  // out of bounds: reported
  auto key = std::make_pair(st, at);
  std::string name = element_name(st, at);
  auto uniform = [&](const Expr& e, const std::string& what) {
    Vals v = eval(e, ts);
    require_defined(v, ts, what);
    for (size_t i = 1; i < ts.size(); ++i) {
      if (v.at(i) != v.at(0)) cannot("an mbarrier call whose " + what + " differs between threads");
    }
    return int64_t(v.at(0));
  };
  if (f == "mbar_init") {
    int64_t count = uniform(op->args.at(1), "arrival count");
    mbarriers_[key] = Mbarrier{count, count, 0};
    return true;
  }
  auto it = mbarriers_.find(key);
  if (it == mbarriers_.end()) {
    error(thread_name(ts[0]) + " uses the mbarrier " + name + " before it was initialised");
    return true;
  }
  Mbarrier& m = it->second;
  if (f == "mbar_arrive" || f == "mbar_cp_async_arrive_noinc") {
    if (f == "mbar_cp_async_arrive_noinc") {
      for (int t : ts) land_all(t);
    }
    int64_t n = int64_t(ts.size());
    while (n > 0) {
      int64_t take = std::min(n, m.pending);
      m.pending -= take, n -= take;
      if (m.pending == 0) ++m.phases, m.pending = m.count, ++epoch_;
    }
    return true;
  }
  if (f == "mbar_wait") {
    int64_t p = uniform(op->args.at(1), "parity") & 1;
    Mbarrier* mb = &m;  // map nodes stay put
    coop_->wait_until([mb, p] { return (mb->phases & 1) != p; },
                      thread_name(ts[0]) + " and " + std::to_string(ts.size() - 1) + " others at T.barrier_wait(" + name +
                          ", " + std::to_string(p) + ")");
    return true;
  }
  cannot("the mbarrier call '" + f + "'");
}

}  // namespace tegula::interp::simt
