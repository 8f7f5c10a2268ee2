#include "codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace fastpath_cache {

namespace {

constexpr char kMagic[4] = {'F', 'P', 'C', '2'};
constexpr uint8_t kAuthNone = 0;
constexpr uint8_t kAuthHmacSha256 = 1;

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

// Triton's protocol datatype strings (common/src/model_config.cc, DataTypeToProtocolString) and
// the bytes of one element; 0 for BYTES (length-prefixed elements).
struct Datatype {
  std::string_view name;
  uint64_t element_bytes;
};
constexpr Datatype kDatatypes[] = {
    {"BOOL", 1}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8}, {"INT8", 1},  {"INT16", 2},
    {"INT32", 4}, {"INT64", 8}, {"FP16", 2},  {"FP32", 4},   {"FP64", 8},   {"BYTES", 0}, {"BF16", 2},
};

const Datatype* FindDatatype(std::string_view name) {
  for (const Datatype& d : kDatatypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

bool Fail(std::string* error, const std::string& what) {
  if (error != nullptr) *error = what;
  return false;
}

// One output's packed bytes [begin, begin + size): the part core's DeserializeResponseOutput reads.
bool CheckOutput(const char* data, size_t size, std::string_view* name_out, std::string* error) {
  size_t pos = 0;
  uint32_t name_bytes = 0;
  if (!ReadAt(data, size, &pos, &name_bytes)) return Fail(error, "no name length");
  if (name_bytes == 0 || name_bytes > kMaxNameBytes) {
    return Fail(error, "name length " + std::to_string(name_bytes) + " out of 1.." + std::to_string(kMaxNameBytes));
  }
  if (size - pos < name_bytes) return Fail(error, "the name runs past the output");
  *name_out = std::string_view(data + pos, name_bytes);
  pos += name_bytes;

  uint32_t dtype_bytes = 0;
  if (!ReadAt(data, size, &pos, &dtype_bytes)) return Fail(error, "no datatype length");
  if (dtype_bytes == 0 || dtype_bytes > 8 || size - pos < dtype_bytes) {
    return Fail(error, "datatype length " + std::to_string(dtype_bytes) + " is not a datatype's");
  }
  const Datatype* dtype = FindDatatype(std::string_view(data + pos, dtype_bytes));
  if (dtype == nullptr) return Fail(error, "an unknown datatype");
  pos += dtype_bytes;

  uint32_t shape_bytes = 0;
  if (!ReadAt(data, size, &pos, &shape_bytes)) return Fail(error, "no shape length");
  if (shape_bytes % sizeof(int64_t) != 0 || shape_bytes / sizeof(int64_t) > kMaxRank || size - pos < shape_bytes) {
    return Fail(error, "shape length " + std::to_string(shape_bytes) + " is not up to " + std::to_string(kMaxRank) +
                           " int64 dims within the output");
  }
  uint64_t elements = 1;
  for (uint32_t i = 0; i < shape_bytes / sizeof(int64_t); ++i) {
    int64_t dim = 0;
    ReadAt(data, size, &pos, &dim);  // in bounds: checked above
    if (dim < 0) return Fail(error, "a negative dim");
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements)) {
      return Fail(error, "the element count overflows");
    }
  }

  uint64_t data_bytes = 0;
  if (!ReadAt(data, size, &pos, &data_bytes)) return Fail(error, "no data length");
  if (data_bytes != size - pos) {
    return Fail(error, "data length " + std::to_string(data_bytes) + " where the output leaves " +
                           std::to_string(size - pos) + " bytes");
  }
  if (dtype->element_bytes != 0) {
    uint64_t expected = 0;
    if (__builtin_mul_overflow(elements, dtype->element_bytes, &expected) || expected != data_bytes) {
      return Fail(error, std::to_string(data_bytes) + " data bytes for " + std::to_string(elements) + " " +
                             std::string(dtype->name) + " elements");
    }
    return true;
  }
  // BYTES: exactly `elements` of [u32 length][bytes], ending at the data's end.
  if (elements > data_bytes / sizeof(uint32_t)) {
    return Fail(error, std::to_string(elements) + " BYTES elements cannot fit in " + std::to_string(data_bytes));
  }
  for (uint64_t i = 0; i < elements; ++i) {
    uint32_t length = 0;
    if (!ReadAt(data, size, &pos, &length) || size - pos < length) {
      return Fail(error, "BYTES element " + std::to_string(i) + " runs past the data");
    }
    pos += length;
  }
  if (pos != size) return Fail(error, std::to_string(size - pos) + " bytes after the last BYTES element");
  return true;
}

}  // namespace

ResponseCheck CheckSerializedResponse(const char* data, size_t size, std::string* error) {
  size_t pos = 0;
  uint32_t outputs = 0;
  if (data == nullptr || !ReadAt(data, size, &pos, &outputs)) {
    Fail(error, "shorter than an output count");
    return ResponseCheck::kMalformed;
  }
  if (outputs == 0) {
    if (size == pos) return ResponseCheck::kNoOutputs;
    Fail(error, "no outputs but " + std::to_string(size - pos) + " more bytes");
    return ResponseCheck::kMalformed;
  }
  std::vector<std::string_view> names;  // for the duplicate check; one output needs none
  if (outputs > 1) names.reserve(std::min<size_t>(outputs, 64));
  for (uint32_t i = 0; i < outputs; ++i) {
    uint64_t n = 0;
    if (!ReadAt(data, size, &pos, &n) || n > size - pos) {
      Fail(error, "output " + std::to_string(i) + " of " + std::to_string(outputs) + " runs past the buffer");
      return ResponseCheck::kMalformed;
    }
    std::string_view name;
    std::string why;
    if (!CheckOutput(data + pos, n, &name, error == nullptr ? nullptr : &why)) {
      Fail(error, "output " + std::to_string(i) + ": " + why);
      return ResponseCheck::kMalformed;
    }
    if (outputs > 1) names.push_back(name);
    pos += n;
  }
  if (pos != size) {
    Fail(error, std::to_string(size - pos) + " bytes after the last output");
    return ResponseCheck::kMalformed;
  }
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
    Fail(error, "two outputs share a name");
    return ResponseCheck::kMalformed;
  }
  return ResponseCheck::kOk;
}

std::string EncodeEntry(const std::string& l2_key, const Entry& entry, const HmacSha256* mac) {
  std::string out;
  out.reserve(sizeof(kMagic) + 1 + 4 + l2_key.size() + 4 + entry.payload_bytes() + 8 * entry.buffers.size() +
              (mac ? kMacBytes : 0));
  out.append(kMagic, sizeof(kMagic));
  Append<uint8_t>(&out, mac ? kAuthHmacSha256 : kAuthNone);
  Append<uint32_t>(&out, static_cast<uint32_t>(l2_key.size()));
  out.append(l2_key);
  Append<uint32_t>(&out, static_cast<uint32_t>(entry.buffers.size()));
  for (const auto& buffer : entry.buffers) {
    Append<uint64_t>(&out, buffer.size());
    out.append(buffer);
  }
  if (mac != nullptr) {
    const Digest tag = mac->Mac(out.data(), out.size());
    out.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  }
  return out;
}

const char* DecodeResultName(DecodeResult result) {
  switch (result) {
    case DecodeResult::kOk: return "ok";
    case DecodeResult::kMalformed: return "malformed";
    case DecodeResult::kForeignKey: return "foreign_key";
    case DecodeResult::kBadMac: return "bad_mac";
  }
  return "?";
}

DecodeResult DecodeEntry(const std::string& value, const std::string& l2_key, const HmacSha256* mac, Entry* entry,
                         std::string* error) {
  const char* data = value.data();
  size_t size = value.size();
  if (size < sizeof(kMagic) + 1 || std::memcmp(data, kMagic, sizeof(kMagic)) != 0) {
    *error = "not a fastpath cache value of this version (no FPC2 header)";
    return DecodeResult::kMalformed;
  }
  size_t pos = sizeof(kMagic);
  uint8_t auth = 0;
  ReadAt(data, size, &pos, &auth);
  if (auth != kAuthNone && auth != kAuthHmacSha256) {
    *error = "unknown authentication " + std::to_string(auth);
    return DecodeResult::kMalformed;
  }
  if (mac != nullptr && auth != kAuthHmacSha256) {
    *error = "the value carries no MAC and this cache has a secret";
    return DecodeResult::kBadMac;
  }
  if (mac == nullptr && auth == kAuthHmacSha256) {
    *error = "the value carries a MAC and this cache has no secret to check it";
    return DecodeResult::kBadMac;
  }
  if (mac != nullptr) {  // checked before anything else of the value is believed
    if (size - pos < kMacBytes) {
      *error = "shorter than its MAC";
      return DecodeResult::kMalformed;
    }
    size -= kMacBytes;
    const Digest tag = mac->Mac(data, size);
    if (!EqualDigests(tag.data(), reinterpret_cast<const uint8_t*>(data + size), kMacBytes)) {
      *error = "the MAC does not match (another secret, or a value not written by a replica)";
      return DecodeResult::kBadMac;
    }
  }
  uint32_t key_bytes = 0;
  if (!ReadAt(data, size, &pos, &key_bytes) || key_bytes > kMaxKeyBytes || size - pos < key_bytes) {
    *error = "no key, or a key length past the value";
    return DecodeResult::kMalformed;
  }
  if (std::string_view(data + pos, key_bytes) != l2_key) {
    *error = "written under another key";
    return DecodeResult::kForeignKey;
  }
  pos += key_bytes;
  uint32_t count = 0;
  if (!ReadAt(data, size, &pos, &count) || count != kResponsesPerEntry) {
    *error = "buffer count " + std::to_string(count) + "; Triton asks for " + std::to_string(kResponsesPerEntry);
    return DecodeResult::kMalformed;
  }
  Entry decoded;
  decoded.buffers.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t n = 0;
    if (!ReadAt(data, size, &pos, &n) || n > size - pos) {
      *error = "buffer " + std::to_string(i) + " runs past the value's end";
      return DecodeResult::kMalformed;
    }
    std::string why;
    const ResponseCheck check = CheckSerializedResponse(data + pos, n, &why);
    if (check != ResponseCheck::kOk) {
      *error = "buffer " + std::to_string(i) + ": " +
               (check == ResponseCheck::kNoOutputs ? std::string("a response with no outputs") : why);
      return DecodeResult::kMalformed;
    }
    decoded.buffers.emplace_back(data + pos, n);
    pos += n;
  }
  if (pos != size) {
    *error = std::to_string(size - pos) + " bytes after the last buffer";
    return DecodeResult::kMalformed;
  }
  *entry = std::move(decoded);
  return DecodeResult::kOk;
}

std::string L2Key(const std::string& prefix, const std::string& ns, const std::string& triton_key) {
  std::string key;
  key.reserve(prefix.size() + 4 + ns.size() + triton_key.size());
  key.append(prefix).append("rc:").append(ns).append(":").append(triton_key);
  return key;
}

}  // namespace fastpath_cache
