// Pass: check_user_barriers.
//
// Expects: the frontend's IR. The language's explicit-barrier statements
// (language/barriers.py) arrive as calls: mbar_init / mbar_arrive / mbar_wait /
// mbar_cp_async_arrive_noinc on an element of a T.alloc_barrier buffer, ptx_cp_async,
// set_max_nreg, no_set_max_nreg, fence_proxy_async.
// Guarantees: the target has the instructions they need (an error at the first call's line
// otherwise), and a kernel whose threads meet at the user's mbarriers is never warp
// specialised or given bulk copies by the compiler: its producer would not arrive where the
// program's threads wait, and the program already divides the work among its warpgroups.
#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

void check_user_barriers(Kernel& k, PassContext& ctx) {
  const CallNode* first_barrier = nullptr;
  const CallNode* first_nreg = nullptr;
  const CallNode* first_cp = nullptr;
  const CallNode* first_fence = nullptr;
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    if (!c) return;
    if (c->op.rfind("mbar_", 0) == 0 && !first_barrier) first_barrier = c;
    if (c->op == "set_max_nreg" && !first_nreg) first_nreg = c;
    if (c->op == "ptx_cp_async" && !first_cp) first_cp = c;
    if (c->op == "fence_proxy_async" && !first_fence) first_fence = c;
  });
  if (first_cp) {
    user_assert(ctx.target.sm >= 80, first_cp->loc)
        << "T.ptx_cp_async needs sm_80 or newer (target " << ctx.target.arch << ")";
  }
  if (first_fence) {
    user_assert(ctx.target.sm >= 90, first_fence->loc)
        << "T.fence_proxy_async needs sm_90 or newer (target " << ctx.target.arch << ")";
  }
  if (first_nreg) {
    user_assert(ctx.target.arch == "sm_90a", first_nreg->loc)
        << "T.set_max_nreg needs sm_90a (target " << ctx.target.arch << ")";
  }
  if (!first_barrier) return;
  user_assert(ctx.target.sm >= 90, first_barrier->loc)
      << "T.alloc_barrier's mbarriers need sm_90 or newer (target " << ctx.target.arch << ")";
  ctx.options.disable_warp_specialized = true;
  ctx.user_mbarriers = true;
}

}  // namespace tegula::transform
