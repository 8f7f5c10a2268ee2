// What the cache stores and how it is keyed, pure (no Triton, no Redis): the complete check of
// Triton's serialized responses (which also tells an error response apart), the L2 value format
// (bound to its key, optionally authenticated) and the L2 key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sha256.h"
#include "tiers.h"

namespace fastpath_cache {

// Triton 2.51 (core r24.10 cache_entry.cc) serializes one response into one buffer:
//   [u32 output count] then per output [u64 packed size][u32 name length][name]
//   [u32 datatype length][datatype: "FP32", "BYTES", ...][u32 shape bytes][shape: int64 each]
//   [u64 data bytes][data]
// where the packed size counts everything after itself for that output (little endian). Core's
// deserializer (DeserializeBuffer / DeserializeResponseOutput) trusts every one of these lengths,
// so a buffer handed to it must already be proven whole: every output's inner lengths add up to
// exactly its packed size; a name of 1..kMaxNameBytes bytes, unique in the response; a datatype
// among Triton's protocol strings; a shape of at most kMaxRank dims, each >= 0, whose element
// count (overflow-checked) times the datatype's size is the data size, or, for BYTES, exactly
// that many [u32 length][bytes] elements ending at the data's end; and nothing after the last
// output. An error response carries its status outside the buffer, so what the cache sees of it
// is a response with no outputs (the Python backend's and the native backend's errors have none):
// kNoOutputs, refused like a malformed one; a successful inference always has an output.
constexpr uint32_t kMaxNameBytes = 256;
constexpr uint32_t kMaxRank = 64;
enum class ResponseCheck { kOk, kNoOutputs, kMalformed };
// `error` (optional) says what is wrong when the result is not kOk.
ResponseCheck CheckSerializedResponse(const char* data, size_t size, std::string* error = nullptr);

// Responses per entry: Triton 2.51 looks a key up for exactly one response
// (TritonCache::Lookup(InferenceResponse*, key)) and its DeserializeBuffers requires the entry's
// buffer count to equal it; an entry of any other count is neither stored nor handed back.
constexpr size_t kResponsesPerEntry = 1;
constexpr uint32_t kMaxKeyBytes = 1024;
constexpr size_t kMacBytes = 32;

// The Redis value, version 2 (little endian):
//   "FPC2", u8 auth (0: none, 1: HMAC-SHA256), u32 key length, the full L2 key the value was
//   written under, u32 buffer count, per buffer u64 size and one serialized response, then with
//   auth 1 the 32-byte HMAC-SHA256 of everything before it.
// The key makes a value copied to another key useless; the MAC (a secret shared by the replicas)
// makes a forged one useless. Values of version 1 ("FPC1") are refused.
// `mac`: the replicas' secret, or nullptr (then values carry no MAC, and one that does is refused).
std::string EncodeEntry(const std::string& l2_key, const Entry& entry, const HmacSha256* mac);

enum class DecodeResult { kOk, kMalformed, kForeignKey, kBadMac };
// Why a value was refused, as the metrics label it: malformed, foreign_key, bad_mac.
const char* DecodeResultName(DecodeResult result);
// Accepts only a value written under `l2_key` with the same secret (or none), holding exactly
// kResponsesPerEntry responses that pass CheckSerializedResponse with outputs; anything else
// is refused with `error` set, and `entry` is left alone.
DecodeResult DecodeEntry(const std::string& value, const std::string& l2_key, const HmacSha256* mac, Entry* entry,
                         std::string* error);

// The Redis key of Triton's key (a hash of model name, version and inputs) in a namespace:
// "<prefix>rc:<namespace>:<key>". The namespace (the served models' identity) makes entries of
// another build unreachable.
std::string L2Key(const std::string& prefix, const std::string& ns, const std::string& triton_key);

}  // namespace fastpath_cache
