// A faithful copy of how Triton 2.51 reads a cached response (core r24.10 src/cache_entry.cc:
// CacheEntry::DeserializeBuffers, DeserializeBuffer, DeserializeResponseOutput, and the copy into
// the response's output buffer), for the cache's C++ drivers. Like core it trusts every length:
// run under AddressSanitizer on an exactly-sized heap copy of a buffer, any read past it is
// reported. The cache must only ever hand it buffers it reads whole and in bounds.
//
// Where core builds an InferenceResponse, this returns plain outputs; everything else (the reads,
// their order, the one size check at the end of an output) is core's, bar one no-op noted below.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace core_copy {

struct Output {
  std::string name;
  std::string dtype;  // core converts it with ProtocolStringToDataType (INVALID if unknown)
  std::vector<int64_t> shape;
  std::string data;  // what core copies into the output's buffer
};
using Response = std::vector<Output>;

// CacheEntry::DeserializeResponseOutput: `packed` spans [begin, begin + size).
inline bool DeserializeResponseOutput(const uint8_t* begin, uint64_t size, Output* out, std::string* error) {
  const uint8_t* end = begin + size;
  size_t position = 0;
  uint32_t name_byte_size = 0;
  std::memcpy(&name_byte_size, begin + position, sizeof(uint32_t));
  position += sizeof(uint32_t);
  const uint8_t* name_start = begin + position;
  std::string name(name_start, name_start + name_byte_size);
  position += name_byte_size;

  uint32_t dtype_byte_size = 0;
  std::memcpy(&dtype_byte_size, begin + position, sizeof(uint32_t));
  position += sizeof(uint32_t);
  const uint8_t* dtype_start = begin + position;
  std::string dtype(dtype_start, dtype_start + dtype_byte_size);
  position += dtype_byte_size;

  uint32_t shape_byte_size = 0;
  std::memcpy(&shape_byte_size, begin + position, sizeof(uint32_t));
  position += sizeof(uint32_t);
  std::vector<int64_t> shape(shape_byte_size / sizeof(int64_t), 0);
  // Core copies even 0 bytes, to an empty vector's null data(): undefined on paper (UBSan says so),
  // a no-op in glibc. This copy skips that one call for a scalar (rank 0); every other read is core's.
  if (shape_byte_size != 0) std::memcpy(shape.data(), begin + position, shape_byte_size);
  position += shape_byte_size;

  uint64_t output_byte_size = 0;
  std::memcpy(&output_byte_size, begin + position, sizeof(uint64_t));
  position += sizeof(uint64_t);
  const uint8_t* output_buffer = begin + position;
  position += output_byte_size;

  if (begin + position != end) {
    *error = "Unexpected number of bytes received: " + std::to_string(size) + ", expected: " + std::to_string(position);
    return false;
  }
  out->name = name;
  out->dtype = dtype;
  out->shape = shape;
  // DeserializeBuffer: AllocateDataBuffer(byte_size), then memcpy from the cached bytes.
  out->data.assign(reinterpret_cast<const char*>(output_buffer), output_byte_size);
  return true;
}

// CacheEntry::DeserializeBuffer over one buffer [base, base + size) (core ignores `size`).
inline bool DeserializeBuffer(const uint8_t* base, uint64_t size, Response* response, std::string* error) {
  (void)size;
  if (base == nullptr) {
    *error = "buffer was nullptr";
    return false;
  }
  uint64_t position = 0;
  uint32_t num_outputs = 0;
  std::memcpy(&num_outputs, base, sizeof(num_outputs));
  position += sizeof(num_outputs);
  for (size_t i = 0; i < num_outputs; i++) {
    uint64_t packed_output_size = 0;
    std::memcpy(&packed_output_size, base + position, sizeof(packed_output_size));
    position += sizeof(packed_output_size);
    Output output;
    if (!DeserializeResponseOutput(base + position, packed_output_size, &output, error)) return false;
    position += packed_output_size;
    response->push_back(std::move(output));
  }
  return true;
}

// CacheEntry::DeserializeBuffers: exactly one buffer per response asked for. Each buffer is first
// copied to a heap block of exactly its size, so that AddressSanitizer sees its end.
inline bool DeserializeBuffers(const std::vector<std::pair<const void*, size_t>>& buffers, size_t responses,
                               std::vector<Response>* out, std::string* error) {
  if (buffers.size() != responses) {
    *error = "Expected number of responses in cache does not match. Expected: " + std::to_string(responses) +
             ", received: " + std::to_string(buffers.size());
    return false;
  }
  for (const auto& [base, size] : buffers) {
    std::unique_ptr<uint8_t[]> exact(new uint8_t[size]);
    std::memcpy(exact.get(), base, size);
    Response response;
    if (!DeserializeBuffer(exact.get(), size, &response, error)) return false;
    out->push_back(std::move(response));
  }
  return true;
}

}  // namespace core_copy
