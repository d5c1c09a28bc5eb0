// Pass: run_warp_groups_apart.
//
// Expects: the frontend's IR of a kernel whose threads meet at the program's own mbarriers
// (T.alloc_barrier; other kernels pass unchanged). Guarantees: consecutive branches on
// disjoint ranges of whole warps form one if/else chain, and a serial loop whose body is
// only such branches is one loop per range, each inside its range's branch
// (ir/warp_groups.h): every warp group runs as far as its own waits let it, as on the GPU,
// and the later passes place no barrier between ranges that the program orders itself.
// The reference interpreter runs the same rewrite of the kernel as written.
#include "ir/warp_groups.h"
#include "transform/passes.h"

namespace tegula::transform {

void run_warp_groups_apart(ir::Kernel& k, PassContext&) {
  k.body = ir::run_warp_groups_apart(k.body, k.thread_var, k.threads);
}

}  // namespace tegula::transform
