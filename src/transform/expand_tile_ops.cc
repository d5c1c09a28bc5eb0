// Pass: expand_tile_ops, and read_annotations.
//
// read_annotations expects the frontend's IR; it refuses thread block clusters (and their
// barrier and rank) on a target before sm_90, records T.use_swizzle on the kernel,
// T.annotate_layout({buf: T.layout.make_swizzled_layout(buf)}) in the set of shared
// buffers stored swizzled (the same XOR swizzle gemm operands get; see gemm.h), and with
// them the epilogue tiles swizzle_epilogue_tiles finds (below), a global
// tensor's T.Layout in the kernel's global_layouts (ir/index_map.h), which every later
// access to it goes through, T.annotate_safe_value({A: v}) in ctx.safe_values (the
// annotation statements themselves leave the kernel), and T.annotate_min_blocks_per_sm(n)
// on the kernel (the launch bounds the printer writes).
// expand_tile_ops replaces copy, fill and atomic_add by the T.Parallel nests they stand
// for (ops/copy.cc), so that layout inference, partitioning, masking and vectorising
// treat them like the author's own loops; a reduction whose source or destination is
// shared memory becomes one over fragments the pass allocates, staged by copies
// (ops/reduce.cc). Guarantees: no copy/fill/atomic_add op left; every reduce is over
// fragments.
#include <map>

#include "ir/functor.h"
#include "ir/index_map.h"
#include "ops/region.h"
#include "ops/tile_op.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {
class Expander : public ir::IRMutator {
 public:
  Expander(ir::Kernel& k, PassContext& ctx) : k_(k), ctx_(ctx) {}
  ir::Stmt mutate_TileOp(const ir::Stmt& self, const ir::TileOpNode* op) override {
    const ops::TileOp* impl = ops::find_tile_op(op->op);
    user_assert(impl, op->loc) << "unknown tile operation '" << op->op << "'";
    ir::Stmt s = impl->expand(op, k_, ctx_);
    // An op may stand for other tile ops (a reduction over shared memory: copies around
    // a reduction over fragments): those expand in turn.
    return s ? mutate(s) : self;
  }

 private:
  ir::Kernel& k_;
  PassContext& ctx_;
};
}  // namespace

// T.annotate_safe_value({A: v}) and T.annotate_min_blocks_per_sm(n): hints for the whole
// kernel, wherever they are written; read, and taken out of the body.
class ReadKernelHints : public ir::IRMutator {
 public:
  ReadKernelHints(ir::Kernel& k, PassContext& ctx) : k_(k), ctx_(ctx) {}
  ir::Stmt mutate_TileOp(const ir::Stmt& self, const ir::TileOpNode* op) override {
    if (op->op == "annotate_min_blocks_per_sm") {
      k_.min_blocks_per_sm = int(op->attr_int("blocks", 0));
      return ir::make_seq({}, op->loc);
    }
    if (op->op != "annotate_safe_value") return self;
    const ir::Buffer& b = op->regions.at(0).buffer;
    user_assert(b->scope == ir::Scope::Global && op->args.size() == 1, op->loc)
        << "T.annotate_safe_value: '" << b->name << "' is not a global tensor";
    ctx_.safe_values[b.get()] = op->args[0];
    return ir::make_seq({}, op->loc);
  }

 private:
  ir::Kernel& k_;
  PassContext& ctx_;
};

void swizzle_epilogue_tiles(ir::Kernel& k, PassContext& ctx);

void read_annotations(ir::Kernel& k, PassContext& ctx) {
  k.body = ReadKernelHints(k, ctx).mutate(k.body);
  k.global_layouts = ir::index_maps(k);
  auto dims = [&] {
    return "(" + std::to_string(k.cluster_dims[0]) + ", " + std::to_string(k.cluster_dims[1]) + ", " +
           std::to_string(k.cluster_dims[2]) + ")";
  };
  user_assert(k.cluster_dims.empty() || ctx.target.sm >= 90, k.loc)
      << "T.ClusterKernel: cluster_dims=" << dims() << " needs thread block clusters, which sm_90 and newer have; "
      << "the target is " << ctx.target.arch;
  ir::post_order(k.body, [&](const ir::Stmt& s) {
    auto* op = s.as<ir::TileOpNode>();
    if (op && op->op == "annotate_layout") {
      const ir::Buffer& b = op->regions.at(0).buffer;
      std::string kind = op->attr_str("layout", "");
      if (kind == "fragment") return;  // a T.Fragment: layout inference fixes it (ops/annotation.cc)
      if (kind == "map") return;       // a global tensor's T.Layout: index_maps above
      user_assert(kind == "swizzled", op->loc) << "T.annotate_layout: unknown layout kind '" << kind << "'";
      user_assert(b->scope == ir::Scope::Shared, op->loc)
          << "T.annotate_layout: only shared-memory buffers take a swizzled layout ('" << b->name << "' is "
          << ir::scope_name(b->scope) << ")";
      const int64_t* cols = b->shape.size() == 2 ? ir::as_const_int(b->shape[1]) : nullptr;
      int64_t row_bytes = cols ? *cols * b->dtype.bytes() : 0;
      int64_t chunks = row_bytes / 16;
      user_assert(cols && row_bytes % 16 == 0 && chunks >= 2 && (chunks & (chunks - 1)) == 0, op->loc)
          << "T.annotate_layout: the swizzled layout needs a 2-D buffer whose rows are a power of two (>= 2) "
          << "of 16-byte chunks; '" << b->name << "' is " << b->dtype.name() << ", " << row_bytes << " bytes a row," << " with " << b->shape.size() << " dimensions";
      ctx.swizzled.insert(b.get());
      return;
    }
    if (!op || op->op != "use_swizzle") return;
    // Panels reorder blocks across the grid; a cluster is a fixed tile of the launch grid.
    user_assert(k.cluster_dims.empty(), op->loc)
        << "T.use_swizzle: not supported in a kernel with cluster_dims=" << dims()
        << " (a panel would split the clusters); remove one of them";
    if (op->attr_int("enable", 1)) {
      k.panel_size = int(op->attr_int("panel_size", 8));
      k.swizzle_row_major = op->attr_str("order", "row") == "row";
    }
  }, [&](const ir::Expr& e) {
    auto* c = e.as<ir::CallNode>();
    bool cluster_call = c && (c->op.rfind("cluster_", 0) == 0 || c->op == "block_rank_in_cluster");
    user_assert(!cluster_call || ctx.target.sm >= 90, c ? c->loc : k.loc)
        << "T." << (c ? c->op : "") << ": thread block clusters need sm_90 or newer; the target is " << ctx.target.arch;
  });
  swizzle_epilogue_tiles(k, ctx);
}

// Shared tiles a program stages its epilogue through (T.copy(C_local, C_shared);
// T.copy(C_shared, C[...])) get the swizzled layout when nothing else touches them. Copied
// from an accumulator, each warp store writes one column pair of 8 rows; on rows of 128
// bytes or a multiple, plain rows put those 8 in one bank (8 cycles a store). Swizzled,
// each 16-byte chunk moved by its row mod 8, they fall in 8 banks, and a row read along is
// still one row's chunks. Only tiles every access of which is a whole-tile T.copy, at least
// one from a fragment, none from global memory (a bulk tensor copy writes plain rows), and
// that no view reads.
void swizzle_epilogue_tiles(ir::Kernel& k, PassContext& ctx) {
  std::map<const ir::BufferNode*, int> from_fragment;  // 1: copied from a fragment; -1: ruled out
  auto rule_out = [&](const ir::Buffer& b) {
    if (b->scope == ir::Scope::Shared) from_fragment[b.get()] = -1;
    if (b->view_of) from_fragment[b->view_of.get()] = -1;  // read through a view: not only copies
  };
  ir::post_order(k.body, [&](const ir::Stmt& s) {
    if (auto* st = s.as<ir::BufferStoreNode>()) rule_out(st->buffer);
    auto* op = s.as<ir::TileOpNode>();
    if (!op) return;
    bool copy = op->op == "copy" && op->regions.size() == 2;
    for (size_t i = 0; i < op->regions.size(); ++i) {
      const ir::Buffer& b = op->regions[i].buffer;
      if (b->view_of) rule_out(b);
      if (b->scope != ir::Scope::Shared) continue;
      bool whole = copy && ops::is_whole(op->regions[i]);
      if (!whole || (i == 1 && op->regions[0].buffer->scope == ir::Scope::Global)) {
        rule_out(b);
      } else if (i == 1 && op->regions[0].buffer->scope == ir::Scope::Fragment && from_fragment[b.get()] == 0) {
        from_fragment[b.get()] = 1;
      }
    }
  }, [&](const ir::Expr& e) {
    if (auto* ld = e.as<ir::BufferLoadNode>()) rule_out(ld->buffer);
  });
  for (const ir::Buffer& b : k.allocs) {
    if (b->view_of) from_fragment[b->view_of.get()] = -1;
  }
  for (const ir::Buffer& b : k.allocs) {
    auto it = from_fragment.find(b.get());
    if (it == from_fragment.end() || it->second != 1 || b->shape.size() != 2 || b->view_of) continue;
    const int64_t* cols = ir::as_const_int(b->shape[1]);
    const int64_t* rows = ir::as_const_int(b->shape[0]);
    int64_t chunks = cols ? *cols * b->dtype.bytes() / 16 : 0;
    if (!rows || *rows % 8 != 0 || !cols || (*cols * b->dtype.bytes()) % 16 != 0 || chunks < 8 ||
        (chunks & (chunks - 1)) != 0) {
      continue;
    }
    ctx.swizzled.insert(b.get());
  }
}

void expand_tile_ops(ir::Kernel& k, PassContext& ctx) { k.body = Expander(k, ctx).mutate(k.body); }

}  // namespace tegula::transform
