// The reference's T.alloc_barrier mbarriers and T.ptx_cp_async (language/barriers.py).
//
// The tile program of a warpgroup is one logical thread, so a statement a side of a thread
// branch runs stands for all of its threads: T.barrier_arrive there makes as many arrivals
// as the side has threads, and T.ptx_cp_async copies once (every thread of the side would
// copy the same elements). Copies land at once, so T.cp_async_barrier_noinc is an arrival.
// The sides run as coroutines (interp/coop.h): T.barrier_wait lets the others run until
// the phase of its parity has completed.
#include "interp/reference_impl.h"
#include "ir/functor.h"

namespace tegula::interp::ref {

using namespace ir;

Compiler::Compiler(const Kernel& k) : k_(k), range_{0, k.threads} {
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    if (c && c->op.rfind("mbar_", 0) == 0) has_mbarriers_ = true;
  });
}

namespace {

std::string element(const BufferLoadNode* ld, int64_t i) { return ld->buffer->name + "[" + std::to_string(i) + "]"; }

// n arrivals: each completes the phase it falls in (a surplus counts toward the next).
void arrive(Mbarrier& m, int64_t n) {
  while (n > 0) {
    int64_t take = std::min(n, m.pending);
    m.pending -= take, n -= take;
    if (m.pending == 0) ++m.phases, m.pending = m.count;
  }
}

}  // namespace

ExprFn Compiler::barrier_call(const CallNode* c, const SourceLoc& loc) {
  const std::string& op = c->op;
  if (op == "fence_barrier_init" || op == "set_max_nreg" || op == "no_set_max_nreg" || op == "fence_proxy_async" ||
      op == "cp_async_commit" || op == "cp_async_wait") {
    return [](Frame&) { return 0.0; };  // no effect on what the program computes (copies land at once)
  }
  if (op == "ptx_cp_async") {
    auto* dst = c->args.at(0).as<BufferLoadNode>();
    auto* src = c->args.at(1).as<BufferLoadNode>();
    const int64_t* bytes = as_const_int(c->args.at(2));
    internal_assert(dst && src && bytes) << "ptx_cp_async(dst, src, bytes) at " << loc.str();
    std::vector<Stmt> copies;
    for (int64_t l = 0; l < *bytes / dst->buffer->dtype.bytes(); ++l) {
      std::vector<Expr> di = dst->indices, si = src->indices;
      di.back() = di.back() + make_int(l);
      si.back() = si.back() + make_int(l);
      copies.push_back(make_store(dst->buffer, di, make_load(src->buffer, si, loc), loc));
    }
    StmtFn body = stmt(make_seq(copies, loc));
    return [body](Frame& f) {
      body(f);
      return 0.0;
    };
  }
  if (op.rfind("mbar_", 0) != 0) return nullptr;
  auto* bar = c->args.at(0).as<BufferLoadNode>();
  internal_assert(bar && bar->indices.size() == 1) << "an mbarrier call on a barrier element at " << loc.str();
  int slot = buffer_slot(bar->buffer, loc);
  ExprFn index = expr(bar->indices[0], loc);
  int64_t threads = range_.count();
  auto state = [slot, index, bar, loc](Frame& f, bool init) -> Mbarrier& {
    int64_t i = int64_t(index(f));
    auto key = std::make_pair(slot, i);
    auto it = f.mbarriers->find(key);
    user_assert(init || it != f.mbarriers->end(), loc)
        << "the mbarrier " << element(bar, i) << " is used before T.alloc_barrier initialised it";
    return (*f.mbarriers)[key];
  };
  if (op == "mbar_init") {
    ExprFn count = expr(c->args.at(1), loc);
    return [state, count](Frame& f) {
      Mbarrier& m = state(f, true);
      m.count = m.pending = int64_t(count(f));
      m.phases = 0;
      return 0.0;
    };
  }
  if (op == "mbar_arrive" || op == "mbar_cp_async_arrive_noinc") {
    return [state, threads](Frame& f) {
      arrive(state(f, false), threads);
      return 0.0;
    };
  }
  if (op == "mbar_wait") {
    ExprFn parity = expr(c->args.at(1), loc);
    return [state, parity, index, bar](Frame& f) {
      Mbarrier* m = &state(f, false);
      int64_t p = int64_t(parity(f)) & 1;
      // The phase of parity p has completed when the current phase's parity differs.
      f.coop->wait_until([m, p] { return (m->phases & 1) != p; },
                         "T.barrier_wait(" + element(bar, int64_t(index(f))) + ", " + std::to_string(p) + ")");
      return 0.0;
    };
  }
  user_error(loc) << "the reference cannot run '" << op << "'";
  return nullptr;
}

}  // namespace tegula::interp::ref
