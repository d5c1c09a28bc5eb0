// See widen_threads.h.
#include "transform/widen_threads.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "ir/functor.h"
#include "ir/thread_guard.h"

namespace tegula::transform {

using namespace ir;

namespace {

class FreeOfThreads : public IRVisitor {
 public:
  explicit FreeOfThreads(const Kernel& k) : thread_(k.thread_var.get()) {}
  bool free = true;

 protected:
  void visit_Var(const VarNode* op) override { free &= op != thread_; }
  void visit_Call(const CallNode* op) override {
    bool atomic = op->op.rfind("atomic", 0) == 0;
    free &= pure_call(op->op) || (atomic && parallel_ > 0);
    IRVisitor::visit_Call(op);
  }
  void visit_For(const ForNode* op) override {
    bool par = op->for_kind == ForKind::Parallel;
    parallel_ += par;
    IRVisitor::visit_For(op);
    parallel_ -= par;
  }
  void visit_TileOp(const TileOpNode* op) override {
    free &= op->op != "annotate_layout";  // a T.Fragment names threads
    parallel_ += 1;
    IRVisitor::visit_TileOp(op);
    parallel_ -= 1;
  }

 private:
  const ExprNode* thread_;
  int parallel_ = 0;
};

}  // namespace

bool thread_count_free(const Kernel& k) {
  FreeOfThreads v(k);
  v.visit(k.body);
  return v.free;
}

bool has_gemm(const Kernel& k) {
  bool found = false;
  post_order(k.body, [&](const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    found |= op && op->op == "gemm";
  });
  return found;
}

int fragment_registers(const Kernel& k) {
  // Per fragment: written from another fragment by a whole copy only (a cast), or not.
  std::map<const BufferNode*, bool> cast_only;
  post_order(k.body, [&](const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    if (!op || op->regions.empty()) return;
    const BufferNode* dst = op->regions.back().buffer.get();
    if (dst->scope != Scope::Fragment) return;
    bool cast = op->op == "copy" && op->regions.size() == 2 && op->regions[0].buffer->scope == Scope::Fragment;
    auto it = cast_only.find(dst);
    cast_only[dst] = (it == cast_only.end() || it->second) && cast;
  }, [&](const Expr&) {});
  post_order(k.body, [&](const Stmt& s) {
    if (auto* st = s.as<BufferStoreNode>())
      if (st->buffer->scope == Scope::Fragment) cast_only[st->buffer.get()] = false;
  });
  int64_t words = 0;
  for (const Buffer& b : k.allocs) {
    if (b->scope != Scope::Fragment || cast_only[b.get()]) continue;
    int64_t n = b->num_elements_const();
    if (n > 0) words += (n * b->dtype.bytes() + 3) / 4;
  }
  return int(words / std::max(k.threads, 1));
}

}  // namespace tegula::transform
