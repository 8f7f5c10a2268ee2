// A stand-in for the parts of tritonserver the response cache calls, for its C++ drivers (tests,
// TSan stress): TRITONSERVER_* errors, logs, buffer attributes, parameters and metrics, and the
// TRITONCACHE_* entry and Copy callbacks. Copy behaves as core r24.10's two allocators: on insert
// it writes the responses a test gives into the cache's buffers (the serialized bytes Triton would
// write), on lookup it builds responses from the cache's buffers with core_deserialize.h.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core_deserialize.h"
#include "triton_cache_api.h"

namespace fake_triton {

// What TRITONCACHE_Copy does with an entry.
struct Allocator {
  enum class Mode { kInsert, kLookup };
  Mode mode = Mode::kLookup;
  std::vector<std::string> serialized;         // kInsert: one serialized response per buffer
  size_t responses = 1;                        // kLookup: how many responses Triton asks for
  std::vector<core_copy::Response> delivered;  // kLookup: what was built
  bool fail = false;                           // Copy answers an error (nothing written or built)
  int copies = 0;
};
TRITONCACHE_Allocator* AsHandle(Allocator* allocator);

// A TRITONCACHE_CacheEntry: on insert, one placeholder (base nullptr, size) per response; on
// lookup, the references the cache adds.
struct Entry {
  std::vector<std::pair<void*, size_t>> buffers;
};
TRITONCACHE_CacheEntry* AsHandle(Entry* entry);
// An entry as Triton builds it for an insert of `serialized` (sizes only).
Entry InsertEntry(const std::vector<std::string>& serialized);

// An error's code and message, and deleting it (nullptr: success, kept as -1 / "").
struct Result {
  int code = -1;
  std::string message;
  bool ok() const { return code == -1; }
};
Result Take(TRITONSERVER_Error* error);

// The value of the metric `family` with the label `key`=`value` ("" = no label), summed over live
// metrics (0 if none); the metric API can be switched off (MetricFamilyNew then fails, as with
// metrics disabled).
double MetricValue(const std::string& family, const std::string& key = "", const std::string& value = "");
void SetMetricsEnabled(bool enabled);

void SetVerbose(bool verbose);
// Log lines so far (each "LEVEL message"); Clear empties them.
std::vector<std::string> Logs();
void ClearLogs();

}  // namespace fake_triton
