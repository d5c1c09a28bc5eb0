// The reference semantics: the kernel as written, at tile level (see interp.h).
//
// One logical thread per block runs the tile program: blocks one after another, every
// T.Parallel / T.Pipelined / T.serial iteration one after another, tile ops at tile level
// (reference_ops.cc). Allocated buffers start as NaN in every block, so a read of an
// unwritten element shows in the outputs. Arithmetic has the generated CUDA's meaning
// (eval_binary / eval_intrinsic), every result rounded to its expression's dtype.
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <limits>

#include "interp/reference_impl.h"
#include "ir/functor.h"
#include "ir/index_map.h"
#include "ir/warp_groups.h"
#include "ir/wide_access.h"

namespace tegula::interp {

using namespace ir;

namespace ref {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A loop bound or shape as an integer; NaN means it was computed from an unwritten value.
int64_t to_int(double v, const SourceLoc& loc, const char* what) {
  user_assert(!std::isnan(v), loc) << what << " is not a number (it was computed from a value never written)";
  return int64_t(v);
}

// A constant the generated code spells as a float literal (cast to 16 bits when needed).
double float_constant(const FloatImmNode* n) {
  if (n->dtype.bits == 64) return n->value;
  return round_to_dtype(n->dtype, double(float(n->value)));
}

}  // namespace

double combine_reducer(int64_t code, double a, double b) {
  switch (code) {
    case 0: return a + b;
    case 1: return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b);
    case 2: return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::min(a, b);
    case 3: return double(int64_t(a) & int64_t(b));
    case 4: return double(int64_t(a) | int64_t(b));
    default: return double(int64_t(a) ^ int64_t(b));
  }
}

int Compiler::declare_var(const ExprNode* var, int lanes) {
  auto [it, fresh] = vars_.emplace(var, next_slot_);
  if (fresh) next_slot_ += lanes;
  return it->second;
}

int Compiler::declare_buffer(const Buffer& b) {
  auto [it, fresh] = bufs_.emplace(b.get(), int(bufs_.size()));
  return it->second;
}

int Compiler::var_slot(const ExprNode* var) const {
  auto it = vars_.find(var);
  return it == vars_.end() ? -1 : it->second;
}

int Compiler::buffer_slot(const Buffer& b, const SourceLoc& loc) const {
  auto it = bufs_.find(b.get());
  internal_assert(it != bufs_.end()) << "reference: buffer '" << b->name << "' at " << loc.str()
                                     << " is neither a parameter nor an allocation of the kernel";
  return it->second;
}

ExprFn Compiler::expr(const Expr& e, const SourceLoc& at) {
  const SourceLoc& loc = e->loc.known() ? e->loc : at;
  switch (e.kind()) {
    case NodeKind::IntImm: {
      auto* n = e.as<IntImmNode>();  // an unsigned constant is held as its bit pattern
      double v = n->dtype.code == DataType::UInt ? double(uint64_t(n->value)) : double(n->value);
      return [v](Frame&) { return v; };
    }
    case NodeKind::FloatImm: {
      double v = float_constant(e.as<FloatImmNode>());
      return [v](Frame&) { return v; };
    }
    case NodeKind::Var: {
      int slot = var_slot(e.get());
      if (slot < 0) {
        user_assert(!k_.thread_var || !e.same_as(k_.thread_var), at)
            << "the reference cannot run programs that use the thread index ('" << e.as<VarNode>()->name
            << "'): a tile program is one logical thread per block";
        internal_error << "reference: variable '" << e.as<VarNode>()->name << "' used at " << at.str()
                       << " has no value";
      }
      return [slot](Frame& f) { return f.vars[slot]; };
    }
    case NodeKind::Binary: return binary(e.as<BinaryNode>(), loc);
    case NodeKind::Not: {
      ExprFn a = expr(e.as<NotNode>()->a, loc);
      return [a](Frame& f) { return a(f) == 0 ? 1.0 : 0.0; };
    }
    case NodeKind::Select: {
      auto* s = e.as<SelectNode>();
      ExprFn c = expr(s->cond, loc), t = expr(s->t, loc), x = expr(s->f, loc);
      return [c, t, x](Frame& f) { return c(f) != 0 ? t(f) : x(f); };
    }
    case NodeKind::Cast: {
      DataType t = e.dtype(), from = e.as<CastNode>()->value.dtype();
      ExprFn v = expr(e.as<CastNode>()->value, loc);
      return [t, from, v](Frame& f) { return cast_to_dtype(from, t, v(f)); };
    }
    case NodeKind::Call: {
      auto* c = e.as<CallNode>();
      DataType t = c->dtype;
      if (ExprFn fn = block_call(c)) return fn;
      if (ExprFn fn = barrier_call(c, loc)) return fn;
      if (c->op == "atomic_add") return atomic_add(c, loc);
      if (c->op == "reinterpret" || wide_access(c)) {
        VecFn v = vexpr(e, loc);
        return [v](Frame& f) {
          double out;
          v(f, &out);
          return out;
        };
      }
      std::vector<ExprFn> args;
      for (auto& a : c->args) args.push_back(expr(a, loc));
      double probe;
      // A warp's lanes together: a tile program has one logical thread per block.
      user_assert(c->op.rfind("warp_reduce_", 0) != 0 && c->op != "any_sync" && c->op != "all_sync" &&
                      c->op != "ballot_sync" && c->op != "ballot" && c->op != "activemask" &&
                      c->op != "match_any_sync" && c->op != "match_all_sync" &&
                      c->op.rfind("shfl_", 0) != 0 && c->op != "sync_warp" && c->op.rfind("syncthreads_", 0) != 0,
                  at)
          << "the reference cannot run '" << c->op << "': it combines the values of several threads (a warp's "
          << "lanes, or the block's threads), and a tile program is one logical thread per block "
          << "(tegula.testing.simulate runs it thread by thread)";
      user_assert(c->op.rfind("rng_", 0) != 0, loc)
          << "the reference cannot run '" << c->op << "': the reference runs one logical thread per block, "
          << "and random numbers are each thread's own";
      if (!eval_intrinsic(c->op, std::vector<double>(args.size(), 1.0), t, &probe)) {
        internal_error << "reference: cannot interpret the call '" << c->op << "' at " << loc.str();
      }
      std::string name = c->op;
      std::vector<double> scratch(args.size());
      return [name, t, args, scratch](Frame& f) mutable {
        std::vector<double>& v = scratch;  // a call's arguments never re-enter the same call
        for (size_t i = 0; i < args.size(); ++i) v[i] = args[i](f);
        double r = 0;
        eval_intrinsic(name, v, t, &r);
        return r;
      };
    }
    case NodeKind::BufferLoad: return load(e.as<BufferLoadNode>(), loc);
    default: break;
  }
  internal_error << "reference: cannot interpret the expression kind " << node_kind_name(e.kind()) << " at "
                 << loc.str();
  return {};
}

ExprFn Compiler::binary(const BinaryNode* b, const SourceLoc& loc) {
  ExprFn x = expr(b->a, loc), y = expr(b->b, loc);
  // && and || short-circuit in the generated code: `i < n && A[i] > 0` never reads A[n].
  if (b->op == BinaryOp::And) return [x, y](Frame& f) { return x(f) != 0 && y(f) != 0 ? 1.0 : 0.0; };
  if (b->op == BinaryOp::Or) return [x, y](Frame& f) { return x(f) != 0 || y(f) != 0 ? 1.0 : 0.0; };
  BinaryOp op = b->op;
  DataType operand = b->a.dtype(), result = b->dtype;
  return [op, x, y, operand, result](Frame& f) {
    double a = x(f);
    return eval_binary(op, a, y(f), operand, result);
  };
}

ExprFn Compiler::load(const BufferLoadNode* l, const SourceLoc& loc) {
  internal_assert(l->dtype.lanes == 1) << "reference: a vector load of '" << l->buffer->name
                                       << "' in a program as written";
  internal_assert(l->indices.size() == l->buffer->shape.size() && l->indices.size() <= kMaxRank)
      << "reference: " << l->indices.size() << " indices into '" << l->buffer->name << "'";
  int slot = buffer_slot(l->buffer, loc);
  std::vector<ExprFn> idx;
  for (auto& i : l->indices) idx.push_back(expr(i, loc));
  return [slot, idx, loc](Frame& f) {
    Buf& b = f.bufs[slot];
    int64_t at[kMaxRank];
    for (size_t d = 0; d < idx.size(); ++d) at[d] = to_index(idx[d](f), b, d, loc);
    double* p = element(b, at, loc);
    return p ? *p : b.safe;
  };
}

// atomic_add(dst element, value[, order]) as an expression (T.atomic_add(...,
// return_prev=True)): adds, and gives the value the element held before.
ExprFn Compiler::atomic_add(const CallNode* c, const SourceLoc& loc) {
  auto* dst = c->args.at(0).as<BufferLoadNode>();
  internal_assert(dst) << "reference: atomic_add's first argument is an element";
  int slot = buffer_slot(dst->buffer, loc);
  std::vector<ExprFn> idx;
  for (auto& i : dst->indices) idx.push_back(expr(i, loc));
  ExprFn value = expr(c->args.at(1), loc);
  DataType t = dst->buffer->dtype;
  return [slot, idx, value, t, loc](Frame& f) {
    Buf& b = f.bufs[slot];
    int64_t at[kMaxRank];
    for (size_t d = 0; d < idx.size(); ++d) at[d] = to_index(idx[d](f), b, d, loc);
    double v = value(f);
    double* p = element(b, at, loc);
    if (!p) return 0.0;
    double old = *p;
    *p = round_to_dtype(t, old + v);
    return old;
  };
}

StmtFn Compiler::store(const BufferStoreNode* s) {
  if (s->value.dtype().lanes > 1) return vector_store(s);
  const SourceLoc& loc = s->loc;
  internal_assert(s->value.dtype().lanes == 1) << "reference: a vector store into '" << s->buffer->name
                                               << "' in a program as written";
  internal_assert(s->indices.size() == s->buffer->shape.size() && s->indices.size() <= kMaxRank)
      << "reference: " << s->indices.size() << " indices into '" << s->buffer->name << "'";
  int slot = buffer_slot(s->buffer, loc);
  std::vector<ExprFn> idx;
  for (auto& i : s->indices) idx.push_back(expr(i, loc));
  ExprFn value = expr(s->value, loc);
  DataType t = s->buffer->dtype, from = s->value.dtype().element();
  return [slot, idx, value, loc, t, from](Frame& f) {
    Buf& b = f.bufs[slot];
    int64_t at[kMaxRank];
    for (size_t d = 0; d < idx.size(); ++d) at[d] = to_index(idx[d](f), b, d, loc);
    double v = value(f);
    // A value of another type stored is converted, as the generated store converts it.
    if (double* p = element(b, at, loc)) *p = from == t ? round_to_dtype(t, v) : cast_to_dtype(from, t, v);
  };
}

StmtFn Compiler::loop(const ForNode* l) {
  const SourceLoc& loc = l->loc;
  ExprFn lo = expr(l->min, loc), n = expr(l->extent, loc);
  int slot = declare_var(l->var.get());
  auto saved = loop_range_;
  loop_range_ = range_;
  StmtFn body = stmt(l->body);
  loop_range_ = saved;
  // Every kind (parallel, pipelined, unrolled, vectorized) runs its iterations in order:
  // the language makes T.Parallel iterations independent, the others are sequential.
  return [lo, n, slot, body, loc](Frame& f) {
    int64_t start = to_int(lo(f), loc, "the loop's start");
    int64_t extent = to_int(n(f), loc, "the loop's extent");
    for (int64_t i = 0; i < extent; ++i) {
      f.vars[slot] = double(start + i);
      body(f);
      if (int jump = f.jump) {
        f.jump = 0;
        if (jump == 1) break;
      }
    }
  };
}

StmtFn Compiler::stmt(const Stmt& s) {
  if (!s) return [](Frame&) {};
  const SourceLoc& loc = s->loc;
  switch (s.kind()) {
    case NodeKind::Seq: {
      std::vector<StmtFn> parts;
      for (auto& x : s.as<SeqNode>()->seq) parts.push_back(stmt(x));
      return [parts](Frame& f) {
        for (auto& p : parts) {
          p(f);
          if (f.jump) return;  // a break or continue: the rest of the iteration is skipped
        }
      };
    }
    case NodeKind::Evaluate: {
      const Expr& v = s.as<EvaluateNode>()->value;
      auto* call = v.as<CallNode>();
      // T.print and instrumentation events (tegula.tools.cuda.iket) change no result.
      // T.Pipelined's stage marks (pipeline_loops.cc) only schedule: the loop means the same.
      if (call && (call->op.rfind("print", 0) == 0 || call->op.rfind("iket_", 0) == 0 ||
                   call->op == "pipeline_stage")) {
        return [](Frame&) {};
      }
      if (call && call->op.rfind("device_assert", 0) == 0) {
        // T.device_assert: a kernel where it fails stops on the GPU; here it is the user's error.
        ExprFn cond = expr(call->args.at(0), loc);
        std::string msg = call->op.size() > 14 ? call->op.substr(14) : "";
        return [cond, msg, loc](Frame& f) {
          user_assert(cond(f) != 0, loc) << "T.device_assert failed" << (msg.empty() ? "" : ": " + msg);
        };
      }
      if (call && call->op == "reducer_update") return reducer_update(call, loc);
      if (auto w = call ? wide_access(call) : std::nullopt; w && w->store) return wide_store(call, loc);
      ExprFn e = expr(v, loc);
      return [e](Frame& f) { e(f); };
    }
    case NodeKind::BufferStore: return store(s.as<BufferStoreNode>());
    case NodeKind::For: return loop(s.as<ForNode>());
    case NodeKind::While: {
      // Per block, as the tile code is run; past kMaxIterations the condition is taken for
      // one that never turns false.
      auto* w = s.as<WhileNode>();
      ExprFn c = expr(w->cond, loc);
      StmtFn body = stmt(w->body);
      return [c, body, loc](Frame& f) {
        constexpr int64_t kMaxIterations = int64_t(1) << 24;
        for (int64_t it = 0; c(f) != 0; ++it) {
          if (it >= kMaxIterations) {
            user_error(loc) << "this while loop ran " << kMaxIterations << " iterations: its condition never turned false";
          }
          body(f);
        }
      };
    }
    case NodeKind::IfThenElse: {
      auto* i = s.as<IfThenElseNode>();
      if (k_.thread_var && reads_var(i->cond, k_.thread_var)) return thread_branch(i, loc);
      ExprFn c = expr(i->cond, loc);
      StmtFn t = stmt(i->then_case), e = stmt(i->else_case);
      return [c, t, e](Frame& f) {
        if (c(f) != 0) t(f);
        else e(f);
      };
    }
    case NodeKind::LetStmt: {
      auto* l = s.as<LetStmtNode>();
      if (int lanes = l->var.dtype().lanes; lanes > 1) {
        VecFn v = vexpr(l->value, loc);
        int slot = declare_var(l->var.get(), lanes);
        lets_.push_back({l->var, l->value});
        StmtFn body = stmt(l->body);
        lets_.pop_back();
        return [v, slot, body](Frame& f) {
          v(f, &f.vars[slot]);
          body(f);
        };
      }
      ExprFn v = expr(l->value, loc);
      int slot = declare_var(l->var.get());
      StmtFn bind = bind_addresses(l->var, loc);  // the tensors T.make_tensor made at this address
      lets_.push_back({l->var, l->value});
      StmtFn body = stmt(l->body);
      lets_.pop_back();
      return [v, slot, bind, body](Frame& f) {
        f.vars[slot] = v(f);
        if (bind) bind(f);
        body(f);
      };
    }
    case NodeKind::TileOp: return compile_tile_op(s.as<TileOpNode>(), *this);
    case NodeKind::Sync: return [](Frame&) {};  // one logical thread: nothing to wait for
    case NodeKind::LoopJump: {
      // One logical thread runs the tile program: a jump that only some threads take (under
      // a branch on the thread index inside the loop) has no meaning here.
      user_assert(loop_range_ && *loop_range_ == range_, loc)
          << "the reference interpreter runs the block as one thread and cannot take a "
          << (s.as<LoopJumpNode>()->is_continue ? "continue" : "break")
          << " that only some threads take (it is under a branch on the thread index); use tegula.testing.simulate";
      int jump = s.as<LoopJumpNode>()->is_continue ? 2 : 1;
      return [jump](Frame& f) { f.jump = jump; };
    }
    default: break;
  }
  internal_error << "reference: cannot interpret the statement kind " << node_kind_name(s.kind()) << " at "
                 << loc.str();
  return {};
}

// The calls that relate the block to the others of its grid or cluster: the barriers
// wait for them (block_scheduler.h), the rank is the block's place in its cluster.
ExprFn Compiler::block_call(const CallNode* c) {
  if (c->op == "block_rank_in_cluster") {
    std::array<int, 3> slot = {-1, -1, -1};
    for (size_t d = 0; d < k_.block_vars.size(); ++d) slot[d] = var_slot(k_.block_vars[d].get());
    std::vector<int64_t> dims = k_.cluster_dims;
    return [slot, dims](Frame& f) {
      int64_t b[3] = {0, 0, 0};
      for (int d = 0; d < 3; ++d) b[d] = slot[d] >= 0 ? int64_t(f.vars[slot[d]]) : 0;
      return double(rank_in_cluster(dims, b));
    };
  }
  const std::string& op = c->op;
  if (op == "sync_grid") {
    return [](Frame& f) {
      f.ticket->sync_grid();
      return 0.0;
    };
  }
  // A named barrier of a run-time id (T.sync_threads(id, n)): one logical thread waits for none.
  if (op == "barrier_sync") return [](Frame&) { return 0.0; };
  if (op.rfind("cluster_", 0) != 0) return nullptr;
  bool arrives = op != "cluster_wait", waits = op != "cluster_arrive" && op != "cluster_arrive_relaxed";
  return [arrives, waits](Frame& f) {
    if (arrives) f.ticket->cluster_arrive();
    if (waits) f.ticket->cluster_wait();
    return 0.0;
  };
}

// A branch on the thread index: each side runs once, as the tile code of the threads that
// take it (TileLang's meaning; transform/scope_thread_guards.cc), when any thread does.
// Which threads do is known for every thread from the thread conjuncts; the uniform rest
// is evaluated per block.
StmtFn Compiler::thread_branch(const IfThenElseNode* i, const SourceLoc& loc) {
  GuardSplit g = split_guard(i->cond, k_.thread_var, range_, lets_);
  // A condition this cannot split reads the thread index where expr refuses it, with the
  // user's error.
  if (!g.evaluable) expr(i->cond, loc);
  internal_assert(g.evaluable) << "reference: an unsplit thread condition at " << loc.str();
  bool then_any = false, else_any = false;
  for (bool t : g.takes) (t ? then_any : else_any) = true;
  ExprFn uniform = g.uniform ? expr(g.uniform, loc) : ExprFn();
  auto side = [&](const Stmt& s, bool taken) {
    ThreadRange saved = range_;
    if (auto r = contiguous_range(g.takes, range_, taken)) range_ = *r;
    StmtFn fn = stmt(s);
    range_ = saved;
    return fn;
  };
  StmtFn t = side(i->then_case, true), e = side(i->else_case, false);
  if (has_mbarriers_) {
    // Warpgroups that meet at mbarriers run side by side (reference_barriers.cc).
    return [uniform, t, e, then_any, else_any](Frame& f) {
      bool u = !uniform || uniform(f) != 0;
      std::vector<std::function<void()>> sides;
      if (u && then_any && t) sides.push_back([&] { t(f); });
      if ((!u || else_any) && e) sides.push_back([&] { e(f); });
      if (sides.size() == 1) sides[0]();
      else if (sides.size() > 1) f.coop->run_all(sides);
    };
  }
  return [uniform, t, e, then_any, else_any](Frame& f) {
    bool u = !uniform || uniform(f) != 0;
    if (u && then_any) t(f);
    if (f.jump) return;
    if (!u || else_any) e(f);
  };
}

RegionFn Compiler::region(const BufferRegion& r, const SourceLoc& at) {
  internal_assert(r.mins.size() == r.buffer->shape.size() && r.extents.size() == r.mins.size() &&
                  r.mins.size() <= kMaxRank)
      << "reference: a region of '" << r.buffer->name << "' with " << r.mins.size() << " dimensions";
  RegionFn out;
  out.buf = buffer_slot(r.buffer, at);
  for (size_t d = 0; d < r.mins.size(); ++d) {
    out.mins.push_back(expr(r.mins[d], at));
    out.extents.push_back(expr(r.extents[d], at));
    out.unit.push_back(is_const_int(r.extents[d], 1));
  }
  return out;
}

RegionVal eval_region(const RegionFn& r, Frame& f, const SourceLoc& loc) {
  RegionVal v;
  v.b = &f.bufs[r.buf];
  v.rank = r.mins.size();
  for (size_t d = 0; d < v.rank; ++d) {
    v.min[d] = to_index(r.mins[d](f), *v.b, d, loc);
    v.ext[d] = to_int(r.extents[d](f), loc, "a region's extent");
    user_assert(v.ext[d] >= 0, loc) << "the region of '" << v.b->node->name << "' has extent " << v.ext[d]
                                    << " in dimension " << d;
  }
  return v;
}

}  // namespace ref

void run_reference(const Kernel& k, CallArgs& args) {
  using namespace ref;
  auto values = bind_call_values(k, args);
  Compiler c(k);
  for (auto& [var, v] : values) c.declare_var(var);
  for (auto& p : k.params) {
    if (p.buffer) c.declare_buffer(p.buffer);
    else c.declare_var(p.var.get());
  }
  for (auto& b : k.allocs) c.declare_buffer(b);
  for (auto& b : k.views) c.declare_buffer(b);
  for (auto& b : k.addressed) c.declare_buffer(b);
  for (auto& v : k.block_vars) c.declare_var(v.get());
  c.set_call(&args);
  internal_assert(!k.grid.empty() && k.grid.size() <= 3 && k.grid.size() == k.block_vars.size())
      << "reference: a grid of " << k.grid.size() << " dimensions";

  // Shapes and the grid are functions of the signature alone.
  std::vector<ExprFn> grid;
  for (auto& g : k.grid) grid.push_back(c.expr(g, k.loc));
  std::vector<std::vector<ExprFn>> shapes;
  for (auto& b : k.allocs) {
    shapes.emplace_back();
    for (auto& d : b->shape) shapes.back().push_back(c.expr(d, b->loc));
  }
  std::vector<std::vector<ExprFn>> view_shapes;
  for (auto& b : k.views) {
    view_shapes.emplace_back();
    for (auto& d : b->shape) view_shapes.back().push_back(c.expr(d, b->loc));
  }
  // Warp groups that meet at mbarriers run as the GPU runs them (ir/warp_groups.h).
  const Stmt program = run_warp_groups_apart(k.body, k.thread_var, k.threads);
  StmtFn body = c.stmt(program);
  std::vector<StmtFn> param_addresses;  // the tensors at T.ptr parameters' addresses
  for (auto& p : k.params) {
    if (StmtFn bind = p.var ? c.bind_addresses(p.var, k.loc) : StmtFn()) param_addresses.push_back(bind);
  }
  // Global tensors with a T.Layout: each element at its place in the map's order.
  const std::map<const BufferNode*, IndexMap> maps = index_maps(k);
  // T.annotate_safe_value({A: v}): a read past A's edge gives v (the whole kernel's hint).
  std::map<const BufferNode*, double> safe;
  post_order(k.body, [&](const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    if (!op || op->op != "annotate_safe_value") return;
    double v = 0;
    if (auto* f = op->args.at(0).as<FloatImmNode>()) v = float_constant(f);
    else if (const int64_t* i = as_const_int(op->args[0])) v = double(*i);
    else user_error(op->loc) << "T.annotate_safe_value: the value must be a constant";
    safe[op->regions.at(0).buffer.get()] = round_to_dtype(op->regions[0].buffer->dtype, v);
  });

  Frame f;
  f.vars.assign(c.num_vars(), kNaN);
  f.bufs.resize(c.num_bufs());
  for (auto& [var, v] : values) {
    f.vars[c.var_slot(var)] = v;
  }
  for (size_t i = 0; i < k.params.size(); ++i) {
    const Param& p = k.params[i];
    if (!p.buffer) continue;
    Buf& b = f.bufs[c.buffer_slot(p.buffer, p.buffer->loc)];
    b.node = p.buffer.get();
    b.data = args.tensors[i]->data();
    b.shape = args.shapes[i];
    b.global = true;
    auto m = maps.find(p.buffer.get());
    if (m != maps.end()) b.map = &m->second;
    auto sv = safe.find(p.buffer.get());
    if (sv != safe.end()) b.safe = sv->second;
  }
  for (auto& bind : param_addresses) bind(f);
  std::vector<std::vector<double>> storage(k.allocs.size());
  for (size_t i = 0; i < k.allocs.size(); ++i) {
    const Buffer& a = k.allocs[i];
    Buf& b = f.bufs[c.buffer_slot(a, a->loc)];
    b.node = a.get();
    int64_t n = 1;
    for (auto& d : shapes[i]) {
      int64_t e = to_int(d(f), a->loc, "a dimension of the buffer's shape");
      user_assert(e >= 0, a->loc) << "the shape of '" << a->name << "' has a negative dimension " << e;
      b.shape.push_back(e);
      n *= e;
    }
    storage[i].resize(size_t(n));
    b.data = storage[i].data();
  }
  // A view reads its root's elements in row-major order under its own shape.
  std::vector<std::pair<int, int>> view_roots;  // (view's slot, its root's)
  std::map<const BufferNode*, std::unique_ptr<Aliases>> aliases;
  for (size_t i = 0; i < k.views.size(); ++i) {
    const Buffer& v = k.views[i];
    Buffer root = v;
    while (root->view_of) root = root->view_of;
    const Buf& r = f.bufs[c.buffer_slot(root, v->loc)];
    user_assert(!root->address, v->loc) << "the reference runs no view ('" << v->name << "') of a tensor at a run-time "
                                        << "address ('" << root->name << "', T.make_tensor)";
    user_assert(!r.map, v->loc) << "'" << v->name << "' is a view of '" << root->name
                                << "', whose elements are stored in the order of a T.Layout: a view of it is not supported";
    Buf& b = f.bufs[c.buffer_slot(v, v->loc)];
    view_roots.push_back({c.buffer_slot(v, v->loc), c.buffer_slot(root, v->loc)});
    b.node = v.get();
    b.data = r.data;
    b.global = r.global;
    b.safe = r.safe;
    int64_t n = 1, total = 1;
    for (auto& d : view_shapes[i]) {
      b.shape.push_back(to_int(d(f), v->loc, "a dimension of the view's shape"));
      n *= b.shape.back();
    }
    for (int64_t e : r.shape) total *= e;
    if (v->dtype != root->dtype) {
      // A view of another dtype: elements of its own, kept in step with the buffer's bits.
      int ratio = v->dtype.bits / root->dtype.bits;
      user_assert(root->dtype.bits >= 8 && v->dtype.bits % root->dtype.bits == 0 && n * ratio == total, v->loc)
          << "the view '" << v->name << "' (" << v->dtype.name() << ") has " << n << " elements, '" << root->name
          << "' has " << total << " of " << root->dtype.name();
      auto& al = aliases[root.get()];
      if (!al) al = std::make_unique<Aliases>();
      al->root = r.data;
      Aliases::View av;
      av.type = v->dtype, av.from = root->dtype.with_lanes(ratio), av.ratio = ratio;
      av.own.assign(size_t(n), kNaN);
      av.out.assign(size_t(n), 0);
      al->views.push_back(std::move(av));
      b.alias = int(al->views.size()) - 1;
      continue;
    }
    user_assert(n == total, v->loc) << "the view '" << v->name << "' has " << n << " elements, '" << root->name
                                    << "' has " << total;
  }
  // The storage of views of another dtype, now that each family's views are all made; every
  // member of a family (the buffer, its views) keeps it in step.
  for (size_t i = 0; i < k.views.size(); ++i) {
    const Buffer& v = k.views[i];
    Buffer root = v;
    while (root->view_of) root = root->view_of;
    auto al = aliases.find(root.get());
    if (al == aliases.end()) continue;
    Buf& b = f.bufs[c.buffer_slot(v, v->loc)];
    b.aliases = al->second.get();
    if (b.alias >= 0) b.data = al->second->views[b.alias].own.data();
    f.bufs[c.buffer_slot(root, v->loc)].aliases = al->second.get();
  }
  int64_t extent[3] = {1, 1, 1};
  for (size_t d = 0; d < grid.size(); ++d) extent[d] = to_int(grid[d](f), k.loc, "the grid's extent");
  int slot[3] = {-1, -1, -1};
  for (size_t d = 0; d < k.block_vars.size(); ++d) slot[d] = c.var_slot(k.block_vars[d].get());
  auto run_block = [&](Frame& fb, std::vector<std::vector<double>>& own, const BlockTicket& t, const int64_t* at) {
    for (size_t d = 0; d < grid.size(); ++d) fb.vars[slot[d]] = double(at[d]);
    for (auto& s : own) std::fill(s.begin(), s.end(), kNaN);
    for (auto& [root, al] : aliases) {
      for (auto& v : al->views) std::fill(v.out.begin(), v.out.end(), 0), v.handed.clear();
    }
    fb.ticket = &t;
    Coop coop;
    std::map<std::pair<int, int64_t>, Mbarrier> mbarriers;
    fb.coop = &coop;
    fb.mbarriers = &mbarriers;
    body(fb);
    fb.coop = nullptr, fb.mbarriers = nullptr;
  };
  CoRun mode = co_run_of(k);
  // Views of another dtype keep elements of their own, one set for the kernel: blocks that
  // run interleaved would share them.
  user_assert(mode == CoRun::None || aliases.empty(), k.loc)
      << "the reference runs a kernel with grid or cluster barriers without views of another dtype";
  try {
    run_blocks(extent, k.cluster_dims, mode, [&](const BlockTicket& t, const int64_t* at) {
      if (mode == CoRun::None) return run_block(f, storage, t, at);
      // Blocks that meet at barriers run interleaved: each its own frame and buffers.
      Frame fb = f;
      std::vector<std::vector<double>> own = storage;
      for (size_t i = 0; i < k.allocs.size(); ++i) fb.bufs[c.buffer_slot(k.allocs[i], k.allocs[i]->loc)].data = own[i].data();
      for (auto& [view, root] : view_roots) fb.bufs[view].data = fb.bufs[root].data;
      run_block(fb, own, t, at);
    });
  } catch (const BarrierError& e) {
    user_error(k.loc) << e.what();
  }
}

}  // namespace tegula::interp
