// A stand-in for the parts of tritonserver the response cache calls, for its C++ drivers (tests,
// TSan stress): TRITONSERVER_* errors and logs (fake_server.h, shared with the backend's drivers),
// buffer attributes, parameters and metrics, and the TRITONCACHE_* entry and Copy callbacks. Copy behaves as core r24.10's two allocators: on insert
// it writes the responses a test gives into the cache's buffers (the serialized bytes Triton would
// write), on lookup it builds responses from the cache's buffers with core_deserialize.h.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core_deserialize.h"
#include "fake_server.h"
#include "triton/core/tritoncache.h"

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

using fake_server::Result;
using fake_server::Take;

// The value of the metric `family` with the label `key`=`value` ("" = no label), summed over live
// metrics (0 if none); the metric API can be switched off (MetricFamilyNew then fails, as with
// metrics disabled).
double MetricValue(const std::string& family, const std::string& key = "", const std::string& value = "");
void SetMetricsEnabled(bool enabled);

using fake_server::ClearLogs;
using fake_server::Logs;
using fake_server::SetVerbose;

}  // namespace fake_triton
