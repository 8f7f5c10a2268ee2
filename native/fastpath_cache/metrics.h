// The cache's counters, kept as atomics and exported on Triton's metrics port through the
// server's TRITONSERVER_Metric* API (the families are created once per cache; where the server
// refuses them, e.g. metrics off, the atomics still count and nothing is exported).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "triton_cache_api.h"

namespace fastpath_cache {

enum class Counter : int {
  kL1Hit,
  kL2Hit,
  kMiss,
  kInsert,
  kRefusedErrorResponse,
  kRefusedTooLarge,
  kRefusedMalformed,
  kEvictedCapacity,
  kEvictedExpired,
  kL2GetFailure,
  kL2SetFailure,
  kL2ConnectFailure,
  kL2RefusedMalformed,
  kL2RefusedForeignKey,
  kL2RefusedBadMac,
  kL2RefusedWrongType,
  kL2Deleted,
  kL2DeleteDropped,
  kL2SkippedBreaker,
  kL2SkippedNoConnection,
  kL2SkippedBypass,
  kL2Lookup,
  kL2WriteDropped,
  kL2Written,
  kBreakerOpened,
  kL2BytesRead,
  kL2BytesWritten,
  kInternalErrorLookup,
  kInternalErrorInsert,
  kInternalErrorWorker,
  kCount,
};

enum class Gauge : int { kL1Bytes, kL1Entries, kBreakerOpen, kL2BypassInterval, kCount };

class Metrics {
 public:
  Metrics() = default;
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Creates the metric families; on failure the error is returned and nothing is exported.
  TRITONSERVER_Error* Export();
  void Add(Counter c, uint64_t n = 1);
  void Set(Gauge g, double value);
  uint64_t Value(Counter c) const { return counts_[static_cast<int>(c)].load(std::memory_order_relaxed); }

 private:
  void Release();
  std::array<std::atomic<uint64_t>, static_cast<int>(Counter::kCount)> counts_{};
  std::array<TRITONSERVER_Metric*, static_cast<int>(Counter::kCount)> counters_{};
  std::array<TRITONSERVER_Metric*, static_cast<int>(Gauge::kCount)> gauges_{};
  std::array<TRITONSERVER_MetricFamily*, 24> families_{};
  int family_count_ = 0;
};

}  // namespace fastpath_cache
