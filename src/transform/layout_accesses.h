// The fragment accesses of a kernel's T.Parallel nests and tile ops, as layout inference
// (layout_inference.cc) reads them: for each outermost T.Parallel nest, its variables and
// extents, the threads it runs on, and how each fragment is indexed in it.
#pragma once
#include <map>
#include <vector>

#include "ir/functor.h"
#include "ir/thread_guard.h"

namespace tegula::transform::layout_infer {

struct Access {
  ir::Buffer buf;
  std::vector<int> keep;  // which loop variable each index is, when every index is one
  bool identity = false;
  // f[i * N + j] in `for i, j in T.Parallel(M, N)` (flattens): the fragment, of M * N
  // elements, read in the loop's own order under another shape, so its layout is the
  // loop's reshaped (layout::make_reshaped), as with identity.
  bool flat = false;
  bool store = false;
  std::vector<ir::Expr> idx;  // the index as written
  bool outer = false;         // the index reads a variable of a loop around the nest
  // When every index is a loop variable of the nest (in order, each once) or a bare
  // variable of a loop around it: per dimension, the nest variable's position, or -1.
  std::vector<int> extend;
};

// The threads a nest or op runs on: the block's, or a thread scope's (scope_thread_guards.cc).
struct ScopeRef {
  ir::Expr var;  // the scope's thread index; null for the whole block
  int64_t count = 0;
  ir::ThreadRange range;
};

struct Nest {
  const ir::ForNode* outer;
  std::vector<ir::Expr> vars;
  std::vector<int64_t> extents;
  std::vector<Access> fragments;
  int min_mem_bytes = 0;  // narrowest global/shared element the loop touches
  ScopeRef scope;
  // The variables of the serial loops around the nest with constant bounds: [lo, hi].
  std::map<const ir::ExprNode*, std::pair<int64_t, int64_t>> around;
  bool scattered = false;  // touches a global tensor under a T.Layout: no vector there
};

class Collector : public ir::IRVisitor {
 public:
  explicit Collector(const ir::Kernel& k)
      : k_(k), scope_{ir::Expr(), k.threads, ir::ThreadRange{0, k.threads}} {}
  std::vector<Nest> nests;
  std::vector<const ir::TileOpNode*> ops;
  std::map<const ir::TileOpNode*, ScopeRef> op_scope;
  // The threads each fragment is used by, and where that was first seen.
  std::map<const ir::BufferNode*, std::pair<ScopeRef, SourceLoc>> frag_scope;

  void visit_LetStmt(const ir::LetStmtNode* op) override;
  void visit_For(const ir::ForNode* op) override;
  void visit_TileOp(const ir::TileOpNode* op) override;
  void visit_BufferLoad(const ir::BufferLoadNode* op) override;
  void visit_BufferStore(const ir::BufferStoreNode* op) override;

 private:
  void note(const ir::Buffer& b, const std::vector<ir::Expr>& idx, bool store);
  // Whether fragment b, indexed by idx inside nest n, is read in the nest's row-major
  // order: element (row-major) k at iteration k, for every iteration (checked point by
  // point, up to 65536 of them).
  static bool flattens(const ir::Buffer& b, const std::vector<ir::Expr>& idx, const Nest& n);
  // A fragment's registers are laid out over one set of threads: a fragment used both
  // under a thread guard and outside it (or under another) has no layout for both.
  void used_by_scope(const ir::Buffer& b, const SourceLoc& loc);

  const ir::Kernel& k_;
  Nest* current_ = nullptr;
  std::map<const ir::ExprNode*, std::pair<int64_t, int64_t>> around_;  // see Nest::around
  ScopeRef scope_;
};

}  // namespace tegula::transform::layout_infer
