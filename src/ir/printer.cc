#include "ir/printer.h"

#include <charconv>
#include <cmath>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "ir/functor.h"

namespace tegula::ir {
namespace {

constexpr int kIndentWidth = 4;

// Python's precedence, loosest first. An operand that binds looser than its slot needs
// parentheses: `(a + b)*c`, but `a + b*c`.
enum Prec : int { kLowest, kOr, kAnd, kNot, kCompare, kBitOr, kBitXor, kBitAnd, kShift, kAdd, kMul, kUnary, kAtom };

struct BinaryStyle {
  const char* text;  // the infix token, or the function name of a call form
  int prec;          // kAtom for the call forms: min(a, b)
  bool spaced;
};

// Indexed by BinaryOp. Mod is C's truncating remainder; `%` is kept for floormod, which is
// what the DSL's `%` means.
const BinaryStyle& binary_style(BinaryOp op) {
  static const BinaryStyle table[] = {
      {"+", kAdd, true},       {"-", kAdd, true},       {"*", kMul, false},      {"/", kMul, false},
      {"truncmod", kAtom, false}, {"//", kMul, false},     {"%", kMul, false},      {"min", kAtom, false},
      {"max", kAtom, false},   {"==", kCompare, true},  {"!=", kCompare, true},  {"<", kCompare, true},
      {"<=", kCompare, true},  {">", kCompare, true},   {">=", kCompare, true},  {"and", kAnd, true},
      {"or", kOr, true},       {"&", kBitAnd, true},    {"|", kBitOr, true},     {"^", kBitXor, true},
      {"<<", kShift, true},    {">>", kShift, true},
  };
  static_assert(sizeof(table) / sizeof(table[0]) == static_cast<size_t>(BinaryOp::Shr) + 1);
  return table[static_cast<size_t>(op)];
}

// Tile ops that move data from their first region into their second print with an arrow.
bool prints_arrow(const std::string& op) { return op == "copy" || op == "reduce"; }

// Shortest text that reads back to the same double, always with a '.' or an exponent.
std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Gives each distinct node a distinct name: its own when free, else name_1, name_2, ...
// skipping every name that appears anywhere in the printed tree.
class Namer {
 public:
  void reserve(const std::string& raw) { raw_.insert(raw); }
  const std::string& name(const void* node, const std::string& raw) {
    auto it = given_.find(node);
    if (it != given_.end()) return it->second;
    std::string base = raw.empty() ? "v" : raw;
    std::string cand = base;
    for (int k = 1; taken_.count(cand) || (cand != base && raw_.count(cand)); ++k) {
      cand = base + "_" + std::to_string(k);
    }
    taken_.insert(cand);
    return given_.emplace(node, cand).first->second;
  }

 private:
  std::unordered_map<const void*, std::string> given_;
  std::unordered_set<std::string> taken_, raw_;
};

// Reserves every raw var and buffer name of a tree before printing starts.
class NameCollector : public IRVisitor {
 public:
  NameCollector(Namer* vars, Namer* bufs) : vars_(vars), bufs_(bufs) {}
  using IRVisitor::visit;
  void buffer(const Buffer& b) {
    if (!b) return;
    bufs_->reserve(b->name);
    for (const Expr& d : b->shape) visit(d);
    for (const Expr& d : b->strides) visit(d);
  }

 protected:
  void visit_Var(const VarNode* op) override { vars_->reserve(op->name); }
  void visit_For(const ForNode* op) override { visit(op->var), IRVisitor::visit_For(op); }
  void visit_LetStmt(const LetStmtNode* op) override { visit(op->var), IRVisitor::visit_LetStmt(op); }
  void visit_BufferLoad(const BufferLoadNode* op) override { buffer(op->buffer), IRVisitor::visit_BufferLoad(op); }
  void visit_BufferStore(const BufferStoreNode* op) override {
    buffer(op->buffer), IRVisitor::visit_BufferStore(op);
  }
  void visit_TileOp(const TileOpNode* op) override {
    for (const BufferRegion& r : op->regions) buffer(r.buffer);
    IRVisitor::visit_TileOp(op);
  }

 private:
  Namer* vars_;
  Namer* bufs_;
};

struct Text {
  std::string s;
  int prec;
};

class Printer {
 public:
  explicit Printer(bool all_spaced = false) : all_spaced_(all_spaced) {}
  void set_spaced(bool spaced) { all_spaced_ = spaced; }
  NameCollector collector() { return NameCollector(&vars_, &bufs_); }

  Text expr(const Expr& e) {
    if (!e) return {"<null>", kAtom};
    switch (e.kind()) {
#define EXPR(Name) \
  case NodeKind::Name: return print_##Name(static_cast<const Name##Node*>(e.get()));
#include "ir/node_kinds.def"
      default: return {std::string("<") + node_kind_name(e.kind()) + " as expr>", kAtom};
    }
  }
  // The operand in a slot that needs at least `min_prec`.
  std::string operand(const Expr& e, int min_prec) {
    Text t = expr(e);
    return t.prec < min_prec ? "(" + t.s + ")" : t.s;
  }
  std::string list(const std::vector<Expr>& es) {
    std::string s;
    for (size_t i = 0; i < es.size(); ++i) s += (i ? ", " : "") + operand(es[i], kLowest);
    return s;
  }
  std::string buffer_name(const Buffer& b) { return b ? bufs_.name(b.get(), b->name) : "<null buffer>"; }
  std::string buffer_name(const BufferNode* b) { return bufs_.name(b, b->name); }
  std::string var_name(const VarNode* v) { return vars_.name(v, v->name); }
  std::string var_name(const Expr& v) {
    auto* n = v.as<VarNode>();
    return n ? vars_.name(n, n->name) : operand(v, kAtom);
  }
  std::string region(const BufferRegion& r) {
    std::string s = buffer_name(r.buffer) + "[";
    for (size_t i = 0; i < r.mins.size(); ++i) {
      s += (i ? ", " : "") + operand(r.mins[i], kLowest) + ":+";
      s += i < r.extents.size() ? operand(r.extents[i], kLowest) : "?";
    }
    return s + "]";
  }
  std::string buffer_type(const Buffer& b) {
    std::string t = b->dtype.name() + "[" + list(b->shape) + "]";
    return b->strides.empty() ? t : t + " strides [" + list(b->strides) + "]";
  }

  void stmt(const Stmt& s, int indent) {
    if (!s) return;
    switch (s.kind()) {
#define STMT(Name)                                                       \
  case NodeKind::Name:                                                   \
    print_##Name(static_cast<const Name##Node*>(s.get()), indent);       \
    return;
#include "ir/node_kinds.def"
      default: line(indent, std::string("<") + node_kind_name(s.kind()) + " as stmt>");
    }
  }
  // A nested block; an empty one still shows as `pass` so the indentation stays legible.
  void block(const Stmt& s, int indent) {
    size_t before = out_.size();
    stmt(s, indent);
    if (out_.size() == before) line(indent, "pass");
  }
  void line(int indent, const std::string& text) { out_ += std::string(indent * kIndentWidth, ' ') + text + "\n"; }
  std::string& out() { return out_; }

 private:
  Text print_IntImm(const IntImmNode* op) {
    if (op->dtype.is_bool()) return {op->value ? "True" : "False", kAtom};
    // A uint64 is held as its bit pattern.
    std::string v = op->dtype.code == DataType::UInt ? std::to_string(uint64_t(op->value)) : std::to_string(op->value);
    if (op->dtype != DataType::i32()) return {op->dtype.name() + "(" + v + ")", kAtom};
    return {v, op->value < 0 ? kUnary : kAtom};
  }
  Text print_FloatImm(const FloatImmNode* op) {
    std::string v = format_float(op->value);
    if (op->dtype != DataType::f32()) return {op->dtype.name() + "(" + v + ")", kAtom};
    return {v, v[0] == '-' ? kUnary : kAtom};
  }
  Text print_Var(const VarNode* op) { return {vars_.name(op, op->name), kAtom}; }
  Text print_Binary(const BinaryNode* op) {
    const BinaryStyle& st = binary_style(op->op);
    if (st.prec == kAtom) return {std::string(st.text) + "(" + list({op->a, op->b}) + ")", kAtom};
    // Comparisons chain in Python (a < b < c), so neither side may be a bare comparison.
    int left_min = st.prec == kCompare ? st.prec + 1 : st.prec;
    std::string sep = st.spaced || all_spaced_ ? std::string(" ") + st.text + " " : st.text;
    return {operand(op->a, left_min) + sep + operand(op->b, st.prec + 1), st.prec};
  }
  Text print_Not(const NotNode* op) { return {"not " + operand(op->a, kNot), kNot}; }
  Text print_Select(const SelectNode* op) { return {"if_then_else(" + list({op->cond, op->t, op->f}) + ")", kAtom}; }
  Text print_Cast(const CastNode* op) { return {op->dtype.name() + "(" + operand(op->value, kLowest) + ")", kAtom}; }
  Text print_Call(const CallNode* op) { return {op->op + "(" + list(op->args) + ")", kAtom}; }
  Text print_BufferLoad(const BufferLoadNode* op) { return {access(op->buffer, op->indices, op->dtype.lanes), kAtom}; }
  // A[i, j]; a vector of n lanes shows the index it moves along (ir::vector_dim: the last,
  // but for some T.StridedTensors) as a slice: A[i, j:+8].
  std::string access(const Buffer& b, const std::vector<Expr>& indices, int lanes) {
    if (lanes < 2) return buffer_name(b) + "[" + list(indices) + "]";
    size_t along = vector_dim(*b);
    std::string s;
    for (size_t d = 0; d < indices.size(); ++d) {
      s += (d ? ", " : "") + operand(indices[d], kLowest) + (d == along ? ":+" + std::to_string(lanes) : "");
    }
    return buffer_name(b) + "[" + s + "]";
  }

  void print_Evaluate(const EvaluateNode* op, int indent) { line(indent, operand(op->value, kLowest)); }
  void print_BufferStore(const BufferStoreNode* op, int indent) {
    int lanes = op->value ? op->value.dtype().lanes : 1;
    line(indent, access(op->buffer, op->indices, lanes) + " = " + operand(op->value, kLowest));
  }
  void print_For(const ForNode* op, int indent) {
    std::string head = "for " + var_name(op->var) + " in " + for_kind_name(op->for_kind) + "(" +
                       list({op->min, op->extent});
    if (op->num_stages > 0) head += ", num_stages=" + std::to_string(op->num_stages);
    line(indent, head + "):");
    block(op->body, indent + 1);
  }
  void print_While(const WhileNode* op, int indent) {
    line(indent, "while " + operand(op->cond, kLowest) + ":");
    block(op->body, indent + 1);
  }
  void print_IfThenElse(const IfThenElseNode* op, int indent) {
    line(indent, "if " + operand(op->cond, kLowest) + ":");
    block(op->then_case, indent + 1);
    Stmt rest = op->else_case;
    while (rest) {
      if (auto* elif = rest.as<IfThenElseNode>()) {
        line(indent, "elif " + operand(elif->cond, kLowest) + ":");
        block(elif->then_case, indent + 1);
        rest = elif->else_case;
      } else {
        line(indent, "else:");
        block(rest, indent + 1);
        break;
      }
    }
  }
  void print_Seq(const SeqNode* op, int indent) {
    for (const Stmt& s : op->seq) stmt(s, indent);
  }
  // The body stays at the same depth: a let scopes over the statements that follow it.
  void print_LetStmt(const LetStmtNode* op, int indent) {
    line(indent, "let " + var_name(op->var) + " = " + operand(op->value, kLowest));
    stmt(op->body, indent);
  }
  void print_TileOp(const TileOpNode* op, int indent) {
    std::string s;
    const char* region_sep = prints_arrow(op->op) ? " -> " : ", ";
    for (size_t i = 0; i < op->regions.size(); ++i) s += (i ? region_sep : "") + region(op->regions[i]);
    for (const Expr& a : op->args) s += (s.empty() ? "" : ", ") + operand(a, kLowest);
    for (const auto& [key, value] : op->attrs) s += (s.empty() ? "" : ", ") + key + "=" + attr(value);
    line(indent, "T." + op->op + "(" + s + ")");
  }
  void print_LoopJump(const LoopJumpNode* op, int indent) { line(indent, op->is_continue ? "continue" : "break"); }
  void print_Sync(const SyncNode* op, int indent) {
    if (!op->threads) return line(indent, "sync_threads()");
    line(indent, "sync_threads(barrier=" + std::to_string(op->barrier) + ", threads=" + std::to_string(op->threads) + ")");
  }

  static std::string attr(const TileAttr& a) {
    if (auto* i = std::get_if<int64_t>(&a)) return std::to_string(*i);
    if (auto* d = std::get_if<double>(&a)) return format_float(*d);
    return "\"" + std::get<std::string>(a) + "\"";
  }

  Namer vars_, bufs_;
  std::string out_;
  bool all_spaced_;
};

// The lines between the signature and the body: launch shape, allocations, storage plan.
void print_header(Printer& p, const Kernel& k) {
  for (const Expr& v : k.dynamic_vars) p.line(1, "dynamic " + p.var_name(v) + ": " + v.dtype().name());
  std::string grid = "grid (" + p.list(k.grid) + (k.grid.size() == 1 ? ",)" : ")");
  if (!k.block_vars.empty()) {
    std::string vars;
    for (size_t i = 0; i < k.block_vars.size(); ++i) vars += (i ? ", " : "") + p.var_name(k.block_vars[i]);
    grid += " -> (" + vars + (k.block_vars.size() == 1 ? ",)" : ")");
  }
  p.line(1, grid);
  std::string threads = "threads " + std::to_string(k.threads);
  if (k.thread_var) threads += " -> " + p.var_name(k.thread_var);
  p.line(1, threads);
  if (!k.cluster_dims.empty()) {
    p.line(1, "cluster (" + std::to_string(k.cluster_dims[0]) + ", " + std::to_string(k.cluster_dims[1]) + ", " +
                  std::to_string(k.cluster_dims[2]) + ")");
  }
  for (const Buffer& b : k.allocs) {
    p.line(1, "alloc " + p.buffer_name(b) + ": " + scope_name(b->scope) + " " + p.buffer_type(b));
  }
  for (const Buffer& b : k.views) {
    p.line(1, "view " + p.buffer_name(b) + ": " + p.buffer_type(b) + " of " + p.buffer_name(b->view_of));
  }
  for (const Buffer& b : k.addressed) {
    p.line(1, "tensor " + p.buffer_name(b) + ": " + p.buffer_type(b) + " at " + p.var_name(b->address));
  }
  if (!k.smem_offset.empty() || k.smem_bytes > 0) {
    // In allocation order; the map itself is keyed by address and has no stable order.
    std::string plan;
    for (const Buffer& b : k.allocs) {
      auto it = k.smem_offset.find(b.get());
      if (it == k.smem_offset.end()) continue;
      plan += (plan.empty() ? "" : ", ") + p.buffer_name(b) + " @ " + std::to_string(it->second);
    }
    p.line(1, "smem " + plan + (plan.empty() ? "" : "; ") + std::to_string(k.smem_bytes) + " bytes");
  }
  if (k.panel_size > 0) {
    p.line(1, "swizzle panel_size=" + std::to_string(k.panel_size) + " order=" + (k.swizzle_row_major ? "row" : "col"));
  }
  if (k.min_blocks_per_sm > 0) p.line(1, "min_blocks_per_sm " + std::to_string(k.min_blocks_per_sm));
}

}  // namespace

std::string to_string(const Expr& e) {
  Printer p;
  p.collector().visit(e);
  return p.expr(e).s;
}

std::string to_spaced_string(const Expr& e) {
  Printer p(true);
  p.collector().visit(e);
  return p.expr(e).s;
}

std::string to_string(const Stmt& s, int indent) {
  Printer p;
  p.collector().visit(s);
  p.block(s, indent);
  return p.out();
}

std::string to_string(const BufferRegion& r) {
  Printer p;
  NameCollector c = p.collector();
  c.buffer(r.buffer);
  for (const Expr& e : r.mins) c.visit(e);
  for (const Expr& e : r.extents) c.visit(e);
  return p.region(r);
}

static void print_kernel(Printer& p, const Kernel& k) {
  NameCollector c = p.collector();
  for (const Param& prm : k.params) prm.buffer ? c.buffer(prm.buffer) : c.visit(prm.var);
  for (const Expr& v : k.dynamic_vars) c.visit(v);
  for (const Expr& v : k.block_vars) c.visit(v);
  c.visit(k.thread_var);
  for (const Buffer& b : k.allocs) c.buffer(b);
  for (const Buffer& b : k.views) c.buffer(b);
  for (const Buffer& b : k.addressed) c.buffer(b);
  c.visit(k.body);

  // Signature first, so parameters keep their own names when a later node shares one.
  std::string sig;
  for (const Param& prm : k.params) {
    sig += sig.empty() ? "" : ", ";
    if (prm.buffer) {
      sig += p.buffer_name(prm.buffer) + ": " + p.buffer_type(prm.buffer);
      if (prm.buffer->scope != Scope::Global) sig += std::string(" ") + scope_name(prm.buffer->scope);
    } else {
      sig += p.var_name(prm.var) + ": " + prm.var.dtype().name();
    }
  }
  p.line(0, "kernel " + k.name + "(" + sig + "):");
  print_header(p, k);
  p.block(k.body, 1);
}

std::string to_string(const Kernel& k) {
  Printer p;
  print_kernel(p, k);
  return p.out();
}

struct PrintedKernel::Impl {
  Printer printer;
  std::string text;
};

PrintedKernel::PrintedKernel(const Kernel& k) : impl_(std::make_unique<Impl>()) {
  print_kernel(impl_->printer, k);
  impl_->text = std::move(impl_->printer.out());
  impl_->printer.out().clear();
}

PrintedKernel::~PrintedKernel() = default;

const std::string& PrintedKernel::text() const { return impl_->text; }

std::string PrintedKernel::expr(const Expr& e, bool spaced) {
  impl_->printer.set_spaced(spaced);
  std::string s = impl_->printer.operand(e, kLowest);
  impl_->printer.set_spaced(false);
  return s;
}

std::string PrintedKernel::var(const VarNode* v) { return impl_->printer.var_name(v); }

std::string PrintedKernel::buffer(const BufferNode* b) { return impl_->printer.buffer_name(b); }

std::string PrintedKernel::head(const Stmt& s) {
  std::string& out = impl_->printer.out();
  out.clear();
  impl_->printer.stmt(s, 0);
  std::string line = out.substr(0, out.find('\n'));
  out.clear();
  return line;
}

std::ostream& operator<<(std::ostream& os, const Expr& e) { return os << to_string(e); }
std::ostream& operator<<(std::ostream& os, const Stmt& s) { return os << to_string(s); }

}  // namespace tegula::ir
