// Pass: allocate_registers, then lower_tile_ops.
//
// lower_fragments (runs after infer_layout, before partition_loops): gives every fragment
// a per-thread register array with as many entries as its layout has slots.
// lower_tile_ops (after partition_loops): replaces reduce/gemm/annotation ops by the code
// their implementations produce. Guarantees: no TileOp left; no fragment buffer is
// referenced any more, and the kernel's allocs list registers and shared scratch instead.
#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "ops/tile_op.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {
class Lowerer : public ir::IRMutator {
 public:
  Lowerer(ir::Kernel& k, PassContext& ctx) : k_(k), ctx_(ctx) {}
  ir::Stmt mutate_TileOp(const ir::Stmt&, const ir::TileOpNode* op) override {
    const ops::TileOp* impl = ops::find_tile_op(op->op);
    user_assert(impl, op->loc) << "unknown tile operation '" << op->op << "'";
    // One unit for insert_barriers, which places barriers around it, never inside.
    ir::Stmt s = impl->lower(op, ctx_, k_);
    return s ? ir::make_if(ir::make_bool(true), s, {}, op->loc) : s;
  }
  ir::Stmt mutate_LetStmt(const ir::Stmt& self, const ir::LetStmtNode* op) override {
    auto r = ir::thread_scope_range(op->value);
    if (!r) return IRMutator::mutate_LetStmt(self, op);
    ScopedThreads scoped(k_, op->var, r->count());  // a thread scope's ops divide among its threads
    return IRMutator::mutate_LetStmt(self, op);
  }

 private:
  ir::Kernel& k_;
  PassContext& ctx_;
};
}  // namespace

void lower_fragments(ir::Kernel& k, PassContext& ctx) {
  std::vector<ir::Buffer> registers;
  for (auto& b : k.allocs) {
    if (b->scope != ir::Scope::Fragment) continue;
    auto& layout = ctx.layouts.fragment.at(b.get());
    ir::Buffer reg = ir::make_buffer(b->name, ir::Scope::Local, b->dtype, {ir::make_int(layout->slots())}, b->loc);
    ctx.registers[b.get()] = reg;
    registers.push_back(reg);
  }
  // Declared now, so every later stage verifies; the fragments go once tile ops are lowered.
  k.allocs.insert(k.allocs.end(), registers.begin(), registers.end());
}

void lower_tile_ops(ir::Kernel& k, PassContext& ctx) {
  k.body = Lowerer(k, ctx).mutate(k.body);
  std::vector<ir::Buffer> allocs;
  for (auto& b : k.allocs) {
    if (b->scope != ir::Scope::Fragment) allocs.push_back(b);
  }
  for (auto& b : ctx.extra_locals) allocs.push_back(b);
  for (auto& b : ctx.extra_shared) allocs.push_back(b);
  ctx.extra_locals.clear();
  ctx.extra_shared.clear();
  k.allocs = allocs;
}

}  // namespace tegula::transform
