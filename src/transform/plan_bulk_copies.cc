// Pass: plan_bulk_copies (sm_90a).
//
// Expects: the frontend's IR (tile ops not yet expanded), annotations read.
// Guarantees: when the kernel can be warp specialised, every global->shared T.copy of its
// T.Pipelined loop, and those ahead of the loop in the same block, is an
// Evaluate(tma_copy(dst[0, 0], src[mins...], map, rows, cols)) whose tensor map is
// k.tensor_maps[map], and ctx.warp_specialize is set; otherwise nothing changes (the
// cp.async pipeline is today's path and stays the fallback).
//
// A copy becomes a bulk tensor copy (cp.async.bulk.tensor, completing on an mbarrier)
// when the copy engine can write exactly the shared layout the rest of the kernel reads:
//   - the destination is a whole 2-D shared buffer of R x C elements, R <= 256 (or a 1-D
//     one of C, R = 1), and the source region spans R x C of a global tensor whose
//     innermost dimension is the C one (unit dimensions in between are fine:
//     Q[b, s0:s0+R, h, :]);
//   - every stride of the tensor is a compile-time multiple of 16 bytes (so only the
//     outermost dimension may be dynamic) and the tensor has at most 5 dimensions;
//   - the buffer is a wgmma operand (stored in 128-byte-wide panels, swizzled: one box per
//     panel with the matching 32/64/128-byte swizzle mode, R a multiple of 8), or a buffer
//     stored plainly with rows of 16-byte multiples of at most 256 elements (one box), not
//     an operand of mma.sync gemms alone (their ldmatrix layouts are no box's);
//   - its index expressions read no shared, fragment or local memory (one producer thread
//     computes them).
// Ragged edges need no mask: the copy engine fills what lies outside the tensor with 0.
// The kernel is warp specialised when it has exactly one T.Pipelined loop (num_stages >=
// 1), a direct statement of the kernel body, all of whose global->shared copies are
// direct statements of its body and qualify, whose other statements neither copy into
// shared memory from global nor write a buffer those copies fill, and one of whose gemms
// at least runs on wgmma (others may take mma.sync), none sparse; statements before the
// loop may not touch a buffer the producer fills early, nor statements after it a buffer
// its copies fill (a staged buffer is a new allocation only the loop's accesses move to).
// The loop may also be nested in one serial loop of the body (a persistent kernel's loop
// over tiles; ctx.ws_nested), on a way of loops, lets and ifs a lone producer thread can
// walk (nest_qualifies), when no computation of it takes a later stage than another.
// Lets of block-invariant values (let_values.h) on the way to the loop are lifted to the
// top of the body, so varlen attention's `kv_start = cu_seqlens_k[b]` does not hide the
// loop (its body's leading lets are inline_loop_lets').
// A kernel with a grid or cluster barrier is never warp specialised (its producer would
// not reach the barrier). tl.disable_tma_lower or tl.disable_warp_specialized keep today's path.
#include <map>
#include <set>

#include "ir/functor.h"
#include "ops/region.h"
#include "ops/tile_op.h"
#include "transform/let_values.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {

using namespace ir;

std::vector<Stmt> flat(const Stmt& s) {
  if (auto* seq = s.as<SeqNode>()) return seq->seq;
  return {s};
}

bool is_global_to_shared_copy(const Stmt& s) {
  auto* op = s.as<TileOpNode>();
  return op && op->op == "copy" && op->regions.size() == 2 && op->regions[0].buffer->scope == Scope::Global &&
         op->regions[1].buffer->scope == Scope::Shared;
}

bool has_global_to_shared_copy(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) { found |= is_global_to_shared_copy(x); }, nullptr);
  return found;
}

// Whether an expression reads only what a lone producer thread can compute: indices,
// parameters and global memory.
bool producer_computable(const Expr& e) {
  bool ok = true;
  post_order(make_evaluate(e), nullptr, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>()) ok &= ld->buffer->scope == Scope::Global;
  });
  return ok;
}

// Shared buffers a statement writes or reads (any access counts).
void touched(const Stmt& s, std::set<const BufferNode*>* reads, std::set<const BufferNode*>* writes) {
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) writes->insert(st->buffer.get());
    if (auto* op = x.as<TileOpNode>()) {
      // The last region of every tile op is what it writes (copy dst, gemm C, reduce out,
      // fill, atomic dst); the others are read.
      for (size_t i = 0; i < op->regions.size(); ++i) {
        (i + 1 == op->regions.size() ? writes : reads)->insert(op->regions[i].buffer.get());
      }
    }
  }, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>()) reads->insert(ld->buffer.get());
  });
}

// Flattens s into top-level statements, lifting the block-invariant lets along the way
// (in order: a lifted value may use an earlier one); a let that is not stays a statement
// with its body.
void lift_lets(const Stmt& s, const std::set<const BufferNode*>& written, std::vector<std::pair<Expr, Expr>>* lets,
               std::vector<Stmt>* top) {
  if (auto* seq = s.as<SeqNode>()) {
    for (const Stmt& x : seq->seq) lift_lets(x, written, lets, top);
  } else if (auto* let = s.as<LetStmtNode>(); let && block_invariant(let->value, written)) {
    lets->push_back({let->var, let->value});
    lift_lets(let->body, written, lets, top);
  } else {
    top->push_back(s);
  }
}

// T.sync_grid or a cluster barrier (language/cluster.py).
bool has_wide_barrier(const Stmt& body) {
  bool found = false;
  post_order(body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    found = found || (c && (c->op == "sync_grid" || c->op.rfind("cluster_", 0) == 0));
  });
  return found;
}

bool contains(const Stmt& s, const StmtNode* target) {
  bool found = false;
  post_order(s, [&](const Stmt& x) { found |= x.get() == target; }, nullptr);
  return found;
}

// Whether a hand schedule puts some computation of the loop in a later stage
// (pipeline_stage marks, pipeline_stages.h).
bool shifted(const Stmt& body) {
  bool found = false;
  post_order(body, nullptr, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    if (!c || c->op != "pipeline_stage" || c->args.empty()) return;
    const int64_t* stage = as_const_int(c->args[0]);
    found |= !stage || *stage != 0;
  });
  return found;
}

// The way from a statement of the body down to a nested pipelined loop, which both warp
// groups walk (warp_specialize): serial loops with bounds, lets with values and ifs
// (without else) with conditions one producer thread computes and nobody writes; every
// other statement along it copies nothing from global to shared memory and touches no
// buffer the loop fills.
bool nest_qualifies(const Stmt& s, const ForNode* loop, const std::set<const BufferNode*>& filled,
                    const std::set<const BufferNode*>& written) {
  if (s.get() == loop) return true;
  auto pure = [&](const Expr& e) { return producer_computable(e) && block_invariant(e, written); };
  if (auto* f = s.as<ForNode>()) {
    return f->for_kind == ForKind::Serial && pure(f->min) && pure(f->extent) && nest_qualifies(f->body, loop, filled, written);
  }
  if (auto* let = s.as<LetStmtNode>()) return pure(let->value) && nest_qualifies(let->body, loop, filled, written);
  if (auto* br = s.as<IfThenElseNode>()) {
    return !br->else_case && pure(br->cond) && nest_qualifies(br->then_case, loop, filled, written);
  }
  auto* seq = s.as<SeqNode>();
  if (!seq) return false;
  for (const Stmt& x : seq->seq) {
    if (contains(x, loop)) {
      if (!nest_qualifies(x, loop, filled, written)) return false;
      continue;
    }
    std::set<const BufferNode*> r, w;
    touched(x, &r, &w);
    for (auto* b : filled) {
      if (r.count(b) || w.count(b)) return false;
    }
    if (has_global_to_shared_copy(x)) return false;
  }
  return true;
}

// Replaces one statement node of a tree.
class ReplaceStmt : public IRMutator {
 public:
  ReplaceStmt(const StmtNode* from, Stmt to) : from_(from), to_(std::move(to)) {}
  Stmt mutate(const Stmt& s) override { return s.get() == from_ ? to_ : IRMutator::mutate(s); }
  using IRMutator::mutate;

 private:
  const StmtNode* from_;
  Stmt to_;
};

struct Planner {
  Kernel& k;
  PassContext& ctx;
  std::set<const BufferNode*> gemm_operands;  // shared operands of gemms on wgmma
  std::set<const BufferNode*> mma_operands;   // of gemms on mma.sync: ldmatrix layouts no box writes

  // The tma_copy a copy statement becomes, or a null Stmt when it does not qualify.
  Stmt bulk_copy(const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    BufferRegion src = op->regions[0], dst = op->regions[1];
    const Buffer& sb = dst.buffer;
    const Buffer& gb = src.buffer;
    if (k.global_layouts.count(gb.get())) return {};  // a T.Layout's order is not a box
    if (ctx.safe_values.count(gb.get())) return {};   // the engine fills 0, not T.annotate_safe_value's
    // Given strides (T.StridedTensor) are not proven to fit a tensor map; 4-bit elements are packed.
    if (!gb->strides.empty() || gb->dtype.is_packed()) return {};
    if (gb->view_of || sb->view_of) return {};        // resolve_views makes it element loops
    // A 1-D buffer is one row (a tile's log-sum-exp or delta row in attention's backward).
    const size_t drank = sb->shape.size();
    if (!ops::is_whole(dst) || (drank != 1 && drank != 2) || gb->dtype != sb->dtype) return {};
    if (ops::all_ones(src)) src = ops::widen(src, dst, op->loc);
    const int64_t one = 1;
    const int64_t* rows = drank == 2 ? as_const_int(sb->shape[0]) : &one;
    const int64_t* cols = as_const_int(sb->shape[drank - 1]);
    if (!rows || !cols) return {};
    int64_t R = *rows, C = *cols, E = sb->dtype.bytes();
    int rank = int(gb->shape.size());
    if (rank < 1 || rank > 5 || R > 256) return {};
    // The source region: the innermost dimension spans C, one other spans R, the rest 1.
    std::vector<int> dims;
    std::vector<int64_t> ext = ops::squeeze(src.extents, &dims);
    for (int64_t e : ext) {
      if (e < 0) return {};
    }
    if (ext.empty() || dims.back() != rank - 1 || ext.back() != C) return {};
    if (ext.size() == 1 ? R != 1 : (ext.size() != 2 || ext[0] != R)) return {};
    // Strides: each dimension past the first a compile-time multiple of 16 bytes.
    int64_t stride = E;
    for (int d = rank - 1; d >= 1; --d) {
      const int64_t* n = as_const_int(gb->shape[d]);
      if (!n || *n >= (int64_t(1) << 31)) return {};
      stride *= *n;
      if (stride % 16 != 0) return {};
    }
    for (auto& m : src.mins) {
      if (!producer_computable(m)) return {};
    }
    // The shared layout the box must produce.
    int swizzle = 0;
    int64_t box_cols = C;
    if (mma_operands.count(sb.get()) && !gemm_operands.count(sb.get())) return {};
    if (gemm_operands.count(sb.get())) {
      int64_t row = C * E;
      if (!(row == 32 || row == 64 || row % 128 == 0) || R % 8 != 0) return {};
      box_cols = std::min<int64_t>(C, 128 / E);
      swizzle = box_cols * E == 128 ? 3 : box_cols * E == 64 ? 2 : 1;
    } else {
      if (ctx.swizzled.count(sb.get()) || (C * E) % 16 != 0 || C > 256) return {};
    }
    // The box: the region's extents, innermost first, the innermost one panel wide.
    std::vector<int64_t> box;
    for (int d = rank - 1; d >= 0; --d) box.push_back(d == rank - 1 ? box_cols : *as_const_int(src.extents[d]));
    int param = -1;
    for (size_t i = 0; i < k.params.size(); ++i) {
      if (k.params[i].buffer.get() == gb.get()) param = int(i);
    }
    if (param < 0) return {};
    int map = -1;
    for (size_t i = 0; i < k.tensor_maps.size(); ++i) {
      auto& m = k.tensor_maps[i];
      if (m.param == param && m.box == box && m.swizzle == swizzle) map = int(i);
    }
    if (map < 0) {
      k.tensor_maps.push_back({param, box, swizzle});
      map = int(k.tensor_maps.size()) - 1;
    }
    std::vector<Expr> origin(drank, make_int(0));
    std::vector<Expr> args = {make_load(sb, origin, op->loc), make_load(gb, src.mins, op->loc), make_int(map),
                              make_int(R), make_int(C)};
    return make_evaluate(make_call("tma_copy", args, DataType::i32(), op->loc), op->loc);
  }

  void run() {
    if (ctx.target.arch != "sm_90a" || ctx.options.disable_tma || ctx.options.disable_warp_specialized) return;
    // Some gemm on wgmma (the others may run on mma.sync: attention's backward computes
    // dQ's 32-row tile so), none sparse.
    bool wgmma = false, sparse = false;
    post_order(k.body, [&](const Stmt& s) {
      auto* op = s.as<TileOpNode>();
      if (!op) return;
      sparse |= op->op == "gemm_sp";
      if (op->op != "gemm") return;
      bool fits = ctx.target.arch == "sm_90a" && !ctx.options.disable_wgmma && ops::wgmma_fits(op, k);
      wgmma |= fits;
      for (int i = 0; i < 2; ++i) {
        if (op->regions[i].buffer->scope == Scope::Shared) (fits ? gemm_operands : mma_operands).insert(op->regions[i].buffer.get());
      }
    }, nullptr);
    if (!wgmma || sparse) return;
    // A grid or cluster barrier is met by every thread of the block, which the producer
    // warpgroup of a warp-specialised kernel never reaches.
    if (has_wide_barrier(k.body)) return;
    // Kernel-level lets of values fixed for the whole block (cu_seqlens[b], ends computed
    // from them) are lifted to the top of the body, so the loop and the copies ahead of it
    // become statements of one list; the producer and the consumer both see them.
    std::vector<std::pair<Expr, Expr>> lets;
    std::vector<Stmt> top;
    std::set<const BufferNode*> written = written_buffers(k.body);
    lift_lets(k.body, written, &lets, &top);
    int loop_at = -1, loops = 0;
    const ForNode* loop = nullptr;
    post_order(k.body, [&](const Stmt& s) {
      auto* f = s.as<ForNode>();
      if (f && f->for_kind == ForKind::Pipelined) loops++, loop = f;
    }, nullptr);
    if (loops != 1) return;
    // The loop is a statement of the body, or nested in one serial loop of it (a
    // persistent kernel's loop over its tiles: `nested`).
    bool nested = false;
    for (size_t i = 0; i < top.size(); ++i) {
      if (top[i].get() == loop) loop_at = int(i);
    }
    if (loop_at < 0) {
      for (size_t i = 0; i < top.size() && loop_at < 0; ++i) {
        auto* outer = top[i].as<ForNode>();
        if (outer && outer->for_kind == ForKind::Serial && contains(top[i], loop)) loop_at = int(i), nested = true;
      }
      if (loop_at < 0) return;
    }
    if (loop->num_stages < 1 || !producer_computable(loop->min) || !producer_computable(loop->extent)) return;
    // The body's leading lets: inline_loop_lets substituted those that read no memory; one
    // reading global memory nothing writes (paged attention's block-table entry) is
    // substituted here, where one producer thread computes it a copy (in the cp.async
    // pipeline every thread would repeat the load, so that pass leaves it).
    Stmt loop_body = loop->body;
    std::vector<std::pair<Expr, Expr>> loop_lets;
    while (auto* let = loop_body.as<LetStmtNode>()) {
      if (!block_invariant(let->value, written)) break;
      loop_lets.push_back({let->var, substitute(let->value, loop_lets)});
      loop_body = let->body;
    }
    if (!loop_lets.empty()) loop_body = substitute(loop_body, loop_lets);
    std::vector<Stmt> body = flat(loop_body);
    std::set<const BufferNode*> filled;
    std::vector<Stmt> new_body;
    for (const Stmt& s : body) {
      if (is_global_to_shared_copy(s)) {
        Stmt b = bulk_copy(s);
        if (!b) return;
        filled.insert(s.as<TileOpNode>()->regions[1].buffer.get());
        new_body.push_back(b);
      } else {
        if (has_global_to_shared_copy(s)) return;
        new_body.push_back(s);
      }
    }
    if (filled.empty()) return;
    for (const Stmt& s : body) {
      if (is_global_to_shared_copy(s)) continue;
      std::set<const BufferNode*> r, w;
      touched(s, &r, &w);
      for (auto* b : w) {
        if (filled.count(b)) return;
      }
    }
    Stmt new_loop = make_for(loop->var, loop->min, loop->extent, loop->for_kind, make_seq(new_body, loop->loc),
                             loop->num_stages, loop->loc);
    if (nested) {
      // The producer runs ahead into the next tile while the consumer finishes this one,
      // so nothing else in the outer loop may touch what it fills; the computations of
      // one iteration stay in one stage (a shifted schedule drains at each tile's end).
      if (!nest_qualifies(top[loop_at], loop, filled, written) || shifted(loop->body)) return;
      new_loop = ReplaceStmt(loop, new_loop).mutate(top[loop_at]);
    }
    // Copies ahead of the loop: the producer issues them first. Nothing before the loop
    // may touch what the producer fills early, nor a buffer such a copy fills.
    std::vector<Stmt> new_top;
    std::set<const BufferNode*> seen_r, seen_w;
    for (int i = 0; i < loop_at; ++i) {
      const Stmt& s = top[i];
      Stmt b;
      if (is_global_to_shared_copy(s)) {
        const BufferNode* dst = s.as<TileOpNode>()->regions[1].buffer.get();
        if (!seen_r.count(dst) && !seen_w.count(dst) && !filled.count(dst)) b = bulk_copy(s);
      }
      touched(s, &seen_r, &seen_w);
      new_top.push_back(b ? b : s);
    }
    new_top.push_back(new_loop);
    // Nor after it: a staged buffer is a new allocation that only the loop's accesses move to.
    for (size_t i = loop_at + 1; i < top.size(); ++i) {
      touched(top[i], &seen_r, &seen_w);
      new_top.push_back(top[i]);
    }
    for (auto* b : filled) {
      if (seen_r.count(b) || seen_w.count(b)) return;
    }
    Stmt body_out = make_seq(new_top, k.body->loc);
    for (auto it = lets.rbegin(); it != lets.rend(); ++it) body_out = make_let(it->first, it->second, body_out, k.body->loc);
    k.body = body_out;
    ctx.warp_specialize = true;
    ctx.ws_nested = nested;
  }
};

}  // namespace

void plan_bulk_copies(Kernel& k, PassContext& ctx) {
  k.tensor_maps.clear();
  Planner p{k, ctx, {}};
  p.run();
  if (!ctx.warp_specialize) k.tensor_maps.clear();
}

// The tma_copy statements this pass makes, as pipeline_loops reads them: passes.h.
bool is_tma_copy(const ir::Stmt& s) {
  auto* ev = s.as<ir::EvaluateNode>();
  auto* c = ev ? ev->value.as<ir::CallNode>() : nullptr;
  return c && c->op == "tma_copy";
}

int64_t tma_bytes(const ir::Stmt& copy) {
  auto* c = copy.as<ir::EvaluateNode>()->value.as<ir::CallNode>();
  return *ir::as_const_int(c->args[3]) * *ir::as_const_int(c->args[4]) *
         c->args[0].as<ir::BufferLoadNode>()->buffer->dtype.bytes();
}

ir::Stmt with_barrier(const ir::Stmt& copy, ir::Expr bar) {
  auto* c = copy.as<ir::EvaluateNode>()->value.as<ir::CallNode>();
  std::vector<ir::Expr> args = c->args;
  args.push_back(std::move(bar));
  return ir::make_evaluate(ir::make_call(c->op, args, c->dtype, c->loc), copy->loc);
}

}  // namespace tegula::transform
