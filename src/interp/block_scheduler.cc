// Blocks as coroutines for the barriers between them (block_scheduler.h).
#include "interp/block_scheduler.h"

#include <array>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "ir/functor.h"

namespace tegula::interp {

CoRun co_run_of(const ir::Kernel& k) {
  CoRun mode = CoRun::None;
  ir::post_order(k.body, [](const ir::Stmt&) {}, [&](const ir::Expr& e) {
    auto* c = e.as<ir::CallNode>();
    if (!c) return;
    if (c->op == "sync_grid") mode = CoRun::Grid;
    else if (c->op.rfind("cluster_", 0) == 0 && mode == CoRun::None) mode = CoRun::Cluster;
  });
  return mode;
}

int64_t rank_in_cluster(const std::vector<int64_t>& c, const int64_t* b) {
  if (c.empty()) return 0;
  return b[0] % c[0] + (b[1] % c[1]) * c[0] + (b[2] % c[2]) * c[0] * c[1];
}

namespace {

// Unwinds the thread of a block that waits when the run stops.
struct Cancelled {};

// No GPU holds more blocks at once (132 SMs x 32 blocks on an H100 is 4224): a cooperative
// launch of more is refused, so a grid barrier over more is not run here either.
constexpr size_t kMaxGroup = 16384;

using Block = std::array<int64_t, 3>;

std::string block_name(const Block& b) {
  return "block (" + std::to_string(b[0]) + ", " + std::to_string(b[1]) + ", " + std::to_string(b[2]) + ")";
}

}  // namespace

// One group of blocks that meet at barriers; see block_scheduler.h.
class BlockScheduler {
 public:
  BlockScheduler(const std::vector<Block>& blocks, const std::vector<int>& cluster_of) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      slots_.push_back(std::make_unique<Slot>());
      slots_.back()->block = blocks[i];
      slots_.back()->cluster = cluster_of[i];
    }
  }

  void run(const std::function<void(const BlockTicket&, const int64_t* block)>& body) {
    if (slots_.size() == 1) {  // alone: every barrier it meets is complete at once
      body(BlockTicket(this, 0), slots_[0]->block.data());
      return;
    }
    std::vector<std::thread> threads;
    for (size_t i = 0; i < slots_.size(); ++i) threads.emplace_back([this, &body, i] { block_main(int(i), body); });
    for (auto& t : threads) t.join();
    if (error_) std::rethrow_exception(error_);
  }

  void sync_grid(int i) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = *slots_[i];
    s.waiting = Slot::kGrid;
    s.target = ++s.grid_arrivals;
    wait_until_met(i, lock);
  }

  void cluster_arrive(int i) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = *slots_[i];
    if (s.cluster_arrivals > s.cluster_waits) {
      throw BarrierError(block_name(s.block) + " arrives at the cluster barrier twice without waiting between "
                         "(each T.cluster_arrive needs its T.cluster_wait before the next)");
    }
    ++s.cluster_arrivals;
  }

  void cluster_wait(int i) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = *slots_[i];
    if (s.cluster_arrivals == s.cluster_waits) {
      throw BarrierError(block_name(s.block) + " waits at the cluster barrier without having arrived "
                         "(T.cluster_wait needs a T.cluster_arrive before it)");
    }
    s.waiting = Slot::kCluster;
    s.target = s.cluster_arrivals;
    wait_until_met(i, lock);
    ++s.cluster_waits;
  }

 private:
  struct Slot {
    Block block;
    int cluster = 0;  // its cluster, among the group's
    int64_t grid_arrivals = 0, cluster_arrivals = 0, cluster_waits = 0;
    enum { kNone, kGrid, kCluster } waiting = kNone;
    int64_t target = 0;  // the arrivals its barrier waits for
    bool done = false;
    std::condition_variable cv;
  };

  bool met(const Slot& s) const {
    for (auto& o : slots_) {
      if (s.waiting == Slot::kGrid && o->grid_arrivals < s.target) return false;
      if (s.waiting == Slot::kCluster && o->cluster == s.cluster && o->cluster_arrivals < s.target) return false;
    }
    return true;
  }
  bool runnable(int i) const { return !slots_[i]->done && (slots_[i]->waiting == Slot::kNone || met(*slots_[i])); }

  // The next block to run after block i, round robin (i itself last); -1 when none can.
  int next_after(int i) const {
    int n = int(slots_.size());
    for (int d = 1; d <= n; ++d) {
      if (runnable((i + d) % n)) return (i + d) % n;
    }
    return -1;
  }

  void wait_until_met(int i, std::unique_lock<std::mutex>& lock) {
    Slot& s = *slots_[i];
    while (!met(s)) {
      int next = next_after(i);
      if (next < 0) throw BarrierError(deadlock());
      current_ = next;
      slots_[next]->cv.notify_one();
      s.cv.wait(lock, [&] { return current_ == i || stopped_; });
      if (stopped_) throw Cancelled{};
    }
    s.waiting = Slot::kNone;
  }

  void block_main(int i, const std::function<void(const BlockTicket&, const int64_t* block)>& body) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      slots_[i]->cv.wait(lock, [&] { return current_ == i || stopped_; });
      if (stopped_) return;
    }
    try {
      body(BlockTicket(this, i), slots_[i]->block.data());
      finish(i);
    } catch (const Cancelled&) {
    } catch (...) {
      stop(std::current_exception());
    }
  }

  void finish(int i) {
    std::unique_lock<std::mutex> lock(mu_);
    slots_[i]->done = true;
    int next = next_after(i);
    if (next >= 0) {
      current_ = next;
      slots_[next]->cv.notify_one();
      return;
    }
    for (auto& s : slots_) {
      if (!s->done) throw BarrierError(deadlock());
    }
  }

  void stop(std::exception_ptr e) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!error_) error_ = e;
    stopped_ = true;
    for (auto& s : slots_) s->cv.notify_one();
  }

  // What each block is doing when no block can go on.
  std::string deadlock() const {
    std::string what;
    int listed = 0;
    for (auto& s : slots_) {
      if (listed == 4) {
        what += ", ...";
        break;
      }
      std::string state = s->done ? "ended" : s->waiting == Slot::kGrid ? "waits at T.sync_grid"
                                           : s->waiting == Slot::kCluster ? "waits at the cluster barrier" : "";
      if (state.empty()) continue;
      what += (listed++ ? ", " : "") + block_name(s->block) + " " + state + " after " +
              std::to_string(s->waiting == Slot::kCluster ? s->cluster_waits : s->grid_arrivals) + " " +
              (s->waiting == Slot::kCluster ? "cluster" : "grid") + " barrier(s)";
    }
    return "a barrier between blocks can never complete (the GPU would hang): " + what +
           ". Every block must reach every T.sync_grid, and every block of a cluster each cluster barrier, "
           "equally often";
  }

  std::vector<std::unique_ptr<Slot>> slots_;
  std::mutex mu_;
  int current_ = 0;
  bool stopped_ = false;
  std::exception_ptr error_;
};

void BlockTicket::sync_grid() const { s_->sync_grid(slot_); }
void BlockTicket::cluster_arrive() const { s_->cluster_arrive(slot_); }
void BlockTicket::cluster_wait() const { s_->cluster_wait(slot_); }

void run_blocks(const int64_t* grid, const std::vector<int64_t>& cluster_dims, CoRun mode,
                const std::function<void(const BlockTicket&, const int64_t* block)>& body) {
  const int64_t c[3] = {cluster_dims.empty() ? 1 : cluster_dims[0], cluster_dims.empty() ? 1 : cluster_dims[1],
                        cluster_dims.empty() ? 1 : cluster_dims[2]};
  if (grid[0] % c[0] || grid[1] % c[1] || grid[2] % c[2]) {  // the launcher refuses it too (program.cc)
    throw BarrierError("cluster_dims=(" + std::to_string(c[0]) + ", " + std::to_string(c[1]) + ", " +
                       std::to_string(c[2]) + ") must divide the grid, but the grid is (" + std::to_string(grid[0]) +
                       ", " + std::to_string(grid[1]) + ", " + std::to_string(grid[2]) + ")");
  }
  const int64_t clusters[3] = {grid[0] / c[0], grid[1] / c[1], grid[2] / c[2]};
  auto cluster_index = [&](const Block& b) {
    return int((b[2] / c[2] * clusters[1] + b[1] / c[1]) * clusters[0] + b[0] / c[0]);
  };
  auto run_group = [&](const std::vector<Block>& blocks) {
    std::vector<int> cluster_of;
    for (auto& b : blocks) cluster_of.push_back(cluster_index(b));
    BlockScheduler(blocks, cluster_of).run(body);
  };
  if (mode == CoRun::Grid) {
    std::vector<Block> all;
    for (int64_t z = 0; z < grid[2]; ++z) {
      for (int64_t y = 0; y < grid[1]; ++y) {
        for (int64_t x = 0; x < grid[0] && all.size() <= kMaxGroup; ++x) all.push_back({x, y, z});
      }
    }
    if (all.size() > kMaxGroup) {
      throw BarrierError("T.sync_grid over a grid of " + std::to_string(grid[0] * grid[1] * grid[2]) +
                         " blocks: no GPU holds that many blocks at once (the launch would be refused)");
    }
    run_group(all);
    return;
  }
  // Cluster by cluster (each alone without cluster barriers), blocks x fastest within one.
  for (int64_t cz = 0; cz < clusters[2]; ++cz) {
    for (int64_t cy = 0; cy < clusters[1]; ++cy) {
      for (int64_t cx = 0; cx < clusters[0]; ++cx) {
        std::vector<Block> members;
        for (int64_t z = cz * c[2]; z < (cz + 1) * c[2]; ++z) {
          for (int64_t y = cy * c[1]; y < (cy + 1) * c[1]; ++y) {
            for (int64_t x = cx * c[0]; x < (cx + 1) * c[0]; ++x) members.push_back({x, y, z});
          }
        }
        if (mode == CoRun::Cluster) {
          run_group(members);
        } else {
          for (auto& b : members) run_group({b});
        }
      }
    }
  }
}

}  // namespace tegula::interp
