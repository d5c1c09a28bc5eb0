// Fragment layouts checked as properties over their whole domain: every (thread, slot)
// pair and every element of the tile, for blocked, row_blocked, projected and replicated
// layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "ir/analyzer.h"
#include "layout/fragment.h"
#include "layout/mma.h"

namespace tegula::layout {
namespace {

struct TileCase {
  std::vector<int64_t> shape;
  int threads, vec;
};

std::string describe(const Fragment& f) { return f.describe(); }

// Every (thread, slot) that holds an element, as row-major flat indices.
std::vector<std::vector<std::pair<int, int>>> holders(const Fragment& f) {
  std::vector<std::vector<std::pair<int, int>>> out(f.num_elements());
  std::vector<int64_t> c(f.shape().size());
  for (int t = 0; t < f.threads(); ++t) {
    for (int s = 0; s < f.slots(); ++s) {
      if (!f.coords(t, s, c.data())) continue;
      for (size_t d = 0; d < c.size(); ++d) {
        EXPECT_TRUE(c[d] >= 0 && c[d] < f.shape()[d])
            << describe(f) << ": thread " << t << " slot " << s << " dim " << d << " = " << c[d];
      }
      out[f.flatten(c.data())].push_back({t, s});
    }
  }
  return out;
}

// coords_expr(tx, s), evaluated with tx = t, must agree with coords(t, s); its `valid`
// predicate must be false exactly where the slot is empty.
void expect_symbolic_matches_numeric(const Fragment& f) {
  ir::Expr tx = ir::make_var("tx");
  std::vector<int64_t> c(f.shape().size());
  for (int s = 0; s < f.slots(); ++s) {
    ir::Expr valid;
    std::vector<ir::Expr> exprs = f.coords_expr(tx, s, &valid);
    ASSERT_EQ(exprs.size(), f.shape().size()) << describe(f) << " slot " << s;
    for (int t = 0; t < f.threads(); ++t) {
      ir::VarValues vals{{tx.get(), t}};
      bool held = f.coords(t, s, c.data());
      bool predicted = true;
      if (valid) {
        int64_t v = 0;
        ASSERT_TRUE(ir::eval_int(valid, vals, &v)) << describe(f) << " slot " << s;
        predicted = v != 0;
      }
      ASSERT_EQ(predicted, held) << describe(f) << ": valid predicate of slot " << s << " at thread " << t;
      if (!held) continue;
      for (size_t d = 0; d < exprs.size(); ++d) {
        int64_t v = 0;
        ASSERT_TRUE(ir::eval_int(exprs[d], vals, &v)) << describe(f) << " slot " << s << " dim " << d;
        EXPECT_EQ(v, c[d]) << describe(f) << ": thread " << t << " slot " << s << " dim " << d;
      }
    }
  }
}

const std::vector<TileCase> kShapes = {
    {{2, 16}, 4, 4},      // the worked example of fragment.h
    {{1, 1024}, 256, 4},  // a row reduction's input
    {{64, 256}, 128, 8},  // several vectors per thread, rounds spanning rows
    {{4, 1024}, 128, 8},  // one round per row
    {{2, 3, 8}, 16, 4},   // rank 3
    {{3, 24}, 32, 2},     // 72 elements: the second round is partly empty
    {{3, 24}, 32, 8},     // fewer vectors than threads: most threads hold nothing
    {{3, 24}, 8, 8},      // the worked example of RowBlocked in fragment.cc
    {{5, 7}, 32, 1},      // odd sizes, scalar
    {{7}, 4, 1},          // rank 1, ragged
    {{16}, 64, 1},        // more threads than elements
    {{6, 40}, 64, 4},     // 10 vectors a row: lanes do not divide it
    // Blocks that are not a power of two of threads (DeepSeek-V3's 7168-wide rows a block):
    // a row's 256 or 128 lanes leave the last 192 or 96 threads idle, never a second row.
    {{1, 7168}, 448, 8},
    {{5, 4096}, 448, 8},
    {{4, 7168}, 224, 8},
    {{3, 24}, 96, 8},
};

// Both free layouts, over every shape above: the same properties must hold for each.
struct Free {
  const char* kind;
  FragmentPtr (*make)(std::vector<int64_t>, int, int);
};
const Free kFree[] = {{"blocked", make_blocked}, {"row_blocked", make_row_blocked}};

template <typename F>
void for_each_free_layout(F check) {
  for (const Free& kind : kFree) {
    for (const auto& bc : kShapes) {
      SCOPED_TRACE(kind.kind);
      check(kind.make(bc.shape, bc.threads, bc.vec), bc);
    }
  }
}

TEST(FreeLayout, EveryElementHeldExactlyOnce) {
  for_each_free_layout([](const FragmentPtr& f, const TileCase& bc) {
    ASSERT_EQ(f->threads(), bc.threads);
    ASSERT_EQ(f->shape(), bc.shape);
    // Enough slots for the tile, and no slot empty in every thread.
    EXPECT_GE(int64_t(f->slots()) * f->threads(), f->num_elements()) << describe(*f);
    auto h = holders(*f);
    for (int64_t e = 0; e < f->num_elements(); ++e) {
      EXPECT_EQ(h[e].size(), 1u) << describe(*f) << ": element " << e;
    }
    std::vector<int64_t> c(f->shape().size());
    for (int s = 0; s < f->slots(); ++s) {
      bool used = false;
      for (int t = 0; t < f->threads() && !used; ++t) used = f->coords(t, s, c.data());
      EXPECT_TRUE(used) << describe(*f) << ": slot " << s << " is empty in every thread";
    }
    EXPECT_EQ(f->replicate_mask(), 0) << describe(*f);
  });
}

TEST(FreeLayout, SlotOfInvertsCoords) {
  for_each_free_layout([](const FragmentPtr& f, const TileCase&) {
    std::vector<int64_t> c(f->shape().size());
    for (int t = 0; t < f->threads(); ++t) {
      std::set<int64_t> mine;
      for (int s = 0; s < f->slots(); ++s) {
        if (!f->coords(t, s, c.data())) continue;
        int64_t flat = f->flatten(c.data());
        mine.insert(flat);
        EXPECT_EQ(f->slot_of(t, flat), s) << describe(*f) << ": thread " << t;
      }
      // And a thread never claims an element it does not hold.
      for (int64_t e = 0; e < f->num_elements(); ++e) {
        if (!mine.count(e)) {
          EXPECT_EQ(f->slot_of(t, e), -1) << describe(*f) << ": thread " << t << " element " << e;
        }
      }
    }
    EXPECT_EQ(f->slot_of(0, -1), -1);
    EXPECT_EQ(f->slot_of(0, f->num_elements()), -1);
  });
}

TEST(FreeLayout, VectorSlotsHoldConsecutiveLastDimElements) {
  for_each_free_layout([](const FragmentPtr& f, const TileCase& bc) {
    int w = f->vector_width();
    ASSERT_EQ(w, bc.vec) << describe(*f);
    ASSERT_EQ(f->slots() % w, 0) << describe(*f);
    std::vector<int64_t> first(f->shape().size()), next(f->shape().size());
    for (int t = 0; t < f->threads(); ++t) {
      for (int g = 0; g < f->slots(); g += w) {
        bool held = f->coords(t, g, first.data());
        // A vector starts on a multiple of its width, so it is aligned whenever the row is.
        if (held) {
          EXPECT_EQ(first.back() % w, 0) << describe(*f) << ": thread " << t << " slot " << g;
        }
        for (int v = 1; v < w; ++v) {
          // A vector is held whole or not at all: the vectorizer masks per vector.
          ASSERT_EQ(f->coords(t, g + v, next.data()), held) << describe(*f) << ": thread " << t << " slot " << g + v;
          if (!held) continue;
          std::vector<int64_t> want = first;
          want.back() += v;
          EXPECT_EQ(next, want) << describe(*f) << ": thread " << t << " slot " << g + v;
        }
      }
    }
  });
}

TEST(FreeLayout, SymbolicCoordsMatchNumeric) {
  for_each_free_layout([](const FragmentPtr& f, const TileCase&) { expect_symbolic_matches_numeric(*f); });
}

TEST(BlockedLayout, WorkedExampleOfTheHeader) {
  // Blocked({2, 16}, threads=4, vec=4): thread 1 holds (0,4..7) in slots 0..3 and (1,4..7) in 4..7.
  FragmentPtr f = make_blocked({2, 16}, 4, 4);
  EXPECT_EQ(f->slots(), 8);
  int64_t c[2];
  ASSERT_TRUE(f->coords(1, 2, c));
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 6);
  ASSERT_TRUE(f->coords(1, 5, c));
  EXPECT_EQ(c[0], 1);
  EXPECT_EQ(c[1], 5);
}

TEST(RowBlockedLayout, WorkedExampleAndRowsStayInPowerOfTwoGroups) {
  // RowBlocked({3, 24}, threads=8, vec=8): 3 vectors a row over 2 lanes; thread 1 holds
  // (0, 8..15), thread 0 holds (0, 0..7) and (0, 16..23).
  FragmentPtr f = make_row_blocked({3, 24}, 8, 8);
  int64_t c[2];
  ASSERT_TRUE(f->coords(1, 3, c));
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 11);
  EXPECT_FALSE(f->coords(1, 8, c));
  ASSERT_TRUE(f->coords(0, 8, c));
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 16);
  // The point of the layout: every row lives in one aligned power-of-two group of threads.
  for (const auto& bc : kShapes) {
    FragmentPtr r = make_row_blocked(bc.shape, bc.threads, bc.vec);
    int64_t cols = bc.shape.back();
    auto h = holders(*r);
    for (int64_t row = 0; row * cols < r->num_elements(); ++row) {
      std::set<int> ts;
      for (int64_t j = 0; j < cols; ++j) {
        for (auto& [t, s] : h[row * cols + j]) ts.insert(t);
      }
      int lo = *ts.begin(), n = 1;
      while (n < int(ts.size())) n *= 2;
      EXPECT_EQ(lo % n, 0) << describe(*r) << ": row " << row;
      EXPECT_LT(*ts.rbegin(), lo + n) << describe(*r) << ": row " << row;
    }
  }
}

// ------------------------------------------------------------------ projected

struct ProjectedCase {
  FragmentPtr (*make)(std::vector<int64_t>, int, int);
  TileCase base;
  std::vector<int> keep;
};

// Cases where every replication group is an xor coset: power-of-two blocked tiles, and
// row_blocked tiles of any shape without their last dimension (what T.reduce(dim=-1) derives).
const std::vector<ProjectedCase> kProjectedCases = {
    {make_blocked, {{8, 16}, 32, 4}, {0}},     // rows: 4 threads per row
    {make_blocked, {{8, 16}, 32, 4}, {1}},     // columns: 8 threads per column
    {make_blocked, {{4, 64}, 32, 2}, {0}},     // every thread holds every row
    {make_blocked, {{1, 1024}, 256, 4}, {0}},  // one element held by all 256 threads
    {make_blocked, {{1, 1024}, 256, 4}, {}},   // everything dropped: shape (1,)
    {make_blocked, {{2, 4, 8}, 16, 2}, {0, 2}},
    {make_blocked, {{2, 4, 8}, 16, 2}, {1}},
    {make_blocked, {{64, 256}, 128, 8}, {0}},
    {make_row_blocked, {{3, 24}, 32, 2}, {0}},  // 12 vectors a row over 8 lanes; one of 4 groups idle
    {make_row_blocked, {{3, 24}, 8, 8}, {0}},
    {make_row_blocked, {{6, 40}, 64, 4}, {0}},  // 10 vectors over 8 lanes: some lanes hold fewer
    {make_row_blocked, {{2, 3, 8}, 16, 4}, {0, 1}},
    {make_row_blocked, {{2, 4, 8}, 16, 4}, {0, 2}},  // power-of-two rows: dropping dim 1 is fine too
    {make_row_blocked, {{64, 256}, 128, 8}, {0}},
    {make_row_blocked, {{1, 1024}, 256, 4}, {0}},
    {make_row_blocked, {{5, 7}, 32, 1}, {0}},
};

// Threads holding each element of a projection.
std::vector<std::set<int>> thread_sets(const Fragment& f) {
  std::vector<std::set<int>> out(f.num_elements());
  auto h = holders(f);
  for (size_t e = 0; e < h.size(); ++e) {
    for (auto& [t, s] : h[e]) out[e].insert(t);
  }
  return out;
}

std::vector<int64_t> project(const std::vector<int64_t>& c, const std::vector<int>& keep) {
  std::vector<int64_t> out;
  for (int k : keep) out.push_back(c[k]);
  if (out.empty()) out.push_back(0);
  return out;
}

TEST(ProjectedLayout, EveryBaseElementProjectsToOneTheSameThreadHolds) {
  for (const auto& pc : kProjectedCases) {
    FragmentPtr base = pc.make(pc.base.shape, pc.base.threads, pc.base.vec);
    FragmentPtr p = make_projected(base, pc.keep, SourceLoc{});
    std::vector<int64_t> want_shape;
    for (int k : pc.keep) want_shape.push_back(pc.base.shape[k]);
    if (want_shape.empty()) want_shape.push_back(1);
    ASSERT_EQ(p->shape(), want_shape) << describe(*p);
    std::vector<int64_t> c(base->shape().size());
    for (int t = 0; t < base->threads(); ++t) {
      for (int s = 0; s < base->slots(); ++s) {
        if (!base->coords(t, s, c.data())) continue;
        std::vector<int64_t> pc_ = project(c, pc.keep);
        EXPECT_GE(p->slot_of(t, p->flatten(pc_.data())), 0) << describe(*p) << ": thread " << t << " base slot " << s;
      }
    }
    // Conversely, a thread holds in the projection only what its base elements project to,
    // and each element at most once.
    std::vector<int64_t> q(p->shape().size());
    for (int t = 0; t < p->threads(); ++t) {
      std::set<int64_t> from_base, held;
      for (int s = 0; s < base->slots(); ++s) {
        if (!base->coords(t, s, c.data())) continue;
        std::vector<int64_t> pc_ = project(c, pc.keep);
        from_base.insert(p->flatten(pc_.data()));
      }
      for (int s = 0; s < p->slots(); ++s) {
        if (!p->coords(t, s, q.data())) continue;
        EXPECT_TRUE(held.insert(p->flatten(q.data())).second) << describe(*p) << ": thread " << t << " repeats";
      }
      EXPECT_EQ(held, from_base) << describe(*p) << ": thread " << t;
    }
    expect_symbolic_matches_numeric(*p);
  }
}

TEST(ProjectedLayout, ReplicateMaskNamesTheThreadsSharingAnElement) {
  for (const auto& pc : kProjectedCases) {
    FragmentPtr p = make_projected(pc.make(pc.base.shape, pc.base.threads, pc.base.vec), pc.keep, SourceLoc{});
    int mask = p->replicate_mask();
    auto sets = thread_sets(*p);
    for (size_t e = 0; e < sets.size(); ++e) {
      ASSERT_FALSE(sets[e].empty()) << describe(*p) << ": element " << e << " is held by nobody";
      int t0 = *sets[e].begin();
      std::set<int> coset;
      // Every subset m of mask, including 0 and mask itself.
      for (int m = mask;; m = (m - 1) & mask) {
        coset.insert(t0 ^ m);
        if (m == 0) break;
      }
      EXPECT_EQ(sets[e], coset) << describe(*p) << ": element " << e << ", mask " << mask;
    }
  }
}

// What T.reduce's butterfly and partition_loops' one-copy store guard rely on, weaker than
// an exact coset: for a holder t of element e in slot p, every t ^ m (m a subset of the
// mask) holds e in slot p too or leaves slot p empty (it then adds the identity), and the
// holder with no mask bits set, which the guard `(tx & mask) == 0` keeps, exists.
void expect_butterfly_safe(const Fragment& p) {
  int mask = p.replicate_mask();
  auto h = holders(p);
  std::vector<int64_t> c(p.shape().size());
  for (size_t e = 0; e < h.size(); ++e) {
    bool representative = false;
    for (auto& [t, slot] : h[e]) {
      representative |= (t & mask) == 0;
      for (int m = mask;; m = (m - 1) & mask) {
        int u = t ^ m;
        ASSERT_LT(u, p.threads()) << describe(p);
        if (p.coords(u, slot, c.data())) {
          EXPECT_EQ(p.flatten(c.data()), int64_t(e))
              << describe(p) << ": thread " << t << " and " << u << " (mask " << mask << ") hold different elements in slot "
              << slot;
        }
        if (m == 0) break;
      }
    }
    EXPECT_TRUE(representative) << describe(p) << ": no holder of element " << e << " passes (tx & " << mask << ") == 0";
  }
}

TEST(ProjectedLayout, ButterflyOverTheMaskIsSafe) {
  for (const auto& pc : kProjectedCases) {
    expect_butterfly_safe(*make_projected(pc.make(pc.base.shape, pc.base.threads, pc.base.vec), pc.keep, SourceLoc{}));
  }
  // Columns of ragged row_blocked tiles: the closure reaches threads past the last row,
  // which hold nothing, so these are safe without being exact cosets.
  expect_butterfly_safe(*make_projected(make_row_blocked({3, 24}, 32, 4), {1}, SourceLoc{}));
  expect_butterfly_safe(*make_projected(make_row_blocked({5, 40}, 64, 4), {1}, SourceLoc{}));
  expect_butterfly_safe(*make_projected(make_row_blocked({16, 8}, 64, 4), {1}, SourceLoc{}));
}

TEST(ProjectedLayout, MiddleDimensionOfRowBlockedIsDetected) {
  // RowBlocked((2, 3, 8), 16, vec 4) gives the flattened row (b, j) to threads 2(3b + j)
  // and +1. Without dim 1, (0, k) is held by {l, 2+l, 4+l} and (1, k) by {6+l, 8+l, 10+l}:
  // replicate_mask() is 14, and 0 ^ 6 = 6 holds (1, k) in the same register as thread 0
  // holds (0, k). A butterfly over that mask would add the two batches together, so the
  // layout must report itself unsafe (T.reduce then refuses with a UserError), while the
  // power-of-two case is safe.
  auto bad = make_projected(make_row_blocked({2, 3, 8}, 16, 4), {0, 2}, SourceLoc{});
  EXPECT_FALSE(bad->xor_groups_consistent(bad->replicate_mask(), false));
  auto good = make_projected(make_row_blocked({2, 4, 8}, 16, 4), {0, 2}, SourceLoc{});
  EXPECT_TRUE(good->xor_groups_consistent(good->replicate_mask(), false));
  expect_butterfly_safe(*good);
}

TEST(ProjectedLayout, KnownMasks) {
  // (8, 16) blocked over 32 threads by 4: thread t holds row t/4, so rows are shared by the
  // 4 threads differing in bits 0-1, and columns by the 8 threads differing in bits 2-4.
  FragmentPtr base = make_blocked({8, 16}, 32, 4);
  EXPECT_EQ(make_projected(base, {0}, SourceLoc{})->replicate_mask(), 0b00011);
  EXPECT_EQ(make_projected(base, {1}, SourceLoc{})->replicate_mask(), 0b11100);
  EXPECT_EQ(make_projected(base, {0, 1}, SourceLoc{})->replicate_mask(), 0);
  EXPECT_EQ(make_projected(make_blocked({1, 1024}, 256, 4), {0}, SourceLoc{})->replicate_mask(), 255);
}

TEST(ProjectedLayout, RaggedBlockedRowsOnlyBoundedByTheMask) {
  // Blocked((3, 24), 32, vec 2) deals 72 elements round-robin: row 2 is held by threads
  // 24..31 and 0..3, no xor coset. replicate_mask() still names every bit along which the
  // copies differ (here all five), which is all fragment.h promises; consumers that
  // butterfly over the mask (ops/reduce.cc) need row_blocked bases, as inference now picks.
  FragmentPtr p = make_projected(make_blocked({3, 24}, 32, 2), {0}, SourceLoc{});
  int mask = p->replicate_mask();
  EXPECT_EQ(mask, 31);
  auto sets = thread_sets(*p);
  for (size_t e = 0; e < sets.size(); ++e) {
    int t0 = *sets[e].begin();
    for (int t : sets[e]) EXPECT_EQ((t ^ t0) & ~mask, 0) << "row " << e << " thread " << t;
    EXPECT_EQ(sets[e].size(), 12u) << "row " << e;
  }
}

TEST(ProjectedLayout, ImpossibleProjectionIsAUserError) {
  // Blocked((2, 3), 2 threads, vec 1) deals flat indices round-robin: thread 0 holds
  // (0,0) (0,2) (1,1) and thread 1 holds (0,1) (1,0) (1,2). Keeping rows, thread 0's base
  // slot 1 is row 0 (its first row) while thread 1's is row 1 (its second): no single
  // register numbering serves both.
  SourceLoc loc{"kernel.py", 42, 7};
  FragmentPtr base = make_blocked({2, 3}, 2, 1);
  try {
    make_projected(base, {0}, loc);
    FAIL() << "projection accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(e.loc().line, 42);
    EXPECT_EQ(e.loc().col, 7);
    EXPECT_NE(std::string(e.what()).find("different registers"), std::string::npos) << e.what();
  }
  // Keeping columns is fine: every thread meets its columns in distinct base slots.
  EXPECT_NO_THROW(make_projected(base, {1}, loc));
}

// ------------------------------------------------------------------ permuted

TEST(PermutedLayout, HoldsWhatItsBaseHoldsUnderTheOrder) {
  struct Case {
    TileCase base;
    std::vector<int> order;
  };
  for (const Case& pc : std::vector<Case>{{{{16, 8}, 64, 4}, {1, 0}},
                                          {{{12, 16, 4}, 128, 4}, {1, 2, 0}},
                                          {{{3, 24}, 32, 2}, {1, 0}},
                                          {{{2, 3, 8}, 16, 4}, {2, 0, 1}},
                                          {{{2, 3, 8}, 16, 4}, {0, 1, 2}}}) {
    FragmentPtr base = make_row_blocked(pc.base.shape, pc.base.threads, pc.base.vec);
    FragmentPtr f = make_permuted(base, pc.order);
    ASSERT_EQ(f->slots(), base->slots());
    for (size_t d = 0; d < pc.order.size(); ++d) EXPECT_EQ(f->shape()[pc.order[d]], base->shape()[d]);
    std::vector<int64_t> c(pc.order.size()), b(pc.order.size());
    for (int t = 0; t < f->threads(); ++t) {
      for (int s = 0; s < f->slots(); ++s) {
        ASSERT_EQ(f->coords(t, s, c.data()), base->coords(t, s, b.data())) << describe(*f);
        if (!base->coords(t, s, b.data())) continue;
        for (size_t d = 0; d < pc.order.size(); ++d) EXPECT_EQ(c[pc.order[d]], b[d]) << describe(*f);
      }
    }
    auto h = holders(*f);
    for (auto& e : h) EXPECT_EQ(e.size(), 1u) << describe(*f);
    expect_symbolic_matches_numeric(*f);
    // Consecutive slots run along the last dimension only where it stays last.
    EXPECT_EQ(f->vector_width(), pc.order.back() == int(pc.order.size()) - 1 ? base->vector_width() : 1);
  }
}

TEST(PermutedLayout, ReducingTheDimensionMovedLastIsAButterfly) {
  // (4, 12, 16) reduced along dim 0: rows along dim 0 to thread groups, so the result's
  // copies form power-of-two groups that a butterfly and a one-copy store can rely on.
  FragmentPtr f = make_permuted(make_row_blocked({12, 16, 4}, 128, 4), {1, 2, 0});
  auto p = make_projected(f, {1, 2}, SourceLoc{});
  EXPECT_TRUE(p->xor_groups_consistent(p->replicate_mask(), true));
  expect_butterfly_safe(*p);
}

// ------------------------------------------------------------------ replicated

TEST(ReplicatedLayout, EveryThreadHoldsEverything) {
  for (auto [shape, threads] : std::vector<std::pair<std::vector<int64_t>, int>>{
           {{4, 8}, 32}, {{3}, 64}, {{2, 3, 5}, 8}}) {
    FragmentPtr f = make_replicated(shape, threads);
    EXPECT_EQ(f->slots(), f->num_elements());
    auto h = holders(*f);
    for (int64_t e = 0; e < f->num_elements(); ++e) {
      std::set<int> ts;
      for (auto& [t, s] : h[e]) EXPECT_TRUE(ts.insert(t).second) << describe(*f) << ": thread " << t << " twice";
      EXPECT_EQ(int(ts.size()), threads) << describe(*f) << ": element " << e;
    }
    EXPECT_EQ(f->replicate_mask(), threads - 1);
    expect_symbolic_matches_numeric(*f);
    EXPECT_FALSE(f->same_as(*make_blocked(shape, threads, 1)));
    EXPECT_TRUE(f->same_as(*make_replicated(shape, threads)));
  }
}

// ------------------------------------------------------------------ choose_vector

TEST(ChooseVector, DividesFitsAndWastesNothing) {
  for (int64_t last : {1, 2, 3, 6, 8, 12, 24, 64, 100, 1024}) {
    for (int64_t rows : {1, 3, 16}) {
      for (int threads : {32, 128, 256}) {
        for (int bytes : {1, 2, 4, 8}) {
          int64_t total = last * rows;
          int v = choose_vector(last, total, threads, bytes);
          std::string what = "last=" + std::to_string(last) + " total=" + std::to_string(total) +
                             " threads=" + std::to_string(threads) + " bytes=" + std::to_string(bytes);
          ASSERT_GE(v, 1) << what;
          EXPECT_EQ(last % v, 0) << what;
          EXPECT_LE(v * bytes, std::max(16, bytes)) << what;
          // At most total/threads, unless even one element per thread is too many.
          if (v > 1) {
            EXPECT_LE(int64_t(v) * threads, total) << what;
          }
          // The widest such power of two.
          int w = 2 * v;
          bool wider_ok = w * bytes <= 16 && last % w == 0 && int64_t(w) * threads <= total;
          EXPECT_FALSE(wider_ok) << what << ": " << w << " would also do";
        }
      }
    }
  }
}

TEST(ChooseRowVector, WidestPowerOfTwoDividingTheRow) {
  for (int64_t last : {1, 2, 3, 6, 8, 12, 24, 40, 100, 1024}) {
    for (int bytes : {1, 2, 4, 8, 16, 32}) {
      int v = choose_row_vector(last, bytes);
      std::string what = "last=" + std::to_string(last) + " bytes=" + std::to_string(bytes);
      ASSERT_GE(v, 1) << what;
      EXPECT_EQ(v & (v - 1), 0) << what;
      EXPECT_EQ(last % v, 0) << what;
      EXPECT_LE(v * bytes, std::max(16, bytes)) << what;
      int w = 2 * v;
      EXPECT_FALSE(w * bytes <= 16 && last % w == 0) << what << ": " << w << " would also do";
    }
  }
}

// The tensor-core accumulators: mma.sync (group 1) and wgmma (group 4) tilings, each
// element held once, symbolic coordinates equal to numeric ones.
struct AccCase {
  int64_t m, n;
  int wm, wn, group;
};
const AccCase kAcc[] = {
    {128, 128, 2, 2, 1}, {64, 64, 4, 1, 1},    // mma.sync
    {64, 256, 4, 1, 4},  {128, 256, 8, 1, 4},  // wgmma, one m64 tile per warpgroup
    {128, 128, 4, 1, 4}, {256, 128, 4, 2, 4},  // several m64 tiles per warpgroup, split along n
};

TEST(MmaAccumulator, EveryElementHeldOnceAndSymbolicMatches) {
  for (const AccCase& a : kAcc) {
    FragmentPtr f = make_mma_accumulator(a.m, a.n, a.wm, a.wn, a.group);
    SCOPED_TRACE(f->describe());
    for (const auto& h : holders(*f)) ASSERT_EQ(h.size(), 1u);
    expect_symbolic_matches_numeric(*f);
  }
}

TEST(MmaAccumulator, WgmmaWarpsTake16RowsOfEach64RowTile) {
  // 128 x 64 over one warpgroup: two m64 instructions; warp w holds rows 16w..16w+15 of
  // each, i.e. rows 16w + {0..15} and 64 + 16w + {0..15}, in slots [mi][ni][e].
  FragmentPtr f = make_mma_accumulator(128, 64, 4, 1, 4);
  ASSERT_EQ(f->slots(), 2 * 8 * 4);
  int64_t c[2];
  for (int t = 0; t < 128; ++t) {
    int w = t / 32, lane = t % 32;
    for (int s = 0; s < f->slots(); ++s) {
      ASSERT_TRUE(f->coords(t, s, c));
      int mi = s / 32, ni = (s / 4) % 8, e = s % 4;
      EXPECT_EQ(c[0], mi * 64 + w * 16 + lane / 4 + (e / 2) * 8);
      EXPECT_EQ(c[1], ni * 8 + (lane % 4) * 2 + e % 2);
    }
  }
  // With one m64 tile per warpgroup the two tilings agree.
  EXPECT_TRUE(make_mma_accumulator(128, 256, 8, 1, 4)->same_as(*make_mma_accumulator(128, 256, 8, 1, 1)));
  EXPECT_FALSE(f->same_as(*make_mma_accumulator(128, 64, 4, 1, 1)));
}

}  // namespace
}  // namespace tegula::layout
