// The NVRTC version without loading NVRTC.
//
// The kernel cache key includes the NVRTC version, but loading libnvrtc costs several
// milliseconds: more than the rest of a disk-cache hit. After the first real load, the
// library's path, size and modification time are recorded next to the cache, with the
// environment variables that choose which library loads; a later process whose
// environment and library file still match reads the version from that record.
#pragma once
#include <string>

namespace tegula::runtime {

// The NVRTC version (as nvrtc_version()), from the record in `cache_dir` when it still
// describes the library this process would load; loads NVRTC and rewrites the record
// otherwise. An empty cache_dir always loads.
int nvrtc_version_cached(const std::string& cache_dir);

}  // namespace tegula::runtime
