// ir/warp_groups.h: in a kernel whose threads meet at the program's own mbarriers, the
// branches on disjoint ranges of warps become one if/else chain and a loop of only such
// branches one loop per range; anything else is left as it stands.
#include <gtest/gtest.h>

#include "ir/functor.h"
#include "ir/warp_groups.h"

namespace tegula {
namespace {

using namespace ir;

Expr c(int64_t v) { return make_int(v); }

struct Fixture {
  Expr tx = make_var("tx"), k = make_var("k");
  Buffer bar = make_buffer("bar", Scope::Shared, DataType{DataType::UInt, 64, 1}, {c(2)});
  Buffer out = make_buffer("out", Scope::Global, DataType::f32(), {c(256)});

  Stmt arrive() const { return make_evaluate(make_call("mbar_arrive", {make_load(bar, {c(0)})}, DataType::i32())); }
  Stmt wait() const {
    return make_evaluate(make_call("mbar_wait", {make_load(bar, {c(1)}), floormod(k, c(2))}, DataType::i32()));
  }
  Stmt store() const { return make_store(out, {tx}, make_cast(DataType::f32(), k)); }
  Stmt low(Stmt s) const { return make_if(tx < c(128), std::move(s)); }
  Stmt high(Stmt s) const { return make_if(make_binary(BinaryOp::GE, tx, c(128)), std::move(s)); }
  Stmt loop(std::vector<Stmt> body) const { return make_for(k, c(0), c(4), ForKind::Serial, make_seq(std::move(body))); }
};

// The loops of s, outermost first.
std::vector<const ForNode*> loops(const Stmt& s) {
  std::vector<const ForNode*> out;
  post_order(s, [&](const Stmt& x) {
    if (auto* f = x.as<ForNode>()) out.push_back(f);
  }, [](const Expr&) {});
  return out;
}

TEST(WarpGroups, ALoopOfDisjointRangesBecomesOneLoopPerRange) {
  Fixture f;
  // consumer first: it waits for what the producer of the same iteration arrives on
  Stmt body = f.loop({f.low(f.wait()), f.high(f.store()), f.high(f.arrive())});
  Stmt out = run_warp_groups_apart(body, f.tx, 256);
  auto* split = out.as<IfThenElseNode>();
  ASSERT_TRUE(split && split->else_case);
  // threads [0, 128) on one side, [128, 256) on the other, each with its own loop
  std::vector<const ForNode*> then_loops = loops(split->then_case), else_loops = loops(split->else_case);
  ASSERT_EQ(then_loops.size(), 1u);
  ASSERT_EQ(else_loops.size(), 1u);
  EXPECT_FALSE(then_loops[0]->var.same_as(else_loops[0]->var));
  EXPECT_FALSE(then_loops[0]->var.same_as(f.k));
  // the producer's two branches keep their order, in one loop
  auto* seq = else_loops[0]->body.as<SeqNode>();
  ASSERT_TRUE(seq);
  EXPECT_EQ(seq->seq.size(), 2u);
  EXPECT_TRUE(seq->seq[0].as<BufferStoreNode>());
  // no statement reads the old loop variable
  bool reads_k = false;
  post_order(out, [](const Stmt&) {}, [&](const Expr& e) { reads_k |= e.same_as(f.k); });
  EXPECT_FALSE(reads_k);
}

TEST(WarpGroups, ConsecutiveBranchesOfDisjointRangesBecomeAnIfElseChain) {
  Fixture f;
  Stmt high = f.high(f.arrive()), low = f.low(f.wait());
  Stmt out = run_warp_groups_apart(make_seq({high, low, f.store()}), f.tx, 256);
  auto* seq = out.as<SeqNode>();
  ASSERT_TRUE(seq && seq->seq.size() == 2u);
  // sorted by range: `if tx < 128` (the consumer's branch as it was) else the producer's
  auto* split = seq->seq[0].as<IfThenElseNode>();
  ASSERT_TRUE(split && split->else_case);
  EXPECT_TRUE(split->then_case.same_as(low));
  EXPECT_TRUE(split->else_case.same_as(high));
  EXPECT_TRUE(seq->seq[1].as<BufferStoreNode>());
}

TEST(WarpGroups, LeftAloneWithoutMbarriersOrDisjointWholeWarps) {
  Fixture f;
  // no mbarrier: the compiler's barriers order the ranges, one after another
  Stmt plain = f.loop({f.low(f.store()), f.high(f.store())});
  EXPECT_TRUE(run_warp_groups_apart(plain, f.tx, 256).same_as(plain));
  // overlapping ranges
  Stmt overlap = f.loop({f.low(f.wait()), make_if(f.tx < c(64), f.arrive())});
  EXPECT_TRUE(run_warp_groups_apart(overlap, f.tx, 256).same_as(overlap));
  // part of a warp
  Stmt partial = f.loop({f.low(f.wait()), make_if(make_binary(BinaryOp::EQ, f.tx, c(128)), f.arrive())});
  EXPECT_TRUE(run_warp_groups_apart(partial, f.tx, 256).same_as(partial));
  // a statement every thread runs in the loop body
  Stmt mixed = f.loop({f.low(f.wait()), f.arrive(), f.high(f.arrive())});
  EXPECT_TRUE(run_warp_groups_apart(mixed, f.tx, 256).same_as(mixed));
}

}  // namespace
}  // namespace tegula
