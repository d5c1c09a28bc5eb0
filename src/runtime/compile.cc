#include "runtime/compile.h"

namespace tegula::runtime {

std::vector<char> compile_cached(KernelCache& cache, const std::string& source, const std::string& name,
                                 const CompileOptions& opts, const std::string& build_id, bool* was_hit) {
  const std::string key = KernelCache::make_key(source, name, opts, nvrtc_version(), build_id);
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
