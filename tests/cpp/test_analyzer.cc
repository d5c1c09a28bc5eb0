// ir::Analyzer: ranges, divisibility, and the simplifier, the last also as a randomized
// property: simplifying never changes an expression's value inside the declared ranges.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ir/analyzer.h"
#include "ir/hash.h"
#include "ir/printer.h"

namespace tegula::ir {
namespace {

Expr c(int64_t v) { return make_int(v); }

TEST(AnalyzerBound, LinearExpressionsOfBoundVars) {
  Analyzer an;
  Expr tx = make_var("tx"), bx = make_var("bx"), free = make_var("n");
  an.bind(tx, 0, 512);
  an.bind(bx, 2, 10);
  EXPECT_TRUE(an.has_bound(tx));
  EXPECT_FALSE(an.has_bound(free));

  Interval a = an.bound(tx * 8 + 3);
  EXPECT_EQ(a.lo, 3);
  EXPECT_EQ(a.hi, 511 * 8 + 3);
  Interval b = an.bound(bx * 128 - tx);  // [256 - 511, 9*128 - 0]
  EXPECT_EQ(b.lo, 2 * 128 - 511);
  EXPECT_EQ(b.hi, 9 * 128);
  Interval neg = an.bound(tx * -2);
  EXPECT_EQ(neg.lo, -1022);
  EXPECT_EQ(neg.hi, 0);
  Interval q = an.bound(floordiv(tx, c(32)));
  EXPECT_EQ(q.lo, 0);
  EXPECT_EQ(q.hi, 15);
  Interval r = an.bound(floormod(tx + bx, c(32)));
  EXPECT_EQ(r.lo, 0);
  EXPECT_EQ(r.hi, 31);
  Interval small = an.bound(floormod(bx, c(32)));  // below the divisor: the value itself
  EXPECT_EQ(small.lo, 2);
  EXPECT_EQ(small.hi, 9);
  Interval mn = an.bound(make_binary(BinaryOp::Min, tx, bx));
  EXPECT_EQ(mn.lo, 0);
  EXPECT_EQ(mn.hi, 9);
  Interval cmp = an.bound(tx < bx);
  EXPECT_EQ(cmp.lo, 0);
  EXPECT_EQ(cmp.hi, 1);

  // A variable without a range makes any sum with it unbounded.
  Interval u = an.bound(tx + free);
  EXPECT_LE(u.lo, -(int64_t(1) << 40));
  EXPECT_GE(u.hi, int64_t(1) << 40);
  EXPECT_TRUE(an.bound(c(7)).is_const());
}

TEST(AnalyzerSimplify, FragmentCoordinateFormulas) {
  // The example of analyzer.h: with tx in [0, 512), tx*8 + 3 < 4096.
  Analyzer an;
  Expr tx = make_var("tx");
  an.bind(tx, 0, 512);
  Expr div = an.simplify(floordiv(tx * 8 + 3, c(4096)));
  EXPECT_TRUE(is_const_int(div, 0)) << to_string(div);
  Expr mod = an.simplify(floormod(tx * 8 + 3, c(4096)));
  EXPECT_TRUE(structural_equal(mod, tx * 8 + 3)) << to_string(mod);

  // One past the range: the quotient is no longer constant.
  Analyzer wide;
  wide.bind(tx, 0, 513);
  EXPECT_EQ(as_const_int(wide.simplify(floordiv(tx * 8 + 3, c(4096)))), nullptr);

  // Multiples of the divisor move into the quotient: (tx*8 + 4096*5 + 3) // 4096 == 5.
  Expr shifted = an.simplify(floordiv(tx * 8 + 4096 * 5 + 3, c(4096)));
  EXPECT_TRUE(is_const_int(shifted, 5)) << to_string(shifted);
  Expr peeled = an.simplify(floormod(tx * 4096 + 7, c(4096)));
  EXPECT_TRUE(is_const_int(peeled, 7)) << to_string(peeled);
}

TEST(AnalyzerSimplify, ComparisonsDecidedByBoundsFold) {
  Analyzer an;
  Expr tx = make_var("tx"), n = make_var("n");
  an.bind(tx, 0, 128);
  auto folds_to = [&](const Expr& e, int64_t v) {
    Expr s = an.simplify(e);
    const int64_t* k = as_const_int(s);
    EXPECT_TRUE(k && *k == v) << to_string(e) << " simplified to " << to_string(s);
    if (k) {
      EXPECT_TRUE(s.dtype().is_bool()) << to_string(s);
    }
  };
  folds_to(tx < c(128), 1);
  folds_to(tx < c(0), 0);
  folds_to(make_binary(BinaryOp::GE, tx * 2, c(256)), 0);
  folds_to(make_binary(BinaryOp::LE, tx, c(127)), 1);
  folds_to(make_binary(BinaryOp::GT, tx + 1, c(0)), 1);
  folds_to(tx < c(200) && make_binary(BinaryOp::GE, tx, c(0)), 1);
  // Not decided by the bounds: kept as a comparison.
  Expr open = an.simplify(tx < c(100));
  EXPECT_EQ(as_const_int(open), nullptr) << to_string(open);
  EXPECT_EQ(as_const_int(an.simplify(tx < n)), nullptr);
  EXPECT_TRUE(an.can_prove(tx < c(128)));
  EXPECT_FALSE(an.can_prove(tx < c(127)));
  EXPECT_FALSE(an.can_prove(tx < n));
}

TEST(AnalyzerSimplify, LogicWithOneConstantSideFolds) {
  // `x and False` is False and `x and True` is x, whatever x is; mutate_Binary has branches
  // for exactly this, but is_comparison() counts And/Or as comparisons, so the comparison
  // branch returns first and the And/Or folds are never reached.
  Analyzer an;
  Expr tx = make_var("tx");
  an.bind(tx, 0, 128);
  Expr open = tx < c(100);
  EXPECT_TRUE(is_const_int(an.simplify(open && tx < c(0)), 0));
  EXPECT_TRUE(structural_equal(an.simplify(open && tx < c(128)), open));
  EXPECT_TRUE(is_const_int(an.simplify(make_binary(BinaryOp::Or, open, tx < c(128))), 1));
  EXPECT_TRUE(structural_equal(an.simplify(make_binary(BinaryOp::Or, open, tx < c(0))), open));
}

TEST(AnalyzerKnownDivisor, ProductsAndSums) {
  Analyzer an;
  Expr tx = make_var("tx"), bx = make_var("bx");
  EXPECT_EQ(an.known_divisor(c(12)), 12);
  EXPECT_EQ(an.known_divisor(c(-12)), 12);
  EXPECT_EQ(an.known_divisor(c(0)), 0);
  EXPECT_EQ(an.known_divisor(tx), 1);
  EXPECT_EQ(an.known_divisor(tx * 8), 8);
  EXPECT_EQ(an.known_divisor(tx * 8 + bx * 12), 4);
  EXPECT_EQ(an.known_divisor(tx * 8 + 3), 1);
  EXPECT_EQ(an.known_divisor(tx * 8 - c(16)), 8);
  EXPECT_EQ(an.known_divisor((tx * 4) * 6), 24);
  EXPECT_EQ(an.known_divisor(make_select(tx < bx, tx * 6, bx * 4)), 2);
  EXPECT_EQ(an.known_divisor(make_cast(DataType::i64(), tx * 16)), 16);
}

// ------------------------------------------------------------------ randomized property

// Random integer expressions over a few variables with small ranges. Subexpressions are
// reused, so the simplifier also meets one node in several places, as in layout formulas.
class RandomExprs {
 public:
  RandomExprs(uint32_t seed, bool extended) : rng_(seed), extended_(extended) {}

  Expr make(const std::vector<Expr>& vars, int depth) {
    Expr e = gen(vars, depth);
    pool_.push_back(e);
    if (pool_.size() > 32) pool_.erase(pool_.begin());
    return e;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  Expr leaf(const std::vector<Expr>& vars) {
    int r = pick(0, 9);
    if (r < 6) return vars[pick(0, int(vars.size()) - 1)];
    if (r < 8 && !pool_.empty()) return pool_[pick(0, int(pool_.size()) - 1)];
    return c(pick(-9, 9));
  }

  Expr gen(const std::vector<Expr>& vars, int depth) {
    if (depth == 0) return leaf(vars);
    Expr a = gen(vars, depth - 1);
    int ops = extended_ ? 11 : 6;
    switch (pick(0, ops - 1)) {
      case 0: return a + gen(vars, depth - 1);
      case 1: return a - gen(vars, depth - 1);
      case 2: return a * c(pick(-4, 8));
      case 3: return floordiv(a, c(pick(1, 9)));
      case 4: return floormod(a, c(pick(1, 9)));
      case 5: return c(pick(1, 16)) * a + c(pick(-20, 20));
      // extended: truncating division, min/max, comparisons and selects, products of atoms
      case 6: return make_binary(pick(0, 1) ? BinaryOp::Div : BinaryOp::Mod, a, c(pick(1, 9)));
      case 7: return make_binary(pick(0, 1) ? BinaryOp::Min : BinaryOp::Max, a, gen(vars, depth - 1));
      case 8: {
        static const BinaryOp cmp[] = {BinaryOp::LT, BinaryOp::LE, BinaryOp::GT, BinaryOp::GE};
        Expr cond = make_binary(cmp[pick(0, 3)], a, gen(vars, depth - 1));
        return make_select(cond, gen(vars, depth - 1), gen(vars, depth - 1));
      }
      case 9: return a * gen(vars, 0);
      default: return make_cast(DataType::i32(), make_binary(BinaryOp::LT, a, c(pick(-5, 20))));
    }
  }

  std::mt19937 rng_;
  bool extended_;
  std::vector<Expr> pool_;
};

struct VarRange {
  Expr var;
  int64_t lo, hi;  // [lo, hi)
};

// Checks simplify(e) == e, and that bound(e) holds e, at every point of the box.
void check_simplify_preserves_value(uint32_t seed, bool extended, int count) {
  std::vector<VarRange> box = {{make_var("x"), 0, 6}, {make_var("y"), -3, 4}, {make_var("z"), 2, 9}};
  Analyzer an;
  std::vector<Expr> vars;
  for (auto& r : box) {
    an.bind(r.var, r.lo, r.hi);
    vars.push_back(r.var);
  }
  RandomExprs gen(seed, extended);
  int changed = 0;
  for (int n = 0; n < count; ++n) {
    Expr e = gen.make(vars, 1 + n % 4);
    Expr s = an.simplify(e);
    ASSERT_TRUE(bool(s)) << "simplify returned nothing for " << to_string(e);
    if (!structural_equal(e, s)) ++changed;
    VarValues vals;
    for (int64_t x = box[0].lo; x < box[0].hi; ++x) {
      for (int64_t y = box[1].lo; y < box[1].hi; ++y) {
        for (int64_t z = box[2].lo; z < box[2].hi; ++z) {
          vals[box[0].var.get()] = x, vals[box[1].var.get()] = y, vals[box[2].var.get()] = z;
          int64_t want = 0, got = 0;
          ASSERT_TRUE(eval_int(e, vals, &want)) << to_string(e);
          ASSERT_TRUE(eval_int(s, vals, &got)) << to_string(s);
          ASSERT_EQ(got, want) << "at x=" << x << " y=" << y << " z=" << z << "\n  e = " << to_string(e)
                               << "\n  simplify(e) = " << to_string(s);
          // The bound must contain every value too: the simplifier relies on it.
          Interval b = an.bound(e);
          ASSERT_TRUE(b.lo <= want && want <= b.hi)
              << to_string(e) << " = " << want << " outside [" << b.lo << ", " << b.hi << "]";
        }
      }
    }
  }
  // The property is only worth something if the simplifier actually rewrote things.
  EXPECT_GT(changed, count / 4);
}

TEST(AnalyzerSimplify, RandomLinearDivModKeepsValues) { check_simplify_preserves_value(20240601, false, 3000); }

TEST(AnalyzerSimplify, RandomMixedExpressionsKeepValues) { check_simplify_preserves_value(7, true, 3000); }

}  // namespace
}  // namespace tegula::ir
