// The rewrites behind infer_layout's crossings through shared memory
// (layout_inference.cc decides them; layout_rewrites.h says what each does).
#include "transform/layout_rewrites.h"

#include "ir/functor.h"

namespace tegula::transform {

using namespace ir;

namespace {

// A fresh shared buffer of frag's shape and type.
Buffer scratch_for(const Buffer& frag, PassContext& ctx, const SourceLoc& loc) {
  Buffer scratch = make_buffer(ctx.fresh_name(frag->name + "_exchange"), Scope::Shared, frag->dtype, frag->shape, loc);
  ctx.extra_shared.push_back(scratch);
  return scratch;
}

// dst[i, j, ...] = src[i, j, ...] as a T.Parallel nest running with `frag`'s layout.
Stmt copy_nest(const Buffer& dst, const Buffer& src, const Buffer& frag, PassContext& ctx, const SourceLoc& loc) {
  std::vector<Expr> vars;
  for (size_t d = 0; d < frag->shape.size(); ++d) vars.push_back(make_var(ctx.fresh_name("e")));
  Stmt nest = make_store(dst, vars, make_load(src, vars, loc), loc);
  for (int d = int(vars.size()) - 1; d >= 0; --d) {
    nest = make_for(vars[d], make_int(0), frag->shape[d], ForKind::Parallel, nest, 0, loc);
  }
  ctx.layouts.loop[nest.get()] = ctx.layouts.fragment.at(frag.get());
  return nest;
}

// Gives each loop Inference found reading a fragment held in another layout a shared
// copy of that fragment: before the loop, a T.Parallel nest with the fragment's layout
// stores it to a fresh shared buffer; the loop reads that buffer instead. insert_barriers
// later fences the store from the reads.
class InsertExchanges : public IRMutator {
 public:
  InsertExchanges(const std::map<const StmtNode*, std::vector<Buffer>>& todo,
                  const std::map<const StmtNode*, Buffer>& writes, PassContext& ctx)
      : todo_(todo), writes_(writes), ctx_(ctx) {}

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    auto wr = writes_.find(op);
    if (wr != writes_.end()) {
      // The loop stores into the scratch; a nest with the fragment's layout loads it back.
      Buffer scratch = scratch_for(wr->second, ctx_, op->loc);
      Stmt loop = RedirectStores(wr->second.get(), scratch).mutate(self);
      return make_seq({rekey(op, loop), copy_nest(wr->second, scratch, wr->second, ctx_, op->loc)}, op->loc);
    }
    auto it = todo_.find(op);
    if (it == todo_.end()) return IRMutator::mutate_For(self, op);
    Stmt loop = self;
    std::vector<Stmt> out;
    for (const Buffer& frag : it->second) {
      Buffer scratch = scratch_for(frag, ctx_, op->loc);
      loop = Redirect(frag.get(), scratch).mutate(loop);
      out.push_back(copy_nest(scratch, frag, frag, ctx_, op->loc));
    }
    out.push_back(rekey(op, loop));
    return make_seq(out, op->loc);
  }

 private:
  // The rewritten loop keeps the layout the original was given.
  Stmt rekey(const ForNode* old, const Stmt& loop) {
    LayoutMap& lm = ctx_.layouts;
    auto layout = lm.loop.at(old);
    lm.loop.erase(old);
    lm.loop[loop.get()] = layout;
    return loop;
  }

  class Redirect : public IRMutator {
   public:
    Redirect(const BufferNode* from, Buffer to) : from_(from), to_(std::move(to)) {}
    Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
      if (op->buffer.get() != from_) return IRMutator::mutate_BufferLoad(self, op);
      std::vector<Expr> idx;
      for (auto& i : op->indices) idx.push_back(mutate(i));
      return make_load(to_, idx, op->loc, op->dtype.lanes);
    }

   private:
    const BufferNode* from_;
    Buffer to_;
  };

  class RedirectStores : public IRMutator {
   public:
    RedirectStores(const BufferNode* from, Buffer to) : from_(from), to_(std::move(to)) {}
    Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
      if (op->buffer.get() != from_) return IRMutator::mutate_BufferStore(self, op);
      std::vector<Expr> idx;
      for (auto& i : op->indices) idx.push_back(mutate(i));
      return make_store(to_, idx, mutate(op->value), op->loc);
    }

   private:
    const BufferNode* from_;
    Buffer to_;
  };

  const std::map<const StmtNode*, std::vector<Buffer>>& todo_;
  const std::map<const StmtNode*, Buffer>& writes_;
  PassContext& ctx_;
};

// A reduction into a fragment held in a layout other than its rows' (Inference's
// reduce_exchanges): it reduces into a fresh fragment in the rows' layout, initialised
// from the output when the reduction accumulates (clear=False), and the rows reach the
// output through a fresh shared buffer, each side copied with its own layout.
class InsertReduceExchanges : public IRMutator {
 public:
  InsertReduceExchanges(const std::map<const TileOpNode*, layout::FragmentPtr>& todo, Kernel& k, PassContext& ctx)
      : todo_(todo), k_(k), ctx_(ctx) {}

  Stmt mutate_TileOp(const Stmt& self, const TileOpNode* op) override {
    auto it = todo_.find(op);
    if (it == todo_.end()) return self;
    const Buffer& dst = op->regions.at(1).buffer;
    Buffer rows = make_buffer(ctx_.fresh_name(dst->name + "_rows"), Scope::Fragment, dst->dtype, dst->shape, op->loc);
    k_.allocs.push_back(rows);
    ctx_.layouts.fragment[rows.get()] = it->second;
    ctx_.layouts.decided_at[rows.get()] = op->loc;
    Buffer scratch = scratch_for(dst, ctx_, op->loc);
    std::vector<Stmt> out;
    if (op->attr_int("clear", 1) == 0) {
      out.push_back(copy_nest(scratch, dst, dst, ctx_, op->loc));
      out.push_back(copy_nest(rows, scratch, rows, ctx_, op->loc));
    }
    std::vector<BufferRegion> regions = op->regions;
    regions[1].buffer = rows;
    out.push_back(make_tile_op(op->op, regions, op->args, op->attrs, op->loc));
    out.push_back(copy_nest(scratch, rows, rows, ctx_, op->loc));
    out.push_back(copy_nest(dst, scratch, dst, ctx_, op->loc));
    return make_seq(out, op->loc);
  }

 private:
  const std::map<const TileOpNode*, layout::FragmentPtr>& todo_;
  Kernel& k_;
  PassContext& ctx_;
};

}  // namespace

Stmt insert_exchanges(const Stmt& body, const std::map<const StmtNode*, std::vector<Buffer>>& reads,
                      const std::map<const StmtNode*, Buffer>& writes, PassContext& ctx) {
  return InsertExchanges(reads, writes, ctx).mutate(body);
}

Stmt insert_reduce_exchanges(const Stmt& body, const std::map<const TileOpNode*, layout::FragmentPtr>& todo,
                             Kernel& k, PassContext& ctx) {
  return InsertReduceExchanges(todo, k, ctx).mutate(body);
}

}  // namespace tegula::transform
