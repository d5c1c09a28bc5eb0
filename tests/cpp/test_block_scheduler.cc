// The interpreters' block scheduler (src/interp/block_scheduler.cc): blocks that meet at a
// grid or cluster barrier run as coroutines, one at a time; every block's work before a
// barrier is done before any block's work after it, the order is the same on every run,
// and a barrier that can never complete is an error naming the blocks, not a hang.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "interp/block_scheduler.h"

namespace tegula::interp {
namespace {

std::string block_text(const int64_t* b) {
  return std::to_string(b[0]) + "," + std::to_string(b[1]) + "," + std::to_string(b[2]);
}

TEST(BlockScheduler, GridBarrierSeparatesThePhasesOfEveryBlock) {
  const int64_t grid[3] = {3, 2, 1};
  std::vector<std::string> trace;
  run_blocks(grid, {}, CoRun::Grid, [&](const BlockTicket& t, const int64_t* b) {
    trace.push_back("a" + block_text(b));
    t.sync_grid();
    trace.push_back("b" + block_text(b));
    t.sync_grid();
    trace.push_back("c" + block_text(b));
  });
  ASSERT_EQ(trace.size(), 18u);
  for (size_t i = 0; i < trace.size(); ++i) EXPECT_EQ(trace[i][0], "abc"[i / 6]) << "event " << i << ": " << trace[i];
  std::vector<std::string> again;
  run_blocks(grid, {}, CoRun::Grid, [&](const BlockTicket& t, const int64_t* b) {
    again.push_back("a" + block_text(b));
    t.sync_grid();
    again.push_back("b" + block_text(b));
    t.sync_grid();
    again.push_back("c" + block_text(b));
  });
  EXPECT_EQ(trace, again);
}

TEST(BlockScheduler, ClustersRunOneAfterAnotherAndMeetWithinThemselves) {
  const int64_t grid[3] = {4, 2, 1};
  std::vector<int64_t> order, ranks;
  run_blocks(grid, {2, 2, 1}, CoRun::Cluster, [&](const BlockTicket& t, const int64_t* b) {
    order.push_back(b[0] + 10 * b[1]);
    ranks.push_back(rank_in_cluster({2, 2, 1}, b));
    t.cluster_arrive();
    t.cluster_wait();
    order.push_back(100 + b[0] + 10 * b[1]);
  });
  // Cluster (0, 0) holds blocks (0, 0), (1, 0), (0, 1), (1, 1) (written 0, 1, 10, 11): all
  // arrive before any goes on, the last to arrive first; then cluster (1, 0).
  std::vector<int64_t> want = {0, 1, 10, 11, 111, 100, 101, 110, 2, 3, 12, 13, 113, 102, 103, 112};
  EXPECT_EQ(order, want);
  EXPECT_EQ(ranks, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(BlockScheduler, ABlockThatNeverArrivesIsReported) {
  const int64_t grid[3] = {3, 1, 1};
  try {
    run_blocks(grid, {}, CoRun::Grid, [&](const BlockTicket& t, const int64_t* b) {
      if (b[0] != 1) t.sync_grid();
    });
    FAIL() << "expected a BarrierError";
  } catch (const BarrierError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("can never complete"), std::string::npos) << what;
    EXPECT_NE(what.find("block (1, 0, 0) ended"), std::string::npos) << what;
  }
}

TEST(BlockScheduler, AnErrorInOneBlockStopsTheWaitingOnes) {
  const int64_t grid[3] = {4, 1, 1};
  int finished = 0;
  EXPECT_THROW(run_blocks(grid, {}, CoRun::Grid,
                          [&](const BlockTicket& t, const int64_t* b) {
                            if (b[0] == 2) throw std::logic_error("block 2 failed");
                            t.sync_grid();
                            ++finished;
                          }),
               std::logic_error);
  EXPECT_EQ(finished, 0);
}

TEST(BlockScheduler, ClusterBarrierMisuseAndShapes) {
  const int64_t grid[3] = {4, 1, 1};
  EXPECT_THROW(run_blocks(grid, {2, 1, 1}, CoRun::Cluster, [&](const BlockTicket& t, const int64_t*) { t.cluster_wait(); }),
               BarrierError);
  EXPECT_THROW(run_blocks(grid, {2, 1, 1}, CoRun::Cluster,
                          [&](const BlockTicket& t, const int64_t*) {
                            t.cluster_arrive();
                            t.cluster_arrive();
                          }),
               BarrierError);
  const int64_t ragged[3] = {5, 1, 1};
  EXPECT_THROW(run_blocks(ragged, {2, 1, 1}, CoRun::None, [](const BlockTicket&, const int64_t*) {}), BarrierError);
  EXPECT_EQ(rank_in_cluster({}, grid), 0);
  const int64_t b[3] = {5, 3, 1};
  EXPECT_EQ(rank_in_cluster({2, 2, 2}, b), 1 + 1 * 2 + 1 * 4);
}

}  // namespace
}  // namespace tegula::interp
