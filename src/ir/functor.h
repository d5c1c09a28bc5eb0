// Traversal of the IR: a visitor (read-only) and a mutator (rebuilds only what changed).
//
// Override the visit_<Kind> methods you care about; the defaults recurse into children.
#pragma once
#include <functional>

#include "ir/stmt.h"

namespace tegula::ir {

class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  virtual void visit(const Expr& e);
  virtual void visit(const Stmt& s);
  void visit_region(const BufferRegion& r);

 protected:
#define EXPR(Name) virtual void visit_##Name(const Name##Node* op);
#define STMT(Name) virtual void visit_##Name(const Name##Node* op);
#include "ir/node_kinds.def"
};

class IRMutator {
 public:
  virtual ~IRMutator() = default;
  virtual Expr mutate(const Expr& e);
  virtual Stmt mutate(const Stmt& s);
  BufferRegion mutate_region(const BufferRegion& r);
  std::vector<Expr> mutate_all(const std::vector<Expr>& v, bool* changed);

 protected:
#define EXPR(Name) virtual Expr mutate_##Name(const Expr& self, const Name##Node* op);
#define STMT(Name) virtual Stmt mutate_##Name(const Stmt& self, const Name##Node* op);
#include "ir/node_kinds.def"
};

// Replaces variables by expressions, keyed by the Var node.
Expr substitute(const Expr& e, const std::vector<std::pair<Expr, Expr>>& map);
Stmt substitute(const Stmt& s, const std::vector<std::pair<Expr, Expr>>& map);

// Calls f on every node of the tree, children first.
void post_order(const Stmt& s, const std::function<void(const Stmt&)>& on_stmt,
                const std::function<void(const Expr&)>& on_expr = nullptr);

}  // namespace tegula::ir
