// Pass: apply_safe_values.
//
// Expects: tile ops expanded into loops and views resolved (every read of a global tensor
// is a BufferLoad of the tensor itself); ctx.safe_values from read_annotations
// (T.annotate_safe_value({A: v})).
// Guarantees: every read of such a tensor A that may fall past its edge is
// select(inside A, A[idx], v). partition_loops' masks (0 past an edge) and the vectoriser
// then meet an access whose value past the edge is already decided, so a program reads v
// there wherever the read sits: a T.Parallel loop, a T.copy, scalar code. Addresses (an
// atomic's, an explicit-width access's, a bulk copy's) are not reads and stay as they
// are; the bulk copy engine is not used for such a tensor (plan_bulk_copies), since it
// fills 0. With tl.disable_safe_memory_legalize nothing is masked, this value included.
//
// Example, A of shape (M, N) annotated with 10:
//   S[i, j] = A[by * 128 + i - 10, j]
// becomes
//   S[i, j] = select(0 <= by * 128 + i - 10 && by * 128 + i - 10 < M, A[by * 128 + i - 10, j], 10)
#include "ir/functor.h"
#include "ir/wide_access.h"
#include "transform/partition.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {

using namespace ir;

class ApplySafeValues : public IRMutator {
 public:
  ApplySafeValues(const Kernel& k, const PassContext& ctx) : an_(kernel_analyzer(k)), values_(ctx.safe_values) {}

  // A loop's variable takes its range, so that reads it keeps inside the tensor stay plain.
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (!an_.has_bound(op->var)) an_.bind_loop(op->var, op->min, op->extent);
    return IRMutator::mutate_For(self, op);
  }

  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    Expr e = IRMutator::mutate_BufferLoad(self, op);
    auto it = values_.find(op->buffer.get());
    if (it == values_.end() || op->dtype.lanes != 1) return e;
    auto* load = e.as<BufferLoadNode>();
    Expr inside = in_bounds(an_, load->buffer, load->indices);
    if (!inside) return e;
    return make_select(inside, e, make_cast(op->dtype, it->second), op->loc);
  }

  // An address is not a read: its indices are rewritten, the access itself is not.
  Expr mutate_Call(const Expr& self, const CallNode* op) override {
    bool addressed = wide_access(op) || op->op == "atomic_add" || op->op == "tma_copy";
    if (!addressed || op->args.empty()) return IRMutator::mutate_Call(self, op);
    std::vector<Expr> args = op->args;
    if (auto* addr = args[0].as<BufferLoadNode>()) {
      std::vector<Expr> idx;
      for (auto& i : addr->indices) idx.push_back(mutate(i));
      args[0] = make_load(addr->buffer, idx, addr->loc, addr->dtype.lanes);
    }
    for (size_t i = 1; i < args.size(); ++i) args[i] = mutate(args[i]);
    return make_call(op->op, std::move(args), op->dtype, op->loc);
  }

 private:
  Analyzer an_;
  const std::map<const BufferNode*, Expr>& values_;
};

}  // namespace

void apply_safe_values(Kernel& k, PassContext& ctx) {
  if (ctx.safe_values.empty() || ctx.options.disable_safe_memory) return;
  k.body = ApplySafeValues(k, ctx).mutate(k.body);
}

}  // namespace tegula::transform
