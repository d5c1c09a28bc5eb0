// The register estimate (src/analysis/register_liveness.h) on kernels written as
// lower_fragments leaves them, one rule at a time, and on one program lowered by the
// pipeline.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/register_liveness.h"
#include "ir/printer.h"
#include "transform/pipeline.h"

namespace tegula {
namespace {

using namespace ir;
using analysis::RegisterLiveness;

Expr c(int64_t v) { return make_int(v); }

BufferRegion whole(const Buffer& b) { return {b, std::vector<Expr>(b->shape.size(), c(0)), b->shape}; }
// The first `extents` of a global tensor.
BufferRegion corner(const Buffer& b, const std::vector<int64_t>& extents) {
  std::vector<Expr> ext;
  for (int64_t e : extents) ext.push_back(c(e));
  return {b, std::vector<Expr>(extents.size(), c(0)), ext};
}
Stmt fill(const Buffer& b) { return make_tile_op("fill", {whole(b)}, {make_float(0.0)}, {}); }
Stmt copy(const BufferRegion& src, const BufferRegion& dst) { return make_tile_op("copy", {src, dst}, {}, {}); }
// for i in T.Parallel(extent): body(i)
template <typename F>
Stmt parallel(int64_t extent, F body) {
  Expr i = make_var("i");
  return make_for(i, c(0), c(extent), ForKind::Parallel, body(i));
}

struct Fragment {
  Buffer buffer;
  int64_t slots;  // of its register array
};

// A kernel as lower_fragments leaves it: its fragments, and after every other allocation
// one register array per fragment, in the same order.
Kernel at_lower_fragments(const std::vector<Buffer>& params, const std::vector<Fragment>& fragments, Stmt body) {
  Kernel k;
  k.name = "k";
  for (const Buffer& p : params) k.params.push_back({p, {}});
  k.grid = {c(1)};
  k.block_vars = {make_var("bx")};
  k.thread_var = make_var("tx");
  k.threads = 128;
  for (const Fragment& f : fragments) k.allocs.push_back(f.buffer);
  for (const Fragment& f : fragments) {
    k.allocs.push_back(make_buffer(f.buffer->name, Scope::Local, f.buffer->dtype, {c(f.slots)}));
  }
  k.body = std::move(body);
  return k;
}

Buffer fragment(const std::string& name, DataType t, std::vector<int64_t> shape) {
  std::vector<Expr> dims;
  for (int64_t d : shape) dims.push_back(c(d));
  return make_buffer(name, Scope::Fragment, t, dims);
}
Buffer global(const std::string& name, DataType t = DataType::f32()) {
  return make_buffer(name, Scope::Global, t, {c(128), c(128)});
}

RegisterLiveness analyse(const Kernel& k) {
  auto r = analysis::register_liveness(k);
  EXPECT_TRUE(r.has_value()) << to_string(k);
  return r.value_or(RegisterLiveness{});
}

// Names of the fragments live at the peak, largest first.
std::vector<std::string> live_at_peak(const RegisterLiveness& r) {
  std::vector<std::string> out;
  for (int i : r.live_at_peak) out.push_back(r.fragments[i].fragment->name);
  return out;
}

TEST(RegisterLiveness, AFragmentTakesItsSlotsTimesItsBytesOverFourRoundedUp) {
  Buffer f32 = fragment("f32", DataType::f32(), {128, 128}), f16 = fragment("f16", DataType::f16(), {128, 128});
  Buffer odd = fragment("odd", DataType::bf16(), {3}), flags = fragment("flags", DataType::boolean(), {16});
  Buffer wide = fragment("wide", DataType::i64(), {4});
  Buffer Y = global("Y");
  Stmt body = make_seq({fill(f32), fill(f16), fill(odd), fill(flags), fill(wide)});
  std::vector<Fragment> frags = {{f32, 128}, {f16, 128}, {odd, 3}, {flags, 4}, {wide, 4}};
  RegisterLiveness r = analyse(at_lower_fragments({Y}, frags, body));
  std::vector<int> registers;
  for (auto& f : r.fragments) registers.push_back(f.registers);
  EXPECT_EQ(registers, (std::vector<int>{128, 64, 2, 1, 8}));
  EXPECT_EQ(r.fragments[2].slots, 3);
  // Each is filled and never read: alive only where it is written, one at a time.
  EXPECT_EQ(r.peak, 128);
  EXPECT_EQ(live_at_peak(r), (std::vector<std::string>{"f32"}));
}

// T.copy(X, a); b = float16(a) elementwise; T.copy(b, Y) [; T.copy(a, Z)]: the conversion
// holds the larger of the two, unless a is read again after it.
TEST(RegisterLiveness, AConversionHoldsTheLargerOfItsTwoFragmentsUnlessTheSourceIsReadLater) {
  Buffer a = fragment("a", DataType::f32(), {128}), b = fragment("b", DataType::f16(), {128});
  Buffer X = global("X"), Y = global("Y", DataType::f16()), Z = global("Z");
  Stmt load = copy(corner(X, {128}), whole(a));
  Stmt convert = parallel(128, [&](Expr i) {
    return make_store(b, {i}, make_cast(DataType::f16(), make_load(a, {i})));
  });
  Stmt store_b = copy(whole(b), corner(Y, {128}));
  Stmt store_a = copy(whole(a), corner(Z, {128}));

  RegisterLiveness once = analyse(at_lower_fragments({X, Y}, {{a, 128}, {b, 128}}, make_seq({load, convert, store_b})));
  EXPECT_EQ(once.peak, 128);
  EXPECT_EQ(live_at_peak(once), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(once.peak_at.same_as(load)) << "a tie goes to the earlier statement";

  RegisterLiveness both =
      analyse(at_lower_fragments({X, Y, Z}, {{a, 128}, {b, 128}}, make_seq({load, convert, store_b, store_a})));
  EXPECT_EQ(both.peak, 192);
  EXPECT_EQ(live_at_peak(both), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(both.peak_at.same_as(convert));
}

// A nest that stores all of b at its own indices, reading none of it, makes b dead before
// it: b is then not live beside c. Stored in reverse, or under a branch, b is read too.
TEST(RegisterLiveness, AParallelNestWritesAFragmentWholeOnlyAtItsOwnIndicesUnconditionally) {
  Buffer b = fragment("b", DataType::f32(), {32}), big = fragment("big", DataType::f32(), {128});
  Buffer X = global("X"), Y = global("Y");
  auto program = [&](bool at_own_indices, bool guarded) {
    Stmt nest = parallel(32, [&](Expr i) {
      Expr index = at_own_indices ? i : c(31) - i;
      Stmt store = make_store(b, {index}, make_load(X, {c(0), i}));
      return guarded ? make_if(make_binary(BinaryOp::LT, i, c(16)), store) : store;
    });
    Stmt body = make_seq({fill(big), copy(whole(big), corner(Y, {128})), nest, copy(whole(b), corner(Y, {32}))});
    return analyse(at_lower_fragments({X, Y}, {{b, 32}, {big, 128}}, body));
  };
  RegisterLiveness whole_write = program(true, false);
  EXPECT_EQ(whole_write.peak, 128);
  EXPECT_EQ(live_at_peak(whole_write), (std::vector<std::string>{"big"}));
  for (auto [own, guarded] : {std::pair{false, false}, std::pair{true, true}}) {
    RegisterLiveness partial = program(own, guarded);
    EXPECT_EQ(partial.peak, 160) << own << guarded;
    EXPECT_EQ(live_at_peak(partial), (std::vector<std::string>{"big", "b"}));
  }
}

// r accumulates across the trips of a loop: it is live at the loop's end (the next trip
// reads it), so it is live beside q, which each trip makes and stores. Once, without the
// loop, q is alone at its peak. A while loop carries it the same way.
TEST(RegisterLiveness, ALoopCarriesWhatItsBodyReadsBeforeWritingToTheEndOfTheBody) {
  Buffer r = fragment("r", DataType::f32(), {64}), q = fragment("q", DataType::f32(), {128});
  Buffer Y = global("Y");
  Stmt accumulate = parallel(64, [&](Expr i) { return make_store(r, {i}, make_load(r, {i}) + make_float(1.0)); });
  Stmt make_q = fill(q);
  Stmt trip = make_seq({accumulate, make_q, copy(whole(q), corner(Y, {128}))});
  std::vector<Fragment> frags = {{r, 64}, {q, 128}};

  RegisterLiveness once = analyse(at_lower_fragments({Y}, frags, make_seq({fill(r), trip})));
  EXPECT_EQ(once.peak, 128);
  EXPECT_EQ(live_at_peak(once), (std::vector<std::string>{"q"}));

  Stmt serial = make_for(make_var("k"), c(0), c(4), ForKind::Serial, trip);
  Stmt whiled = make_while(make_binary(BinaryOp::LT, make_load(Y, {c(0), c(0)}), make_float(1.0)), trip);
  for (const Stmt& loop : {serial, whiled}) {
    RegisterLiveness carried = analyse(at_lower_fragments({Y}, frags, make_seq({fill(r), loop})));
    EXPECT_EQ(carried.peak, 192) << to_string(loop);
    EXPECT_EQ(live_at_peak(carried), (std::vector<std::string>{"q", "r"}));
    EXPECT_TRUE(carried.peak_at.same_as(make_q));
  }
}

// The arms of a branch are not live together. z, which both arms write whole, is dead
// before the branch; without the else, falling through keeps it live beside w.
TEST(RegisterLiveness, BeforeABranchIsLiveWhatAnyArmOrFallingThroughNeeds) {
  Buffer w = fragment("w", DataType::f32(), {80}), x = fragment("x", DataType::f32(), {96});
  Buffer y = fragment("y", DataType::f32(), {64}), z = fragment("z", DataType::f32(), {32});
  Buffer Y = global("Y");
  auto program = [&](bool with_else) {
    Stmt then_arm = make_seq({fill(x), copy(whole(x), corner(Y, {96})), fill(z)});
    Stmt else_arm = with_else ? make_seq({fill(y), copy(whole(y), corner(Y, {64})), fill(z)}) : Stmt();
    Stmt body = make_seq({fill(w), copy(whole(w), corner(Y, {80})),
                          make_if(make_binary(BinaryOp::LT, make_var("bx"), c(1)), then_arm, else_arm),
                          copy(whole(z), corner(Y, {32}))});
    return analyse(at_lower_fragments({Y}, {{w, 80}, {x, 96}, {y, 64}, {z, 32}}, body));
  };
  RegisterLiveness both_arms = program(true);
  EXPECT_EQ(both_arms.peak, 96);
  EXPECT_EQ(live_at_peak(both_arms), (std::vector<std::string>{"x"}));
  RegisterLiveness then_only = program(false);
  EXPECT_EQ(then_only.peak, 112);
  EXPECT_EQ(live_at_peak(then_only), (std::vector<std::string>{"w", "z"}));
}

// gemm(A, B, C, clear_accum=1) overwrites all of C: C is dead before it. Accumulating, it
// reads C, which is then live from the start of the kernel (beside x).
TEST(RegisterLiveness, AGemmThatClearsItsAccumulatorWritesItWhole) {
  Buffer C = fragment("C", DataType::f32(), {64, 64}), x = fragment("x", DataType::f32(), {64});
  Buffer A = make_buffer("A_shared", Scope::Shared, DataType::f16(), {c(64), c(64)});
  Buffer B = make_buffer("B_shared", Scope::Shared, DataType::f16(), {c(64), c(64)});
  Buffer Y = global("Y");
  for (int64_t clear : {1, 0}) {
    Stmt gemm = make_tile_op("gemm", {whole(A), whole(B), whole(C)}, {}, {{"clear_accum", clear}});
    Stmt body = make_seq({fill(x), copy(whole(x), corner(Y, {64})), gemm, copy(whole(C), corner(Y, {64, 64}))});
    Kernel k = at_lower_fragments({Y}, {{C, 32}, {x, 64}}, body);
    k.allocs.insert(k.allocs.begin(), {A, B});
    RegisterLiveness r = analyse(k);
    EXPECT_EQ(r.peak, clear ? 64 : 96) << "clear_accum=" << clear;
  }
}

TEST(RegisterLiveness, AKernelOfAnotherStageGivesNothing) {
  Buffer a = fragment("a", DataType::f32(), {128});
  Buffer Y = global("Y");
  Kernel k = at_lower_fragments({Y}, {{a, 128}}, make_seq({fill(a), copy(whole(a), corner(Y, {128}))}));
  Kernel before = k;
  before.allocs.pop_back();  // the register array not made yet
  EXPECT_FALSE(analysis::register_liveness(before).has_value());
  Kernel other = k;
  other.allocs.back() = make_buffer("a", Scope::Local, DataType::f16(), {c(128)});  // not a's array
  EXPECT_FALSE(analysis::register_liveness(other).has_value());
  EXPECT_TRUE(analysis::register_liveness(k).has_value());
}

// The program of tests/python/cpu/test_register_pressure.py's cast test, through the whole
// pipeline: the estimate reads its lower_fragments stage.
TEST(RegisterLiveness, ReadsTheLowerFragmentsStageOfALoweredKernel) {
  for (bool read_again : {false, true}) {
    Buffer X = make_buffer("X", Scope::Global, DataType::f32(), {c(128), c(128)});
    Buffer Y = make_buffer("Y", Scope::Global, DataType::f16(), {c(128), c(128)});
    Buffer Z = make_buffer("Z", Scope::Global, DataType::f32(), {c(128), c(128)});
    Buffer a = fragment("a", DataType::f32(), {128, 128}), b = fragment("b", DataType::f16(), {128, 128});
    std::vector<Stmt> body = {copy(whole(X), whole(a)), copy(whole(a), whole(b)), copy(whole(b), whole(Y))};
    if (read_again) body.push_back(copy(whole(a), whole(Z)));
    Kernel k;
    k.name = "cast";
    k.params = {{X, {}}, {Y, {}}, {Z, {}}};
    k.grid = {c(1)};
    k.block_vars = {make_var("bx")};
    k.thread_var = make_var("tx");
    k.threads = 128;
    k.allocs = {a, b};
    k.body = make_seq(body);
    transform::Lowered lowered = transform::lower(k, transform::Target::parse("sm_90a"), {}, false);
    const Kernel* stage = nullptr;
    for (auto& [name, s] : lowered.stages) {
      if (name == "lower_fragments") stage = &s;
    }
    ASSERT_NE(stage, nullptr);
    RegisterLiveness r = analyse(*stage);
    ASSERT_EQ(r.fragments.size(), 2u);
    EXPECT_EQ(r.fragments[0].registers, 128);  // 128 x 128 float32 over 128 threads
    EXPECT_EQ(r.fragments[1].registers, 64);   // float16: two to a register
    EXPECT_EQ(r.peak, read_again ? 192 : 128);
    EXPECT_EQ(live_at_peak(r), read_again ? (std::vector<std::string>{"a", "b"}) : (std::vector<std::string>{"a"}));
    EXPECT_FALSE(analysis::register_liveness(lowered.stages.front().second).has_value());
  }
}

}  // namespace
}  // namespace tegula
