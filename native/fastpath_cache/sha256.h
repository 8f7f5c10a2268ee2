// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), small and dependency-free, for the MAC that
// binds an L2 value to its key (codec.h). Pure; tested against the FIPS and RFC 4231 vectors in
// native/tests/test_fastpath_cache.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace fastpath_cache {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  Digest Final();  // the object is spent afterwards

 private:
  void Block(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest Sha256Of(const void* data, size_t size);

// HMAC-SHA256 under one key: the key's inner and outer pads are hashed once, each MAC costs the
// message and two more blocks.
class HmacSha256 {
 public:
  explicit HmacSha256(const std::string& key);
  Digest Mac(const void* data, size_t size) const;

 private:
  Sha256 inner_;  // state after the key ^ ipad block
  Sha256 outer_;  // state after the key ^ opad block
};

// Compares without an early exit (the time taken does not tell how many leading bytes match).
bool EqualDigests(const uint8_t* a, const uint8_t* b, size_t size);

}  // namespace fastpath_cache
