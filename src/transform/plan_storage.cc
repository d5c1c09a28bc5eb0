// Pass: plan_storage.
//
// Expects: every shared buffer (the author's and the passes' scratch) in k.allocs with a
// constant shape. Guarantees: k.smem_offset gives each one a 128-byte aligned offset in
// the kernel's one dynamic shared-memory pool (1024-byte for wgmma operands, whose
// swizzle the hardware computes from address bits), and k.smem_bytes its size. Fragments must
// be gone by now: one still referenced means it was used outside T.Parallel or a tile op.
#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

void plan_storage(ir::Kernel& k, PassContext& ctx) {
  ir::post_order(k.body, [&](const ir::Stmt& s) {
    const ir::BufferNode* b = nullptr;
    if (auto* st = s.as<ir::BufferStoreNode>()) b = st->buffer.get();
    if (b && b->scope == ir::Scope::Fragment) {
      user_error(s->loc) << "fragment '" << b->name
                         << "' can only be accessed inside T.Parallel loops and tile operations";
    }
  }, [&](const ir::Expr& e) {
    auto* ld = e.as<ir::BufferLoadNode>();
    if (ld && ld->buffer->scope == ir::Scope::Fragment) {
      user_error(e->loc) << "fragment '" << ld->buffer->name
                         << "' can only be accessed inside T.Parallel loops and tile operations";
    }
  });
  int64_t offset = 0;
  for (auto& b : k.allocs) {
    if (b->scope != ir::Scope::Shared) continue;
    int64_t n = b->num_elements_const();
    user_assert(n > 0, b->loc) << "shared buffer '" << b->name << "' needs a constant shape";
    int64_t align = ctx.panelled.count(b.get()) ? 1024 : 128;
    offset = (offset + align - 1) / align * align;
    k.smem_offset[b.get()] = offset;
    offset += n * b->dtype.bytes();
  }
  k.smem_bytes = offset;
  k.smem_swizzled = ctx.swizzled;
  k.smem_panelled = ctx.panelled;
  k.uses_wgmma = ctx.wgmma;
}

}  // namespace tegula::transform
