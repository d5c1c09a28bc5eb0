// Coroutines of one block (see coop.h).
#include "interp/coop.h"

namespace tegula::interp {

Coop::Coop() { tasks_.push_back(std::make_unique<Task>()); }

Coop::~Coop() {
  for (auto& t : tasks_) {
    if (t->th.joinable()) t->th.join();
  }
}

// Called with the lock held by task `me`, which cannot go on: runs the next task that can
// (round robin after me) and returns once me may run again. Throws BarrierError when none
// can, Unwound when another task's error stopped the run.
void Coop::hand_over(std::unique_lock<std::mutex>& lock, int me) {
  const int n = int(tasks_.size());
  int next = -1;
  for (int i = 1; i <= n && next < 0; ++i) {
    int j = (me + i) % n;
    Task& t = *tasks_[j];
    if (!t.done && (!t.ready || t.ready())) next = j;
  }
  if (next < 0) {
    std::string msg = "the warpgroups wait for each other forever (the GPU would hang):";
    for (auto& t : tasks_) {
      if (!t->done && t->ready && !t->joining) msg += " " + t->what + ";";
    }
    aborted_ = true;
    cv_.notify_all();
    throw BarrierError(msg);
  }
  if (next == me) return;
  running_ = next;
  cv_.notify_all();
  if (tasks_[me]->done) return;
  cv_.wait(lock, [&] { return running_ == me || aborted_; });
  if (aborted_) throw Unwound{};
}

void Coop::wait_until(const std::function<bool()>& ready, const std::string& what) {
  if (ready()) return;
  std::unique_lock<std::mutex> lock(mu_);
  int me = running_;
  tasks_[me]->ready = ready;
  tasks_[me]->what = what;
  try {
    while (!ready()) hand_over(lock, me);
  } catch (...) {
    tasks_[me]->ready = nullptr;
    throw;
  }
  tasks_[me]->ready = nullptr;
}

void Coop::run_all(const std::vector<std::function<void()>>& fns) {
  std::vector<int> ids;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t i = 0; i < fns.size(); ++i) {
      int id = int(tasks_.size());
      tasks_.push_back(std::make_unique<Task>());
      ids.push_back(id);
    }
    for (size_t i = 0; i < fns.size(); ++i) {
      int id = ids[i];
      std::function<void()> fn = fns[i];
      tasks_[id]->th = std::thread([this, id, fn] {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return running_ == id || aborted_; });
        if (!aborted_) {
          lock.unlock();
          try {
            fn();
          } catch (const Unwound&) {
          } catch (...) {
            tasks_[id]->err = std::current_exception();
          }
          lock.lock();
        }
        tasks_[id]->done = true;
        if (tasks_[id]->err && !aborted_) {
          aborted_ = true;  // stop the others: their waits may never be met now
          cv_.notify_all();
          return;
        }
        if (aborted_ || running_ != id) {
          cv_.notify_all();
          return;
        }
        try {
          hand_over(lock, id);
        } catch (...) {
          if (!tasks_[id]->err) tasks_[id]->err = std::current_exception();
        }
      });
    }
  }
  std::exception_ptr mine;
  int me = running_;
  tasks_[me]->joining = true;
  try {
    wait_until([this, ids] {
      for (int id : ids) {
        if (!tasks_[id]->done) return false;
      }
      return true;
    }, "a branch waiting for its sides to finish");
  } catch (const Unwound&) {
  } catch (...) {
    mine = std::current_exception();
  }
  tasks_[me]->joining = false;
  std::exception_ptr first;
  for (int id : ids) {
    if (tasks_[id]->th.joinable()) tasks_[id]->th.join();
    if (!first && tasks_[id]->err) first = tasks_[id]->err;
  }
  if (first) std::rethrow_exception(first);
  if (mine) std::rethrow_exception(mine);
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw Unwound{};
}

}  // namespace tegula::interp
