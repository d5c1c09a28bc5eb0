// The warpgroups of one block that meet at mbarriers (T.alloc_barrier), run side by side
// by the interpreters: each side of a branch on the thread index is a coroutine, on a
// thread of its own, exactly one of which runs at any moment. A coroutine runs until it
// waits for something that has not happened (an mbarrier phase, its branches to finish),
// then hands over to the next one that can go on, round robin; so a run is deterministic.
//
// Worked example: `if tx < 128: wait(full, 0); read S` / `else: write S; arrive(full)`.
// The consumer side waits; the producer side runs, writes, arrives (the phase completes)
// and ends; the consumer resumes and reads what was written.
//
// A wait that can never be satisfied (every coroutine waits) would hang the GPU; here it
// is a BarrierError naming the waits. The first exception a coroutine throws stops the
// others (they are unwound) and is rethrown by the branch that started them.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "interp/block_scheduler.h"

namespace tegula::interp {

class Coop {
 public:
  Coop();
  ~Coop();
  Coop(const Coop&) = delete;
  Coop& operator=(const Coop&) = delete;
  // Runs fns side by side and returns when all have finished (rethrowing the first error).
  void run_all(const std::vector<std::function<void()>>& fns);
  // Lets the others run until ready() holds; `what` names the wait in a deadlock report.
  void wait_until(const std::function<bool()>& ready, const std::string& what);

 private:
  struct Task {
    std::function<bool()> ready;  // null: runnable
    std::string what;
    bool done = false;
    bool joining = false;  // waits in run_all for its sides (left out of a deadlock report)
    std::exception_ptr err;
    std::thread th;
  };
  struct Unwound {};  // thrown in the coroutines stopped by another's error
  void hand_over(std::unique_lock<std::mutex>& lock, int me);
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Task>> tasks_;  // 0: the caller's thread
  int running_ = 0;
  bool aborted_ = false;
};

}  // namespace tegula::interp
