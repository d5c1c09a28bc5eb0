// Vector instructions: pack_casts pairs neighbouring conversions (and only those whose
// lanes are neighbours, whose order does not matter, and that the target converts two at
// a time); every pair it can make has a CUDA spelling; the reference and the simulator
// convert a pair exactly as two single conversions, NaN, infinities, overflow and 8-bit
// saturation included; vectorize_loops turns a T.vectorized copy into vector accesses and
// keeps a loop whose iterations read each other's results.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "codegen/cuda_printer.h"
#include "codegen/cuda_spellings.h"
#include "interp/interp.h"
#include "interp/simt.h"
#include "ir/functor.h"
#include "ir/printer.h"
#include "transform/passes.h"

namespace tegula {
namespace {

using namespace ir;

Expr c(int64_t v) { return make_int(v); }

Kernel bare(const std::string& name, std::vector<Param> params, std::vector<Buffer> allocs, Stmt body,
           int threads = 32) {
  Kernel k;
  k.name = name;
  k.params = std::move(params);
  k.grid = {c(1)};
  k.block_vars = {make_var("bx")};
  k.thread_var = make_var("tx");
  k.threads = threads;
  k.allocs = std::move(allocs);
  k.body = std::move(body);
  return k;
}

transform::PassContext context(int sm) {
  transform::PassContext ctx;
  ctx.target = transform::Target::parse("sm_" + std::to_string(sm));
  return ctx;
}

// The stores of a kernel's body in order, each as (lanes of its value, its first index).
std::vector<std::pair<int, int64_t>> stores_into(const Kernel& k, const Buffer& b) {
  std::vector<std::pair<int, int64_t>> out;
  post_order(k.body, [&](const Stmt& s) {
    auto* st = s.as<BufferStoreNode>();
    if (st && st->buffer == b) out.push_back({st->value.dtype().lanes, *as_const_int(st->indices[0])});
  });
  return out;
}

// The lanes of each store into global b, in order.
std::vector<int> stores_into_global(const Kernel& k, const Buffer& b) {
  std::vector<int> out;
  post_order(k.body, [&](const Stmt& s) {
    auto* st = s.as<BufferStoreNode>();
    if (st && st->buffer == b) out.push_back(st->value.dtype().lanes);
  });
  return out;
}

// r[i] = T(s[i]) for each i of `which`, in order.
Kernel conversions(DataType from, DataType to, const std::vector<int64_t>& which, Buffer* r_out) {
  Buffer s = make_buffer("s", Scope::Local, from, {c(8)});
  Buffer r = make_buffer("r", Scope::Local, to, {c(8)});
  std::vector<Stmt> body;
  for (int64_t i : which) body.push_back(make_store(r, {c(i)}, make_cast(to, make_load(s, {c(i)}))));
  *r_out = r;
  return bare("conv", {}, {s, r}, make_seq(body));
}

TEST(PackCasts, NeighbouringConversionsPairAndAnOddOneStaysAlone) {
  Buffer r;
  Kernel k = conversions(DataType::f32(), DataType::f16(), {0, 1, 2, 3, 4}, &r);
  auto ctx = context(90);
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r), (std::vector<std::pair<int, int64_t>>{{2, 0}, {2, 2}, {1, 4}})) << to_string(k);
  std::string code = codegen::print_cuda(k, ctx.target).code;
  EXPECT_NE(code.find("*reinterpret_cast<__half2*>(&r[2]) = __float22half2_rn(*reinterpret_cast<const float2*>(&s[2]));"),
            std::string::npos) << code;
  EXPECT_NE(code.find("r[4] = cast<half_t>(s[4]);"), std::string::npos) << code;
  EXPECT_NE(code.find("half_t r[8] __attribute__((aligned(16)));"), std::string::npos) << code;
}

TEST(PackCasts, OnlyAlignedNeighboursOfTypesTheTargetConvertsInPairsPair) {
  Buffer r;
  // r[1], r[2]: not a pair's first element.
  Kernel k = conversions(DataType::f32(), DataType::f16(), {1, 2}, &r);
  auto ctx = context(90);
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r), (std::vector<std::pair<int, int64_t>>{{1, 1}, {1, 2}}));
  // r[2], r[0]: not neighbours in order.
  k = conversions(DataType::f32(), DataType::f16(), {2, 0}, &r);
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r), (std::vector<std::pair<int, int64_t>>{{1, 2}, {1, 0}}));
  // 8-bit floats: from sm_89 only.
  DataType e4m3{DataType::Float8E4M3, 8, 1};
  for (int sm : {80, 89}) {
    k = conversions(DataType::f32(), e4m3, {0, 1}, &r);
    auto cx = context(sm);
    transform::pack_casts(k, cx);
    EXPECT_EQ(stores_into(k, r).front().first, sm >= 89 ? 2 : 1) << sm;
  }
  // float32 -> int32 has no pair instruction.
  k = conversions(DataType::f32(), DataType::i32(), {0, 1}, &r);
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r).front().first, 1);
  // Disabled with the vectoriser.
  k = conversions(DataType::f32(), DataType::f16(), {0, 1}, &r);
  ctx.options.disable_vectorize = true;
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r).front().first, 1);
}

TEST(PackCasts, ComputedValuesPairThroughRegistersUnlessTheSecondReadsTheFirst) {
  Buffer s = make_buffer("s", Scope::Local, DataType::f32(), {c(2)});
  Buffer r = make_buffer("r", Scope::Local, DataType::f16(), {c(2)});
  auto twice = [&](int64_t i) { return make_load(s, {c(i)}) * make_float(2.0); };
  Kernel k = bare("conv", {}, {s, r},
                  make_seq({make_store(r, {c(0)}, make_cast(DataType::f16(), twice(0))),
                            make_store(r, {c(1)}, make_cast(DataType::f16(), twice(1)))}));
  auto ctx = context(80);
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r), (std::vector<std::pair<int, int64_t>>{{2, 0}})) << to_string(k);
  ASSERT_EQ(k.allocs.size(), 3u);  // the pair of float registers the values go through
  // r[1] = T(r[0] + s[1]): reads the first conversion's result.
  Expr chained = make_cast(DataType::f32(), make_load(r, {c(0)})) + make_load(s, {c(1)});
  k = bare("conv", {}, {s, r},
           make_seq({make_store(r, {c(0)}, make_cast(DataType::f16(), twice(0))),
                     make_store(r, {c(1)}, make_cast(DataType::f16(), chained))}));
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r), (std::vector<std::pair<int, int64_t>>{{1, 0}, {1, 1}})) << to_string(k);
}

// r[c] = reinterpret<f16>(uint16(lo(x))); r[c + 1] = reinterpret<f16>(uint16(hi(x))) for
// each (c, x, lo, hi) of `halves`, lo / hi the expression of x each half reads.
const DataType kU16{DataType::UInt, 16, 1}, kU32{DataType::UInt, 32, 1};
Expr bits16(const Expr& v) { return make_call("reinterpret", {make_cast(kU16, v)}, DataType::f16()); }
Expr u32(int64_t v) { return make_int(v, kU32); }

TEST(PackCasts, TwoHalvesOfOneWordAreStoredAsTheWord) {
  Buffer W = make_buffer("W", Scope::Global, kU32, {c(4)});
  Buffer r = make_buffer("r", Scope::Local, DataType::f16(), {c(8)});
  auto word = [&](int64_t i) { return make_load(W, {c(i)}); };
  auto lo = [](Expr x) { return make_binary(BinaryOp::BitAnd, x, u32(0xffff)); };
  auto hi = [](Expr x) { return make_binary(BinaryOp::Shr, x, u32(16)); };
  auto pair = [&](int64_t at, Expr first, Expr second) {
    return std::vector<Stmt>{make_store(r, {c(at)}, bits16(first)), make_store(r, {c(at + 1)}, bits16(second))};
  };
  auto kernel = [&](std::vector<std::vector<Stmt>> pairs) {
    std::vector<Stmt> body;
    for (auto& p : pairs) body.insert(body.end(), p.begin(), p.end());
    return bare("halves", {{W, {}}}, {r}, make_seq(body));
  };
  auto ctx = context(90);
  // x & 0xffff then x >> 16, and x >> 0 then (x >> 16) & 0xffff: one 32-bit store each.
  Kernel k = kernel({pair(0, lo(word(0)), hi(word(0))),
                     pair(2, make_binary(BinaryOp::Shr, word(1), u32(0)), lo(hi(word(1))))});
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r), (std::vector<std::pair<int, int64_t>>{{2, 0}, {2, 2}})) << to_string(k);
  std::string code = codegen::print_cuda(k, ctx.target).code;
  EXPECT_NE(code.find("*reinterpret_cast<unsigned*>(&r[0]) = W[0];"), std::string::npos) << code;
  // Not the halves of one word: the high half first, two words, an odd first register, a
  // shift other than 16, a conversion of the integer rather than its bits.
  for (auto pairs : std::vector<std::vector<Stmt>>{
           pair(0, hi(word(0)), lo(word(0))), pair(0, lo(word(0)), hi(word(1))), pair(1, lo(word(0)), hi(word(0))),
           pair(0, lo(word(0)), make_binary(BinaryOp::Shr, word(0), u32(8))),
           {make_store(r, {c(0)}, make_cast(DataType::f16(), make_cast(kU16, word(0)))),
            make_store(r, {c(1)}, make_cast(DataType::f16(), make_cast(kU16, hi(word(0)))))}}) {
    k = kernel({pairs});
    transform::pack_casts(k, ctx);
    EXPECT_EQ(stores_into(k, r).front().first, 1) << to_string(k);
  }
  // A word read from r itself: the first half's store would change it.
  Expr from_r = make_call("reinterpret", {make_load(r, {c(4)}, {}, 2)}, kU32);
  k = kernel({pair(0, from_r, hi(from_r))});
  transform::pack_casts(k, ctx);
  EXPECT_EQ(stores_into(k, r).front().first, 1) << to_string(k);
  // The same value bound around each half (partitioning repeats a loop's `let` per
  // element): one binding, one store.
  Expr v0 = make_var("v", kU32), v1 = make_var("v", kU32);
  k = bare("halves", {{W, {}}}, {r},
           make_seq({make_let(v0, word(2), make_store(r, {c(4)}, bits16(lo(v0)))),
                     make_let(v1, word(2), make_store(r, {c(5)}, bits16(hi(v1))))}));
  transform::pack_casts(k, ctx);
  auto* let = k.body.as<SeqNode>() ? k.body.as<SeqNode>()->seq.front().as<LetStmtNode>() : k.body.as<LetStmtNode>();
  ASSERT_TRUE(let) << to_string(k);
  EXPECT_EQ(stores_into(k, r), (std::vector<std::pair<int, int64_t>>{{2, 4}})) << to_string(k);
}

// The stored word, run by the reference and the simulator, reads back as its two halves:
// Y[2 i], Y[2 i + 1] = the float16 values of W[i]'s bits 0..15 and 16..31 (NaN, infinity,
// negative zero and subnormals among them).
TEST(PackCasts, InterpretersReadAStoredWordAsItsTwoHalves) {
  std::vector<double> words = {double(0x3C00C000u), double(0x7E007C00u), double(0x80000001u),
                               double((0x12345678u & 0x000F000Fu) ^ 0x64086408u)};
  const int64_t n = int64_t(words.size());
  Buffer W = make_buffer("W", Scope::Global, kU32, {c(n)});
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f16(), {c(2 * n)});
  Buffer r = make_buffer("r", Scope::Local, DataType::f16(), {c(2 * n)});
  std::vector<Stmt> body;
  for (int64_t i = 0; i < n; ++i) {
    Expr w = make_load(W, {c(i)});
    body.push_back(make_store(r, {c(2 * i)}, bits16(make_binary(BinaryOp::BitAnd, w, u32(0xffff)))));
    body.push_back(make_store(r, {c(2 * i + 1)}, bits16(make_binary(BinaryOp::Shr, w, u32(16)))));
  }
  for (int64_t i = 0; i < 2 * n; ++i) body.push_back(make_store(Y, {c(i)}, make_load(r, {c(i)})));
  Kernel k = bare("halves", {{W, {}}, {Y, {}}}, {r}, make_seq(body), 1);
  auto ctx = context(90);
  transform::pack_casts(k, ctx);
  ASSERT_EQ(stores_into(k, r).front().first, 2) << to_string(k);
  double inf = std::numeric_limits<double>::infinity();
  // 0xC000 -2, 0x3C00 1, 0x7C00 inf, 0x7E00 NaN, 0x0001 2^-24, 0x8000 -0, 0x6400 1024, 0x640C 1036
  std::vector<double> want = {-2.0, 1.0, inf, std::nan(""), std::ldexp(1.0, -24), -0.0, 1024.0, 1036.0};
  for (int run : {0, 1}) {
    std::vector<double> y(2 * n, -12345.0);
    interp::CallArgs args{{&words, &y}, {{n}, {2 * n}}, {0, 0}};
    if (run == 0) {
      interp::run_reference(k, args);
    } else {
      auto errors = interp::simulate_kernel(k, {}, args);
      ASSERT_TRUE(errors.empty()) << errors.front();
    }
    for (int64_t i = 0; i < 2 * n; ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(y[i])) << i << (run ? " simulate" : " reference");
      } else {
        EXPECT_EQ(y[i], want[i]) << i << (run ? " simulate" : " reference");
        EXPECT_EQ(std::signbit(y[i]), std::signbit(want[i])) << i;
      }
    }
  }
}

TEST(PackCasts, EveryPairThePassMakesHasACudaSpelling) {
  std::vector<DataType> types = {DataType::f32(), DataType::f16(), DataType::bf16(), {DataType::Float, 64, 1},
                                 {DataType::Float8E4M3, 8, 1}, {DataType::Float8E5M2, 8, 1},
                                 {DataType::Float8E8M0, 8, 1}, DataType::i32(), {DataType::Int, 8, 1}};
  int pairs = 0;
  for (int sm : {80, 89, 90, 100}) {
    for (DataType from : types) {
      for (DataType to : types) {
        if (!transform::converts_pairs(from, to, sm)) continue;
        codegen::PairConversion pc;
        EXPECT_TRUE(codegen::pair_conversion(from, to, &pc)) << from.name() << " -> " << to.name();
        ++pairs;
      }
    }
  }
  EXPECT_EQ(pairs, 4 + 12 * 3);  // f32 <-> f16 / bf16 everywhere; the 8-bit pairs from sm_89
}

// X -> s (float32 registers) -> r[0:+2], r[2:+2], ... = T(s[..:+2]) -> Y, run by the
// reference and the simulator, against a scalar conversion of each element.
void expect_pairs_convert_as_singles(DataType to) {
  const int64_t n = 16;
  Buffer X = make_buffer("X", Scope::Global, DataType::f32(), {c(n)});
  Buffer Y = make_buffer("Y", Scope::Global, to, {c(n)});
  Buffer s = make_buffer("s", Scope::Local, DataType::f32(), {c(n)});
  Buffer r = make_buffer("r", Scope::Local, to, {c(n)});
  std::vector<Stmt> body;
  for (int64_t i = 0; i < n; ++i) body.push_back(make_store(s, {c(i)}, make_load(X, {c(i)})));
  for (int64_t i = 0; i < n; i += 2) {
    body.push_back(make_store(r, {c(i)}, make_cast(to.with_lanes(2), make_load(s, {c(i)}, {}, 2))));
  }
  for (int64_t i = 0; i < n; ++i) body.push_back(make_store(Y, {c(i)}, make_load(r, {c(i)})));
  Kernel k = bare("pairs", {{X, {}}, {Y, {}}}, {s, r}, make_seq(body), 1);
  double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x = {0.0, -0.0, nan, inf, -inf, 1e9, -70000.0, 65520.0,
                           448.0, 464.0, 465.0, 0.1, -3.14159, 1.0 / 1024, 1e-7, 57344.0};
  for (auto run : {0, 1}) {
    std::vector<double> y(n, -12345.0);
    interp::CallArgs args{{&x, &y}, {{n}, {n}}, {0, 0}};
    if (run == 0) {
      interp::run_reference(k, args);
    } else {
      auto errors = interp::simulate_kernel(k, {}, args);
      ASSERT_TRUE(errors.empty()) << errors.front();
    }
    for (int64_t i = 0; i < n; ++i) {
      double want = interp::cast_to_dtype(DataType::f32(), to, x[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << to.name() << " " << i << (run ? " simulate" : " reference");
      } else {
        EXPECT_EQ(y[i], want) << to.name() << " element " << i << " (" << x[i] << ")" << (run ? " simulate" : " reference");
        EXPECT_EQ(std::signbit(y[i]), std::signbit(want)) << i;
      }
    }
  }
}

TEST(PairConversions, InterpretersConvertEachLaneAsAlone) {
  expect_pairs_convert_as_singles(DataType::f16());
  expect_pairs_convert_as_singles(DataType::bf16());
  expect_pairs_convert_as_singles({DataType::Float8E4M3, 8, 1});
  expect_pairs_convert_as_singles({DataType::Float8E5M2, 8, 1});
}

// for i in T.vectorized(8): B[tx * 8 + i] = A[tx * 8 + i] (+ B[tx * 8 + i - shift] when shift).
Kernel vectorized_copy(int shift, Buffer* B_out) {
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(128)});
  Buffer B = make_buffer("B", Scope::Global, DataType::f32(), {c(128)});
  Expr i = make_var("i");
  Kernel k = bare("vcopy", {{A, {}}, {B, {}}}, {}, Stmt(), 16);
  Expr at = k.thread_var * 8 + i;
  Expr value = make_load(A, {at});
  if (shift) value = value + make_load(B, {at + make_int(-shift)});
  k.body = make_for(i, c(shift), c(8 - shift), ForKind::Vectorized, make_store(B, {at}, value));
  *B_out = B;
  return k;
}

TEST(VectorizeLoops, ACopyBecomesVectorsAndADependentLoopStaysALoop) {
  Buffer B;
  Kernel k = vectorized_copy(0, &B);
  auto ctx = context(90);
  transform::vectorize_loops(k, ctx);
  // Groups of 4 (16 bytes): two turns of an unrolled loop, one float4 each.
  auto* groups = k.body.as<ForNode>();
  ASSERT_TRUE(groups) << to_string(k);
  EXPECT_TRUE(is_const_int(groups->extent, 2) && groups->for_kind == ForKind::Unrolled) << to_string(k);
  EXPECT_EQ(stores_into_global(k, B), (std::vector<int>{4})) << to_string(k);
  EXPECT_NE(codegen::print_cuda(k, ctx.target).code.find("*reinterpret_cast<float4*>(&B["), std::string::npos);
  // B[j] = A[j] + B[j - 4] for j = 4..7: a lane reads what an earlier one wrote.
  k = vectorized_copy(4, &B);
  transform::vectorize_loops(k, ctx);
  auto* loop = k.body.as<ForNode>();
  ASSERT_TRUE(loop) << to_string(k);
  EXPECT_EQ(loop->for_kind, ForKind::Unrolled);
  EXPECT_EQ(stores_into_global(k, B), (std::vector<int>{1})) << to_string(k);
}

// Y[0:+2] = half2(X[0:+2]) and Y[2:+2] = half2(X[2:+2]) staged as the vectoriser stages
// them: s = X; t[0:+2] = half2(s[0:+2]); Y[0:+2] = t[0:+2]; the second under a test.
// `extra`: a statement appended at the end (one that reads t, to keep it).
Kernel staged_conversions(Buffer* t_out, Buffer* Y_out, Stmt (*extra)(const Buffer& t) = nullptr) {
  Buffer X = make_buffer("X", Scope::Global, DataType::f32(), {c(4)});
  Buffer Y = make_buffer("Y", Scope::Global, DataType::f16(), {c(4)});
  Buffer s = make_buffer("s", Scope::Local, DataType::f32(), {c(4)});
  Buffer t = make_buffer("t", Scope::Local, DataType::f16(), {c(2)});
  Buffer t2 = make_buffer("t2", Scope::Local, DataType::f16(), {c(2)});
  Kernel k = bare("staged", {{X, {}}, {Y, {}}}, {s, t, t2}, Stmt(), 1);
  auto half2 = [&](int64_t i) { return make_cast(DataType::f16().with_lanes(2), make_load(s, {c(i)}, {}, 2)); };
  std::vector<Stmt> body;
  for (int64_t i = 0; i < 4; ++i) body.push_back(make_store(s, {c(i)}, make_load(X, {c(i)})));
  body.push_back(make_store(t, {c(0)}, half2(0)));
  body.push_back(make_store(Y, {c(0)}, make_load(t, {c(0)}, {}, 2)));
  body.push_back(make_store(t2, {c(0)}, half2(2)));
  body.push_back(make_if(k.thread_var < c(1), make_store(Y, {c(2)}, make_load(t2, {c(0)}, {}, 2))));
  if (extra) body.push_back(extra(t));
  k.body = make_seq(body);
  *t_out = t;
  *Y_out = Y;
  return k;
}

bool declares(const Kernel& k, const Buffer& b) {
  for (const Buffer& a : k.allocs) {
    if (a == b) return true;
  }
  return false;
}

TEST(ForwardLocals, AStagedPairConversionIsStoredStraightIntoMemory) {
  Buffer t, Y;
  Kernel k = staged_conversions(&t, &Y);
  auto ctx = context(90);
  transform::forward_locals(k, ctx);
  EXPECT_TRUE(stores_into(k, t).empty()) << to_string(k);
  EXPECT_EQ(stores_into_global(k, Y), (std::vector<int>{2, 2})) << to_string(k);
  EXPECT_FALSE(declares(k, t)) << to_string(k);
  EXPECT_EQ(k.allocs.size(), 1u) << to_string(k);  // s alone
  std::string code = codegen::print_cuda(k, ctx.target).code;
  EXPECT_NE(code.find("*reinterpret_cast<__half2*>(&Y[0]) = __float22half2_rn(*reinterpret_cast<const float2*>(&s[0]));"),
            std::string::npos) << code;
  EXPECT_NE(code.find("if ((tx < 1)) {"), std::string::npos) << code;  // the test stays
  // The simulator stores what the staged form stores, the reference being the meaning.
  std::vector<double> x = {1.5, -0.1, 70000.0, std::numeric_limits<double>::quiet_NaN()};
  std::vector<double> y(4, -1.0);
  interp::CallArgs args{{&x, &y}, {{4}, {4}}, {0, 0}};
  auto errors = interp::simulate_kernel(k, {}, args);
  ASSERT_TRUE(errors.empty()) << errors.front();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i], interp::cast_to_dtype(DataType::f32(), DataType::f16(), x[i])) << i;
  EXPECT_TRUE(std::isnan(y[3]));
}

TEST(ForwardLocals, AnArrayReadElsewhereStaysStaged) {
  Buffer t, Y;
  // t read again after its store: the staging stays (t2 is still forwarded).
  Kernel k = staged_conversions(&t, &Y, [](const Buffer& t) {
    return make_store(t, {c(1)}, make_load(t, {c(0)}));
  });
  auto ctx = context(90);
  transform::forward_locals(k, ctx);
  EXPECT_EQ(stores_into(k, t), (std::vector<std::pair<int, int64_t>>{{2, 0}, {1, 1}})) << to_string(k);
  EXPECT_TRUE(declares(k, t));
  EXPECT_EQ(stores_into_global(k, Y), (std::vector<int>{2, 2})) << to_string(k);
  // Disabled with the vectoriser.
  k = staged_conversions(&t, &Y);
  ctx.options.disable_vectorize = true;
  transform::forward_locals(k, ctx);
  EXPECT_EQ(stores_into(k, t).size(), 1u);
}

// B[tx * 4:+4] = A[tx * 4:+4] staged as a vector load into vld, element copies into vst,
// and a vector store of vst; `scaled`: the copies double each element instead.
Kernel staged_copy(bool scaled, Buffer* vst_out, Buffer* B_out) {
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(64)});
  Buffer B = make_buffer("B", Scope::Global, DataType::f32(), {c(64)});
  Buffer vld = make_buffer("vld", Scope::Local, DataType::f32(), {c(4)});
  Buffer vst = make_buffer("vst", Scope::Local, DataType::f32(), {c(4)});
  Kernel k = bare("staged_copy", {{A, {}}, {B, {}}}, {vld, vst}, Stmt(), 16);
  Expr at = k.thread_var * 4;
  std::vector<Stmt> body = {make_store(vld, {c(0)}, make_load(A, {at}, {}, 4))};
  for (int64_t i = 0; i < 4; ++i) {
    Expr v = make_load(vld, {c(i)});
    body.push_back(make_store(vst, {c(i)}, scaled ? v * make_float(2.0) : v));
  }
  body.push_back(make_store(B, {at}, make_load(vst, {c(0)}, {}, 4)));
  k.body = make_seq(body);
  *vst_out = vst;
  *B_out = B;
  return k;
}

TEST(ForwardLocals, AStagedCopyBecomesOneVectorCopyAndAComputedOneStays) {
  Buffer vst, B;
  Kernel k = staged_copy(false, &vst, &B);
  auto ctx = context(90);
  transform::forward_locals(k, ctx);
  EXPECT_TRUE(k.allocs.empty()) << to_string(k);
  EXPECT_EQ(stores_into_global(k, B), (std::vector<int>{4})) << to_string(k);
  std::string code = codegen::print_cuda(k, ctx.target).code;
  EXPECT_NE(code.find("*reinterpret_cast<float4*>(&B[(tx * 4)]) = *reinterpret_cast<const float4*>(&A[(tx * 4)]);"),
            std::string::npos) << code;
  std::vector<double> a(64), b(64, -1.0);
  for (int i = 0; i < 64; ++i) a[i] = i * 0.5 - 7;
  interp::CallArgs args{{&a, &b}, {{64}, {64}}, {0, 0}};
  auto errors = interp::simulate_kernel(k, {}, args);
  ASSERT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(a, b);
  // vst[i] = 2 * vld[i]: not a copy, nothing changes.
  k = staged_copy(true, &vst, &B);
  transform::forward_locals(k, ctx);
  EXPECT_EQ(k.allocs.size(), 2u) << to_string(k);
  EXPECT_EQ(stores_into(k, vst).size(), 4u) << to_string(k);
}

// C[tx * 2:+2] = acc[2:+2] staged as the vectoriser stages a fragment's store: element
// copies into vst, then a vector store of vst. `odd`: from acc[1:+2], not a whole vector.
Kernel staged_fragment_store(bool odd, Buffer* vst_out, Buffer* C_out) {
  Buffer X = make_buffer("X", Scope::Global, DataType::f32(), {c(4)});
  Buffer C = make_buffer("C", Scope::Global, DataType::f32(), {c(32)});
  Buffer acc = make_buffer("acc", Scope::Local, DataType::f32(), {c(4)});
  Buffer vst = make_buffer("vst", Scope::Local, DataType::f32(), {c(2)});
  Kernel k = bare("fragment_store", {{X, {}}, {C, {}}}, {acc, vst}, Stmt(), 16);
  std::vector<Stmt> body;
  for (int64_t i = 0; i < 4; ++i) body.push_back(make_store(acc, {c(i)}, make_load(X, {c(i)}) + make_float(1.0)));
  int64_t d = odd ? 1 : 2;
  for (int64_t i = 0; i < 2; ++i) body.push_back(make_store(vst, {c(i)}, make_load(acc, {c(d + i)})));
  body.push_back(make_store(C, {k.thread_var * 2}, make_load(vst, {c(0)}, {}, 2)));
  k.body = make_seq(body);
  *vst_out = vst;
  *C_out = C;
  return k;
}

TEST(ForwardLocals, AFragmentStoredThroughCopiesIsStoredFromItsOwnRegisters) {
  Buffer vst, C;
  Kernel k = staged_fragment_store(false, &vst, &C);
  auto ctx = context(90);
  transform::forward_locals(k, ctx);
  EXPECT_TRUE(stores_into(k, vst).empty()) << to_string(k);
  EXPECT_EQ(k.allocs.size(), 1u) << to_string(k);
  std::string code = codegen::print_cuda(k, ctx.target).code;
  EXPECT_NE(code.find("*reinterpret_cast<float2*>(&C[(tx * 2)]) = *reinterpret_cast<const float2*>(&acc[2]);"),
            std::string::npos) << code;
  EXPECT_NE(code.find("float acc[4] __attribute__((aligned(16)));"), std::string::npos) << code;
  std::vector<double> x = {1, 2, 3, 4}, out(32, -1.0);
  interp::CallArgs args{{&x, &out}, {{4}, {32}}, {0, 0}};
  auto errors = interp::simulate_kernel(k, {}, args);
  ASSERT_TRUE(errors.empty()) << errors.front();
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(out[2 * t], 4.0) << t;
    EXPECT_EQ(out[2 * t + 1], 5.0) << t;
  }
  // acc[1:+2] is no aligned vector of acc: the copies stay.
  k = staged_fragment_store(true, &vst, &C);
  transform::forward_locals(k, ctx);
  EXPECT_EQ(stores_into(k, vst).size(), 2u) << to_string(k);
}

}  // namespace
}  // namespace tegula
