#include "metrics.h"

#include <string>
#include <vector>

#include "common.h"

namespace fastpath_cache {

namespace {

struct Series {
  const char* label_value;  // nullptr: no label
  int index;
};

struct Family {
  const char* name;
  const char* description;
  TRITONSERVER_MetricKind kind;
  const char* label_key;
  std::vector<Series> series;
};

int C(Counter c) { return static_cast<int>(c); }
int G(Gauge g) { return static_cast<int>(g); }

const std::vector<Family>& Families() {
  static const std::vector<Family> families = {
      {"fastpath_response_cache_hits_total", "Response-cache lookups answered from a tier (l1: in process, l2: Redis)",
       TRITONSERVER_METRIC_KIND_COUNTER, "tier", {{"l1", C(Counter::kL1Hit)}, {"l2", C(Counter::kL2Hit)}}},
      {"fastpath_response_cache_misses_total", "Response-cache lookups answered by neither tier",
       TRITONSERVER_METRIC_KIND_COUNTER, nullptr, {{nullptr, C(Counter::kMiss)}}},
      {"fastpath_response_cache_inserts_total", "Responses stored in the in-process tier",
       TRITONSERVER_METRIC_KIND_COUNTER, nullptr, {{nullptr, C(Counter::kInsert)}}},
      {"fastpath_response_cache_refused_total",
       "Responses not stored: error_response (no outputs: an error), too_large, malformed",
       TRITONSERVER_METRIC_KIND_COUNTER, "reason",
       {{"error_response", C(Counter::kRefusedErrorResponse)},
        {"too_large", C(Counter::kRefusedTooLarge)},
        {"malformed", C(Counter::kRefusedMalformed)}}},
      {"fastpath_response_cache_evictions_total", "Entries taken out of the in-process tier",
       TRITONSERVER_METRIC_KIND_COUNTER, "reason",
       {{"capacity", C(Counter::kEvictedCapacity)}, {"expired", C(Counter::kEvictedExpired)}}},
      {"fastpath_response_cache_l2_failures_total",
       "Redis operations that failed (the request went on without Redis): get, set, connect",
       TRITONSERVER_METRIC_KIND_COUNTER, "op",
       {{"get", C(Counter::kL2GetFailure)},
        {"set", C(Counter::kL2SetFailure)},
        {"connect", C(Counter::kL2ConnectFailure)}}},
      {"fastpath_response_cache_l2_refused_total",
       "Redis values refused, answered as misses and deleted: malformed (not a whole, well-formed value), "
       "foreign_key (written under another key), bad_mac (no or a wrong MAC), wrong_type (not a string key)",
       TRITONSERVER_METRIC_KIND_COUNTER, "reason",
       {{"malformed", C(Counter::kL2RefusedMalformed)},
        {"foreign_key", C(Counter::kL2RefusedForeignKey)},
        {"bad_mac", C(Counter::kL2RefusedBadMac)},
        {"wrong_type", C(Counter::kL2RefusedWrongType)}}},
      {"fastpath_response_cache_l2_deletes_total",
       "Refused keys deleted from Redis (deleted), or not (dropped: write queue full, or the breaker open)",
       TRITONSERVER_METRIC_KIND_COUNTER, "outcome",
       {{"deleted", C(Counter::kL2Deleted)}, {"dropped", C(Counter::kL2DeleteDropped)}}},
      {"fastpath_response_cache_l2_skipped_total",
       "L1 misses that did not ask Redis: breaker_open, no_connection (none idle; a lookup never waits), "
       "bypass (the adaptive L2 bypass: Redis has not been hitting, only a sample asks)",
       TRITONSERVER_METRIC_KIND_COUNTER, "reason",
       {{"breaker_open", C(Counter::kL2SkippedBreaker)},
        {"no_connection", C(Counter::kL2SkippedNoConnection)},
        {"bypass", C(Counter::kL2SkippedBypass)}}},
      {"fastpath_response_cache_l2_lookups_total",
       "L1 misses that asked Redis and got an answer (a hit, no value, or a value refused); hits_total{tier=\"l2\"} "
       "over this is the L2 hit rate",
       TRITONSERVER_METRIC_KIND_COUNTER, nullptr, {{nullptr, C(Counter::kL2Lookup)}}},
      {"fastpath_response_cache_l2_writes_total",
       "Entries sent to Redis (stored) or dropped (write queue full in entries or bytes, or the breaker open)",
       TRITONSERVER_METRIC_KIND_COUNTER, "outcome",
       {{"stored", C(Counter::kL2Written)}, {"dropped", C(Counter::kL2WriteDropped)}}},
      {"fastpath_response_cache_breaker_opened_total",
       "Times the Redis breaker opened (a failed probe opens it again)", TRITONSERVER_METRIC_KIND_COUNTER, nullptr,
       {{nullptr, C(Counter::kBreakerOpened)}}},
      {"fastpath_response_cache_l2_bytes_total", "Bytes of cache values read from and written to Redis",
       TRITONSERVER_METRIC_KIND_COUNTER, "direction",
       {{"read", C(Counter::kL2BytesRead)}, {"written", C(Counter::kL2BytesWritten)}}},
      {"fastpath_response_cache_internal_errors_total",
       "Exceptions caught inside the cache (e.g. out of memory): a lookup answered as a miss, a response "
       "not stored, a Redis worker round skipped",
       TRITONSERVER_METRIC_KIND_COUNTER, "where",
       {{"lookup", C(Counter::kInternalErrorLookup)},
        {"insert", C(Counter::kInternalErrorInsert)},
        {"worker", C(Counter::kInternalErrorWorker)}}},
  };
  return families;
}

const std::vector<Family>& GaugeFamilies() {
  static const std::vector<Family> families = {
      {"fastpath_response_cache_l1_bytes", "Bytes held by the in-process tier (entries and bookkeeping)",
       TRITONSERVER_METRIC_KIND_GAUGE, nullptr, {{nullptr, G(Gauge::kL1Bytes)}}},
      {"fastpath_response_cache_l1_entries", "Entries in the in-process tier", TRITONSERVER_METRIC_KIND_GAUGE,
       nullptr, {{nullptr, G(Gauge::kL1Entries)}}},
      {"fastpath_response_cache_breaker_open", "1 while the Redis breaker is open (Redis skipped)",
       TRITONSERVER_METRIC_KIND_GAUGE, nullptr, {{nullptr, G(Gauge::kBreakerOpen)}}},
      {"fastpath_response_cache_l2_bypass_interval",
       "1 in how many L1 misses asks Redis: 1 while Redis hits (or the bypass is off), more while the adaptive "
       "L2 bypass samples (0: no Redis)",
       TRITONSERVER_METRIC_KIND_GAUGE, nullptr, {{nullptr, G(Gauge::kL2BypassInterval)}}},
  };
  return families;
}

}  // namespace

TRITONSERVER_Error* Metrics::Export() {
  auto create = [this](const Family& family, TRITONSERVER_Metric** slots) -> TRITONSERVER_Error* {
    TRITONSERVER_MetricFamily* handle = nullptr;
    FASTPATH_RETURN_IF_ERROR(
        TRITONSERVER_MetricFamilyNew(&handle, family.kind, family.name, family.description));
    families_[family_count_++] = handle;
    for (const Series& series : family.series) {
      TRITONSERVER_Parameter* label = nullptr;
      if (series.label_value != nullptr) {
        label = TRITONSERVER_ParameterNew(family.label_key, TRITONSERVER_PARAMETER_STRING, series.label_value);
        if (label == nullptr) return NewError(TRITONSERVER_ERROR_INTERNAL, "cannot create a metric label");
      }
      const TRITONSERVER_Parameter* labels[1] = {label};
      TRITONSERVER_Error* err = TRITONSERVER_MetricNew(&slots[series.index], handle, labels, label ? 1 : 0);
      if (label != nullptr) TRITONSERVER_ParameterDelete(label);
      FASTPATH_RETURN_IF_ERROR(err);
    }
    return nullptr;
  };
  TRITONSERVER_Error* err = nullptr;
  for (const Family& family : Families()) {
    if ((err = create(family, counters_.data())) != nullptr) break;
  }
  for (const Family& family : GaugeFamilies()) {
    if (err != nullptr) break;
    err = create(family, gauges_.data());
  }
  if (err != nullptr) Release();
  return err;
}

void Metrics::Release() {
  for (auto& metric : counters_) {
    if (metric != nullptr) FASTPATH_CACHE_LOG_IF_ERROR(TRITONSERVER_MetricDelete(metric), "deleting a metric");
    metric = nullptr;
  }
  for (auto& metric : gauges_) {
    if (metric != nullptr) FASTPATH_CACHE_LOG_IF_ERROR(TRITONSERVER_MetricDelete(metric), "deleting a metric");
    metric = nullptr;
  }
  for (int i = 0; i < family_count_; ++i) {
    FASTPATH_CACHE_LOG_IF_ERROR(TRITONSERVER_MetricFamilyDelete(families_[i]), "deleting a metric family");
    families_[i] = nullptr;
  }
  family_count_ = 0;
}

Metrics::~Metrics() { Release(); }

void Metrics::Add(Counter c, uint64_t n) {
  if (n == 0) return;
  const int i = static_cast<int>(c);
  counts_[i].fetch_add(n, std::memory_order_relaxed);
  if (counters_[i] != nullptr) {
    TRITONSERVER_Error* err = TRITONSERVER_MetricIncrement(counters_[i], static_cast<double>(n));
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);
  }
}

void Metrics::Set(Gauge g, double value) {
  TRITONSERVER_Metric* metric = gauges_[static_cast<int>(g)];
  if (metric == nullptr) return;
  TRITONSERVER_Error* err = TRITONSERVER_MetricSet(metric, value);
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}

}  // namespace fastpath_cache
