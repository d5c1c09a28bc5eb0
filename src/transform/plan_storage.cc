// Pass: plan_storage.
//
// Expects: every shared buffer (the author's and the passes' scratch) in k.allocs with a
// constant shape. Guarantees: k.smem_offset gives each one a 128-byte aligned offset in
// the kernel's one dynamic shared-memory pool (1024-byte for wgmma operands, whose
// swizzle the hardware computes from address bits), and k.smem_bytes its size. Fragments must
// be gone by now: one still referenced means it was used outside T.Parallel or a tile op.
// A pool larger than the target's per-block limit is the user's error, reported at the
// kernel's line with every buffer's share: the driver would only refuse it at load time.
#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {

// Largest dynamic shared memory one block may opt into, by compute capability (the CUDA
// programming guide's table of technical specifications; 1 KiB of each SM's memory is
// reserved by the system and already left out).
int64_t smem_limit(int sm) {
  static const std::pair<int, int64_t> table[] = {
      {70, 96}, {72, 96}, {75, 64}, {80, 163}, {86, 99}, {87, 163}, {89, 99},
      {90, 227}, {100, 227}, {101, 227}, {103, 227}, {110, 227}, {120, 99}, {121, 99},
  };
  int64_t kib = 99;  // an architecture not listed: the smallest limit of the recent ones
  for (auto& [arch, limit] : table) {
    if (arch == sm) kib = limit;
  }
  return kib * 1024;
}

void check_smem_limit(const ir::Kernel& k, const Target& target) {
  int64_t limit = smem_limit(target.sm);
  if (k.smem_bytes <= limit) return;
  Text os;
  for (auto& b : k.allocs) {
    if (b->scope != ir::Scope::Shared) continue;
    os << "\n  " << b->name << ": " << b->num_elements_const() * b->dtype.bytes() << " bytes (" << b->dtype.name()
       << "[";
    for (size_t d = 0; d < b->shape.size(); ++d) os << (d ? ", " : "") << *ir::as_const_int(b->shape[d]);
    os << "])";
  }
  user_error(k.loc) << "kernel '" << k.name << "' needs " << k.smem_bytes << " bytes of shared memory, more than "
                    << target.arch << " allows one block (" << limit << " bytes = " << limit / 1024
                    << " KiB); its shared buffers (T.Pipelined stages included, alignment padding aside):" << os.str()
                    << "\nUse smaller tiles or fewer pipeline stages.";
}

}  // namespace

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
  check_smem_limit(k, ctx.target);
  k.smem_swizzled = ctx.swizzled;
  k.smem_panelled = ctx.panelled;
  k.uses_wgmma = ctx.wgmma;
}

}  // namespace tegula::transform
