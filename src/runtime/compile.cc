#include "runtime/compile.h"

#include <chrono>

#include "runtime/nvrtc_identity.h"

namespace tegula::runtime {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::string compile_key(KernelCache& cache, const std::string& source, const std::string& name,
                        const CompileOptions& opts, const std::string& build_id) {
  const int version = cache.disk_enabled() ? nvrtc_version_cached(cache.dir()) : nvrtc_version();
  return KernelCache::make_key(source, name, opts, version, build_id);
}

std::vector<char> compile_cached(KernelCache& cache, const std::string& source, const std::string& name,
                                 const CompileOptions& opts, const std::string& build_id, bool* was_hit,
                                 CompileReport* report) {
  auto t0 = std::chrono::steady_clock::now();
  const std::string key = compile_key(cache, source, name, opts, build_id);
  bool from_disk = false;
  std::optional<std::vector<char>> image = cache.lookup(key, &from_disk);
  if (report) {
    report->lookup_ms = ms_since(t0);
    report->cache = image ? (from_disk ? "disk hit" : "memory hit") : "miss";
  }
  if (image) {
    if (was_hit) *was_hit = true;
    return std::move(*image);
  }
  if (was_hit) *was_hit = false;
  auto t1 = std::chrono::steady_clock::now();
  CompileResult result = compile(source, name, opts);
  if (report) {
    report->nvrtc_ms = ms_since(t1);
    report->phases = result.phases;
    report->pch = result.pch;
  }
  cache.store(key, result.cubin);
  return std::move(result.cubin);
}

std::vector<char> compile_cached(const std::string& source, const std::string& name, const CompileOptions& opts,
                                 const std::string& build_id, bool* was_hit, CompileReport* report) {
  return compile_cached(KernelCache::global(), source, name, opts, build_id, was_hit, report);
}

}  // namespace tegula::runtime
