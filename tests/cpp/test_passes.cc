// The lowering passes on small hand-built kernels: the shape of the lowered IR, the CUDA
// it prints, the errors it reports, and what the lowered code computes. The last is
// checked without a GPU by the SIMT simulator (src/interp/simt.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "codegen/cuda_printer.h"
#include "interp/simt.h"
#include "ir/functor.h"
#include "ir/hash.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "transform/passes.h"
#include "transform/pipeline.h"

namespace tegula {
namespace {

using namespace ir;

Expr c(int64_t v) { return make_int(v); }
// Each node gets its own line, so a test can tell which node an error blames.
SourceLoc at(int line) { return SourceLoc{"kernel.py", line, 5}; }

BufferRegion region(const Buffer& b, std::vector<Expr> mins, const std::vector<int64_t>& extents) {
  std::vector<Expr> ext;
  for (int64_t e : extents) ext.push_back(c(e));
  return {b, std::move(mins), ext};
}
BufferRegion whole(const Buffer& b) {
  std::vector<Expr> mins(b->shape.size(), c(0));
  return {b, mins, b->shape};
}
Stmt copy(const BufferRegion& src, const BufferRegion& dst, int line) {
  return make_tile_op("copy", {src, dst}, {}, {}, at(line));
}
Stmt reduce(const Buffer& src, const Buffer& dst, const std::string& kind, int dim, int line) {
  return make_tile_op("reduce", {whole(src), whole(dst)}, {}, {{"kind", kind}, {"dim", int64_t(dim)}, {"clear", int64_t(1)}},
                      at(line));
}
// for vars... in T.Parallel(extents...): body, each loop on its own line from `line` on.
Stmt parallel(const std::vector<Expr>& vars, const std::vector<int64_t>& extents, Stmt body, int line) {
  for (int d = int(vars.size()) - 1; d >= 0; --d) {
    body = make_for(vars[d], c(0), c(extents[d]), ForKind::Parallel, body, 0, at(line + d));
  }
  return body;
}

// Holds the kernel-bound variables, so bodies can be written before the kernel exists.
struct KernelBuilder {
  Expr bx = make_var("bx"), tx = make_var("tx");
  std::vector<Expr> dynamic;

  Kernel build(const std::string& name, std::vector<Buffer> params, Expr grid, int threads, std::vector<Buffer> allocs,
               Stmt body) const {
    Kernel k;
    k.name = name;
    for (auto& b : params) k.params.push_back({b, {}});
    k.dynamic_vars = dynamic;
    k.grid = {std::move(grid)};
    k.block_vars = {bx};
    k.thread_var = tx;
    k.threads = threads;
    k.allocs = std::move(allocs);
    k.body = std::move(body);
    k.loc = at(1);
    return k;
  }
};

transform::Target sm90() { return transform::Target::parse("sm_90a"); }

// ------------------------------------------------------------------ pass by pass

struct Stage {
  const char* name;
  void (*run)(Kernel&, transform::PassContext&);
};

// The order of transform/pipeline.cc; LowerCopy.StagesVerifyAndMatchThePipeline checks that
// it still is.
const Stage kStages[] = {
    {"simplify", transform::simplify},
    {"check_loop_jumps", transform::check_loop_jumps},
    {"bound_parallel_extents", transform::bound_parallel_extents},
    {"read_annotations", transform::read_annotations},
    {"check_user_barriers", transform::check_user_barriers},
    {"run_warp_groups_apart", transform::run_warp_groups_apart},
    {"unroll_gemm_offsets", transform::unroll_gemm_offsets},
    {"flatten_stage_buffers", transform::flatten_stage_buffers},
    {"inline_loop_lets", transform::inline_loop_lets},
    {"plan_bulk_copies", transform::plan_bulk_copies},
    {"expand_tile_ops", transform::expand_tile_ops},
    {"resolve_views", transform::resolve_views},
    {"apply_safe_values", transform::apply_safe_values},
    {"scope_thread_guards", transform::scope_thread_guards},
    {"infer_layout", transform::infer_layout},
    {"lower_fragments", transform::lower_fragments},
    {"partition_loops", transform::partition_loops},
    {"lower_tile_ops", transform::lower_tile_ops},
    {"vectorize_loops", transform::vectorize_loops},
    {"pack_casts", transform::pack_casts},
    {"forward_locals", transform::forward_locals},
    {"pipeline_loops", transform::pipeline_loops},
    {"warp_specialize", transform::warp_specialize},
    {"plan_storage", transform::plan_storage},
    {"insert_barriers", transform::insert_barriers},
    {"final_simplify", transform::simplify},
    {"roll_loops", transform::roll_loops},
};

// The passes' shared scratch lives in the context until lower_tile_ops declares it.
// Verify the kernel as if it were declared, so every other invariant is checked at every
// stage.
Kernel with_pending_buffers(Kernel k, const transform::PassContext& ctx) {
  for (auto& [frag, reg] : ctx.registers) {
    if (std::find(k.allocs.begin(), k.allocs.end(), reg) == k.allocs.end()) k.allocs.push_back(reg);
  }
  for (auto& b : ctx.extra_locals) k.allocs.push_back(b);
  for (auto& b : ctx.extra_shared) k.allocs.push_back(b);
  return k;
}

// Runs the passes one at a time with ir::verify after each; fails the test on any breach.
Kernel lower_verified(const Kernel& input) {
  Kernel k = input;
  transform::PassContext ctx;
  ctx.target = sm90();
  EXPECT_NO_THROW(verify(k, "input")) << to_string(k);
  for (const Stage& st : kStages) {
    st.run(k, ctx);
    try {
      verify(with_pending_buffers(k, ctx), st.name);
    } catch (const InternalError& e) {
      ADD_FAILURE() << e.what() << "\n" << to_string(k);
    }
  }
  return k;
}

// Every node of the lowered body.
struct Census {
  std::vector<const ForNode*> fors;
  std::vector<const TileOpNode*> tile_ops;
  std::vector<const CallNode*> calls;
  std::vector<const IfThenElseNode*> ifs;
  std::vector<Expr> conditions;  // of ifs and selects
  std::set<const BufferNode*> buffers;
  int syncs = 0;
  int vector_accesses = 0;
};

Census census(const Stmt& body) {
  Census out;
  post_order(
      body,
      [&](const Stmt& s) {
        if (auto* f = s.as<ForNode>()) out.fors.push_back(f);
        if (auto* t = s.as<TileOpNode>()) out.tile_ops.push_back(t);
        if (auto* i = s.as<IfThenElseNode>()) out.ifs.push_back(i), out.conditions.push_back(i->cond);
        if (s.as<SyncNode>()) ++out.syncs;
        if (auto* st = s.as<BufferStoreNode>()) {
          out.buffers.insert(st->buffer.get());
          if (st->value.dtype().lanes > 1) ++out.vector_accesses;
        }
      },
      [&](const Expr& e) {
        if (auto* call = e.as<CallNode>()) out.calls.push_back(call);
        if (auto* sel = e.as<SelectNode>()) out.conditions.push_back(sel->cond);
        if (auto* ld = e.as<BufferLoadNode>()) {
          out.buffers.insert(ld->buffer.get());
          if (ld->dtype.lanes > 1) ++out.vector_accesses;
        }
      });
  return out;
}

bool mentions(const Expr& e, const Expr& var) {
  bool found = false;
  post_order(make_evaluate(e), [](const Stmt&) {}, [&](const Expr& x) { found |= x.same_as(var); });
  return found;
}

// ------------------------------------------------------------------ the simulator

// Runs a lowered kernel with the SIMT simulator (src/interp/simt.cc) on tensors the test
// fills: the block's threads in lockstep, reporting what a GPU run would hide (out-of-bounds
// accesses, unwritten reads, races between barriers, partial barriers, bad shuffles,
// cp.async copies read before they land).
class Simulator {
 public:
  Simulator(const Kernel& k, const std::vector<int64_t>& dynamic_values) : k_(k) {
    for (size_t d = 0; d < k.dynamic_vars.size(); ++d) dynamic_[k.dynamic_vars[d].get()] = dynamic_values.at(d);
  }

  // Storage of a global tensor, sized by its shape; filled by the test.
  std::vector<double>& tensor(const Buffer& b) {
    auto& v = global_[b.get()];
    if (v.empty()) {
      int64_t n = 1;
      for (int64_t d : shape(b)) n *= d;
      v.assign(n, 0.0);
    }
    return v;
  }

  std::vector<std::string> errors;

  void run() {
    interp::CallArgs args;
    for (auto& p : k_.params) {
      args.tensors.push_back(&tensor(p.buffer));
      args.shapes.push_back(shape(p.buffer));
      args.scalars.push_back(0.0);
    }
    errors = interp::simulate_kernel(k_, {}, args);
  }

 private:
  std::vector<int64_t> shape(const Buffer& b) const {
    std::vector<int64_t> out;
    for (auto& d : b->shape) {
      int64_t n = 0;
      EXPECT_TRUE(eval_int(d, dynamic_, &n)) << to_string(d);
      out.push_back(n);
    }
    return out;
  }

  const Kernel& k_;
  VarValues dynamic_;
  std::unordered_map<const BufferNode*, std::vector<double>> global_;
};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += x + "\n";
  return s;
}

// Small integers, exact in half precision and in float sums.
double pattern(int64_t i) { return double((i * 7) % 23 - 11); }

// ------------------------------------------------------------------ (a) copy round trip

// B[bx*R : +R, :] = A[bx*R : +R, :] through an (R, C) half fragment, by default (4, 1024)
// over 128 threads:
//   T.copy(A[bx*R, 0], F); T.copy(F, B[bx*R, 0])
struct CopyKernel {
  KernelBuilder kb;
  Expr rows;  // 64*R, or the dynamic M
  Buffer A, B, F;
  Kernel kernel;

  explicit CopyKernel(bool dynamic_rows, int64_t R = 4, int64_t C = 1024, int threads = 128) {
    if (dynamic_rows) kb.dynamic.push_back(make_var("M"));
    rows = dynamic_rows ? kb.dynamic[0] : c(64 * R);
    A = make_buffer("A", Scope::Global, DataType::f16(), {rows, c(C)}, at(2));
    B = make_buffer("B", Scope::Global, DataType::f16(), {rows, c(C)}, at(2));
    F = make_buffer("F", Scope::Fragment, DataType::f16(), {c(R), c(C)}, at(3));
    Stmt body = make_seq({copy(region(A, {kb.bx * R, c(0)}, {1, 1}), whole(F), 4),
                          copy(whole(F), region(B, {kb.bx * R, c(0)}, {1, 1}), 5)});
    Expr grid = dynamic_rows ? floordiv(rows + (R - 1), c(R)) : c(64);
    kernel = kb.build("copy_rows", {A, B}, grid, threads, {F}, body);
  }
};

TEST(LowerCopy, NoTileOpsOrParallelLoopsAndFragmentsBecomeRegisters) {
  CopyKernel ck(false);
  transform::Lowered out = transform::lower(ck.kernel, sm90(), {}, false);
  const Kernel& k = out.kernel;
  Census cs = census(k.body);
  EXPECT_TRUE(cs.tile_ops.empty()) << to_string(k);
  for (auto* f : cs.fors) EXPECT_NE(f->for_kind, ForKind::Parallel) << to_string(k);
  for (auto* b : cs.buffers) EXPECT_NE(b->scope, Scope::Fragment) << b->name << "\n" << to_string(k);

  // F: 4096 elements over 128 threads is 32 registers per thread.
  const BufferNode* regs = nullptr;
  for (auto& b : k.allocs) {
    EXPECT_NE(b->scope, Scope::Fragment) << b->name;
    if (b->name == "F") regs = b.get();
  }
  ASSERT_NE(regs, nullptr) << to_string(k);
  EXPECT_EQ(regs->scope, Scope::Local);
  EXPECT_EQ(regs->num_elements_const(), 32);
  EXPECT_TRUE(cs.buffers.count(regs)) << "the registers replacing F are never used";
  // Everything stays inside the static tensors, so nothing needs a mask.
  EXPECT_TRUE(cs.ifs.empty()) << to_string(k);

  std::string code = codegen::print_cuda(k, sm90()).code;
  EXPECT_NE(code.find("Vec<half_t, 8>"), std::string::npos) << code;
  EXPECT_EQ(code.find("tegula_smem"), std::string::npos) << code;
}

// Counts the global loads and stores of the lowered copy that are 8-half vectors, and the rest.
void expect_all_global_accesses_vectorized(int64_t rows, int64_t cols, int threads) {
  CopyKernel ck(false, rows, cols, threads);
  Kernel k = lower_verified(ck.kernel);
  int scalar = 0, vector = 0;
  auto count = [&](const Buffer& b, int lanes) {
    if (b->scope == Scope::Global) (lanes == 8 ? vector : scalar) += 1;
  };
  post_order(
      k.body,
      [&](const Stmt& s) {
        if (auto* st = s.as<BufferStoreNode>()) count(st->buffer, st->value.dtype().lanes);
      },
      [&](const Expr& e) {
        if (auto* ld = e.as<BufferLoadNode>()) count(ld->buffer, ld->dtype.lanes);
      });
  EXPECT_GT(vector, 0) << rows << "x" << cols << " over " << threads << "\n" << to_string(k);
  EXPECT_EQ(scalar, 0) << rows << "x" << cols << " over " << threads << "\n" << to_string(k);
}

// partition_loops.cc: contiguous, aligned global accesses of consecutive slots become one
// vector access of up to 16 bytes. Each thread's slots hold 8-half vectors of a row.
TEST(LowerCopy, GlobalAccessesAreVectorsOfSixteenBytes) { expect_all_global_accesses_vectorized(4, 1024, 128); }

TEST(LowerCopy, RowsShorterThanTheBlockStillVectorize) {
  // Rows of 256, 64 and 32 halves go to groups of 32, 8 and 4 threads, so the layout's
  // formulas contain tx % lanes, built afresh for every slot. vectorize.cc proves two slots
  // contiguous by simplifying the difference of their indices, tx%32*8 + 1 - tx%32*8, which
  // only cancels if the simplifier matches the two tx%32 atoms by structure, not identity.
  expect_all_global_accesses_vectorized(64, 256, 128);
  expect_all_global_accesses_vectorized(16, 64, 128);
  expect_all_global_accesses_vectorized(8, 32, 32);
}

TEST(LowerCopy, StagesVerifyAndMatchThePipeline) {
  CopyKernel ck(false);
  Kernel by_stage = lower_verified(ck.kernel);
  transform::Lowered out = transform::lower(ck.kernel, sm90(), {}, false);
  EXPECT_TRUE(structural_equal(by_stage, out.kernel)) << "pass list differs from transform/pipeline.cc?\n"
                                                      << to_string(by_stage) << "\nvs\n" << to_string(out.kernel);
  ASSERT_EQ(out.stages.size(), std::size(kStages) + 1);
  for (size_t i = 0; i < std::size(kStages); ++i) EXPECT_EQ(out.stages[i + 1].first, kStages[i].name);
}

TEST(LowerCopy, SimulatedRunCopiesEveryElement) {
  for (auto [rows, cols, threads] : {std::tuple{4, 1024, 128}, std::tuple{16, 64, 128}, std::tuple{3, 40, 32}}) {
    CopyKernel ck(false, rows, cols, threads);
    Kernel k = lower_verified(ck.kernel);
    Simulator sim(k, {});
    auto& a = sim.tensor(ck.A);
    for (size_t i = 0; i < a.size(); ++i) a[i] = pattern(int64_t(i));
    auto& b = sim.tensor(ck.B);
    std::fill(b.begin(), b.end(), 99.0);
    sim.run();
    ASSERT_TRUE(sim.errors.empty()) << joined(sim.errors);
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], a[i]) << rows << "x" << cols << " element " << i;
  }
}

// ------------------------------------------------------------------ (c) ragged rows

TEST(LowerCopy, DynamicRowsAreMaskedInTheIR) {
  CopyKernel ck(true);
  Kernel k = lower_verified(ck.kernel);
  Census cs = census(k.body);
  Expr M = ck.kb.dynamic[0];
  int guarded = 0;
  for (auto& cond : cs.conditions) guarded += mentions(cond, M);
  // One condition per vector of loads and one per vector of stores at least.
  EXPECT_GE(guarded, 2) << to_string(k);
  EXPECT_GT(cs.vector_accesses, 0) << "a row of 1024 halves still vectorizes:\n" << to_string(k);
  std::string code = codegen::print_cuda(k, sm90()).code;
  EXPECT_NE(code.find("< M"), std::string::npos) << code;
}

TEST(LowerCopy, DynamicRowsSimulatedStayInBounds) {
  CopyKernel ck(true);
  Kernel k = lower_verified(ck.kernel);
  for (int64_t M : {1, 4, 10, 13}) {
    Simulator sim(k, {M});
    auto& a = sim.tensor(ck.A);
    ASSERT_EQ(int64_t(a.size()), M * 1024);
    for (size_t i = 0; i < a.size(); ++i) a[i] = pattern(int64_t(i));
    auto& b = sim.tensor(ck.B);
    std::fill(b.begin(), b.end(), 99.0);
    sim.run();
    ASSERT_TRUE(sim.errors.empty()) << "M=" << M << "\n" << joined(sim.errors);
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], a[i]) << "M=" << M << " element " << i;
  }
}

// ------------------------------------------------------------------ (b) reductions

// T.copy(A[bx*T0, 0, ...], F); T.reduce_<kind>(F, R, dim); T.copy(R, B[bx*R0, 0, ...])
// for a float32 tile F of shape (T0, T1, ...) and R its shape without `dim`.
struct ReduceKernel {
  KernelBuilder kb;
  std::vector<int64_t> tile, out;
  int dim;
  std::string kind;
  Buffer A, B, F, R;
  Kernel kernel;

  ReduceKernel(std::vector<int64_t> tile_shape, int reduce_dim, int threads, const std::string& reduce_kind,
               int64_t blocks = 4)
      : tile(std::move(tile_shape)), dim(reduce_dim), kind(reduce_kind) {
    for (int d = 0; d < int(tile.size()); ++d) {
      if (d != dim) out.push_back(tile[d]);
    }
    auto shape_of = [&](const std::vector<int64_t>& t, int64_t scale) {
      std::vector<Expr> sh;
      for (size_t d = 0; d < t.size(); ++d) sh.push_back(c(d == 0 ? t[d] * scale : t[d]));
      return sh;
    };
    auto corner = [&](const std::vector<int64_t>& t) {
      std::vector<Expr> mins(t.size(), c(0));
      mins[0] = kb.bx * t[0];
      return region(nullptr, mins, std::vector<int64_t>(t.size(), 1));
    };
    A = make_buffer("A", Scope::Global, DataType::f32(), shape_of(tile, blocks), at(2));
    B = make_buffer("B", Scope::Global, DataType::f32(), shape_of(out, blocks), at(2));
    F = make_buffer("F", Scope::Fragment, DataType::f32(), shape_of(tile, 1), at(3));
    R = make_buffer("R", Scope::Fragment, DataType::f32(), shape_of(out, 1), at(3));
    BufferRegion a_corner = corner(tile), b_corner = corner(out);
    a_corner.buffer = A, b_corner.buffer = B;
    Stmt body = make_seq({copy(a_corner, whole(F), 4), reduce(F, R, kind, dim, 5), copy(whole(R), b_corner, 6)});
    kernel = kb.build("reduce_" + kind, {A, B}, c(blocks), threads, {F, R}, body);
  }

  // Runs the lowered kernel; returns A and B.
  std::pair<std::vector<double>, std::vector<double>> simulate(const Kernel& k) {
    Simulator sim(k, {});
    auto& a = sim.tensor(A);
    for (size_t i = 0; i < a.size(); ++i) a[i] = pattern(int64_t(i) * 5 + 3);
    auto& b = sim.tensor(B);
    std::fill(b.begin(), b.end(), 1e9);
    sim.run();
    EXPECT_TRUE(sim.errors.empty()) << joined(sim.errors);
    return {a, b};
  }

  // Each block's tile of A reduced directly; blocks are contiguous in A and in B.
  std::vector<double> expected(const std::vector<double>& a) const {
    auto prod = [](auto first, auto last) { return std::accumulate(first, last, int64_t(1), std::multiplies<>()); };
    int64_t size = prod(tile.begin(), tile.end());
    int64_t inner = prod(tile.begin() + dim + 1, tile.end()), outer = prod(tile.begin(), tile.begin() + dim);
    std::vector<double> res;
    for (size_t base = 0; base < a.size(); base += size) {
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t in = 0; in < inner; ++in) {
          double acc = kind == "sum" ? 0.0 : -std::numeric_limits<double>::infinity();
          for (int64_t r = 0; r < tile[dim]; ++r) {
            double v = a[base + (o * tile[dim] + r) * inner + in];
            acc = kind == "sum" ? acc + v : std::max(acc, v);
          }
          res.push_back(acc);
        }
      }
    }
    return res;
  }
};

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// Lowers, simulates and compares with the direct reduction.
void expect_reduce_exact(std::vector<int64_t> tile, int dim, int threads, const std::string& kind) {
  ReduceKernel rk(tile, dim, threads, kind, 2);
  Kernel k = lower_verified(rk.kernel);
  auto [a, b] = rk.simulate(k);
  EXPECT_EQ(b, rk.expected(a)) << kind << " of " << shape_text(tile) << " over dim " << dim << " at " << threads
                               << " threads\n" << to_string(k);
}

TEST(LowerReduce, SumOverTheBlockShufflesThenCombinesWarpsInShared) {
  ReduceKernel rk({1, 1024}, 1, 256, "sum");
  Kernel k = lower_verified(rk.kernel);
  Census cs = census(k.body);
  // Every thread holds part of the one row: xor over the 5 lane bits, then 8 warps via shared.
  std::set<int64_t> lanes;
  for (auto* call : cs.calls) {
    if (call->op != "shfl_xor") continue;
    ASSERT_EQ(call->args.size(), 2u);
    const int64_t* m = as_const_int(call->args[1]);
    ASSERT_NE(m, nullptr) << to_string(call->args[1]);
    lanes.insert(*m);
  }
  EXPECT_EQ(lanes, (std::set<int64_t>{1, 2, 4, 8, 16})) << to_string(k);
  const BufferNode* scratch = nullptr;
  for (auto& b : k.allocs) {
    if (b->scope == Scope::Shared) scratch = b.get();
  }
  ASSERT_NE(scratch, nullptr) << "no shared scratch for the cross-warp step\n" << to_string(k);
  EXPECT_TRUE(cs.buffers.count(scratch));
  EXPECT_GE(cs.syncs, 1) << to_string(k);
  EXPECT_GE(k.smem_bytes, scratch->num_elements_const() * 4);
  EXPECT_EQ(k.smem_offset.count(scratch), 1u);

  std::string code = codegen::print_cuda(k, sm90()).code;
  EXPECT_NE(code.find("tegula::shfl_xor("), std::string::npos) << code;
  EXPECT_NE(code.find("__syncthreads();"), std::string::npos) << code;
  EXPECT_NE(code.find("tegula_smem"), std::string::npos) << code;
}

TEST(LowerReduce, SimulatedSumAndMaxAreExact) {
  // One row over the whole block (shuffles and shared), four rows of one warp each
  // (shuffles only), and rows held whole by one thread (no communication).
  expect_reduce_exact({1, 1024}, 1, 256, "sum");
  expect_reduce_exact({1, 1024}, 1, 256, "max");
  expect_reduce_exact({4, 128}, 1, 128, "sum");
  expect_reduce_exact({4, 128}, 1, 128, "max");
  expect_reduce_exact({64, 4}, 1, 64, "sum");
}

TEST(LowerReduce, RaggedRowsSimulatedAreExact) {
  // Rows that do not fill the block, or whose vectors do not fill their thread group: the
  // threads sharing a row must still form an xor group of lanes, or the butterfly mixes
  // rows, and the one-copy store guard of R must find one holder per row. (The row-major
  // round-robin layout put row 2 of a (3, 24) tile at 32 threads on threads 24..31 and 0..3.)
  expect_reduce_exact({3, 24}, 1, 32, "sum");
  expect_reduce_exact({3, 24}, 1, 32, "max");
  expect_reduce_exact({5, 40}, 1, 64, "sum");
  expect_reduce_exact({6, 12}, 1, 64, "max");
  expect_reduce_exact({3, 1000}, 1, 256, "sum");
}

TEST(LowerReduce, ColumnsSimulatedAreExact) {
  // dim 0 of a 2-D tile: a column's holders are one lane in each row group; threads of the
  // xor closure beyond the last row hold nothing and contribute the identity.
  expect_reduce_exact({3, 24}, 0, 32, "sum");
  expect_reduce_exact({4, 128}, 0, 128, "max");
  expect_reduce_exact({16, 8}, 0, 64, "sum");
}

TEST(LowerReduce, MiddleDimensionOfARank3TileIsExactOrRefused) {
  // (2, 3, 8) at 16 threads, reduced over dim 1: row_blocked puts the flattened rows
  // (b, j) on thread pairs 2*(3b + j) + {0, 1}, so output (0, k) is held by {l, 2+l, 4+l}
  // and (1, k) by {6+l, 8+l, 10+l}. The xor closure of the first, {l, 2+l, 4+l, 6+l},
  // takes in thread 6+l, which holds (1, k) in the same register: the butterfly adds
  // batch 1's row into batch 0's sum.
  // That layout is refused with a UserError rather than computed wrongly.
  EXPECT_THROW(expect_reduce_exact({2, 3, 8}, 1, 16, "sum"), tegula::UserError);
  expect_reduce_exact({2, 4, 8}, 1, 16, "sum");  // power-of-two rows: exact
}

// ------------------------------------------------------------------ shared memory

TEST(LowerShared, TransposeThroughSharedIsFencedByBarriers) {
  // for r in serial(0, 2):        twice, so the second round's writes of S must wait for
  //                               the first round's reads
  //     for i, j in T.Parallel(16, 128): S[j, i] = A[bx*16 + i, j]
  //     for i, j in T.Parallel(16, 128): F[i, j] = S[j, i] + 1
  //     T.copy(F, B[bx*16, 0])
  // Each thread reads elements of S that other threads wrote: the simulator reports any
  // access pair that no barrier separates.
  KernelBuilder kb;
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(32), c(128)}, at(2));
  Buffer B = make_buffer("B", Scope::Global, DataType::f32(), {c(32), c(128)}, at(2));
  Buffer S = make_buffer("S", Scope::Shared, DataType::f32(), {c(128), c(16)}, at(3));
  Buffer F = make_buffer("F", Scope::Fragment, DataType::f32(), {c(16), c(128)}, at(3));
  Expr i = make_var("i"), j = make_var("j"), i2 = make_var("i"), j2 = make_var("j");
  Stmt fill_s = parallel({i, j}, {16, 128}, make_store(S, {j, i}, make_load(A, {kb.bx * 16 + i, j}, at(11)), at(12)), 10);
  Stmt to_f = parallel({i2, j2}, {16, 128},
                       make_store(F, {i2, j2}, make_load(S, {j2, i2}, at(21)) + make_float(1.0), at(22)), 20);
  Stmt out = copy(whole(F), region(B, {kb.bx * 16, c(0)}, {1, 1}), 30);
  Stmt body = make_seq({fill_s, to_f, out});
  Expr r = make_var("r");
  Kernel kernel = kb.build("transpose_twice", {A, B}, c(2), 128, {S, F},
                           make_for(r, c(0), c(2), ForKind::Serial, body, 0, at(9)));
  Kernel k = lower_verified(kernel);
  EXPECT_GE(census(k.body).syncs, 2) << to_string(k);

  Simulator sim(k, {});
  auto& a = sim.tensor(A);
  for (size_t n = 0; n < a.size(); ++n) a[n] = pattern(int64_t(n));
  auto& b = sim.tensor(B);
  sim.run();
  ASSERT_TRUE(sim.errors.empty()) << joined(sim.errors) << to_string(k);
  for (size_t n = 0; n < b.size(); ++n) ASSERT_EQ(b[n], a[n] + 1) << "element " << n;
}

// A pipelined loop shaped like attention's: a tile copied ahead of the loop (Q), and in
// the loop a copy, compute on it, a second copy, compute on that and on the first tile.
//   T.copy(X, Xs); acc = 0
//   for k in T.Pipelined(L, num_stages=2):
//       T.copy(Y[k*R, 0], Ys); acc += Ys
//       T.copy(Z[k*R, 0], Zs); acc += Zs * Xs
//   T.copy(acc, O)
struct PipelinedKernel {
  static constexpr int64_t R = 8, C = 64, L = 5;
  KernelBuilder kb;
  Buffer X, Y, Z, O, Xs, Ys, Zs, acc;
  Kernel kernel;

  PipelinedKernel() {
    X = make_buffer("X", Scope::Global, DataType::f16(), {c(R), c(C)}, at(2));
    Y = make_buffer("Y", Scope::Global, DataType::f16(), {c(L * R), c(C)}, at(2));
    Z = make_buffer("Z", Scope::Global, DataType::f16(), {c(L * R), c(C)}, at(2));
    O = make_buffer("O", Scope::Global, DataType::f32(), {c(R), c(C)}, at(2));
    Xs = make_buffer("Xs", Scope::Shared, DataType::f16(), {c(R), c(C)}, at(3));
    Ys = make_buffer("Ys", Scope::Shared, DataType::f16(), {c(R), c(C)}, at(3));
    Zs = make_buffer("Zs", Scope::Shared, DataType::f16(), {c(R), c(C)}, at(3));
    acc = make_buffer("acc", Scope::Fragment, DataType::f32(), {c(R), c(C)}, at(3));
    Expr k = make_var("k");
    auto add_to_acc = [&](Expr value_of_ij, const Expr& i, const Expr& j, int line) {
      return parallel({i, j}, {R, C}, make_store(acc, {i, j}, make_load(acc, {i, j}, at(line)) + value_of_ij, at(line)),
                      line);
    };
    Expr i0 = make_var("i"), j0 = make_var("j"), i1 = make_var("i"), j1 = make_var("j"), i2 = make_var("i"),
         j2 = make_var("j");
    Stmt clear = parallel({i0, j0}, {R, C}, make_store(acc, {i0, j0}, make_float(0.0), at(5)), 5);
    Stmt loop_body = make_seq({
        copy(region(Y, {k * R, c(0)}, {1, 1}), whole(Ys), 10),
        add_to_acc(make_cast(DataType::f32(), make_load(Ys, {i1, j1}, at(11))), i1, j1, 11),
        copy(region(Z, {k * R, c(0)}, {1, 1}), whole(Zs), 14),
        add_to_acc(make_cast(DataType::f32(), make_load(Zs, {i2, j2}, at(15))) *
                       make_cast(DataType::f32(), make_load(Xs, {i2, j2}, at(15))),
                   i2, j2, 15),
    });
    Stmt body = make_seq({copy(whole(X), whole(Xs), 4), clear,
                          make_for(k, c(0), c(L), ForKind::Pipelined, loop_body, 2, at(9)),
                          copy(whole(acc), whole(O), 20)});
    kernel = kb.build("pipelined", {X, Y, Z, O}, c(1), 32, {Xs, Ys, Zs, acc}, body);
  }

  // Runs k and checks O against the sums; returns the simulator's complaints.
  std::vector<std::string> run(const Kernel& k) {
    Simulator sim(k, {});
    auto& x = sim.tensor(X);
    auto& y = sim.tensor(Y);
    auto& z = sim.tensor(Z);
    for (size_t n = 0; n < x.size(); ++n) x[n] = pattern(int64_t(n));
    for (size_t n = 0; n < y.size(); ++n) y[n] = pattern(int64_t(n) + 5), z[n] = pattern(int64_t(n) * 3 + 1);
    auto& o = sim.tensor(O);
    sim.run();
    if (!sim.errors.empty()) return sim.errors;
    for (int64_t n = 0; n < R * C; ++n) {
      double want = 0;
      for (int64_t it = 0; it < L; ++it) want += y[it * R * C + n] + z[it * R * C + n] * x[n];
      if (o[n] != want) return {"O[" + std::to_string(n) + "] = " + std::to_string(o[n]) + ", want " + std::to_string(want)};
    }
    return {};
  }
};

TEST(PipelineLoops, CopiesAnywhereInTheBodyAndAheadOfTheLoopOverlapCorrectly) {
  PipelinedKernel pk;
  Kernel k = lower_verified(pk.kernel);
  Census cs = census(k.body);
  int async_into_xs = 0, async_total = 0, waits = 0;
  for (auto* call : cs.calls) {
    if (call->op == "cp_async") {
      ++async_total;
      async_into_xs += call->args[0].as<BufferLoadNode>()->buffer->name == "Xs";
    }
    waits += call->op == "cp_async_wait";
  }
  EXPECT_GT(async_into_xs, 0) << "the copy ahead of the loop should be cp.async\n" << to_string(k);
  EXPECT_GT(async_total, async_into_xs);
  // Ys and Zs are read by different statements, one after the other: one wait before
  // each reader in the loop (by consumer) and one after it; none between the copy of Xs
  // and the loop, none after each copy.
  EXPECT_EQ(waits, 3) << to_string(k);
  auto errors = pk.run(k);
  EXPECT_TRUE(errors.empty()) << joined(errors) << to_string(k);
}

// Without the waits the simulated copies land too late (or never): the model must say so.
class DropAsyncWaits : public IRMutator {
 public:
  Stmt mutate_Evaluate(const Stmt& self, const EvaluateNode* op) override {
    auto* call = op->value.as<CallNode>();
    return call && call->op == "cp_async_wait" ? make_evaluate(c(0)) : self;
  }
};

TEST(Simulator, ReportsCopiesReadBeforeTheyLand) {
  PipelinedKernel pk;
  Kernel k = transform::lower(pk.kernel, sm90(), {}, false).kernel;
  k.body = DropAsyncWaits().mutate(k.body);
  auto errors = pk.run(k);
  ASSERT_FALSE(errors.empty());
  EXPECT_TRUE(joined(errors).find("unwritten") != std::string::npos ||
              joined(errors).find("in flight") != std::string::npos ||
              joined(errors).find("never waited") != std::string::npos) << joined(errors);
}

// The simulator's own checks must be able to fire, or the tests above prove little.
class DropBarriers : public IRMutator {
 public:
  Stmt mutate_Sync(const Stmt&, const SyncNode*) override { return make_evaluate(c(0)); }
};

TEST(Simulator, ReportsARaceWithoutTheBarriers) {
  ReduceKernel rk({1, 1024}, 1, 256, "sum");
  Kernel k = transform::lower(rk.kernel, sm90(), {}, false).kernel;
  k.body = DropBarriers().mutate(k.body);
  Simulator sim(k, {});
  auto& a = sim.tensor(rk.A);
  std::fill(a.begin(), a.end(), 1.0);
  sim.tensor(rk.B);
  sim.run();
  ASSERT_FALSE(sim.errors.empty());
  EXPECT_NE(sim.errors[0].find("race on red_buf"), std::string::npos) << joined(sim.errors);
}

TEST(Simulator, ReportsOutOfBoundsWithoutTheMasks) {
  CopyKernel ck(true);
  transform::Options unsafe;
  unsafe.disable_safe_memory = true;
  Kernel k = transform::lower(ck.kernel, sm90(), unsafe, false).kernel;
  Simulator sim(k, {10});
  sim.tensor(ck.A);
  sim.tensor(ck.B);
  sim.run();
  ASSERT_FALSE(sim.errors.empty());
  EXPECT_NE(sim.errors[0].find("out of bounds"), std::string::npos) << joined(sim.errors);
}

// ------------------------------------------------------------------ (d) layout conflicts

TEST(LayoutExchange, TransposedFragmentReadCrossesThroughSharedMemory) {
  // T.copy(A[0, 0], F)                                   line 10
  // for j, i in T.Parallel(64, 8):                       lines 20, 21
  //     B[j, i] = F[i, j]                                store line 22, load of F line 23
  // F takes the copy's layout, which keeps row-major vectors of F together; the second loop,
  // free to choose, gives thread 1 the vector B[0, 4..7], so it needs F[4..7, 0], which
  // other threads hold. Fragments are registers: no thread can read another's, so F, which
  // the loop only reads, reaches it through shared memory (TileLang's meaning: the program
  // is a transpose).
  KernelBuilder kb;
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(8), c(64)}, at(2));
  Buffer B = make_buffer("B", Scope::Global, DataType::f32(), {c(64), c(8)}, at(2));
  Buffer F = make_buffer("F", Scope::Fragment, DataType::f32(), {c(8), c(64)}, at(3));
  Expr i = make_var("i"), j = make_var("j");
  Stmt load_f = make_store(B, {j, i}, make_load(F, {i, j}, at(23)), at(22));
  Stmt body = make_seq({copy(whole(A), whole(F), 10), parallel({j, i}, {64, 8}, load_f, 20)});
  Kernel kernel = kb.build("transpose_fragment", {A, B}, c(1), 64, {F}, body);
  transform::Lowered out = transform::lower(kernel, sm90(), {}, false);
  std::string ir = ir::to_string(out.kernel);
  EXPECT_NE(ir.find("F_exchange"), std::string::npos) << ir;
  EXPECT_NE(ir.find("sync"), std::string::npos) << ir;
}

TEST(LayoutExchange, RowsAndColumnsOfOneLoopMeetThroughSharedMemory) {
  // for i, j in T.Parallel(8, 8):      lines 20, 21
  //     G[i] = A[i, j]                 G: the loop's layout projected on its rows
  //     H[j] = A[i, j]                 H: the same projected on its columns
  // for i in T.Parallel(8):            line 30
  //     C[i] = G[i] + H[i]             runs with G's layout; H's differs, and H is only
  //                                    read: it reaches the loop through shared memory
  KernelBuilder kb;
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(8), c(8)}, at(2));
  Buffer C = make_buffer("C", Scope::Global, DataType::f32(), {c(8)}, at(2));
  Buffer G = make_buffer("G", Scope::Fragment, DataType::f32(), {c(8)}, at(3));
  Buffer H = make_buffer("H", Scope::Fragment, DataType::f32(), {c(8)}, at(4));
  Expr i = make_var("i"), j = make_var("j"), i2 = make_var("i");
  Stmt both = make_seq({make_store(G, {i}, make_load(A, {i, j}, at(22)), at(22)),
                        make_store(H, {j}, make_load(A, {i, j}, at(23)), at(23))});
  Stmt meet = make_store(C, {i2}, make_load(G, {i2}, at(31)) + make_load(H, {i2}, at(31)), at(31));
  Stmt body = make_seq({parallel({i, j}, {8, 8}, both, 20), parallel({i2}, {8}, meet, 30)});
  Kernel kernel = kb.build("rows_and_columns", {A, C}, c(1), 32, {G, H}, body);
  transform::Lowered out = transform::lower(kernel, sm90(), {}, false);
  std::string ir = ir::to_string(out.kernel);
  EXPECT_NE(ir.find("H_exchange"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("G_exchange"), std::string::npos) << ir;
  EXPECT_NE(ir.find("sync"), std::string::npos) << ir;
}

// ------------------------------------------------------------------ (e) simplify, before/expected

TEST(SimplifyPass, FoldsIndexArithmeticWithTheThreadRange) {
  // before:
  //   for i in serial(0, 4):
  //       if tx < 128:
  //           B[(tx*8 + 3)//4096 + i, (tx*8 + 3)%4096] = A[i + 0, tx*8 + 3 + bx*0]
  // expected (tx in [0, 128), so tx*8 + 3 < 4096 and the guard always holds):
  //   for i in serial(0, 4):
  //       B[i, tx*8 + 3] = A[i, tx*8 + 3]
  auto make = [](bool simplified) {
    KernelBuilder kb;
    Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(4), c(4096)});
    Buffer B = make_buffer("B", Scope::Global, DataType::f32(), {c(4), c(4096)});
    Expr i = make_var("i"), tx = kb.tx, bx = kb.bx;
    Stmt body;
    if (simplified) {
      body = make_store(B, {i, tx * 8 + 3}, make_load(A, {i, tx * 8 + 3}));
    } else {
      Expr off = tx * 8 + 3;
      Stmt store = make_store(B, {floordiv(off, c(4096)) + i, floormod(off, c(4096))},
                              make_load(A, {i + 0, tx * 8 + 3 + bx * 0}));
      body = make_if(tx < c(128), store);
    }
    return kb.build("fold", {A, B}, c(2), 128, {}, make_for(i, c(0), c(4), ForKind::Serial, body));
  };
  Kernel before = make(false), expected = make(true);
  ASSERT_FALSE(structural_equal(before, expected));
  transform::PassContext ctx;
  transform::simplify(before, ctx);
  EXPECT_TRUE(structural_equal(before, expected)) << to_string(before) << "\nexpected\n" << to_string(expected);
  EXPECT_EQ(structural_hash(before), structural_hash(expected));
  EXPECT_NO_THROW(verify(before, "simplify"));
  // Idempotent: a second run gives the same program again.
  Kernel again = before;
  transform::simplify(again, ctx);
  EXPECT_TRUE(structural_equal(again, expected)) << to_string(again);
}

TEST(SimplifyPass, KeepsWhatTheRangesDoNotDecide) {
  // With 256 threads, tx < 128 and (tx*8 + 3)//1024 depend on the thread: both stay.
  KernelBuilder kb;
  Buffer B = make_buffer("B", Scope::Global, DataType::f32(), {c(4), c(4096)});
  Expr off = kb.tx * 8 + 3;
  Stmt body = make_if(kb.tx < c(128), make_store(B, {floordiv(off, c(1024)), floormod(off, c(1024))}, make_float(1.0)));
  Kernel k = kb.build("keep", {B}, c(1), 256, {}, body);
  Kernel before = k;
  transform::PassContext ctx;
  transform::simplify(k, ctx);
  EXPECT_TRUE(structural_equal(k, before)) << to_string(k);
}

// ------------------------------------------------------------------ barriers under branches

// Lowered code: a register flag, then a branch on it holding two partitioned units (always-
// true branches) where each thread reads what another wrote in shared memory:
//   R[0] = 1.0                       (with opaque_call: opaque(R[0]), which may write R)
//   if R[0] > 0:
//       if True: S[tx] = tx
//       if True: Out[tx] = S[127 - tx]
Kernel flag_branch_kernel(KernelBuilder& kb, bool opaque_call) {
  Buffer S = make_buffer("S", Scope::Shared, DataType::f32(), {c(128)}, at(2));
  Buffer Out = make_buffer("Out", Scope::Global, DataType::f32(), {c(128)}, at(2));
  Buffer R = make_buffer("R", Scope::Local, DataType::f32(), {c(1)}, at(3));
  Stmt write = make_if(make_bool(true), make_store(S, {kb.tx}, make_cast(DataType::f32(), kb.tx), at(6)));
  Stmt read = make_if(make_bool(true), make_store(Out, {kb.tx}, make_load(S, {c(127) - kb.tx}, at(7)), at(7)));
  Expr flag = make_load(R, {c(0)}, at(5));
  std::vector<Stmt> body = {make_store(R, {c(0)}, make_float(1.0), at(4))};
  if (opaque_call) body.push_back(make_evaluate(make_call("opaque", {flag}, DataType::i32(), at(4))));
  body.push_back(make_if(make_binary(BinaryOp::GT, flag, make_float(0.0)), make_seq({write, read}), {}, at(5)));
  return kb.build("flag_branch", {Out}, c(1), 128, {S, R}, make_seq(body));
}

TEST(InsertBarriers, BranchOnARegisterEveryThreadHoldsAlikeGetsItsBarrierInside) {
  KernelBuilder kb;
  Kernel k = flag_branch_kernel(kb, false);
  transform::PassContext ctx;
  ctx.target = sm90();
  transform::insert_barriers(k, ctx);
  auto* seq = k.body.as<SeqNode>();
  ASSERT_TRUE(seq) << to_string(k);
  auto* br = seq->seq.back().as<IfThenElseNode>();
  ASSERT_TRUE(br) << to_string(k);
  EXPECT_EQ(census(br->then_case).syncs, 1) << to_string(k);
}

TEST(InsertBarriers, ProgramsOwnCpAsyncLandsAtItsWaitAndTheBarrierFollowsTheWait) {
  // ptx_cp_async(&S[tx], &A[tx], 4); cp_async_commit(); R[tx] = 1; Out[tx] = R[127 - tx];
  // cp_async_wait(0); Out[tx] = S[127 - tx]: the exchange through R gets a barrier between
  // the issue and the wait, but the copy lands at the wait, so the read of another thread's
  // copy needs a second barrier after the wait.
  KernelBuilder kb;
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(128)}, at(2));
  Buffer S = make_buffer("S", Scope::Shared, DataType::f32(), {c(128)}, at(2));
  Buffer Out = make_buffer("Out", Scope::Global, DataType::f32(), {c(128)}, at(2));
  Stmt issue = make_evaluate(make_call("ptx_cp_async", {make_load(S, {kb.tx}, at(3)), make_load(A, {kb.tx}, at(3)), c(4)},
                                       DataType::i32(), at(3)));
  Stmt commit = make_evaluate(make_call("cp_async_commit", {}, DataType::i32(), at(4)));
  Stmt wait = make_evaluate(make_call("cp_async_wait", {c(0)}, DataType::i32(), at(5)));
  Stmt read = make_store(Out, {kb.tx}, make_load(S, {c(127) - kb.tx}, at(6)), at(6));
  Buffer R = make_buffer("R", Scope::Shared, DataType::f32(), {c(128)}, at(2));
  Stmt r_write = make_store(R, {kb.tx}, make_float(1.0), at(4));
  Stmt r_read = make_store(Out, {kb.tx}, make_load(R, {c(127) - kb.tx}, at(4)), at(4));
  Kernel k = kb.build("own_groups", {A, Out}, c(1), 128, {S, R}, make_seq({issue, commit, r_write, r_read, wait, read}));
  transform::PassContext ctx;
  ctx.target = sm90();
  transform::insert_barriers(k, ctx);
  auto* seq = k.body.as<SeqNode>();
  ASSERT_TRUE(seq && seq->seq.size() >= 2) << to_string(k);
  size_t n = seq->seq.size();
  EXPECT_TRUE(seq->seq[n - 2].as<SyncNode>()) << to_string(k);  // right before the read
  auto* w = seq->seq[n - 3].as<EvaluateNode>();
  ASSERT_TRUE(w) << to_string(k);
  EXPECT_EQ(w->value.as<CallNode>()->op, "cp_async_wait") << to_string(k);
  EXPECT_EQ(census(k.body).syncs, 2) << to_string(k);
}

TEST(InsertBarriers, BranchThatMayDivergeAndNeedsABarrierIsRefusedAtItsLine) {
  // A call may write the register through its address: the flag may differ between threads,
  // no barrier can go inside the branch, and leaving it out would race.
  KernelBuilder kb;
  Kernel k = flag_branch_kernel(kb, true);
  transform::PassContext ctx;
  ctx.target = sm90();
  try {
    transform::insert_barriers(k, ctx);
    ADD_FAILURE() << "expected a UserError\n" << to_string(k);
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a barrier inside the branch ('S'"), std::string::npos) << e.what();
    EXPECT_EQ(e.loc().line, 5) << e.what();
  }
}

// ------------------------------------------------------------------ verifier between passes

TEST(PassContracts, PartitionedKernelDeclaresItsRegisters) {
  // ir/verifier.h: "every buffer touched is a param or in allocs" is an invariant every pass
  // must keep, including partition_loops, which writes the register arrays made by
  // lower_fragments and the vectorizer's vld/vst temporaries into the body.
  CopyKernel ck(false);
  Kernel k = ck.kernel;
  transform::PassContext ctx;
  ctx.target = sm90();
  for (const Stage& st : kStages) {
    st.run(k, ctx);
    EXPECT_NO_THROW(verify(k, st.name)) << st.name;
  }
}

}  // namespace
}  // namespace tegula
