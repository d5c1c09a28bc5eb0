// Source to loadable image, through the kernel cache: the one call the bindings make to build.
#pragma once
#include <string>
#include <vector>

#include "runtime/cache.h"
#include "runtime/nvrtc.h"

namespace tegula::runtime {

// Where a compile_cached call spent its time, for TEGULA_LOG=compile.
struct CompileReport {
  std::string cache = "miss";  // "memory hit", "disk hit" or "miss"
  double lookup_ms = 0, nvrtc_ms = 0;
  std::string phases, pch = "none";  // CompileResult's, on a miss
};

// The image for `source` (a cubin, or PTX for a compute_XX arch): from the global cache when it is
// there, else compiled by NVRTC and stored. build_id: see KernelCache::make_key. *was_hit tells
// which. Compile errors throw CudaError as compile() does, and nothing is stored.
std::vector<char> compile_cached(const std::string& source, const std::string& name, const CompileOptions& opts,
                                 const std::string& build_id, bool* was_hit = nullptr,
                                 CompileReport* report = nullptr);
// The key compile_cached stores the image of `source` under.
std::string compile_key(KernelCache& cache, const std::string& source, const std::string& name,
                        const CompileOptions& opts, const std::string& build_id);
// Same, against a given cache.
std::vector<char> compile_cached(KernelCache& cache, const std::string& source, const std::string& name,
                                 const CompileOptions& opts, const std::string& build_id, bool* was_hit = nullptr,
                                 CompileReport* report = nullptr);

}  // namespace tegula::runtime
