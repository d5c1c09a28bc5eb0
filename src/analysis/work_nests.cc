// T.Parallel nests of the work count (work_counts.h): each statement of a nest counts once
// per element, its accesses where they fall inside their tensor; a nest whose guards and
// indices are intervals of its variables is counted by arithmetic, any other by
// enumerating its points, block by block.
#include <algorithm>
#include <cmath>

#include "analysis/work_counter.h"

namespace tegula::analysis::detail {

// ---- T.Parallel nests: once per element ----

void Counter::nest(const Stmt& s, const Mask& mask) {
  std::vector<Leaf> leaves;
  collect(s, {}, {}, leaves);
  for (const Leaf& leaf : leaves) {
    std::vector<Expr> exprs;
    std::optional<Access> target;
    bool atomic = false;
    if (auto* let = leaf.stmt.as<ir::LetStmtNode>()) {
      exprs = {let->value};
    } else if (auto* st = leaf.stmt.as<ir::BufferStoreNode>()) {
      exprs = {st->value};
      exprs.insert(exprs.end(), st->indices.begin(), st->indices.end());
      target = Access{st->buffer, st->indices, st->value.dtype().lanes, true};
    } else if (auto* ev = leaf.stmt.as<ir::EvaluateNode>()) {
      auto* c = ev->value.as<ir::CallNode>();
      if (c && c->op == "atomic_add" && c->args.size() >= 2) {
        exprs = {c->args[1]};
        atomic = true;
        if (auto* dst = c->args[0].as<ir::BufferLoadNode>()) {
          target = Access{dst->buffer, dst->indices, dst->dtype.lanes, true};
        }
      } else {
        exprs = c ? c->args : std::vector<Expr>{ev->value};
      }
    }
    const Plan& p = plan(leaf.stmt, exprs, target ? &*target : nullptr, atomic);
    if (p.flops) out_.cuda_flops += p.flops * points(leaf.loops, leaf.guards, mask);
    for (const Access& a : p.accesses) {
      std::vector<Guard> guards = leaf.guards;
      guards.push_back(Guard{Expr(), false, &a});
      int64_t n = points(leaf.loops, guards, mask);
      add_bytes(a, n, a.store);
      if (atomic && a.store) add_bytes(a, n, false);
    }
  }
}

void Counter::collect(const Stmt& s, const std::vector<Loop>& loops, const std::vector<Guard>& guards,
                      std::vector<Leaf>& leaves) {
  switch (s.kind()) {
    case ir::NodeKind::For: {
      auto* op = s.as<ir::ForNode>();
      Vars nest;
      for (const Loop& l : loops) nest.push_back(l.var);
      if (ev_.reads_any(op->min, nest) || ev_.reads_any(op->extent, nest)) {
        fail("`" + line(s) + "` has bounds that depend on an enclosing T.Parallel variable, which the count does not "
             "follow");
      }
      std::vector<Loop> inner = loops;
      inner.push_back(Loop{op->var.as<ir::VarNode>(), control(op->min, s, false), control(op->extent, s, false)});
      for (const Stmt& c : items(op->body)) collect(c, inner, guards, leaves);
      return;
    }
    case ir::NodeKind::IfThenElse: {
      std::vector<Expr> earlier;
      for (auto& [cond, body] : arms(s.as<ir::IfThenElseNode>())) {
        std::vector<Guard> here = guards;
        for (const Expr& e : earlier) here.push_back(Guard{e, true, nullptr});
        if (cond) here.push_back(Guard{cond, false, nullptr});
        for (const Stmt& c : items(body)) collect(c, loops, here, leaves);
        if (cond) earlier.push_back(cond);
      }
      return;
    }
    case ir::NodeKind::TileOp:
      out_.notes.insert("T." + s.as<ir::TileOpNode>()->op + " inside a T.Parallel nest is not counted");
      return;
    case ir::NodeKind::While:
    case ir::NodeKind::LoopJump: return statement(s, Mask{}, false);  // refused there, naming the line
    case ir::NodeKind::LetStmt: {
      auto* op = s.as<ir::LetStmtNode>();
      env_[op->var.as<ir::VarNode>()] = Binding{Val(), op->value};
      leaves.push_back(Leaf{s, loops, guards});
      return;
    }
    default: leaves.push_back(Leaf{s, loops, guards});
  }
}

int64_t Counter::points(const std::vector<Loop>& loops, const std::vector<Guard>& guards, const Mask& mask) {
  if (guards.empty()) {
    Val per = Val::of_int(1);
    for (const Loop& l : loops) per = apply_binary(BinaryOp::Mul, per, apply_binary(BinaryOp::Max, l.extent, Val::of_int(0)));
    return sum_where(per, mask);
  }
  Vars nest;
  std::vector<Val> lo, hi;
  for (const Loop& l : loops) {
    nest.push_back(l.var);
    lo.push_back(l.lo);
    hi.push_back(apply_binary(BinaryOp::Sub, apply_binary(BinaryOp::Add, l.lo, l.extent), Val::of_int(1)));
  }
  Mask ok = mask;
  for (const Guard& g : guards) {
    auto cs = constraints(g, nest);
    bool intervals = cs.has_value() && std::all_of(cs->begin(), cs->end(), [](const Constraint& c) {
      return c.is_truth || c.form.coeffs.size() <= 1;
    });
    if (!intervals) return dense_points(loops, guards, mask);
    for (const Constraint& c : *cs) {
      if (c.is_truth) {
        ok = and_truth(ok, c.truth);
      } else if (c.form.coeffs.empty()) {
        ok = and_truth(ok, apply_binary(BinaryOp::GE, c.form.base, Val::of_int(0)));
      } else {
        auto [var, k] = c.form.coeffs[0];
        size_t d = std::find(nest.begin(), nest.end(), var) - nest.begin();
        if (k > 0) {
          Val bound = apply_binary(BinaryOp::Sub, Val::of_int(0), apply_binary(BinaryOp::FloorDiv, c.form.base, Val::of_int(k)));
          lo[d] = apply_binary(BinaryOp::Max, lo[d], bound);
        } else {
          hi[d] = apply_binary(BinaryOp::Min, hi[d], apply_binary(BinaryOp::FloorDiv, c.form.base, Val::of_int(-k)));
        }
      }
    }
  }
  Val per = Val::of_int(1);
  for (size_t d = 0; d < nest.size(); ++d) {
    Val n = apply_binary(BinaryOp::Add, apply_binary(BinaryOp::Sub, hi[d], lo[d]), Val::of_int(1));
    per = apply_binary(BinaryOp::Mul, per, apply_binary(BinaryOp::Max, n, Val::of_int(0)));
  }
  return sum_where(per, ok);
}

void Counter::unknown_branch(const Guard& g) {
  std::string text = quote(g.negated ? ir::make_not(g.cond) : g.cond);
  out_.notes.insert("`if " + text + "` depends on values computed in the kernel: counted as taken");
}

std::optional<std::vector<Constraint>> Counter::constraints(const Guard& g, const Vars& nest) {
  std::vector<Constraint> out;
  if (g.in_bounds) {
    const Access& a = *g.in_bounds;
    const BufferInfo& info = buffers_.at(a.buffer.get());
    for (size_t d = 0; d < a.indices.size() && d < info.shape.size(); ++d) {
      AffineResult r = affine(a.indices[d], nest);
      if (r.kind == AffineResult::None) return std::nullopt;
      if (r.kind == AffineResult::Unknown) {
        out_.notes.insert("an index of " + info.name + " depends on values computed in the kernel: counted as inside "
                          "the tensor");
        continue;
      }
      int64_t last = d + 1 == info.shape.size() ? a.lanes - 1 : 0;
      out.push_back(Constraint{false, Val(), r.form});
      out.push_back(Constraint{false, Val(), Affine{{}, Val::of_int(info.shape[d] - 1 - last)}.plus(r.form, -1)});
    }
    return out;
  }
  if (!ev_.reads_any(g.cond, nest)) {
    Val v = ev_.eval(g.cond);
    if (g.negated) v = logical_not(v);
    if (!v.known()) {
      unknown_branch(g);
      return out;
    }
    out.push_back(Constraint{true, v, {}});
    return out;
  }
  auto* bin = g.cond.as<ir::BinaryNode>();
  if (!g.negated && bin && bin->op == BinaryOp::And) {
    for (const Expr& part : {bin->a, bin->b}) {
      auto cs = constraints(Guard{part, false, nullptr}, nest);
      if (!cs) return std::nullopt;
      out.insert(out.end(), cs->begin(), cs->end());
    }
    return out;
  }
  bool negate = g.negated;
  Expr cmp = g.cond;
  if (!negate) {
    if (auto* n = g.cond.as<ir::NotNode>()) negate = true, cmp = n->a;
  }
  auto* c = cmp.as<ir::BinaryNode>();
  if (!c || !ir::is_comparison(c->op)) return std::nullopt;
  BinaryOp op = c->op;
  if (negate) {
    switch (op) {
      case BinaryOp::LT: op = BinaryOp::GE; break;
      case BinaryOp::LE: op = BinaryOp::GT; break;
      case BinaryOp::GT: op = BinaryOp::LE; break;
      case BinaryOp::GE: op = BinaryOp::LT; break;
      case BinaryOp::EQ: op = BinaryOp::NE; break;
      default: op = BinaryOp::EQ; break;
    }
  }
  AffineResult a = affine(c->a, nest), b = affine(c->b, nest);
  if (a.kind == AffineResult::Unknown || b.kind == AffineResult::Unknown) {
    unknown_branch(g);
    return out;
  }
  if (a.kind == AffineResult::None || b.kind == AffineResult::None) return std::nullopt;
  Affine one{{}, Val::of_int(1)};
  auto form = [](const Affine& f) { return Constraint{false, Val(), f}; };
  switch (op) {
    case BinaryOp::LT: return std::vector<Constraint>{form(b.form.plus(a.form, -1).plus(one, -1))};
    case BinaryOp::LE: return std::vector<Constraint>{form(b.form.plus(a.form, -1))};
    case BinaryOp::GT: return std::vector<Constraint>{form(a.form.plus(b.form, -1).plus(one, -1))};
    case BinaryOp::GE: return std::vector<Constraint>{form(a.form.plus(b.form, -1))};
    case BinaryOp::EQ: return std::vector<Constraint>{form(a.form.plus(b.form, -1)), form(b.form.plus(a.form, -1))};
    default: return std::nullopt;
  }
}

AffineResult Counter::affine(const Expr& e, const Vars& nest) {
  if (!ev_.reads_any(e, nest)) {
    Val v = ev_.eval(e);
    if (!v.known()) return {AffineResult::Unknown, {}};
    if (!v.is_int()) return {};
    return {AffineResult::Ok, Affine{{}, v}};
  }
  if (auto* v = e.as<ir::VarNode>()) {
    auto it = env_.find(v);
    if (it != env_.end() && it->second.deferred) return affine(it->second.deferred, nest);
    return {AffineResult::Ok, Affine{{{v, 1}}, Val::of_int(0)}};
  }
  if (auto* op = e.as<ir::BinaryNode>()) {
    if (op->op != BinaryOp::Add && op->op != BinaryOp::Sub && op->op != BinaryOp::Mul) return {};
    AffineResult a = affine(op->a, nest), b = affine(op->b, nest);
    if (a.kind == AffineResult::Unknown || b.kind == AffineResult::Unknown) return {AffineResult::Unknown, {}};
    if (a.kind == AffineResult::None || b.kind == AffineResult::None) return {};
    if (op->op == BinaryOp::Mul) {
      for (auto [x, k] : {std::pair{&a.form, &b.form}, std::pair{&b.form, &a.form}}) {
        if (k->coeffs.empty() && k->base.is_int() && !k->base.per_lane()) return {AffineResult::Ok, x->scaled(k->base.i(0))};
      }
      return {};
    }
    return {AffineResult::Ok, a.form.plus(b.form, op->op == BinaryOp::Add ? 1 : -1)};
  }
  if (auto* cast = e.as<ir::CastNode>()) {
    const std::string name = e.dtype().name();
    static const std::unordered_set<std::string> int_casts = {"int8",  "int16",  "int32",  "int64",
                                                               "uint8", "uint16", "uint32", "uint64"};
    if (int_casts.count(name)) return affine(cast->value, nest);
  }
  return {};
}

int64_t Counter::dense_points(const std::vector<Loop>& loops, const std::vector<Guard>& guards, const Mask& mask) {
  std::vector<size_t> blocks;
  for (size_t k = 0; k < mask.size(); ++k) {
    if (mask[k]) blocks.push_back(k);
  }
  int64_t volume = 1;
  for (const Loop& l : loops) {
    int64_t size = 0;
    for (size_t b : blocks) size = std::max(size, l.extent.i(b));
    volume *= size;
  }
  if (volume == 0 || blocks.empty()) return 0;
  double scale = 1.0;
  int64_t total_blocks = int64_t(blocks.size());
  if (volume * total_blocks > in_.dense_limit) {
    // Too many points to enumerate (an im2col's padding over a million blocks): evenly
    // spaced blocks are, and the count scales to all of them.
    int64_t keep = std::max<int64_t>(1, in_.dense_limit / volume);
    scale = double(total_blocks) / double(keep);
    out_.notes.insert("a nest's masked accesses are estimated from " + std::to_string(keep) + " of " +
                      std::to_string(total_blocks) + " blocks");
    std::vector<size_t> picked;
    for (int64_t j = 0; j < keep; ++j) picked.push_back(blocks[size_t(j * total_blocks / keep)]);
    blocks = std::move(picked);
  }
  int64_t total = 0;
  for (size_t b : blocks) {
    std::vector<int64_t> lo, extent;
    int64_t points = 1;
    for (const Loop& l : loops) {
      lo.push_back(l.lo.i(b));
      extent.push_back(l.extent.i(b));
      points *= std::max<int64_t>(extent.back(), 0);
    }
    if (points == 0) continue;
    // The block's points become the lanes: every value of the block's lane is read there,
    // and each nest variable runs over its points.
    std::vector<std::pair<const ir::VarNode*, Val>> saved;
    for (auto& [var, binding] : env_) {
      if (!binding.deferred && binding.value.per_lane()) {
        saved.push_back({var, binding.value});
        binding.value = binding.value.at(b);
      }
    }
    int64_t stride = points;
    for (size_t d = 0; d < loops.size(); ++d) {
      stride /= extent[d];
      std::vector<int64_t> values(points);
      for (int64_t p = 0; p < points; ++p) values[p] = lo[d] + p / stride % extent[d];
      env_[loops[d].var] = Binding{Val::int_lanes(std::move(values)), Expr()};
    }
    Mask ok(points, 1);
    for (const Guard& g : guards) ok = dense_holds(g, ok);
    total += analysis::count(ok);
    for (const Loop& l : loops) env_.erase(l.var);
    for (auto& [var, value] : saved) env_[var].value = value;
  }
  return scale == 1.0 ? total : int64_t(std::nearbyint(double(total) * scale));
}

Mask Counter::dense_holds(const Guard& g, const Mask& ok) {
  if (g.in_bounds) return inside(*g.in_bounds, ok);
  Val v = ev_.eval(g.cond);
  if (g.negated) v = logical_not(v);
  if (!v.known()) {
    unknown_branch(g);
    return ok;
  }
  return and_truth(ok, v);
}

}  // namespace tegula::analysis::detail
