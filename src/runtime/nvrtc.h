// NVRTC, opened with dlopen on first use (never linked), and the one place that turns CUDA C++
// into a loadable image.
//
// Where libnvrtc comes from, first hit wins:
//   1. TEGULA_NVRTC_PATH, or a path given to set_nvrtc_path() before first use: a library file, or a
//      directory searched as <dir>, <dir>/lib, <dir>/lib64, <dir>/cu13/lib, <dir>/cuda_nvrtc/lib (so the
//      pip packages' site-packages/nvidia directory works);
//   2. $CUDA_HOME/lib64, $CUDA_PATH/lib64;
//   3. the bare sonames libnvrtc.so.13, .12, libnvrtc.so (the loader's path, or a copy torch already loaded);
//   4. /usr/local/cuda/lib64.
#pragma once
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

namespace tegula::runtime {

struct CompileOptions {
  // "sm_80", "sm_90a", "sm_100a" give a cubin; "compute_90" gives PTX.
  std::string arch = "sm_80";
  // Passed through verbatim: "-use_fast_math", "-lineinfo", "-DNAME=1", ...
  std::vector<std::string> extra_flags;
  // (include name, content): handed to NVRTC in memory, so the device library needs no files.
  std::vector<std::pair<std::string, std::string>> headers;
  // Searched after the in-memory headers and before the toolkit's include directories.
  std::vector<std::string> include_dirs;
  // Where this process may keep NVRTC precompiled headers of the device library (NVRTC
  // 12.8+); empty: none. Never part of the cache key: a PCH changes no output byte.
  std::string pch_dir;
  // Ask NVRTC for the time of each of its phases (CompileResult::phases).
  bool report_phases = false;
};

struct CompileResult {
  // The image cuModuleLoadData takes: the cubin, or for a compute_XX arch the PTX text with its
  // terminating NUL.
  std::vector<char> cubin;
  // Warnings of a successful compile (NVRTC's log, possibly empty).
  std::string log;
  // Filled only for compute_XX archs.
  std::string ptx;
  // With report_phases: "front end 120 ms, nvvm 540 ms, ptxas 330 ms" (NVRTC's --time).
  std::string phases;
  // "used", "created", "none" or "failed: <why>": what the precompiled header did.
  std::string pch = "none";
};

// Held shared by every compile(); compile_in_processes (compile_pool.h) holds it exclusively
// while it forks, so that no compile's locks are copied into a child held.
std::shared_mutex& compile_fork_guard();
// In a forked child: a guard of its own (the copy is held by the parent's forking thread).
void reset_after_fork();
// Removes the precompiled headers this process made (a forked child leaves with _exit).
void remove_own_pch();

// Must be called before NVRTC is first used; returns false (and changes nothing) once it is loaded.
bool set_nvrtc_path(const std::string& file_or_dir);
// True when libnvrtc can be loaded; never throws.
bool nvrtc_available();
// The file libnvrtc was loaded from (loads it; throws CudaError when it cannot be found).
std::string nvrtc_library_path();
// major * 1000 + minor * 10, e.g. 13000 for 13.0. Throws CudaError when NVRTC cannot be loaded.
int nvrtc_version();

// The toolkit include directory holding cuda_fp16.h, matched to the loaded NVRTC where possible;
// empty when none was found.
std::string cuda_include_dir();
// Every toolkit directory handed to NVRTC with -I: cuda_include_dir() plus, where the toolkit keeps
// libcu++ apart (CUDA 13: include/cccl), the directory holding <cuda/std/...>.
std::vector<std::string> cuda_include_dirs();

// Always -std=c++17 and --gpu-architecture=<arch>, and -minimal (none of the CUDA runtime's
// host-side declarations: a shorter front end, the same image; a source that needs them is
// compiled again without). Throws CudaError naming the NVRTC call and its error, with the
// full log and the generated lines the errors point at.
//
// With opts.pch_dir, a source that begins with `#include "tegula/tegula.h"` (every generated
// kernel) reuses a precompiled header of the device library. NVRTC ties a PCH to the library
// instance that made it, so it lives only as long as this process: the second compile of a
// process creates it (as a by-product of that compile), later ones use it; the file is
// removed at exit. A PCH that cannot be created or used is skipped, never an error.
CompileResult compile(const std::string& source, const std::string& name, const CompileOptions& opts);

// Lines of `name` the log reports errors on, from "name(LINE): error: ..." (and "catastrophic
// error"); an empty name accepts any file. In order of appearance, without repeats.
std::vector<int> error_lines(const std::string& log, const std::string& name = "");
// The 1-based line of `source`, without its newline; empty when out of range.
std::string line_of(const std::string& source, int line);

}  // namespace tegula::runtime
