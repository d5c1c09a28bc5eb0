// Pass: plan_storage.
//
// Expects: every shared buffer (the author's and the passes' scratch) in k.allocs with a
// constant shape. Guarantees: k.smem_offset gives each one a 128-byte aligned offset in
// the kernel's one dynamic shared-memory pool (1024-byte for wgmma operands, whose
// swizzle the hardware computes from address bits), and k.smem_bytes its size. Fragments must
// be gone by now: one still referenced means it was used outside T.Parallel or a tile op.
// When the buffers do not fit the target's per-block limit side by side, buffers whose
// lifetimes (live_ranges) do not overlap share bytes. A pool that still does not fit is
// the user's error, reported at the kernel's line with every buffer's share: the driver
// would only refuse it at load time.
#include <functional>
#include <set>

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

// Where each shared buffer is live: [first, last] positions in the kernel's statements
// in program order. Seq, LetStmt and serial/pipelined loop bodies are walked; any other
// statement (a branch, a partitioned T.Parallel nest) is one position. A buffer used
// inside a loop is live over the whole loop when it is also used outside it or when its
// first use in the body is a read (a value carried from the previous iteration). Operands
// of an issued wgmma stay live until a wgmma wait, destinations of cp.async until a
// cp.async wait: the hardware reads or writes them in between.
// Warp specialised, positions are those of the consumer branch: the producer fills its
// buffers from the kernel's start, so each is live from position 0 until the consumers'
// last use (they wait for every copy it issues); mbarriers, which threads still arrive on
// after their own last wait, are live throughout.
std::map<const ir::BufferNode*, std::pair<int, int>> live_ranges(const ir::Kernel& k, const PassContext& ctx) {
  using Live = std::map<const ir::BufferNode*, std::pair<int, int>>;
  Live live;
  int pos = 0;
  std::set<const ir::BufferNode*> pending_mma, pending_copy;
  struct Frame {
    int begin;
    std::set<const ir::BufferNode*> used, read_first;
  };
  std::vector<Frame> loops;
  struct Done {
    int begin, end;
    std::set<const ir::BufferNode*> used, read_first;
  };
  std::vector<Done> frames_done;
  auto note = [&](const ir::BufferNode* b, bool write) {
    if (b->scope != ir::Scope::Shared) return;
    auto it = live.find(b);
    if (it == live.end()) live[b] = {pos, pos};
    else it->second.second = pos;
    for (auto& f : loops) {
      if (f.used.insert(b).second && !write) f.read_first.insert(b);
    }
  };
  auto leaf = [&](const ir::Stmt& s) {
    bool mma_wait = false, copy_wait = false;
    std::vector<const ir::BufferNode*> mma_operands, copy_dests;
    ir::post_order(s, [&](const ir::Stmt& x) {
      if (auto* st = x.as<ir::BufferStoreNode>()) note(st->buffer.get(), true);
    }, [&](const ir::Expr& e) {
      if (auto* ld = e.as<ir::BufferLoadNode>()) note(ld->buffer.get(), false);
      if (auto* c = e.as<ir::CallNode>()) {
        if (c->op == "wgmma_wait") mma_wait = true;
        if (c->op == "cp_async_wait") copy_wait = true;
        if (c->op == "wgmma_ss" || c->op == "wgmma_rs") {
          for (auto& a : c->args) {
            if (auto* ld = a.as<ir::BufferLoadNode>()) mma_operands.push_back(ld->buffer.get());
          }
        }
        if (c->op == "cp_async") copy_dests.push_back(c->args[0].as<ir::BufferLoadNode>()->buffer.get());
      }
    });
    for (auto* b : pending_mma) note(b, false);
    for (auto* b : pending_copy) note(b, true);
    if (mma_wait) pending_mma.clear();
    if (copy_wait) pending_copy.clear();
    // A statement that waits as well as issues (a loop, a gemm's issue-and-wait) is taken
    // to wait for what it issued.
    if (!mma_wait) pending_mma.insert(mma_operands.begin(), mma_operands.end());
    if (!copy_wait) pending_copy.insert(copy_dests.begin(), copy_dests.end());
    ++pos;
  };
  std::set<const ir::BufferNode*> produced;
  std::function<void(const ir::Stmt&)> walk = [&](const ir::Stmt& s) {
    auto* br = s.as<ir::IfThenElseNode>();
    auto* split = br ? br->cond.as<ir::CallNode>() : nullptr;
    if (split && split->op == "ws_producer") {
      ir::post_order(br->then_case, [&](const ir::Stmt& x) {
        if (auto* st = x.as<ir::BufferStoreNode>()) produced.insert(st->buffer.get());
      }, [&](const ir::Expr& e) {
        if (auto* ld = e.as<ir::BufferLoadNode>()) produced.insert(ld->buffer.get());
      });
      walk(br->else_case);
    } else if (auto* seq = s.as<ir::SeqNode>()) {
      for (auto& c : seq->seq) walk(c);
    } else if (auto* let = s.as<ir::LetStmtNode>()) {
      leaf(ir::make_evaluate(let->value, let->loc));
      walk(let->body);
    } else if (auto* f = s.as<ir::ForNode>(); f && f->for_kind != ir::ForKind::Parallel) {
      loops.push_back({pos, {}, {}});
      walk(f->body);
      Frame frame = std::move(loops.back());
      loops.pop_back();
      int end = pos - 1;
      frames_done.push_back({frame.begin, end, std::move(frame.used), std::move(frame.read_first)});
      ++pos;
    } else {
      leaf(s);
    }
  };
  walk(k.body);
  // Innermost loops first, so that a widened range is seen by the loops around it.
  for (auto& f : frames_done) {
    for (auto* b : f.used) {
      auto& r = live[b];
      bool outside = r.first < f.begin || r.second > f.end;
      if (outside || f.read_first.count(b)) r = {std::min(r.first, f.begin), std::max(r.second, f.end)};
    }
  }
  for (auto* b : produced) {
    if (b->scope != ir::Scope::Shared) continue;
    auto it = live.find(b);
    live[b] = {0, it == live.end() ? pos : it->second.second};
  }
  for (auto& m : ctx.mbarriers) live[m.buffer.get()] = {0, pos};
  return live;
}

// Offsets with buffers whose live ranges do not meet sharing bytes: each buffer, largest
// first, at the lowest aligned offset clear of every placed buffer it is live with.
// insert_barriers, which runs next, treats buffers that share bytes as one, so a barrier
// separates the last use of one from the first use of the next.
int64_t plan_shared_reuse(ir::Kernel& k, const PassContext& ctx) {
  auto live = live_ranges(k, ctx);
  std::vector<ir::Buffer> bufs;
  for (auto& b : k.allocs) {
    if (b->scope == ir::Scope::Shared) bufs.push_back(b);
  }
  auto bytes = [](const ir::Buffer& b) { return b->num_elements_const() * b->dtype.bytes(); };
  std::stable_sort(bufs.begin(), bufs.end(), [&](const ir::Buffer& a, const ir::Buffer& b) { return bytes(a) > bytes(b); });
  struct Placed {
    int64_t lo, hi;
    std::pair<int, int> when;
  };
  std::vector<Placed> placed;
  int64_t top = 0;
  for (auto& b : bufs) {
    auto it = live.find(b.get());
    std::pair<int, int> when = it == live.end() ? std::make_pair(-1, -1) : it->second;
    int64_t align = ctx.panelled.count(b.get()) ? 1024 : 128;
    int64_t offset = 0;
    for (bool moved = true; moved;) {
      moved = false;
      offset = (offset + align - 1) / align * align;
      for (auto& p : placed) {
        bool together = when.first >= 0 && p.when.first >= 0 && when.first <= p.when.second && p.when.first <= when.second;
        if (together && offset < p.hi && p.lo < offset + bytes(b)) {
          offset = p.hi;
          moved = true;
        }
      }
    }
    k.smem_offset[b.get()] = offset;
    placed.push_back({offset, offset + bytes(b), when});
    top = std::max(top, offset + bytes(b));
  }
  return top;
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
  // Buffers each in their own bytes keep every kernel that fits simple to read and to
  // simulate; one that does not fit has buffers whose lifetimes do not overlap share bytes
  // (an attention output tile staged where the K/V stages were).
  // Warp specialised, the producer's buffers are live from the start (live_ranges); one
  // that still does not fit takes the cp.async form, whose stages live only in the loop.
  if (k.smem_bytes > smem_limit(ctx.target.sm)) {
    auto separate = k.smem_offset;
    int64_t shared_bytes = plan_shared_reuse(k, ctx);
    if (shared_bytes < k.smem_bytes) k.smem_bytes = shared_bytes;
    else k.smem_offset = separate;
  }
  if (k.consumer_threads && k.smem_bytes > smem_limit(ctx.target.sm)) throw WarpSpecializationRefused{};
  check_smem_limit(k, ctx.target);
  k.smem_swizzled = ctx.swizzled;
  k.smem_panelled = ctx.panelled;
  k.uses_wgmma = !ctx.wgmma_accumulators.empty();
}

}  // namespace tegula::transform
