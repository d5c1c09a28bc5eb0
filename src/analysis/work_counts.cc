#include "analysis/work_counts.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "analysis/work_counter.h"
#include "ir/functor.h"

namespace tegula::analysis {

int dtype_bits(const ir::DataType& t) {
  if (t.is_bool()) return 8;
  return t.bits;
}

namespace detail {
namespace {

constexpr int64_t kLaneChunk = int64_t(1) << 20;  // lanes evaluated together

bool is_math(const std::string& name) {
  static const std::unordered_set<std::string> names = {"exp",   "exp2", "log",  "log2",  "sqrt", "rsqrt", "tanh", "sin",
                                                        "cos",   "floor", "ceil", "trunc", "rint", "abs",   "sigmoid"};
  return names.count(name) != 0;
}

bool is_float_name(const std::string& name) { return name.rfind("float", 0) == 0 || name.rfind("bfloat", 0) == 0; }

bool is_arithmetic(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: case BinaryOp::Sub: case BinaryOp::Mul: case BinaryOp::Div: case BinaryOp::FloorDiv:
    case BinaryOp::FloorMod: case BinaryOp::Min: case BinaryOp::Max: return true;
    default: return false;
  }
}

bool is_bitwise(BinaryOp op) {
  return op == BinaryOp::BitAnd || op == BinaryOp::BitOr || op == BinaryOp::BitXor || op == BinaryOp::Shl ||
         op == BinaryOp::Shr;
}

void items_of(const Stmt& s, std::vector<Stmt>& out) {
  if (!s) return;
  if (auto* seq = s.as<ir::SeqNode>()) {
    for (const Stmt& c : seq->seq) items_of(c, out);
  } else if (auto* let = s.as<ir::LetStmtNode>()) {
    out.push_back(s);
    items_of(let->body, out);
  } else {
    out.push_back(s);
  }
}

// The same tree: kinds, dtypes, constants, ops, and the same variable and buffer nodes.
bool same_expr(const Expr& a, const Expr& b);

bool same_exprs(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_expr(a[i], b[i])) return false;
  }
  return true;
}

bool same_expr(const Expr& a, const Expr& b) {
  if (a.same_as(b)) return true;
  if (!a || !b || a.kind() != b.kind() || a.dtype() != b.dtype()) return false;
  switch (a.kind()) {
    case ir::NodeKind::IntImm: return a.as<ir::IntImmNode>()->value == b.as<ir::IntImmNode>()->value;
    case ir::NodeKind::FloatImm: {
      double x = a.as<ir::FloatImmNode>()->value, y = b.as<ir::FloatImmNode>()->value;
      return x == y || (x != x && y != y);
    }
    case ir::NodeKind::Binary: {
      auto *x = a.as<ir::BinaryNode>(), *y = b.as<ir::BinaryNode>();
      return x->op == y->op && same_expr(x->a, y->a) && same_expr(x->b, y->b);
    }
    case ir::NodeKind::Not: return same_expr(a.as<ir::NotNode>()->a, b.as<ir::NotNode>()->a);
    case ir::NodeKind::Select: {
      auto *x = a.as<ir::SelectNode>(), *y = b.as<ir::SelectNode>();
      return same_expr(x->cond, y->cond) && same_expr(x->t, y->t) && same_expr(x->f, y->f);
    }
    case ir::NodeKind::Cast: return same_expr(a.as<ir::CastNode>()->value, b.as<ir::CastNode>()->value);
    case ir::NodeKind::Call: {
      auto *x = a.as<ir::CallNode>(), *y = b.as<ir::CallNode>();
      return x->op == y->op && same_exprs(x->args, y->args);
    }
    case ir::NodeKind::BufferLoad: {
      auto *x = a.as<ir::BufferLoadNode>(), *y = b.as<ir::BufferLoadNode>();
      return x->buffer == y->buffer && same_exprs(x->indices, y->indices);
    }
    default: return false;  // two distinct variables
  }
}

}  // namespace

std::vector<Stmt> items(const Stmt& s) {
  std::vector<Stmt> out;
  items_of(s, out);
  return out;
}

std::vector<std::pair<Expr, Stmt>> arms(const ir::IfThenElseNode* op) {
  std::vector<std::pair<Expr, Stmt>> out;
  for (;;) {
    out.push_back({op->cond, op->then_case});
    if (!op->else_case) break;
    if (auto* elif = op->else_case.as<ir::IfThenElseNode>()) {
      op = elif;
      continue;
    }
    out.push_back({Expr(), op->else_case});
    break;
  }
  return out;
}

int64_t Counter::fixed(const Expr& e, const std::string& what) {
  Val v;
  try {
    v = ev_.eval(e);
  } catch (const MissingValue& m) {
    fail("the " + what + " " + quote(e) + " needs the value of '" + printed_.var(m.var) + "'");
  }
  if (!v.known()) fail("the " + what + " " + quote(e) + " is not known before the run");
  return v.i(0);
}

Val Counter::load(const ir::BufferNode* b, const std::vector<Val>& indices) {
  auto it = buffers_.find(b);
  if (it == buffers_.end() || !it->second.global || !in_.tensors.count(it->second.name)) return Val();
  const TensorContents* data = in_.contents ? in_.contents(it->second.name) : nullptr;
  if (!data) throw NeedsData{it->second.name};
  size_t lanes = 1;
  bool per_lane = false;
  for (const Val& i : indices) {
    lanes = std::max(lanes, i.lanes());
    per_lane |= i.per_lane();
  }
  auto offset = [&](size_t lane) {
    int64_t flat = 0;
    for (size_t d = 0; d < data->shape.size(); ++d) {
      int64_t hi = std::max<int64_t>(data->shape[d] - 1, 0);
      int64_t i = d < indices.size() ? std::clamp<int64_t>(indices[d].i(lane), 0, hi) : 0;
      flat = flat * data->shape[d] + i;
    }
    return size_t(flat);
  };
  if (!per_lane) return data->is_float ? Val::of_float(data->floats[offset(0)]) : Val::of_int(data->ints[offset(0)]);
  if (data->is_float) {
    std::vector<double> out(lanes);
    for (size_t k = 0; k < lanes; ++k) out[k] = data->floats[offset(k)];
    return Val::float_lanes(std::move(out));
  }
  std::vector<int64_t> out(lanes);
  for (size_t k = 0; k < lanes; ++k) out[k] = data->ints[offset(k)];
  return Val::int_lanes(std::move(out));
}

// ---- statements ----

void Counter::run(const std::vector<Stmt>& stmts, const Mask& mask, bool threaded) {
  for (const Stmt& s : stmts) {
    if (!any(mask)) return;
    try {
      statement(s, mask, threaded);
    } catch (const NeedsData& need) {
      fail("`" + line(s) + "` depends on the values of '" + need.buffer + "': pass the tensor itself, not its shape");
    }
  }
}

bool Counter::per_thread(const std::vector<Expr>& exprs, bool threaded) const {
  if (threaded) return true;
  if (!first_thread_) return false;
  return std::any_of(exprs.begin(), exprs.end(), [&](const Expr& e) { return ev_.reads_any(e, thread_vars_); });
}

Mask Counter::counted(const Mask& mask, bool per_thread) const {
  if (per_thread || !first_thread_) return mask;
  Mask out(mask.size());
  for (size_t k = 0; k < mask.size(); ++k) out[k] = mask[k] && (*first_thread_)[k];
  return out;
}

void Counter::statement(const Stmt& s, const Mask& mask, bool threaded) {
  switch (s.kind()) {
    case ir::NodeKind::For: {
      auto* op = s.as<ir::ForNode>();
      if (op->for_kind == ir::ForKind::Parallel) return nest(s, counted(mask, false));
      return loop(op, s, mask, per_thread({op->min, op->extent}, threaded));
    }
    case ir::NodeKind::IfThenElse: return branch(s.as<ir::IfThenElseNode>(), mask, threaded);
    case ir::NodeKind::LetStmt: {
      auto* op = s.as<ir::LetStmtNode>();
      bool pt = per_thread({op->value}, threaded);
      lane_statement(s, {op->value}, nullptr, counted(mask, pt), false);
      auto* var = op->var.as<ir::VarNode>();
      env_[var] = Binding{ev_.eval(op->value), Expr()};
      if (pt) thread_vars_.push_back(var);
      if (is_float(op->value)) float_lets_.insert(var);
      return;
    }
    case ir::NodeKind::BufferStore: {
      auto* op = s.as<ir::BufferStoreNode>();
      std::vector<Expr> exprs{op->value};
      exprs.insert(exprs.end(), op->indices.begin(), op->indices.end());
      Access target{op->buffer, op->indices, op->value.dtype().lanes, true};
      return lane_statement(s, exprs, &target, counted(mask, per_thread(exprs, threaded)), false);
    }
    case ir::NodeKind::TileOp: return tile_op(s.as<ir::TileOpNode>(), counted(mask, false));
    case ir::NodeKind::Evaluate: {
      const Expr& value = s.as<ir::EvaluateNode>()->value;
      auto* c = value.as<ir::CallNode>();
      return call(s, value, counted(mask, per_thread(c ? c->args : std::vector<Expr>{value}, threaded)));
    }
    case ir::NodeKind::Sync: return;
    case ir::NodeKind::While:
      fail("`" + line(s) + "` runs until a value computed in the kernel says stop, which a static count cannot follow");
    case ir::NodeKind::LoopJump:
      fail("`" + line(s) + "` leaves its loop at a point only the run decides, which a static count cannot follow");
    default: fail("cannot count a " + std::string(ir::node_kind_name(s.kind())) + " statement");
  }
}

void Counter::loop(const ir::ForNode* op, const Stmt& s, const Mask& mask, bool threaded) {
  Val lo = control(op->min, s, false);
  Val extent = control(op->extent, s, true);
  int64_t trips = 0;
  for (size_t k = 0; k < mask.size(); ++k) {
    if (mask[k]) trips = std::max(trips, extent.i(k));
  }
  auto* var = op->var.as<ir::VarNode>();
  std::vector<Stmt> body = items(op->body);
  for (int64_t t = 0; t < trips; ++t) {
    Mask active(mask.size());
    bool some = false;
    for (size_t k = 0; k < mask.size(); ++k) some |= (active[k] = mask[k] && t < extent.i(k));
    if (!some) break;
    env_[var] = Binding{apply_binary(BinaryOp::Add, lo, Val::of_int(t)), Expr()};
    run(body, active, threaded);
  }
}

Val Counter::control(const Expr& e, const Stmt& s, bool upper) {
  Val v = ev_.eval(e);
  if (!v.known() && upper) {
    v = ev_.eval_upper(e);
    if (v.known()) {
      out_.notes.insert("the trip count of `" + line(s) +
                        "` depends on values computed in the kernel: counted at its largest");
    }
  }
  if (!v.known()) {
    fail("the bound of `" + line(s) + "` depends on values computed while the kernel runs, which a static count "
         "cannot follow");
  }
  return v;
}

void Counter::branch(const ir::IfThenElseNode* op, const Mask& mask, bool threaded) {
  Mask rest = mask;
  std::vector<Expr> earlier;
  for (auto& [cond, body] : arms(op)) {
    Mask taken;
    if (!cond) {
      taken = rest;
    } else {
      earlier.push_back(cond);
      Val c = ev_.eval(cond);
      if (!c.known()) {
        out_.notes.insert("`if " + quote(cond) + "` depends on values computed in the kernel: counted as taken");
        taken = rest;
        rest.assign(rest.size(), 0);
      } else {
        taken = and_truth(rest, c);
        rest = and_truth(rest, logical_not(c));
      }
    }
    run(items(body), taken, per_thread(earlier, threaded));
  }
}

void Counter::lane_statement(const Stmt& s, const std::vector<Expr>& exprs, const Access* target, const Mask& mask,
                             bool atomic) {
  const Plan& p = plan(s, exprs, target, atomic);
  out_.cuda_flops += analysis::count(mask) * p.flops;
  for (const Access& a : p.accesses) {
    int64_t n = analysis::count(inside(a, mask));
    add_bytes(a, n, a.store);
    if (atomic && a.store) add_bytes(a, n, false);
  }
}

Mask Counter::inside(const Access& a, const Mask& mask) {
  const BufferInfo& info = buffers_.at(a.buffer.get());
  Mask ok = mask;
  for (size_t d = 0; d < a.indices.size() && d < info.shape.size(); ++d) {
    Val idx = ev_.eval(a.indices[d]);
    if (!idx.known()) {
      out_.notes.insert("an index of " + info.name + " depends on values computed in the kernel: counted as inside "
                        "the tensor");
      continue;
    }
    int64_t last = d + 1 == info.shape.size() ? a.lanes - 1 : 0;
    for (size_t k = 0; k < ok.size(); ++k) {
      int64_t i = idx.i(k);
      ok[k] = ok[k] && i >= 0 && i + last < info.shape[d];
    }
  }
  return ok;
}

void Counter::add_bytes(const Access& a, int64_t n, bool store) {
  const BufferInfo& info = buffers_.at(a.buffer.get());
  (store ? out_.stores : out_.loads)[info.name] += n * a.lanes * info.bits / 8;
}

void Counter::tile_op(const ir::TileOpNode* op, const Mask& mask) {
  int64_t active = analysis::count(mask);
  auto extents = [&](const ir::BufferRegion& r) {
    std::vector<int64_t> out;
    for (const Expr& e : r.extents) out.push_back(fixed(e, "tile extent"));
    return out;
  };
  if (op->op == "gemm" || op->op == "gemm_sp") {
    bool sparse = op->op == "gemm_sp";
    std::vector<int64_t> a = extents(op->regions[0]), c = extents(op->regions[sparse ? 3 : 2]);
    int64_t k = (op->attr_int("transpose_A", 0) ? a.front() : a.back()) * (sparse ? 2 : 1);
    out_.tensor_flops += 2 * c[0] * c[1] * k * active;
  } else if (op->op == "reduce") {
    std::vector<int64_t> src = extents(op->regions[0]);
    int64_t dim = op->attr_int("dim", int64_t(src.size()) - 1);
    int64_t n = src[dim], all = 1;
    for (int64_t e : src) all *= e;
    std::string kind = op->attr_str("kind", "");
    int64_t per = n - 1 + (op->attr_int("clear", 1) ? 0 : 1) + (kind == "abssum" || kind == "absmax" ? n : 0);
    out_.cuda_flops += all / std::max<int64_t>(n, 1) * per * active;
  } else if (op->op != "use_swizzle") {
    out_.notes.insert("T." + op->op + " is not counted");
  }
}

void Counter::call(const Stmt& s, const Expr& value, const Mask& mask) {
  auto* c = value.as<ir::CallNode>();
  if (!c) return lane_statement(s, {value}, nullptr, mask, false);
  if (c->op == "tma_copy") fail("bulk tensor copies are counted from the kernel lowered without them");
  if (c->op == "atomic_add" && c->args.size() >= 2) {
    std::optional<Access> target;
    if (auto* dst = c->args[0].as<ir::BufferLoadNode>()) {
      target = Access{dst->buffer, dst->indices, dst->dtype.lanes, true};
    }
    return lane_statement(s, {c->args[1]}, target ? &*target : nullptr, mask, true);
  }
  lane_statement(s, c->args, nullptr, mask, false);
}

// ---- plans ----

const Plan& Counter::plan(const Stmt& s, const std::vector<Expr>& exprs, const Access* target, bool atomic) {
  auto it = plans_.find(s.get());
  if (it != plans_.end()) return it->second;
  Plan p;
  p.flops = atomic ? 1 : 0;
  for (const Expr& e : exprs) p.flops += flops(e);
  auto add = [&](const Access& a) {
    auto b = buffers_.find(a.buffer.get());
    if (b == buffers_.end() || !b->second.global) return;
    bool again = std::any_of(p.accesses.begin(), p.accesses.end(), [&](const Access& o) {
      return o.buffer == a.buffer && o.store == a.store && o.lanes == a.lanes && same_exprs(o.indices, a.indices);
    });
    if (!again) p.accesses.push_back(a);
  };
  for (const Expr& e : exprs) {
    ir::post_order(ir::make_evaluate(e), nullptr, [&](const Expr& x) {
      if (auto* l = x.as<ir::BufferLoadNode>()) add(Access{l->buffer, l->indices, l->dtype.lanes, false});
    });
  }
  if (target) add(*target);
  return plans_.emplace(s.get(), std::move(p)).first->second;
}

bool Counter::is_float(const Expr& e) const {
  switch (e.kind()) {
    case ir::NodeKind::FloatImm: return true;
    case ir::NodeKind::Var: {
      auto* v = e.as<ir::VarNode>();
      auto it = env_.find(v);
      if (it != env_.end() && it->second.deferred) return is_float(it->second.deferred);
      for (const ir::Param& p : k_.params) {
        if (!p.buffer && p.var.get() == v) return is_float_name(v->dtype.name());
      }
      return float_lets_.count(v) != 0;
    }
    case ir::NodeKind::Binary: {
      auto* op = e.as<ir::BinaryNode>();
      if (is_arithmetic(op->op) || is_bitwise(op->op) || op->op == BinaryOp::Mod) return is_float(op->a) || is_float(op->b);
      return false;
    }
    case ir::NodeKind::Select: {
      auto* op = e.as<ir::SelectNode>();
      return is_float(op->t) || is_float(op->f);
    }
    case ir::NodeKind::Cast: return is_float_name(e.dtype().name());
    case ir::NodeKind::Call: {
      auto* op = e.as<ir::CallNode>();
      if (op->op == "infinity" || op->op == "ninfinity" || op->op == "max_value" || op->op == "min_value" ||
          is_math(op->op) || is_float_name(op->op)) {
        return true;
      }
      if (op->op == "min" || op->op == "max" || op->op == "truncmod") {
        return std::any_of(op->args.begin(), op->args.end(), [&](const Expr& a) { return is_float(a); });
      }
      return false;
    }
    case ir::NodeKind::BufferLoad: return is_float_name(e.as<ir::BufferLoadNode>()->buffer->dtype.name());
    default: return false;
  }
}

int64_t Counter::flops(const Expr& e) const {
  switch (e.kind()) {
    case ir::NodeKind::FloatImm: {
      double v = e.as<ir::FloatImmNode>()->value;
      return std::isinf(v) && v < 0 ? 1 : 0;  // -inf reads as a negated infinity
    }
    case ir::NodeKind::Binary: {
      auto* op = e.as<ir::BinaryNode>();
      int64_t own = is_arithmetic(op->op) && is_float(e) ? 1 : 0;
      return own + flops(op->a) + flops(op->b);
    }
    case ir::NodeKind::Not: return flops(e.as<ir::NotNode>()->a);
    case ir::NodeKind::Select: {
      auto* op = e.as<ir::SelectNode>();
      return flops(op->cond) + flops(op->t) + flops(op->f);
    }
    case ir::NodeKind::Cast: return flops(e.as<ir::CastNode>()->value);
    case ir::NodeKind::Call: {
      auto* op = e.as<ir::CallNode>();
      int64_t own = is_math(op->op) || ((op->op == "min" || op->op == "max") && is_float(e)) ? 1 : 0;
      for (const Expr& a : op->args) own += flops(a);
      return own;
    }
    default: return 0;  // constants, variables, and loads (their indices are integer work)
  }
}

// ---- the whole grid ----

WorkCounts Counter::count() {
  for (auto& [name, number] : in_.values) {
    for (const Expr& v : k_.dynamic_vars) {
      if (v.as<ir::VarNode>()->name == name) {
        env_[v.as<ir::VarNode>()] = Binding{number.is_float ? Val::of_float(number.f) : Val::of_int(number.i), Expr()};
      }
    }
    for (const ir::Param& p : k_.params) {
      if (!p.buffer && p.var.as<ir::VarNode>()->name == name) {
        env_[p.var.as<ir::VarNode>()] = Binding{number.is_float ? Val::of_float(number.f) : Val::of_int(number.i), Expr()};
      }
    }
  }
  auto describe = [&](const ir::Buffer& b, bool global) {
    BufferInfo info{printed_.buffer(b.get()), global, {}, dtype_bits(b->dtype), is_float_name(b->dtype.name())};
    if (global) {
      int64_t bytes = 1;
      for (const Expr& d : b->shape) {
        info.shape.push_back(fixed(d, "dimension of " + info.name));
        bytes *= info.shape.back();
      }
      out_.sizes[info.name] = bytes * info.bits / 8;
    }
    buffers_[b.get()] = info;
  };
  try {
    for (const ir::Param& p : k_.params) {
      if (p.buffer) describe(p.buffer, p.buffer->scope == ir::Scope::Global);
    }
    for (const ir::Buffer& b : k_.allocs) describe(b, b->scope == ir::Scope::Global);
    for (const ir::Buffer& b : k_.views) {
      auto root = buffers_.find(b->view_of.get());
      describe(b, root != buffers_.end() && root->second.global);
    }
    for (const ir::Buffer& b : k_.addressed) describe(b, true);
    std::vector<std::pair<const ir::VarNode*, int64_t>> dims;
    for (size_t i = 0; i < k_.grid.size(); ++i) {
      out_.grid.push_back(fixed(k_.grid[i], "grid size"));
      dims.push_back({i < k_.block_vars.size() ? k_.block_vars[i].as<ir::VarNode>() : nullptr, out_.grid.back()});
    }
    auto* tx = k_.thread_var ? k_.thread_var.as<ir::VarNode>() : nullptr;
    bool reads_thread = false;
    if (tx) {
      ir::post_order(k_.body, nullptr, [&](const Expr& e) { reads_thread |= e.as<ir::VarNode>() == tx; });
    }
    bool threaded = !in_.per_thread && reads_thread;
    if (tx && (in_.per_thread || threaded)) {
      dims.push_back({tx, k_.threads});
      thread_vars_.push_back(tx);
    }
    int64_t lanes = 1;
    for (auto& d : dims) lanes *= d.second;
    std::vector<Stmt> body = items(k_.body);
    for (int64_t start = 0; start < lanes; start += kLaneChunk) {
      int64_t n = std::min(lanes, start + kLaneChunk) - start;
      int64_t stride = 1;
      for (auto& [var, size] : dims) {
        std::vector<int64_t> ids(n);
        for (int64_t k = 0; k < n; ++k) ids[k] = (start + k) / stride % size;
        stride *= size;
        if (!var) continue;
        if (threaded && var == tx) {
          first_thread_ = Mask(n);
          for (int64_t k = 0; k < n; ++k) (*first_thread_)[k] = ids[k] == 0;
        }
        env_[var] = Binding{Val::int_lanes(std::move(ids)), Expr()};
      }
      run(body, Mask(n, 1), false);
    }
  } catch (const MissingValue& m) {
    fail("the count needs the value of '" + printed_.var(m.var) + "' (a dynamic size or a scalar parameter)");
  }
  return out_;
}

}  // namespace detail

WorkCounts count_work(const ir::Kernel& kernel, const WorkInputs& inputs) { return detail::Counter(kernel, inputs).count(); }

}  // namespace tegula::analysis
