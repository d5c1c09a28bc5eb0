// SHA-256 (FIPS 180-4), for cache keys and the checksum of cache entries: a collision between two
// kernels' keys would load the wrong binary, so a cryptographic hash is worth its few hundred MB/s.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tegula::runtime {

class Hasher {
 public:
  Hasher();
  Hasher& update(const void* data, size_t size);
  Hasher& update(std::string_view bytes) { return update(bytes.data(), bytes.size()); }
  // Length-prefixed, so a sequence of fields hashes unambiguously: ("ab","c") != ("a","bc").
  Hasher& field(std::string_view bytes);
  Hasher& field(int64_t value);

  // Finishes the hash; the Hasher is then spent, and a further call throws InternalError.
  std::array<uint8_t, 32> digest();
  // 64 lowercase hex digits.
  std::string hex();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

// One-shot SHA-256 of `bytes`, in hex.
std::string hash_hex(std::string_view bytes);
std::string to_hex(const uint8_t* data, size_t size);

}  // namespace tegula::runtime
