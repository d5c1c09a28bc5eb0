// Rewrites of T.Parallel nests ahead of layout inference (layout_inference.cc); what each
// does is in layout_rewrites.h.
#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "transform/layout_rewrites.h"

namespace tegula::transform {

using namespace ir;

namespace {

// `for i, j in T.Parallel(2, 4): t[i, j] = ...` on a (4, 4) fragment writes part of it.
// Such a nest runs over the fragment's whole shape with the rest masked off, so that it
// can take the fragment's layout (which places every element of the whole tile). Done
// when every fragment the nest indexes by exactly its variables has one shape, at least
// the nest's extents.
class PadToFragment : public IRMutator {
 public:
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (op->for_kind != ForKind::Parallel) return IRMutator::mutate_For(self, op);
    std::vector<const ForNode*> loops;
    for (const ForNode* f = op; f && f->for_kind == ForKind::Parallel; f = f->body.as<ForNode>()) loops.push_back(f);
    std::vector<int64_t> extents;
    for (auto* f : loops) {
      const int64_t* e = as_const_int(f->extent);
      if (!e || !is_const_int(f->min, 0)) return self;
      extents.push_back(*e);
    }
    const Stmt& body = loops.back()->body;
    std::vector<int64_t> shape;
    bool consistent = true;
    post_order(body, [&](const Stmt& s) {
      if (auto* st = s.as<BufferStoreNode>()) note(st->buffer, st->indices, loops, &shape, &consistent);
    }, [&](const Expr& e) {
      if (auto* ld = e.as<BufferLoadNode>()) note(ld->buffer, ld->indices, loops, &shape, &consistent);
    });
    if (!consistent || shape.empty() || shape == extents) return self;
    Expr inside;
    for (size_t d = 0; d < loops.size(); ++d) {
      if (shape[d] < extents[d]) return self;
      if (shape[d] == extents[d]) continue;
      Expr c = make_binary(BinaryOp::LT, loops[d]->var, make_int(extents[d]));
      inside = inside ? (inside && c) : c;
    }
    Stmt out = make_if(inside, body, {}, op->loc);
    for (int d = int(loops.size()) - 1; d >= 0; --d) {
      out = make_for(loops[d]->var, loops[d]->min, make_int(shape[d]), ForKind::Parallel, out, 0, loops[d]->loc);
    }
    return out;
  }

 private:
  static void note(const Buffer& b, const std::vector<Expr>& idx, const std::vector<const ForNode*>& loops,
                   std::vector<int64_t>* shape, bool* consistent) {
    if (b->scope != Scope::Fragment || idx.size() != loops.size()) return;
    for (size_t d = 0; d < idx.size(); ++d) {
      if (!idx[d].same_as(loops[d]->var)) return;
    }
    std::vector<int64_t> s;
    for (auto& e : b->shape) {
      const int64_t* v = as_const_int(e);
      if (!v) return;
      s.push_back(*v);
    }
    if (shape->empty()) *shape = s;
    *consistent &= *shape == s;
  }
};

// A T.Parallel nest that touches no fragment and stores only into local buffers is each
// thread's own (TileLang's rule: `for i in T.Parallel(n): r[i] = A[r0 + i]` fills every
// thread's whole r): it runs whole in every thread, as unrolled loops, unpartitioned.
class ThreadPrivateNests : public IRMutator {
 public:
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (op->for_kind != ForKind::Parallel || !thread_private_nest(self)) return IRMutator::mutate_For(self, op);
    std::vector<const ForNode*> loops;
    for (const ForNode* f = op; f && f->for_kind == ForKind::Parallel; f = f->body.as<ForNode>()) loops.push_back(f);
    Stmt out = mutate(loops.back()->body);
    for (int d = int(loops.size()) - 1; d >= 0; --d) {
      out = make_for(loops[d]->var, loops[d]->min, loops[d]->extent, ForKind::Unrolled, out, 0, loops[d]->loc);
    }
    return out;
  }
};

}  // namespace

Stmt pad_nests_to_fragments(const Stmt& body) { return PadToFragment().mutate(body); }

Stmt run_thread_private_nests(const Stmt& body) { return ThreadPrivateNests().mutate(body); }

}  // namespace tegula::transform
