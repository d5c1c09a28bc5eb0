// Pass: bound_parallel_extents.
//
// Expects: the frontend's IR. A T.Parallel loop whose extent is known only at run time
// but bounded (`for i in T.Parallel(T.min(valid_len, 512))`) becomes the loop over the
// bound with its body under `i < extent`: layout inference lays out constant extents,
// and the guard keeps TileLang's meaning (no iteration past the extent; none at all for
// an extent of 0 or less). A loop starting elsewhere than 0 is shifted the same way.
// Guarantees: every T.Parallel loop has a constant extent and starts at 0, or the
// program is refused at the loop's line (an extent with no constant bound).
#include "ir/analyzer.h"
#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

class BoundParallel : public IRMutator {
 public:
  explicit BoundParallel(const Kernel& k) : an_(kernel_analyzer(k)) {}

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (op->for_kind != ForKind::Parallel) {
      an_.bind_loop(op->var, op->min, op->extent);
      return IRMutator::mutate_For(self, op);
    }
    // The whole nest: `for i, j in T.Parallel(n, 128)` is two loops, and the guard of a
    // level must go inside the innermost one, or the nest would be split.
    std::vector<const ForNode*> nest;
    for (const ForNode* f = op; f && f->for_kind == ForKind::Parallel; f = f->body.as<ForNode>()) nest.push_back(f);
    bool all_constant = true;
    for (auto* f : nest) all_constant &= as_const_int(f->extent) && is_const_int(f->min, 0);
    Stmt body = mutate(nest.back()->body);
    if (all_constant && body.same_as(nest.back()->body)) return self;
    Expr guard;
    std::vector<std::pair<Expr, Expr>> shift;
    std::vector<int64_t> bounds;
    for (auto* f : nest) {
      if (as_const_int(f->extent) && is_const_int(f->min, 0)) {
        bounds.push_back(*as_const_int(f->extent));
        continue;
      }
      Expr extent = an_.simplify(f->extent);
      Interval iv = an_.bound(extent);
      user_assert(iv.hi < (int64_t(1) << 24), f->loc)
          << "T.Parallel extents must be constants, or bounded by one (T.min(n, 512)): the extent "
          << "here has no bound the compiler can see";
      int64_t bound = std::max<int64_t>(iv.hi, 1);
      bounds.push_back(bound);
      if (iv.lo < bound) {
        Expr g = make_binary(BinaryOp::LT, f->var, extent, f->loc);
        guard = guard ? make_binary(BinaryOp::And, guard, g, f->loc) : g;
      }
      if (!is_const_int(f->min, 0)) shift.push_back({f->var, f->var + f->min});
    }
    if (!shift.empty()) body = substitute(body, shift);
    if (guard) body = make_if(guard, body, {}, op->loc);
    for (size_t d = nest.size(); d-- > 0;) {
      const ForNode* f = nest[d];
      body = make_for(f->var, make_int(0), make_int(bounds[d]), ForKind::Parallel, body, f->num_stages, f->loc);
    }
    return body;
  }

 private:
  Analyzer an_;
};

}  // namespace

void bound_parallel_extents(Kernel& k, PassContext&) { k.body = BoundParallel(k).mutate(k.body); }

}  // namespace tegula::transform
