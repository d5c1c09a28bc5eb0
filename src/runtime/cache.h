// Compiled kernel images by key: an in-memory map first, then one file per key on disk.
//
// Disk entries are written to a temporary file in the cache directory, fsync'ed and renamed into
// place, so a reader sees a whole entry or none. Each carries its key, its length and a SHA-256 of
// its payload; an entry that fails any check (truncated, bit-flipped, foreign) is deleted and
// reported as a miss, so the caller recompiles: a damaged binary is never loaded. Anything but a
// regular file at an entry's path (a directory, a FIFO, a device, a link to one, an unreadable
// file) is a miss too, looked at but never read, and left alone when a store cannot replace it.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/nvrtc.h"

namespace tegula::runtime {

struct CacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t misses = 0;
  uint64_t stores = 0;
  uint64_t rejected = 0;  // damaged disk entries thrown away
};

class KernelCache {
 public:
  // The directory is TEGULA_CACHE_DIR, else $XDG_CACHE_HOME/tegula, else ~/.cache/tegula.
  KernelCache();
  // An explicit directory; empty means memory only. TEGULA_DISABLE_CACHE=1 turns the disk off in
  // both constructors (the in-memory map stays: it never outlives the process that filled it).
  explicit KernelCache(std::string dir);

  // The process-wide cache compile_cached() uses.
  static KernelCache& global();
  static std::string default_dir();

  // Everything that decides the compiled image. The caller's build_id must cover what the key
  // cannot see: the device library and a stamp of the compiler core, so a changed pass never
  // reuses a stale binary. Files under opts.include_dirs are not read, only their paths hashed.
  static std::string make_key(const std::string& source, const std::string& name, const CompileOptions& opts,
                              int nvrtc_version, const std::string& build_id);

  // *from_disk (when given) says which level hit.
  std::optional<std::vector<char>> lookup(const std::string& key, bool* from_disk = nullptr);
  // Always kept in memory; on disk too when enabled (a failed write leaves the memory entry).
  void store(const std::string& key, const std::vector<char>& image);
  void clear_memory();

  void set_disk_enabled(bool enabled);
  bool disk_enabled() const;
  const std::string& dir() const { return dir_; }
  // Where the entry for `key` lives on disk (whether or not it exists).
  std::string entry_path(const std::string& key) const;

  CacheStats stats() const;
  void reset_stats();

 private:
  std::optional<std::vector<char>> read_entry(const std::string& key);
  void write_entry(const std::string& key, const std::vector<char>& image);

  std::string dir_;
  mutable std::mutex mutex_;  // guards everything below
  bool disk_enabled_ = true;
  std::unordered_map<std::string, std::vector<char>> memory_;
  CacheStats stats_;
};

}  // namespace tegula::runtime
