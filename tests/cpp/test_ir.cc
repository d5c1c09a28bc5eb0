// The IR's printer, structural hash/equality and verifier, on small kernels built by hand.
#include <gtest/gtest.h>

#include "ir/hash.h"
#include "ir/host_checks.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace tegula::ir {
namespace {

Expr c(int64_t v) { return make_int(v); }

// A tile of a 256x256 matmul-like kernel:
//   for k in pipelined(0, 8, num_stages=2):
//       T.copy(A[by*128:+128, k*32:+32] -> A_shared[0:+128, 0:+32])
//       for i in parallel(0, 128):
//           C[by*128 + i, bx] = float32(A_shared[i, 0]) + 1.0
struct TinyKernel {
  Expr bx = make_var("bx"), by = make_var("by"), tx = make_var("tx");
  Buffer A = make_buffer("A", Scope::Global, DataType::f16(), {c(256), c(256)});
  Buffer C = make_buffer("C", Scope::Global, DataType::f32(), {c(256), c(2)});
  Buffer A_shared = make_buffer("A_shared", Scope::Shared, DataType::f16(), {c(128), c(32)});

  Kernel build(int fill = 1, const std::string& loop_name = "i") const {
    Expr k = make_var("k"), i = make_var(loop_name);
    BufferRegion src{A, {by * 128, k * 32}, {c(128), c(32)}};
    BufferRegion dst{A_shared, {c(0), c(0)}, {c(128), c(32)}};
    Stmt copy = make_tile_op("copy", {src, dst}, {}, {});
    Expr value = make_cast(DataType::f32(), make_load(A_shared, {i, c(0)})) + make_float(double(fill));
    Stmt store = make_store(C, {by * 128 + i, bx}, value);
    Stmt inner = make_for(i, c(0), c(128), ForKind::Parallel, store);
    Kernel kern;
    kern.name = "tiny";
    kern.params = {{A, {}}, {C, {}}};
    kern.grid = {c(2), c(2)};
    kern.block_vars = {bx, by};
    kern.thread_var = tx;
    kern.allocs = {A_shared};
    kern.body = make_for(k, c(0), c(8), ForKind::Pipelined, make_seq({copy, inner}), 2);
    return kern;
  }
};

TEST(IrPrinter, KernelShowsHeaderAndBody) {
  std::string text = to_string(TinyKernel().build());
  EXPECT_NE(text.find("kernel tiny(A: float16[256, 256], C: float32[256, 2]):"), std::string::npos) << text;
  EXPECT_NE(text.find("grid (2, 2) -> (bx, by)"), std::string::npos) << text;
  EXPECT_NE(text.find("threads 128 -> tx"), std::string::npos) << text;
  EXPECT_NE(text.find("alloc A_shared: shared float16[128, 32]"), std::string::npos) << text;
  EXPECT_NE(text.find("for k in pipelined(0, 8, num_stages=2):"), std::string::npos) << text;
  EXPECT_NE(text.find("T.copy(A[by*128:+128, k*32:+32] -> A_shared[0:+128, 0:+32])"), std::string::npos) << text;
  EXPECT_NE(text.find("for i in parallel(0, 128):"), std::string::npos) << text;
  EXPECT_NE(text.find("C[by*128 + i, bx] = float32(A_shared[i, 0]) + 1.0"), std::string::npos) << text;
}

TEST(IrPrinter, ParenthesesFollowPrecedence) {
  Expr a = make_var("a"), b = make_var("b"), d = make_var("d");
  EXPECT_EQ(to_string((a + b) * d), "(a + b)*d");
  EXPECT_EQ(to_string(a + b * d), "a + b*d");
  EXPECT_EQ(to_string(a - (b - d)), "a - (b - d)");
  EXPECT_EQ(to_string((a - b) - d), "a - b - d");
  EXPECT_EQ(to_string(floordiv(a, c(32)) + floormod(a, c(32))), "a//32 + a%32");
  EXPECT_EQ(to_string(make_not(a < b && b < d)), "not (a < b and b < d)");
  EXPECT_EQ(to_string(make_call("exp2", {make_float(0.5)}, DataType::f32())), "exp2(0.5)");
  EXPECT_EQ(to_string(make_binary(BinaryOp::Max, a, c(-1))), "max(a, -1)");
}

TEST(IrPrinter, SpacedTextQuotesAConditionAsWritten) {
  Expr n = make_var("N"), m = make_var("M");
  EXPECT_EQ(to_spaced_string(make_binary(BinaryOp::EQ, floormod(n, c(4)), c(0))), "N % 4 == 0");
  EXPECT_EQ(to_spaced_string((n + m) * c(2) < c(100)), "(N + M) * 2 < 100");
}

TEST(HostChecks, TopLevelAssumptionsOverSizesOnly) {
  Expr n = make_var("N"), i = make_var("i");
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {n});
  auto assume = [](Expr cond) { return make_evaluate(make_call("assume", {cond}, DataType::i32())); };
  Stmt top = assume(make_binary(BinaryOp::EQ, floormod(n, c(4)), c(0)));
  Stmt reads = assume(make_float(0.0) < make_load(A, {c(0)}));                    // reads memory: a hint
  Stmt nested = make_for(i, c(0), c(4), ForKind::Serial, assume(c(8) < n));       // in a loop: a hint
  Kernel k;
  k.name = "k";
  k.params = {{A, {}}};
  k.dynamic_vars = {n};
  k.grid = {c(1)};
  k.block_vars = {make_var("bx")};
  k.thread_var = make_var("tx");
  k.body = make_seq({top, reads, nested});
  std::vector<HostCheck> checks = host_checks(k);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].text, "N % 4 == 0");
  EXPECT_EQ(failed_assumption(checks, {{n.get(), 8}}, "k"), "");
  EXPECT_EQ(failed_assumption(checks, {{n.get(), 6}}, "k"),
            "k: Assume: N % 4 == 0 does not hold for this call (N = 6): T.assume states a fact the kernel relies on");
}

TEST(IrPrinter, StatementsAndVectorAccess) {
  Buffer S = make_buffer("S", Scope::Shared, DataType::f16(), {c(64)});
  Expr x = make_var("x"), j = make_var("j");
  Stmt vec = make_store(S, {j * 8}, make_load(S, {j * 8 + 64}, {}, 8));
  Stmt body = make_let(x, j + 1, make_if(x < c(4), vec, make_sync()));
  std::string text = to_string(make_for(j, c(0), c(8), ForKind::Serial, body));
  EXPECT_EQ(text,
            "for j in serial(0, 8):\n"
            "    let x = j + 1\n"
            "    if x < 4:\n"
            "        S[j*8:+8] = S[j*8 + 64:+8]\n"
            "    else:\n"
            "        sync_threads()\n");
}

TEST(IrPrinter, WhileLoopAndItsHash) {
  Buffer x = make_buffer("x", Scope::Local, DataType::i32(), {c(1)});
  auto loop = [&](int64_t limit) {
    Expr cur = make_load(x, {c(0)}, {});
    return make_while(cur < c(limit), make_store(x, {c(0)}, cur + c(1)));
  };
  EXPECT_EQ(to_string(loop(8)),
            "while x[0] < 8:\n"
            "    x[0] = x[0] + 1\n");
  EXPECT_TRUE(structural_equal(loop(8), loop(8)));
  EXPECT_EQ(structural_hash(loop(8)), structural_hash(loop(8)));
  EXPECT_FALSE(structural_equal(loop(8), loop(9)));
  EXPECT_NE(structural_hash(loop(8)), structural_hash(loop(9)));
}

TEST(IrPrinter, DistinctVarsWithOneNameAreNumbered) {
  Buffer S = make_buffer("S", Scope::Local, DataType::i32(), {c(4), c(4)});
  Expr outer = make_var("i"), inner = make_var("i");
  Stmt s = make_for(outer, c(0), c(4), ForKind::Serial,
                    make_for(inner, c(0), c(4), ForKind::Serial, make_store(S, {outer, inner}, c(0))));
  std::string text = to_string(s);
  EXPECT_NE(text.find("for i in serial(0, 4):"), std::string::npos) << text;
  EXPECT_NE(text.find("for i_1 in serial(0, 4):"), std::string::npos) << text;
  EXPECT_NE(text.find("S[i, i_1] = 0"), std::string::npos) << text;
  EXPECT_EQ(text, to_string(s));  // deterministic
}

TEST(IrHash, SameStructureBuiltTwiceIsEqual) {
  TinyKernel t;
  Kernel a = t.build(), b = t.build();
  EXPECT_TRUE(structural_equal(a, b));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
  EXPECT_TRUE(structural_equal(a.body, b.body));
  EXPECT_EQ(structural_hash(a.body), structural_hash(b.body));
}

TEST(IrHash, DifferentConstantDiffers) {
  TinyKernel t;
  Kernel a = t.build(1), b = t.build(2);
  EXPECT_FALSE(structural_equal(a, b));
  EXPECT_NE(structural_hash(a), structural_hash(b));
  EXPECT_FALSE(structural_equal(a.body, b.body));
}

TEST(IrHash, AlphaRenamedLoopVarIsEqual) {
  TinyKernel t;
  Kernel a = t.build(1, "i"), b = t.build(1, "row");
  EXPECT_TRUE(structural_equal(a.body, b.body));
  EXPECT_EQ(structural_hash(a.body), structural_hash(b.body));
  // Separately built kernels with their own block vars still match by binding position.
  TinyKernel other;
  EXPECT_TRUE(structural_equal(a, other.build(1, "row")));
}

TEST(IrHash, FreeVarsCompareByNameAndBoundByPosition) {
  Expr n1 = make_var("n"), n2 = make_var("n"), m = make_var("m");
  EXPECT_TRUE(structural_equal(n1 + 1, n2 + 1));
  EXPECT_FALSE(structural_equal(n1 + 1, m + 1));
  Buffer S = make_buffer("S", Scope::Local, DataType::i32(), {c(4), c(4)});
  Expr i = make_var("i"), j = make_var("j");
  auto nest = [&](Expr a, Expr b, Expr x, Expr y) {
    return make_for(a, c(0), c(4), ForKind::Serial,
                    make_for(b, c(0), c(4), ForKind::Serial, make_store(S, {x, y}, c(0))));
  };
  EXPECT_TRUE(structural_equal(nest(i, j, i, j), nest(j, i, j, i)));
  EXPECT_FALSE(structural_equal(nest(i, j, i, j), nest(i, j, j, i)));  // transposed access
}

TEST(IrVerifier, AcceptsWellFormedKernel) { EXPECT_NO_THROW(verify(TinyKernel().build(), "test")); }

TEST(IrVerifier, CatchesUnboundVar) {
  TinyKernel t;
  Kernel k = t.build();
  Expr stray = make_var("stray");
  k.body = make_seq({k.body, make_store(t.C, {stray, c(0)}, make_float(0.0))});
  try {
    verify(k, "my_pass");
    FAIL() << "no error";
  } catch (const InternalError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("my_pass"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'stray'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("C[stray, 0] = 0.0"), std::string::npos) << msg;
  }
}

TEST(IrVerifier, CatchesRankMismatchAndOtherFaults) {
  TinyKernel t;
  auto with = [&](Stmt extra) {
    Kernel k = t.build();
    k.body = make_seq({k.body, extra});
    return k;
  };
  EXPECT_THROW(verify(with(make_store(t.C, {c(0)}, make_float(0.0))), "rank"), InternalError);
  EXPECT_THROW(verify(with(make_store(t.C, {c(0), c(2)}, make_float(0.0))), "range"), InternalError);
  Buffer orphan = make_buffer("orphan", Scope::Shared, DataType::f32(), {c(4)});
  EXPECT_THROW(verify(with(make_store(orphan, {c(0)}, make_float(0.0))), "alloc"), InternalError);
  Expr v = make_var("v");
  EXPECT_THROW(verify(with(make_for(v, c(0), make_float(4.0), ForKind::Serial, make_sync())), "extent"),
               InternalError);
  auto mixed = std::make_shared<BinaryNode>(DataType::i32(), BinaryOp::Add, c(1), make_int(1, DataType::i64()));
  EXPECT_THROW(verify(with(make_evaluate(Expr(mixed))), "binary"), InternalError);
  auto wrong = std::make_shared<BufferStoreNode>(t.C, std::vector<Expr>{c(0), c(0)}, c(1));
  EXPECT_THROW(verify(with(Stmt(wrong)), "store dtype"), InternalError);
}

// A T.ptr parameter and a pointer-table entry held in a let, each the address of a tensor
// (T.make_tensor): a tensor is reached only where its address is in scope.
TEST(IrVerifier, TensorAtAnAddressNeedsItsAddressInScope) {
  TinyKernel t;
  Expr ptr = make_var("a_ptr", DataType{DataType::Handle, 64, 1});
  Expr addr = make_var("X_addr", DataType::i64());
  Buffer table = make_buffer("ptrs", Scope::Global, DataType::i64(), {c(4)});
  Buffer P = make_address_buffer("P", DataType::f32(), {c(16)}, {}, ptr);
  Buffer X = make_address_buffer("X", DataType::f32(), {c(16)}, {}, addr);
  auto kernel = [&](Stmt body) {
    Kernel k = t.build();
    k.params.push_back({Buffer(), ptr});
    k.params.push_back({table, Expr()});
    k.addressed = {P, X};
    k.body = make_seq({k.body, body});
    return k;
  };
  Stmt copy = make_store(P, {c(1)}, make_load(X, {c(2)}));
  Kernel good = kernel(make_let(addr, make_load(table, {t.bx}), copy));
  EXPECT_NO_THROW(verify(good, "test"));
  std::string text = to_string(good);
  EXPECT_NE(text.find("tensor P: float32[16] at a_ptr"), std::string::npos) << text;
  EXPECT_NE(text.find("tensor X: float32[16] at X_addr"), std::string::npos) << text;
  try {
    verify(kernel(make_seq({make_let(addr, make_load(table, {t.bx}), make_sync()), copy})), "outside");
    FAIL() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the scope of its address 'X_addr'"), std::string::npos) << e.what();
  }
  // The address is part of a tensor's structure.
  Buffer Q = make_address_buffer("P", DataType::f32(), {c(16)}, {}, make_var("b_ptr", DataType{DataType::Handle, 64, 1}));
  EXPECT_FALSE(structural_equal(make_store(P, {c(0)}, make_float(1.0)), make_store(Q, {c(0)}, make_float(1.0))));
}

}  // namespace
}  // namespace tegula::ir
