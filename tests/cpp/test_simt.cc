// The SIMT simulator (src/interp/simt*.cc) on tensor-core kernels and on its own checks:
// a block GEMM lowered for wgmma (sm_90a) and mma.sync (sm_80) computes the product, and
// the hazards of the asynchronous paths (a wgmma never waited for, an accumulator read
// before its wait, registers laid out other than the instruction holds them, registers
// read before they are written) are reported, as is anything it cannot run.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "interp/simt.h"
#include "ir/functor.h"
#include "ir/printer.h"
#include "layout/mma.h"
#include "transform/pipeline.h"

namespace tegula {
namespace {

using namespace ir;

Expr c(int64_t v) { return make_int(v); }

BufferRegion whole(const Buffer& b) { return {b, std::vector<Expr>(b->shape.size(), c(0)), b->shape}; }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += x + "\n";
  return s;
}

bool mentions(const std::vector<std::string>& errors, const std::string& what) {
  return joined(errors).find(what) != std::string::npos;
}

// C = A B for one M x N x K tile:
//   T.copy(A, As); T.copy(B, Bs); T.clear(acc); T.gemm(As, Bs, acc); T.copy(acc, C)
struct GemmKernel {
  static constexpr int64_t M = 64, N = 32, K = 32;
  Buffer A, B, C, As, Bs, acc;
  Kernel kernel;

  GemmKernel() {
    A = make_buffer("A", Scope::Global, DataType::f16(), {c(M), c(K)});
    B = make_buffer("B", Scope::Global, DataType::f16(), {c(K), c(N)});
    C = make_buffer("C", Scope::Global, DataType::f32(), {c(M), c(N)});
    As = make_buffer("As", Scope::Shared, DataType::f16(), {c(M), c(K)});
    Bs = make_buffer("Bs", Scope::Shared, DataType::f16(), {c(K), c(N)});
    acc = make_buffer("acc", Scope::Fragment, DataType::f32(), {c(M), c(N)});
    Stmt body = make_seq({
        make_tile_op("copy", {whole(A), whole(As)}, {}, {}),
        make_tile_op("copy", {whole(B), whole(Bs)}, {}, {}),
        make_tile_op("fill", {whole(acc)}, {make_float(0.0)}, {}),
        make_tile_op("gemm", {whole(As), whole(Bs), whole(acc)}, {}, {}),
        make_tile_op("copy", {whole(acc), whole(C)}, {}, {}),
    });
    kernel.name = "block_gemm";
    kernel.params = {{A, {}}, {B, {}}, {C, {}}};
    kernel.grid = {c(1)};
    kernel.block_vars = {make_var("bx")};
    kernel.thread_var = make_var("tx");
    kernel.threads = 128;
    kernel.allocs = {As, Bs, acc};
    kernel.body = body;
  }

  std::vector<double> a = values(M * K, 1), b = values(K * N, 2), out;

  // Small integers: exact in half precision and in the sums.
  static std::vector<double> values(int64_t n, int seed) {
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = double((i * 7 + seed * 5) % 9 - 4);
    return v;
  }

  std::vector<std::string> run(const Kernel& k, const interp::RegisterLayouts& layouts) {
    out.assign(M * N, -1e9);
    interp::CallArgs args;
    args.tensors = {&a, &b, &out};
    args.shapes = {{M, K}, {K, N}, {M, N}};
    args.scalars = {0, 0, 0};
    return interp::simulate_kernel(k, layouts, args);
  }

  std::string mismatch() const {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double want = 0;
        for (int64_t x = 0; x < K; ++x) want += a[i * K + x] * b[x * N + j];
        if (out[i * N + j] != want) {
          return "C[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(out[i * N + j]) +
                 ", want " + std::to_string(want);
        }
      }
    }
    return "";
  }
};

transform::Lowered lower_for(const Kernel& k, const char* arch) {
  return transform::lower(k, transform::Target::parse(arch), {}, false);
}

// Rewrites the evaluate statements whose call is named `op`.
class RewriteCall : public IRMutator {
 public:
  RewriteCall(std::string op, std::function<Stmt(const Stmt&)> f) : op_(std::move(op)), f_(std::move(f)) {}
  Stmt mutate_Evaluate(const Stmt& self, const EvaluateNode* node) override {
    auto* call = node->value.as<CallNode>();
    return call && call->op == op_ ? f_(self) : self;
  }

 private:
  std::string op_;
  std::function<Stmt(const Stmt&)> f_;
};

TEST(SimtTensorCores, BlockGemmOnBothPathsIsExact) {
  for (const char* arch : {"sm_90a", "sm_80"}) {
    GemmKernel g;
    transform::Lowered l = lower_for(g.kernel, arch);
    std::string ir = to_string(l.kernel);
    EXPECT_NE(ir.find(std::string(arch) == "sm_90a" ? "wgmma_ss" : "gemm_ss"), std::string::npos) << ir;
    auto errors = g.run(l.kernel, l.register_layouts);
    ASSERT_TRUE(errors.empty()) << arch << "\n" << joined(errors) << ir;
    EXPECT_EQ(g.mismatch(), "") << arch << "\n" << ir;
  }
}

TEST(SimtTensorCores, WgmmaNeverWaitedForIsReported) {
  GemmKernel g;
  transform::Lowered l = lower_for(g.kernel, "sm_90a");
  Kernel k = l.kernel;
  k.body = RewriteCall("wgmma_wait", [](const Stmt&) { return make_evaluate(c(0)); }).mutate(k.body);
  auto errors = g.run(k, l.register_layouts);
  ASSERT_FALSE(errors.empty()) << to_string(k);
  EXPECT_TRUE(mentions(errors, "while a wgmma accumulating into it is in flight")) << joined(errors);
}

TEST(SimtTensorCores, AccumulatorReadBeforeTheWaitIsReported) {
  // The wait moved to the end of the kernel: the epilogue reads acc's registers while the
  // group still runs.
  GemmKernel g;
  transform::Lowered l = lower_for(g.kernel, "sm_90a");
  Kernel k = l.kernel;
  Stmt wait;
  k.body = RewriteCall("wgmma_wait", [&](const Stmt& s) {
             wait = s;
             return make_evaluate(c(0));
           }).mutate(k.body);
  ASSERT_TRUE(wait) << to_string(k);
  k.body = make_seq({k.body, wait});
  auto errors = g.run(k, l.register_layouts);
  EXPECT_TRUE(mentions(errors, "before its wgmma_wait")) << joined(errors);
}

TEST(SimtTensorCores, RegistersLaidOutOtherwiseThanTheInstructionAreReported) {
  // The passes' layout for acc replaced by the mma.sync one (warps 4 x 1, no warpgroup
  // stride): the instruction's registers hold other elements than the epilogue assumes.
  GemmKernel g;
  transform::Lowered l = lower_for(g.kernel, "sm_90a");
  interp::RegisterLayouts layouts = l.register_layouts;
  int replaced = 0;
  for (auto& [reg, layout] : layouts) {
    if (reg->name == "acc") layout = layout::make_mma_accumulator(GemmKernel::M, GemmKernel::N, 2, 2), ++replaced;
  }
  ASSERT_EQ(replaced, 1);
  auto errors = g.run(l.kernel, layouts);
  EXPECT_TRUE(mentions(errors, "are laid out as")) << joined(errors);
}

TEST(SimtTensorCores, TheClearedAccumulatorIsNeededOnTheMmaSyncPath) {
  // Without T.clear's stores the gemm accumulates into registers never written.
  GemmKernel g;
  transform::Lowered l = lower_for(g.kernel, "sm_80");
  Kernel k = l.kernel;
  class DropRegisterZeroes : public IRMutator {
   public:
    Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
      bool zero = op->buffer->name == "acc" && op->value.as<FloatImmNode>();
      return zero ? make_evaluate(c(0)) : self;
    }
  };
  k.body = DropRegisterZeroes().mutate(k.body);
  auto errors = g.run(k, l.register_layouts);
  EXPECT_TRUE(mentions(errors, "reads unwritten acc")) << joined(errors) << to_string(k);
}

// ------------------------------------------------------------------ undefined values

// One warp, 32 threads, a register U written by threads < 16 only.
Kernel partly_written_register(const Buffer& Y, const Buffer& U) {
  Kernel k;
  k.name = "partly_written";
  k.params = {{Y, {}}};
  k.grid = {c(1)};
  k.block_vars = {make_var("bx")};
  k.thread_var = make_var("tx");
  k.threads = 32;
  k.allocs = {U};
  k.body = make_if(k.thread_var < c(16), make_store(U, {c(0)}, make_cast(DataType::f32(), k.thread_var)));
  return k;
}

TEST(SimtUndefined, UnwrittenRegistersReachingMemoryAreReported) {
  //   if tx < 16: U[0] = tx
  //   Y[tx] = U[0] * 2          threads >= 16 store garbage
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f32(), {c(32)});
  Buffer U = make_buffer("U", Scope::Local, DataType::f32(), {c(1)});
  Kernel k = partly_written_register(Y, U);
  k.body = make_seq({k.body, make_store(Y, {k.thread_var}, make_load(U, {c(0)}) * make_float(2.0))});
  std::vector<double> y(32, -1);
  interp::CallArgs args{{&y}, {{32}}, {0}};
  auto errors = interp::simulate_kernel(k, {}, args);
  EXPECT_TRUE(mentions(errors, "thread 16 stores a value computed from unwritten registers into Y[16]")) << joined(errors);
}

TEST(SimtUndefined, GuardedUseOfPartlyWrittenRegistersIsSound) {
  //   if tx < 16: U[0] = tx
  //   U[0] = U[0] + 1           garbage + 1 on threads >= 16, never stored
  //   if tx < 16: Y[tx] = U[0]
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f32(), {c(32)});
  Buffer U = make_buffer("U", Scope::Local, DataType::f32(), {c(1)});
  Kernel k = partly_written_register(Y, U);
  Expr tx = k.thread_var;
  k.body = make_seq({
      k.body,
      make_store(U, {c(0)}, make_load(U, {c(0)}) + make_float(1.0)),
      make_if(tx < c(16), make_store(Y, {tx}, make_load(U, {c(0)}))),
  });
  std::vector<double> y(32, -1);
  interp::CallArgs args{{&y}, {{32}}, {0}};
  auto errors = interp::simulate_kernel(k, {}, args);
  EXPECT_TRUE(errors.empty()) << joined(errors);
  for (int t = 0; t < 16; ++t) EXPECT_EQ(y[t], t + 1.0);
  for (int t = 16; t < 32; ++t) EXPECT_EQ(y[t], -1.0);
  // Branching on such a value is reported.
  k.body = make_seq({k.body, make_if(make_load(U, {c(0)}) < make_float(0.0), make_store(Y, {tx}, make_float(0.0)))});
  errors = interp::simulate_kernel(k, {}, args);
  EXPECT_TRUE(mentions(errors, "thread 16 branches on a value computed from unwritten registers")) << joined(errors);
}

TEST(SimtUnsupported, UnknownCallsAreRefusedNotGuessed) {
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f32(), {c(32)});
  Kernel k;
  k.name = "unknown";
  k.params = {{Y, {}}};
  k.grid = {c(1)};
  k.block_vars = {make_var("bx")};
  k.thread_var = make_var("tx");
  k.threads = 32;
  k.body = make_store(Y, {k.thread_var}, make_call("erfinv", {make_float(0.5)}, DataType::f32()));
  std::vector<double> y(32, -1);
  interp::CallArgs args{{&y}, {{32}}, {0}};
  auto errors = interp::simulate_kernel(k, {}, args);
  ASSERT_EQ(errors.size(), 1u) << joined(errors);
  EXPECT_EQ(errors[0], "cannot simulate the call 'erfinv'");
}

}  // namespace
}  // namespace tegula
