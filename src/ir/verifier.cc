#include "ir/verifier.h"

#include <unordered_map>
#include <unordered_set>

#include "ir/functor.h"
#include "ir/printer.h"

namespace tegula::ir {
namespace {

std::string first_line(const std::string& s) {
  size_t end = s.find('\n');
  return end == std::string::npos ? s : s.substr(0, end);
}

class Verifier : public IRVisitor {
 public:
  explicit Verifier(const std::string& stage) : stage_(stage) {}

  void run(const Kernel& k) {
    context_ = "kernel " + k.name + " (signature, grid and allocations)";
    for (const Param& p : k.params) {
      if (p.buffer) buffers_.insert(p.buffer.get());
      if (p.var) bind(p.var);
    }
    for (const Expr& v : k.dynamic_vars) bind(v);
    for (const Expr& v : k.block_vars) bind(v);
    if (k.thread_var) bind(k.thread_var);
    for (const Buffer& b : k.allocs) buffers_.insert(b.get());
    for (const Buffer& b : k.addressed) {
      buffers_.insert(b.get());
      if (!b->address || !b->address.as<VarNode>() || b->scope != Scope::Global ||
          !(b->address.dtype() == DataType{DataType::Handle, 64, 1} ||
            (b->address.dtype().is_int() && b->address.dtype().bits == 64))) {
        fail("tensor '" + b->name + "' at an address: its address must be a 64-bit Var and it global", b->name);
      }
    }
    for (const Buffer& b : k.views) {
      buffers_.insert(b.get());
      if (!buffers_.count(b->view_of.get())) fail("view '" + b->name + "' is of a buffer the kernel does not have", b->name);
    }
    for (const Param& p : k.params) {
      if (p.buffer) shape(p.buffer);
    }
    for (const Buffer& b : k.allocs) shape(b);
    for (const Buffer& b : k.views) shape(b);
    for (const Expr& g : k.grid) visit(g);
    visit(k.body);
  }

  using IRVisitor::visit;
  void visit(const Stmt& s) override {
    if (!s) return;
    Stmt saved = current_;
    current_ = s;
    IRVisitor::visit(s);
    current_ = saved;
  }

 protected:
  void visit_Var(const VarNode* op) override {
    if (!bound_.count(op)) fail("variable '" + op->name + "' is used outside the scope that binds it", op->name);
  }
  void visit_Binary(const BinaryNode* op) override {
    if (op->a && op->b && op->a.dtype() != op->b.dtype()) {
      fail("operands of '" + std::string(binary_op_name(op->op)) + "' have dtypes " + op->a.dtype().name() + " and " +
               op->b.dtype().name(),
           to_string(op->a) + " " + binary_op_name(op->op) + " " + to_string(op->b));
    }
    IRVisitor::visit_Binary(op);
  }
  // A cp.async whose predicate is false copies nothing (it zero-fills its destination),
  // so its source address may lie anywhere: a pipeline's prologue forms the address of an
  // iteration the loop may not have.
  void visit_Call(const CallNode* op) override {
    if (op->op == "cp_async" && op->args.size() == 3 && is_const_int(op->args[2], 0)) {
      visit(op->args[0]);
      auto* src = op->args[1].as<BufferLoadNode>();
      if (src) known_buffer(src->buffer, access_text(src->buffer, src->indices));
      return;
    }
    IRVisitor::visit_Call(op);
  }
  void visit_BufferLoad(const BufferLoadNode* op) override {
    std::string text = access_text(op->buffer, op->indices);
    registers_in_range(op->buffer, op->indices, op->dtype.lanes, op->loc);
    access(op->buffer, op->indices, op->dtype.lanes, text);
    if (op->dtype.element() != op->buffer->dtype.element()) {
      fail("load of dtype " + op->dtype.name() + " from a buffer of " + op->buffer->dtype.name(), text);
    }
    IRVisitor::visit_BufferLoad(op);
  }
  void visit_BufferStore(const BufferStoreNode* op) override {
    std::string text = first_line(to_string(current_));
    int lanes = op->value ? op->value.dtype().lanes : 1;
    registers_in_range(op->buffer, op->indices, lanes, op->loc);
    access(op->buffer, op->indices, lanes, text);
    if (!op->value) fail("store without a value", text);
    if (op->value.dtype().element() != op->buffer->dtype.element()) {
      fail("stored value has dtype " + op->value.dtype().name() + " but '" + op->buffer->name + "' holds " +
               op->buffer->dtype.name(),
           text);
    }
    IRVisitor::visit_BufferStore(op);
  }
  void visit_For(const ForNode* op) override {
    std::string text = first_line(to_string(current_));
    if (!op->var.as<VarNode>()) fail("loop variable is not a Var", text);
    if (!op->min || !op->min.dtype().is_int()) fail("loop min is not an integer", text);
    if (!op->extent || !op->extent.dtype().is_int()) fail("loop extent is not an integer", text);
    visit(op->min), visit(op->extent);
    bind(op->var);
    visit(op->body);
    unbind(op->var);
  }
  void visit_LetStmt(const LetStmtNode* op) override {
    if (!op->var.as<VarNode>()) fail("let variable is not a Var", first_line(to_string(current_)));
    if (!op->value) fail("let without a value", first_line(to_string(current_)));
    visit(op->value);
    bind(op->var);
    visit(op->body);
    unbind(op->var);
  }
  void visit_TileOp(const TileOpNode* op) override {
    for (const BufferRegion& r : op->regions) region(r);
    IRVisitor::visit_TileOp(op);
  }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& node) {
    std::string in = current_ ? first_line(to_string(current_)) : context_;
    std::string msg = "IR verification failed after '" + stage_ + "': " + what + "\n  node: " + node;
    if (in != node) msg += "\n  in:   " + in;
    throw InternalError(msg);
  }

  void bind(const Expr& v) { ++bound_[v.get()]; }
  void unbind(const Expr& v) {
    auto it = bound_.find(v.get());
    if (it != bound_.end() && --it->second == 0) bound_.erase(it);
  }

  void shape(const Buffer& b) {
    for (const Expr& d : b->shape) visit(d);
  }

  void known_buffer(const Buffer& b, const std::string& text) {
    if (!b) fail("access to a null buffer", text);
    if (!buffers_.count(b.get())) fail("buffer '" + b->name + "' is neither a parameter nor allocated", text);
    // A tensor at a run-time address is reached through its address: that Var must be in scope.
    if (b->address && !bound_.count(b->address.get())) {
      fail("tensor '" + b->name + "' is accessed outside the scope of its address '" +
               b->address.as<VarNode>()->name + "'", text);
    }
  }

  std::string access_text(const Buffer& b, const std::vector<Expr>& indices) {
    std::string s = (b ? b->name : "<null>") + "[";
    for (size_t i = 0; i < indices.size(); ++i) s += (i ? ", " : "") + to_string(indices[i]);
    return s + "]";
  }

  // `extent` elements starting at a constant index must fit inside a constant dimension.
  void in_range(const Buffer& b, size_t dim, const Expr& index, int64_t extent, const std::string& text) {
    const int64_t* i = as_const_int(index);
    const int64_t* n = as_const_int(b->shape[dim]);
    if (i && n && (*i < 0 || *i + extent > *n)) {
      fail("index " + std::to_string(*i) + (extent > 1 ? " (+" + std::to_string(extent) + ")" : "") +
               " is out of range of dimension " + std::to_string(dim) + " of '" + b->name + "' (size " +
               std::to_string(*n) + ")",
           text);
    }
  }

  // A constant index past a register array (a T.alloc_local's) is the user's, at the
  // access: the frontend checks the indices as written, but unrolled and partitioned loops
  // can make a constant of a loop variable there (loc[j + 1] with j = 7).
  void registers_in_range(const Buffer& b, const std::vector<Expr>& indices, int lanes, const SourceLoc& loc) {
    if (!b || b->scope != Scope::Local || indices.size() != b->shape.size()) return;
    for (size_t d = 0; d < indices.size(); ++d) {
      const int64_t* i = as_const_int(indices[d]);
      const int64_t* n = as_const_int(b->shape[d]);
      int64_t extent = d + 1 == indices.size() ? lanes : 1;
      if (!i || !n || (*i >= 0 && *i + extent <= *n)) continue;
      std::string dims;
      for (const Expr& x : b->shape) dims += (dims.empty() ? "" : ", ") + to_string(x);
      user_error(loc) << "index " << *i << " is out of bounds for dimension " << d << " of local buffer '" << b->name
                      << "' of shape (" << dims << ")";
    }
  }

  void access(const Buffer& b, const std::vector<Expr>& indices, int lanes, const std::string& text) {
    known_buffer(b, text);
    if (indices.size() != b->shape.size()) {
      fail("'" + b->name + "' has " + std::to_string(b->shape.size()) + " dimensions but is accessed with " +
               std::to_string(indices.size()) + " indices",
           text);
    }
    size_t along = vector_dim(*b);
    for (size_t d = 0; d < indices.size(); ++d) in_range(b, d, indices[d], d == along ? lanes : 1, text);
  }

  void region(const BufferRegion& r) {
    std::string text = to_string(r);
    known_buffer(r.buffer, text);
    size_t rank = r.buffer->shape.size();
    if (r.mins.size() != rank || r.extents.size() != rank) {
      fail("region of '" + r.buffer->name + "' (rank " + std::to_string(rank) + ") has " +
               std::to_string(r.mins.size()) + " mins and " + std::to_string(r.extents.size()) + " extents",
           text);
    }
    for (size_t d = 0; d < rank; ++d) {
      const int64_t* ext = as_const_int(r.extents[d]);
      if (ext) in_range(r.buffer, d, r.mins[d], *ext, text);
    }
  }

  std::string stage_;
  std::string context_;
  Stmt current_;
  std::unordered_map<const ExprNode*, int> bound_;  // a count, so a shadowing rebind unwinds
  std::unordered_set<const BufferNode*> buffers_;
};

}  // namespace

void verify(const Kernel& k, const std::string& stage) { Verifier(stage).run(k); }

}  // namespace tegula::ir
