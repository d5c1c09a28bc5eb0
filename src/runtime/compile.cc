#include "runtime/compile.h"

#include "runtime/nvrtc_identity.h"

namespace tegula::runtime {

std::vector<char> compile_cached(KernelCache& cache, const std::string& source, const std::string& name,
                                 const CompileOptions& opts, const std::string& build_id, bool* was_hit) {
  const int version = cache.disk_enabled() ? nvrtc_version_cached(cache.dir()) : nvrtc_version();
  const std::string key = KernelCache::make_key(source, name, opts, version, build_id);
  if (std::optional<std::vector<char>> image = cache.lookup(key)) {
    if (was_hit) *was_hit = true;
    return std::move(*image);
  }
  if (was_hit) *was_hit = false;
  CompileResult result = compile(source, name, opts);
  cache.store(key, result.cubin);
  return std::move(result.cubin);
}

std::vector<char> compile_cached(const std::string& source, const std::string& name, const CompileOptions& opts,
                                 const std::string& build_id, bool* was_hit) {
  return compile_cached(KernelCache::global(), source, name, opts, build_id, was_hit);
}

}  // namespace tegula::runtime
