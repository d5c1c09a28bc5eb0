#include "runtime/compile_pool.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>

namespace tegula::runtime {

namespace {

// What a child sends per job, then `size` bytes: the image, or the error text.
struct Frame {
  uint32_t job;
  uint32_t ok;
  uint64_t size;
};

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

PoolResult compile_here(const PoolJob& job) {
  PoolResult r;
  try {
    r.image = compile(job.source, job.name, job.options).cubin;
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

[[noreturn]] void run_child(const std::vector<PoolJob>& jobs, int job_fd, int result_fd) {
  reset_after_fork();
  uint32_t index;
  for (;;) {
    ssize_t n = ::read(job_fd, &index, sizeof index);
    if (n < 0 && errno == EINTR) continue;
    if (n != ssize_t(sizeof index) || index >= jobs.size()) break;
    PoolResult r = compile_here(jobs[index]);
    const std::vector<char>& body = r.ok ? r.image : std::vector<char>(r.error.begin(), r.error.end());
    Frame f{index, r.ok ? 1u : 0u, body.size()};
    if (!write_all(result_fd, &f, sizeof f) || !write_all(result_fd, body.data(), body.size())) break;
  }
  remove_own_pch();
  ::_exit(0);
}

// A child's answers, parsed as its bytes arrive.
struct Reader {
  pid_t pid = -1;
  int fd = -1;
  std::vector<char> buf;

  void take(std::vector<PoolResult>* results, std::vector<bool>* answered) {
    size_t at = 0;
    while (buf.size() - at >= sizeof(Frame)) {
      Frame f;
      std::memcpy(&f, buf.data() + at, sizeof f);
      if (buf.size() - at - sizeof f < f.size) break;
      const char* body = buf.data() + at + sizeof f;
      if (f.job < results->size()) {
        PoolResult& r = (*results)[f.job];
        r.ok = f.ok != 0;
        if (r.ok) {
          r.image.assign(body, body + f.size);
        } else {
          r.error.assign(body, f.size);
        }
        (*answered)[f.job] = true;
      }
      at += sizeof f + f.size;
    }
    buf.erase(buf.begin(), buf.begin() + long(at));
  }
};

}  // namespace

std::vector<PoolResult> compile_in_processes(const std::vector<PoolJob>& jobs, int workers,
                                             const std::function<bool()>& interrupted) {
  std::vector<PoolResult> results(jobs.size());
  size_t children = std::min<size_t>(size_t(std::max(workers, 0)), jobs.size());
  // Every job number goes into the pipe before the fork (it holds 64 KiB: 16384 jobs).
  int job_pipe[2] = {-1, -1};
  if (children < 2 || jobs.size() > 16384 || ::pipe(job_pipe) != 0) {
    for (size_t i = 0; i < jobs.size(); ++i) results[i] = compile_here(jobs[i]);
    return results;
  }
  // Longest first (a job's source length stands for its compile time), so that no worker
  // starts the batch's attention kernel last while the others sit idle.
  std::vector<uint32_t> order(jobs.size());
  for (uint32_t i = 0; i < jobs.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return jobs[a].source.size() > jobs[b].source.size(); });
  write_all(job_pipe[1], order.data(), order.size() * sizeof(uint32_t));
  ::close(job_pipe[1]);
  nvrtc_version();  // NVRTC loaded here, before the fork, not by each child

  std::vector<Reader> readers;
  {
    std::unique_lock<std::shared_mutex> no_compiles(compile_fork_guard());
    for (size_t c = 0; c < children; ++c) {
      int result_pipe[2];
      if (::pipe(result_pipe) != 0) break;
      pid_t pid = ::fork();
      if (pid == 0) {
        ::close(result_pipe[0]);
        for (const Reader& r : readers) ::close(r.fd);
        run_child(jobs, job_pipe[0], result_pipe[1]);
      }
      ::close(result_pipe[1]);
      if (pid < 0) {
        ::close(result_pipe[0]);
        break;
      }
      readers.push_back(Reader{pid, result_pipe[0], {}});
    }
  }
  ::close(job_pipe[0]);

  std::vector<bool> answered(jobs.size(), false);
  std::vector<pollfd> fds;
  for (const Reader& r : readers) fds.push_back({r.fd, POLLIN, 0});
  size_t open = readers.size();
  std::vector<char> chunk(1 << 16);
  while (open > 0) {
    int n = ::poll(fds.data(), fds.size(), interrupted ? 100 : -1);
    if (interrupted && interrupted()) {
      for (const Reader& r : readers) ::kill(r.pid, SIGKILL);
      for (const Reader& r : readers) {
        if (r.fd >= 0) ::close(r.fd);
        while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
      throw PoolInterrupted();
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (size_t c = 0; c < fds.size(); ++c) {
      if (fds[c].fd < 0 || !(fds[c].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = ::read(fds[c].fd, chunk.data(), chunk.size());
      if (got < 0 && errno == EINTR) continue;
      if (got > 0) {
        readers[c].buf.insert(readers[c].buf.end(), chunk.data(), chunk.data() + got);
        readers[c].take(&results, &answered);
        continue;
      }
      ::close(fds[c].fd);
      fds[c].fd = readers[c].fd = -1;
      --open;
    }
  }
  std::string died;
  for (const Reader& r : readers) {
    int status = 0;
    pid_t w;
    do {
      w = ::waitpid(r.pid, &status, 0);
    } while (w < 0 && errno == EINTR);
    if (w == r.pid && WIFSIGNALED(status)) died = "a compile worker died of signal " + std::to_string(WTERMSIG(status));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (answered[i]) continue;
    // No worker answered (one died, or none could be started): compiled here.
    results[i] = compile_here(jobs[i]);
    if (!results[i].ok && !died.empty()) results[i].error += " (" + died + ")";
  }
  return results;
}

}  // namespace tegula::runtime
