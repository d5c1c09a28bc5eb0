// Pass: inline_loop_lets.
//
// Expects: the frontend's IR (tile ops not yet expanded).
// Guarantees: a T.Pipelined loop body's leading lets whose values read no memory are
// substituted into it, so its global->shared copies are statements of the body that the
// pipelines (plan_bulk_copies, pipeline_loops) can issue ahead:
//   for k in T.Pipelined(n):                for k in T.Pipelined(n):
//     let kk = k + first                =>    T.copy(K[(k + first) * 64 : +64, :], K_s)
//     T.copy(K[kk * 64 : +64, :], K_s)        ...
// A value is the same wherever it is computed, so a copy issued iterations ahead reads what
// the loop would have.
#include "ir/functor.h"
#include "transform/let_values.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

std::set<const BufferNode*> written_buffers(const Stmt& s) {
  std::set<const BufferNode*> out;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) out.insert(st->buffer.get());
    if (auto* op = x.as<TileOpNode>()) {
      // A tile op writes its last region (copy dst, gemm C, reduce and cumsum out, fill,
      // im2col col), T.atomic_add its first (dst, then the values added); an annotation
      // (annotate_layout, annotate_safe_value, ..., use_swizzle) writes nothing.
      bool annotation = op->op.rfind("annotate_", 0) == 0 || op->op == "use_swizzle";
      if (!op->regions.empty() && !annotation) {
        out.insert((op->op == "atomic_add" ? op->regions.front() : op->regions.back()).buffer.get());
      }
    }
  }, [&](const Expr& e) {
    // An intrinsic may write through an address it is given (an atomic's destination).
    if (auto* c = e.as<CallNode>()) {
      for (const Expr& a : c->args) {
        if (auto* ld = a.as<BufferLoadNode>(); ld && c->op.find("atomic") != std::string::npos) {
          out.insert(ld->buffer.get());
        }
      }
    }
  });
  return out;
}

bool block_invariant(const Expr& value, const std::set<const BufferNode*>& written) {
  bool ok = true;
  post_order(make_evaluate(value), nullptr, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>()) ok &= ld->buffer->scope == Scope::Global && !written.count(ld->buffer.get());
  });
  return ok;
}

namespace {

// Only values that read no memory: substituting a load (a block table's entry) repeats it
// in every copy's address, which measured slower on paged MLA decode than keeping the copy
// in place (H200: 1.11 ms against 0.92 ms).
bool reads_memory(const Expr& value) {
  bool found = false;
  post_order(make_evaluate(value), nullptr, [&](const Expr& x) { found |= x.as<BufferLoadNode>() != nullptr; });
  return found;
}

// Whether a tensor accessed in s lives at the address `var` holds (T.make_tensor): the let
// of such a var stays, its tensors being reached through it.
bool addresses_tensor(const Stmt& s, const Expr& var) {
  bool found = false;
  auto note = [&](const Buffer& b) { found |= b->address.same_as(var); };
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) note(st->buffer);
    if (auto* op = x.as<TileOpNode>()) {
      for (const BufferRegion& r : op->regions) note(r.buffer);
    }
  }, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) note(ld->buffer);
  });
  return found;
}

Stmt inline_leading(const Stmt& s, const std::set<const BufferNode*>& written) {
  auto* let = s.as<LetStmtNode>();
  if (!let || reads_memory(let->value) || !block_invariant(let->value, written)) return s;
  if (addresses_tensor(let->body, let->var)) return s;
  return inline_leading(substitute(let->body, {{let->var, let->value}}), written);
}

class LoopLets : public IRMutator {
 public:
  explicit LoopLets(const std::set<const BufferNode*>& written) : written_(written) {}
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    Stmt inner = IRMutator::mutate_For(self, op);
    op = inner.as<ForNode>();
    if (op->for_kind != ForKind::Pipelined) return inner;
    Stmt body = inline_leading(op->body, written_);
    if (body.same_as(op->body)) return inner;
    return make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
  }

 private:
  const std::set<const BufferNode*>& written_;
};

}  // namespace

void inline_loop_lets(Kernel& k, PassContext& ctx) {
  (void)ctx;
  std::set<const BufferNode*> written = written_buffers(k.body);
  k.body = LoopLets(written).mutate(k.body);
}

}  // namespace tegula::transform
