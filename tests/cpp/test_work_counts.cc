// analysis::count_work on kernels built by hand, each against a count done here by brute
// force or by arithmetic: ragged tiles count their in-bounds bytes, a causal loop its own
// trips per block, a bound read from a tensor its contents (or an error asking for them),
// a branch on a register value a note, a guard coupling two nest variables the
// enumerated points.
#include <gtest/gtest.h>

#include <string>

#include "analysis/work_counts.h"
#include "ir/stmt.h"

namespace tegula::analysis {
namespace {

using namespace ir;  // NOLINT: the builders read like the IR they build

Expr c(int64_t v) { return make_int(v); }

Kernel kernel_of(std::vector<Param> params, std::vector<Expr> grid, std::vector<Expr> block_vars, Stmt body,
                 std::vector<Buffer> allocs = {}) {
  Kernel k;
  k.name = "k";
  k.params = std::move(params);
  k.grid = std::move(grid);
  k.block_vars = std::move(block_vars);
  k.thread_var = make_var("tx");
  k.threads = 128;
  k.allocs = std::move(allocs);
  k.body = std::move(body);
  return k;
}

TEST(WorkCounts, RaggedTilesCountTheirInBoundsBytesAndEveryPaddedFlop) {
  constexpr int64_t M = 100, N = 70, t = 32;
  Buffer X = make_buffer("X", Scope::Global, DataType::f16(), {c(M), c(N)});
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f32(), {c(M), c(N)});
  Expr bx = make_var("bx"), by = make_var("by"), i = make_var("i"), j = make_var("j");
  std::vector<Expr> at{by * t + i, bx * t + j};
  Stmt store = make_store(Y, at, make_cast(DataType::f32(), make_load(X, at)) * make_float(2.0));
  Stmt nest = make_for(i, c(0), c(t), ForKind::Parallel, make_for(j, c(0), c(t), ForKind::Parallel, store));
  Kernel k = kernel_of({{X, {}}, {Y, {}}}, {c(3), c(4)}, {bx, by}, nest);

  WorkCounts w = count_work(k, {});
  EXPECT_EQ(w.grid, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(w.loads.at("X"), M * N * 2);
  EXPECT_EQ(w.stores.at("Y"), M * N * 4);
  EXPECT_EQ(w.sizes.at("X"), M * N * 2);
  EXPECT_EQ(w.cuda_flops, 3 * 4 * t * t);  // the multiply, padding included; the cast is free
  EXPECT_EQ(w.tensor_flops, 0);
  EXPECT_TRUE(w.notes.empty());
}

TEST(WorkCounts, ACausalLoopCountsEachBlocksOwnTrips) {
  Buffer A = make_buffer("A_s", Scope::Shared, DataType::f16(), {c(16), c(32)});
  Buffer B = make_buffer("B_s", Scope::Shared, DataType::f16(), {c(32), c(8)});
  Buffer C = make_buffer("C_f", Scope::Fragment, DataType::f32(), {c(16), c(8)});
  Buffer O = make_buffer("O", Scope::Global, DataType::f32(), {c(4)});
  Expr bx = make_var("bx"), kv = make_var("k");
  Stmt gemm = make_tile_op("gemm", {{A, {c(0), c(0)}, {c(16), c(32)}}, {B, {c(0), c(0)}, {c(32), c(8)}},
                                    {C, {c(0), c(0)}, {c(16), c(8)}}},
                           {}, {{"transpose_A", int64_t(0)}, {"transpose_B", int64_t(0)}});
  Stmt loop = make_for(kv, c(0), bx + 1, ForKind::Serial, gemm);
  Kernel k = kernel_of({{O, {}}}, {c(4)}, {bx}, loop, {A, B, C});
  WorkCounts w = count_work(k, {});
  EXPECT_EQ(w.tensor_flops, 2 * 16 * 8 * 32 * (1 + 2 + 3 + 4));
  EXPECT_TRUE(w.loads.empty());
}

Kernel data_bound_kernel() {
  Buffer L = make_buffer("L", Scope::Global, DataType::i32(), {c(4)});
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f32(), {c(4)});
  Expr bx = make_var("bx"), n = make_var("n"), kv = make_var("k");
  Stmt add = make_store(Y, {bx}, make_load(Y, {bx}) + make_float(1.0));
  Stmt body = make_let(n, make_load(L, {bx}), make_for(kv, c(0), n, ForKind::Serial, add));
  return kernel_of({{L, {}}, {Y, {}}}, {c(4)}, {bx}, body);
}

TEST(WorkCounts, ABoundReadFromATensorIsCountedFromItsContents) {
  Kernel k = data_bound_kernel();
  TensorContents lengths{{4}, false, {3, 0, 5, 1}, {}};
  WorkInputs in;
  in.tensors = {"L", "Y"};
  in.contents = [&](const std::string& name) { return name == "L" ? &lengths : nullptr; };
  WorkCounts w = count_work(k, in);
  EXPECT_EQ(w.cuda_flops, 9);                  // one add per trip, 3 + 0 + 5 + 1 trips
  EXPECT_EQ(w.stores.at("Y"), 9 * 4);
  EXPECT_EQ(w.loads.at("Y"), 9 * 4);
  EXPECT_EQ(w.loads.at("L"), 4 * 4);           // the let reads L once per block

  in.contents = [](const std::string&) -> const TensorContents* { return nullptr; };
  try {
    count_work(k, in);
    FAIL() << "counted a bound whose tensor was not given";
  } catch (const WorkCountError& err) {
    EXPECT_NE(std::string(err.what()).find("`let n = L[bx]` depends on the values of 'L'"), std::string::npos)
        << err.what();
  }
  // A tensor the caller knows nothing of holds values only the run would tell.
  EXPECT_THROW(count_work(k, {}), WorkCountError);
}

TEST(WorkCounts, ABranchOnARegisterValueCountsAsTakenAndSaysSo) {
  Buffer F = make_buffer("F", Scope::Fragment, DataType::f32(), {c(1)});
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f32(), {c(6)});
  Expr bx = make_var("bx");
  Stmt body = make_if(make_binary(BinaryOp::GT, make_load(F, {c(0)}), make_float(0.0)), make_store(Y, {bx}, make_float(1.0)));
  Kernel k = kernel_of({{Y, {}}}, {c(6)}, {bx}, body, {F});
  WorkCounts w = count_work(k, {});
  EXPECT_EQ(w.stores.at("Y"), 6 * 4);
  ASSERT_EQ(w.notes.size(), 1u);
  EXPECT_EQ(*w.notes.begin(), "`if F[0] > 0.0` depends on values computed in the kernel: counted as taken");
}

TEST(WorkCounts, AGuardCouplingTwoNestVariablesIsEnumeratedExactly) {
  constexpr int64_t n = 8;
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f32(), {c(n * n - 5)});
  Expr bx = make_var("bx"), i = make_var("i"), j = make_var("j");
  Stmt store = make_if(make_binary(BinaryOp::LE, i, j), make_store(Y, {i * n + j}, make_float(1.0)));
  Stmt nest = make_for(i, c(0), c(n), ForKind::Parallel, make_for(j, c(0), c(n), ForKind::Parallel, store));
  Kernel k = kernel_of({{Y, {}}}, {c(2)}, {bx}, nest);
  int64_t stored = 0;
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = a; b < n; ++b) stored += a * n + b < n * n - 5;
  }
  WorkCounts w = count_work(k, {});
  EXPECT_EQ(w.stores.at("Y"), 2 * stored * 4);

  // Past the limit, evenly spaced blocks stand for the rest, and a note says so.
  WorkInputs few;
  few.dense_limit = n * n;
  WorkCounts sampled = count_work(k, few);
  EXPECT_EQ(sampled.stores.at("Y"), 2 * stored * 4);
  EXPECT_EQ(*sampled.notes.begin(), "a nest's masked accesses are estimated from 1 of 2 blocks");
}

}  // namespace
}  // namespace tegula::analysis
