// Masks of global accesses (partition_loops, vectorize): a global load inside another
// access's index is masked before the access's own bounds test reads it, in the vectorised
// and the element-wise forms of a T.Parallel nest and in the code outside the nests. Checked
// on the printed CUDA and by the simulator, which reports every out-of-bounds access.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/cuda_printer.h"
#include "interp/simt.h"
#include "transform/pipeline.h"

namespace tegula {
namespace {

using namespace ir;

Expr c(int64_t v) { return make_int(v); }

constexpr int64_t kRows = 37, kTable = 50, kCols = 64, kBlock = 16;

// for t, i in T.Parallel(16, 64): Out[bx*16 + t, i] = C[Pos[bx*16 + t], i], over 37 rows:
// the last block's rows 37..47 index Pos past its end.
struct Gather {
  Buffer pos = make_buffer("Pos", Scope::Global, DataType::i32(), {c(kRows)});
  Buffer table = make_buffer("C", Scope::Global, DataType::f16(), {c(kTable), c(kCols)});
  Buffer out = make_buffer("Out", Scope::Global, DataType::f16(), {c(kRows), c(kCols)});
  Kernel kernel;

  Gather() {
    Expr bx = make_var("bx"), tx = make_var("tx"), t = make_var("t"), i = make_var("i");
    Expr row = make_binary(BinaryOp::Add, make_binary(BinaryOp::Mul, bx, c(kBlock)), t);
    Stmt body = make_store(out, {row, i}, make_load(table, {make_load(pos, {row}), i}));
    body = make_for(i, c(0), c(kCols), ForKind::Parallel, body, 0);
    body = make_for(t, c(0), c(kBlock), ForKind::Parallel, body, 0);
    kernel.name = "gather";
    kernel.params = {{pos, {}}, {table, {}}, {out, {}}};
    kernel.grid = {c((kRows + kBlock - 1) / kBlock)};
    kernel.block_vars = {bx};
    kernel.thread_var = tx;
    kernel.threads = 64;
    kernel.body = body;
  }
};

std::vector<std::string> simulate(const Kernel& k, std::vector<std::vector<double>>& tensors,
                                  const std::vector<std::vector<int64_t>>& shapes) {
  interp::CallArgs args;
  for (size_t p = 0; p < tensors.size(); ++p) {
    args.tensors.push_back(&tensors[p]);
    args.shapes.push_back(shapes[p]);
    args.scalars.push_back(0.0);
  }
  return interp::simulate_kernel(k, {}, args);
}

void expect_gather_in_bounds(const transform::Options& options) {
  Gather g;
  Kernel k = transform::lower(g.kernel, transform::Target::parse("sm_90a"), options, false).kernel;
  std::vector<std::vector<double>> tensors(3);
  for (int64_t r = 0; r < kRows; ++r) tensors[0].push_back(double((r * 7) % kTable));
  for (int64_t e = 0; e < kTable * kCols; ++e) tensors[1].push_back(double(e % 1000));
  tensors[2].assign(kRows * kCols, -1.0);
  auto errors = simulate(k, tensors, {{kRows}, {kTable, kCols}, {kRows, kCols}});
  ASSERT_TRUE(errors.empty()) << errors[0];
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < kCols; ++i) {
      ASSERT_EQ(tensors[2][r * kCols + i], tensors[1][((r * 7) % kTable) * kCols + i]) << r << ", " << i;
    }
  }
  // Every read of Pos in the printed code sits in the arm of its own row test.
  std::string code = codegen::print_cuda(k, transform::Target::parse("sm_90a")).code;
  size_t reads = 0;
  for (size_t at = code.find("Pos["); at != std::string::npos; at = code.find("Pos[", at + 1), ++reads) {
    EXPECT_EQ(code.compare(at - 2, 2, "? "), 0) << code.substr(at > 80 ? at - 80 : 0, 120);
  }
  EXPECT_GT(reads, 0u);
}

TEST(Masks, IndexLoadOfAVectorisedGatherIsMaskedFirst) { expect_gather_in_bounds({}); }

TEST(Masks, IndexLoadOfAnElementwiseGatherIsMaskedFirst) {
  transform::Options options;
  options.disable_vectorize = true;
  expect_gather_in_bounds(options);
}

// for k in T.serial(8): Out[bx] = Out[bx] + X[bx*8 + k], outside any T.Parallel nest, over
// 29 elements of X: the last block reads X[29..31].
TEST(Masks, AccessesOutsideParallelNestsAreMasked) {
  Buffer x = make_buffer("X", Scope::Global, DataType::f32(), {c(29)});
  Buffer out = make_buffer("Out", Scope::Global, DataType::f32(), {c(4)});
  Expr bx = make_var("bx"), tx = make_var("tx"), k = make_var("k");
  Expr at = make_binary(BinaryOp::Add, make_binary(BinaryOp::Mul, bx, c(8)), k);
  Stmt body = make_store(out, {bx}, make_binary(BinaryOp::Add, make_load(out, {bx}), make_load(x, {at})));
  Kernel kernel;
  kernel.name = "sums";
  kernel.params = {{x, {}}, {out, {}}};
  kernel.grid = {c(4)};
  kernel.block_vars = {bx};
  kernel.thread_var = tx;
  kernel.threads = 1;
  kernel.body = make_for(k, c(0), c(8), ForKind::Serial, body, 0);
  Kernel lowered = transform::lower(kernel, transform::Target::parse("sm_90a"), {}, false).kernel;
  std::vector<std::vector<double>> tensors(2);
  for (int e = 0; e < 29; ++e) tensors[0].push_back(double(e));
  tensors[1].assign(4, 0.0);
  auto errors = simulate(lowered, tensors, {{29}, {4}});
  ASSERT_TRUE(errors.empty()) << errors[0];
  EXPECT_EQ(tensors[1], (std::vector<double>{28, 92, 156, 24 + 25 + 26 + 27 + 28}));
}

}  // namespace
}  // namespace tegula
