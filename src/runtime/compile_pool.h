// Compiles in worker processes: NVRTC compiles in threads of one process overlap only in
// part (on a 16-core host, 16 threads ran a batch of kernels 2.6x faster than one, where 16
// processes ran it 5.3x faster), so a batch (par_compile, the autotuner) is spread over
// forked children instead.
//
// Each child is a fork of this process that runs C++ only: it takes job numbers from one
// pipe, compiles each job's source with compile() (no cache: the parent stores what comes
// back), writes the image or the error text to its own result pipe, and leaves with _exit,
// removing any precompiled header it made. It never touches Python, CUDA or the cache. No
// compile of this process is in flight while it forks (compile() holds compile_fork_guard
// shared; the fork holds it exclusively), so no NVRTC or precompiled-header lock is copied
// held.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/nvrtc.h"

namespace tegula::runtime {

struct PoolJob {
  std::string source, name;
  CompileOptions options;
};

struct PoolResult {
  bool ok = false;
  std::vector<char> image;
  // Without ok: the child's error text, or why no answer came (the worker died).
  std::string error;
};

// Thrown when `interrupted` says so while the workers run: they are killed and reaped first.
struct PoolInterrupted : std::runtime_error {
  PoolInterrupted() : std::runtime_error("compile_in_processes: interrupted") {}
};

// Results in job order. workers < 2, a single job, or fork failing: compiled here, in order.
// `interrupted` (when given) is asked every 100 ms while the workers run (Ctrl-C: the
// binding checks Python's signals).
std::vector<PoolResult> compile_in_processes(const std::vector<PoolJob>& jobs, int workers,
                                             const std::function<bool()>& interrupted = nullptr);

}  // namespace tegula::runtime
