// What the cache stores and how it is keyed, pure (no Triton, no Redis): the check of Triton's
// serialized responses (which tells an error response apart), the L2 value format and the L2 key.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tiers.h"

namespace fastpath_cache {

// Triton 2.51 (core r24.10 cache_entry.cc) serializes one response into one buffer:
//   [u32 output count] then per output [u64 n][n bytes: name, datatype, shape, data].
// An error response carries its status outside the buffer, so what the cache can see of it is
// the outputs: the Python backend's and this kit's native backend's errors have none. A response
// with no outputs is therefore refused (kNoOutputs); a successful inference always has one.
enum class ResponseCheck { kOk, kNoOutputs, kMalformed };
ResponseCheck CheckSerializedResponse(const char* data, size_t size);

// The Redis value: "FPC1", u32 buffer count, then per buffer u64 size and its bytes (little endian).
std::string EncodeEntry(const Entry& entry);
// Refuses anything but an exact encoding of well-formed responses (a foreign or corrupt value).
bool DecodeEntry(const std::string& value, Entry* entry, std::string* error);

// The Redis key of Triton's key (a hash of model name, version and inputs) in a namespace:
// "<prefix>rc:<namespace>:<key>". The namespace (the served models' identity) makes entries of
// another build unreachable.
std::string L2Key(const std::string& prefix, const std::string& ns, const std::string& triton_key);

}  // namespace fastpath_cache
