#include "runtime/cache.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/hash.h"

namespace tegula::runtime {
namespace {

namespace fs = std::filesystem;

// Entry layout, little-endian:
//   magic[8] | u32 format | u32 key length | u64 payload length | payload SHA-256[32] | key | payload
constexpr char kMagic[8] = {'T', 'G', 'L', 'K', 'E', 'R', 'N', 0};
constexpr uint32_t kFormat = 1;
constexpr size_t kHeaderSize = 8 + 4 + 4 + 8 + 32;
constexpr const char* kSuffix = ".tgk";

void put_le(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t get_le(const char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t(static_cast<uint8_t>(in[i])) << (8 * i);
  return value;
}

std::array<uint8_t, 32> payload_digest(const char* data, size_t size) { return Hasher().update(data, size).digest(); }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool env_disables_disk() {
  std::string v = env("TEGULA_DISABLE_CACHE");
  return !v.empty() && v != "0" && v != "false" && v != "FALSE" && v != "off";
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// An entry larger than this is not one we wrote (cubins are a few MB at most).
constexpr off_t kMaxEntryBytes = off_t(1) << 30;

// The whole of `path` when it is (or links to) a readable regular file. Anything else at an
// entry's path (a directory, a FIFO, a device, a socket) is only looked at, never read:
// opening a FIFO for reading would wait for a writer, and a device may act on open. The
// type is checked before opening and again on the open descriptor, which O_NONBLOCK keeps
// from waiting should the path change type in between.
bool read_regular_file(const std::string& path, std::string* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return false;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxEntryBytes;
  if (ok) {
    out->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out->size()) {
      ssize_t n = ::read(fd, &(*out)[got], out->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    out->resize(got);  // a shorter file than fstat said fails the entry's length check
  }
  ::close(fd);
  return ok;
}

// Keys from make_key are hex; anything else is hashed so it cannot escape the directory.
bool safe_file_stem(const std::string& key) {
  return !key.empty() && key.size() <= 128 && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

}  // namespace

KernelCache::KernelCache() : KernelCache(default_dir()) {}

KernelCache::KernelCache(std::string dir) : dir_(std::move(dir)), disk_enabled_(!env_disables_disk()) {}

KernelCache& KernelCache::global() {
  static KernelCache cache;
  return cache;
}

std::string KernelCache::default_dir() {
  std::string dir = env("TEGULA_CACHE_DIR");
  if (!dir.empty()) return dir;
  std::string xdg = env("XDG_CACHE_HOME");
  if (!xdg.empty()) return (fs::path(xdg) / "tegula").string();
  std::string home = env("HOME");
  if (home.empty()) {
    struct passwd pw;
    struct passwd* found = nullptr;
    char buf[4096];
    if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &found) == 0 && found && found->pw_dir) home = found->pw_dir;
  }
  return home.empty() ? "" : (fs::path(home) / ".cache" / "tegula").string();
}

std::string KernelCache::make_key(const std::string& source, const std::string& name, const CompileOptions& opts,
                                  int nvrtc_version, const std::string& build_id) {
  Hasher h;
  h.field("tegula kernel cache key v1").field(source).field(name).field(opts.arch);
  h.field(static_cast<int64_t>(opts.extra_flags.size()));
  for (const std::string& flag : opts.extra_flags) h.field(flag);
  h.field(static_cast<int64_t>(opts.headers.size()));
  for (const auto& [header_name, body] : opts.headers) h.field(header_name).field(body);
  h.field(static_cast<int64_t>(opts.include_dirs.size()));
  for (const std::string& dir : opts.include_dirs) h.field(dir);
  h.field(static_cast<int64_t>(nvrtc_version)).field(build_id);
  return h.hex();
}

std::string KernelCache::entry_path(const std::string& key) const {
  if (dir_.empty()) return "";
  return (fs::path(dir_) / ((safe_file_stem(key) ? key : hash_hex(key)) + kSuffix)).string();
}

void KernelCache::set_disk_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  disk_enabled_ = enabled;
}

bool KernelCache::disk_enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return disk_enabled_ && !dir_.empty();
}

CacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void KernelCache::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = CacheStats();
}

void KernelCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.clear();
}

std::optional<std::vector<char>> KernelCache::lookup(const std::string& key, bool* from_disk) {
  if (from_disk) *from_disk = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  // Disk reads run unlocked: entries are published whole by rename, so there is nothing to race on.
  std::optional<std::vector<char>> image = disk_enabled() ? read_entry(key) : std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!image) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.disk_hits;
  if (from_disk) *from_disk = true;
  memory_.emplace(key, *image);
  return image;
}

void KernelCache::store(const std::string& key, const std::vector<char>& image) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_[key] = image;
    ++stats_.stores;
  }
  if (disk_enabled()) write_entry(key, image);
}

std::optional<std::vector<char>> KernelCache::read_entry(const std::string& key) {
  const std::string path = entry_path(key);
  std::string bytes;
  if (!read_regular_file(path, &bytes)) return std::nullopt;

  const char* p = bytes.data();
  bool ok = bytes.size() >= kHeaderSize && std::memcmp(p, kMagic, sizeof(kMagic)) == 0 && get_le(p + 8, 4) == kFormat;
  const uint64_t key_size = ok ? get_le(p + 12, 4) : 0;
  const uint64_t payload_size = ok ? get_le(p + 16, 8) : 0;
  ok = ok && key_size == key.size() && bytes.size() - kHeaderSize >= key_size &&
       payload_size == bytes.size() - kHeaderSize - key_size && bytes.compare(kHeaderSize, key_size, key) == 0;
  const char* payload = p + kHeaderSize + key_size;
  ok = ok && std::memcmp(payload_digest(payload, payload_size).data(), p + 24, 32) == 0;
  if (!ok) {
    // Only a regular file was read, so only a regular file is removed.
    std::error_code ec;
    fs::remove(path, ec);
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.rejected;
    return std::nullopt;
  }
  return std::vector<char>(payload, payload + payload_size);
}

void KernelCache::write_entry(const std::string& key, const std::vector<char>& image) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_, ec)) {
    // An unwritable cache location is not an error: carry on from memory.
    std::lock_guard<std::mutex> lock(mutex_);
    disk_enabled_ = false;
    return;
  }
  std::string header(kMagic, sizeof(kMagic));
  put_le(&header, kFormat, 4);
  put_le(&header, key.size(), 4);
  put_le(&header, image.size(), 8);
  std::array<uint8_t, 32> digest = payload_digest(image.data(), image.size());
  header.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  header += key;

  static std::atomic<uint64_t> counter{0};
  const std::string path = entry_path(key);
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  bool ok =
      write_all(fd, header.data(), header.size()) && write_all(fd, image.data(), image.size()) && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  // Make the rename itself durable; best effort, the entry is already valid for this boot.
  int dir_fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace tegula::runtime
