#include "codec.h"

#include <cstdint>
#include <cstring>

namespace fastpath_cache {

namespace {

constexpr char kMagic[4] = {'F', 'P', 'C', '1'};
constexpr uint32_t kMaxBuffers = 4096;

template <typename T>
bool ReadAt(const char* data, size_t size, size_t* pos, T* out) {
  if (*pos > size || size - *pos < sizeof(T)) return false;
  std::memcpy(out, data + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

}  // namespace

ResponseCheck CheckSerializedResponse(const char* data, size_t size) {
  size_t pos = 0;
  uint32_t outputs = 0;
  if (data == nullptr || !ReadAt(data, size, &pos, &outputs)) return ResponseCheck::kMalformed;
  for (uint32_t i = 0; i < outputs; ++i) {
    uint64_t n = 0;
    if (!ReadAt(data, size, &pos, &n)) return ResponseCheck::kMalformed;
    // name, datatype and shape lengths (3 x u32) and the data length (u64) at least
    if (n < 3 * sizeof(uint32_t) + sizeof(uint64_t) || n > size - pos) return ResponseCheck::kMalformed;
    pos += n;
  }
  if (pos != size) return ResponseCheck::kMalformed;
  return outputs == 0 ? ResponseCheck::kNoOutputs : ResponseCheck::kOk;
}

std::string EncodeEntry(const Entry& entry) {
  std::string out;
  out.reserve(8 + entry.payload_bytes() + 8 * entry.buffers.size());
  out.append(kMagic, sizeof(kMagic));
  Append<uint32_t>(&out, static_cast<uint32_t>(entry.buffers.size()));
  for (const auto& buffer : entry.buffers) {
    Append<uint64_t>(&out, buffer.size());
    out.append(buffer);
  }
  return out;
}

bool DecodeEntry(const std::string& value, Entry* entry, std::string* error) {
  const char* data = value.data();
  const size_t size = value.size();
  if (size < 8 || std::memcmp(data, kMagic, sizeof(kMagic)) != 0) {
    *error = "not a fastpath cache value (no FPC1 header)";
    return false;
  }
  size_t pos = sizeof(kMagic);
  uint32_t count = 0;
  ReadAt(data, size, &pos, &count);
  if (count == 0 || count > kMaxBuffers) {
    *error = "buffer count " + std::to_string(count) + " out of 1.." + std::to_string(kMaxBuffers);
    return false;
  }
  Entry decoded;
  decoded.buffers.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t n = 0;
    if (!ReadAt(data, size, &pos, &n) || n > size - pos) {
      *error = "buffer " + std::to_string(i) + " runs past the value's end";
      return false;
    }
    if (CheckSerializedResponse(data + pos, n) != ResponseCheck::kOk) {
      *error = "buffer " + std::to_string(i) + " is not a serialized response with outputs";
      return false;
    }
    decoded.buffers.emplace_back(data + pos, n);
    pos += n;
  }
  if (pos != size) {
    *error = std::to_string(size - pos) + " bytes after the last buffer";
    return false;
  }
  *entry = std::move(decoded);
  return true;
}

std::string L2Key(const std::string& prefix, const std::string& ns, const std::string& triton_key) {
  std::string key;
  key.reserve(prefix.size() + 4 + ns.size() + triton_key.size());
  key.append(prefix).append("rc:").append(ns).append(":").append(triton_key);
  return key;
}

}  // namespace fastpath_cache
