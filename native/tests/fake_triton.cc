#include "fake_triton.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

struct TRITONSERVER_BufferAttributes {
  size_t byte_size = 0;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
};

struct TRITONSERVER_Parameter {
  std::string name;
  std::string value;
};

struct TRITONSERVER_MetricFamily {
  std::string name;
};

struct TRITONSERVER_Metric {
  std::string family;
  std::string label_key;
  std::string label_value;
  double value = 0;
};

namespace fake_triton {

namespace {

std::mutex mu;  // metrics (the cache's worker thread uses them too)
std::vector<TRITONSERVER_Metric*> live_metrics;
std::atomic<bool> metrics_enabled{true};

TRITONSERVER_Error* Error(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, message.c_str());
}

}  // namespace

TRITONCACHE_Allocator* AsHandle(Allocator* allocator) { return reinterpret_cast<TRITONCACHE_Allocator*>(allocator); }
TRITONCACHE_CacheEntry* AsHandle(Entry* entry) { return reinterpret_cast<TRITONCACHE_CacheEntry*>(entry); }

Entry InsertEntry(const std::vector<std::string>& serialized) {
  Entry entry;
  for (const std::string& s : serialized) entry.buffers.emplace_back(nullptr, s.size());
  return entry;
}

double MetricValue(const std::string& family, const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu);
  double sum = 0;
  for (const TRITONSERVER_Metric* m : live_metrics) {
    if (m->family == family && m->label_key == key && m->label_value == value) sum += m->value;
  }
  return sum;
}

void SetMetricsEnabled(bool enabled) { metrics_enabled = enabled; }

}  // namespace fake_triton

using fake_triton::Error;

extern "C" {

TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** attributes) {
  *attributes = new TRITONSERVER_BufferAttributes();
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* attributes) {
  delete attributes;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryTypeId(TRITONSERVER_BufferAttributes* a, int64_t id) {
  a->memory_type_id = id;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(TRITONSERVER_BufferAttributes* a,
                                                               TRITONSERVER_MemoryType type) {
  a->memory_type = type;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(TRITONSERVER_BufferAttributes* a, size_t size) {
  a->byte_size = size;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryType(TRITONSERVER_BufferAttributes* a,
                                                            TRITONSERVER_MemoryType* type) {
  *type = a->memory_type;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* a, size_t* size) {
  *size = a->byte_size;
  return nullptr;
}

TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(const char* name, const TRITONSERVER_ParameterType type,
                                                  const void* value) {
  if (type != TRITONSERVER_PARAMETER_STRING) return nullptr;
  return new TRITONSERVER_Parameter{name, static_cast<const char*>(value)};
}
void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* parameter) { delete parameter; }

TRITONSERVER_Error* TRITONSERVER_MetricFamilyNew(TRITONSERVER_MetricFamily** family, const TRITONSERVER_MetricKind,
                                                 const char* name, const char*) {
  if (!fake_triton::metrics_enabled) return Error(TRITONSERVER_ERROR_UNAVAILABLE, "metrics are disabled");
  *family = new TRITONSERVER_MetricFamily{name};
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_MetricFamilyDelete(TRITONSERVER_MetricFamily* family) {
  delete family;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_MetricNew(TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family,
                                           const TRITONSERVER_Parameter** labels, const uint64_t label_count) {
  auto* m = new TRITONSERVER_Metric{family->name, "", "", 0};
  if (label_count == 1) {
    m->label_key = labels[0]->name;
    m->label_value = labels[0]->value;
  }
  std::lock_guard<std::mutex> lock(fake_triton::mu);
  fake_triton::live_metrics.push_back(m);
  *metric = m;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_MetricDelete(TRITONSERVER_Metric* metric) {
  std::lock_guard<std::mutex> lock(fake_triton::mu);
  auto& live = fake_triton::live_metrics;
  for (auto it = live.begin(); it != live.end(); ++it) {
    if (*it == metric) {
      live.erase(it);
      break;
    }
  }
  delete metric;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* metric, double value) {
  std::lock_guard<std::mutex> lock(fake_triton::mu);
  metric->value += value;
  return nullptr;
}
TRITONSERVER_Error* TRITONSERVER_MetricSet(TRITONSERVER_Metric* metric, double value) {
  std::lock_guard<std::mutex> lock(fake_triton::mu);
  metric->value = value;
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = TRITONCACHE_API_VERSION_MAJOR;
  *minor = TRITONCACHE_API_VERSION_MINOR;
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_CacheEntryBufferCount(TRITONCACHE_CacheEntry* entry, size_t* count) {
  *count = reinterpret_cast<fake_triton::Entry*>(entry)->buffers.size();
  return nullptr;
}

// As core: a reference to the cache's buffer, CPU only, never of size zero.
TRITONSERVER_Error* TRITONCACHE_CacheEntryAddBuffer(TRITONCACHE_CacheEntry* entry, void* base,
                                                    TRITONSERVER_BufferAttributes* attributes) {
  if (entry == nullptr || base == nullptr || attributes == nullptr) {
    return Error(TRITONSERVER_ERROR_INVALID_ARG, "entry, base, or attrs was nullptr");
  }
  if (attributes->byte_size == 0) return Error(TRITONSERVER_ERROR_INVALID_ARG, "Buffer byte size was zero");
  if (attributes->memory_type != TRITONSERVER_MEMORY_CPU && attributes->memory_type != TRITONSERVER_MEMORY_CPU_PINNED) {
    return Error(TRITONSERVER_ERROR_INVALID_ARG, "Only buffers in CPU memory are allowed in cache currently");
  }
  reinterpret_cast<fake_triton::Entry*>(entry)->buffers.emplace_back(base, attributes->byte_size);
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_CacheEntryGetBuffer(TRITONCACHE_CacheEntry* entry, size_t index, void** base,
                                                    TRITONSERVER_BufferAttributes* attributes) {
  auto& buffers = reinterpret_cast<fake_triton::Entry*>(entry)->buffers;
  if (index >= buffers.size()) return Error(TRITONSERVER_ERROR_INVALID_ARG, "index was greater than count");
  *base = buffers[index].first;
  attributes->byte_size = buffers[index].second;
  attributes->memory_type = TRITONSERVER_MEMORY_CPU;
  attributes->memory_type_id = 0;
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_CacheEntrySetBuffer(TRITONCACHE_CacheEntry* entry, size_t index, void* new_base,
                                                    TRITONSERVER_BufferAttributes* attributes) {
  auto& buffers = reinterpret_cast<fake_triton::Entry*>(entry)->buffers;
  if (index >= buffers.size()) return Error(TRITONSERVER_ERROR_INVALID_ARG, "index was greater than count");
  buffers[index].first = new_base;
  if (attributes != nullptr) buffers[index].second = attributes->byte_size;
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_Copy(TRITONCACHE_Allocator* handle, TRITONCACHE_CacheEntry* entry_handle) {
  auto* allocator = reinterpret_cast<fake_triton::Allocator*>(handle);
  auto* entry = reinterpret_cast<fake_triton::Entry*>(entry_handle);
  ++allocator->copies;
  if (allocator->fail) return Error(TRITONSERVER_ERROR_INTERNAL, "fake copy failure");
  if (allocator->mode == fake_triton::Allocator::Mode::kInsert) {
    // core's SerializeResponses: one response into each placeholder, of exactly its size
    if (entry->buffers.size() != allocator->serialized.size()) {
      return Error(TRITONSERVER_ERROR_INTERNAL, "Expected number of responses in cache does not match");
    }
    for (size_t i = 0; i < entry->buffers.size(); ++i) {
      if (entry->buffers[i].first == nullptr || entry->buffers[i].second != allocator->serialized[i].size()) {
        return Error(TRITONSERVER_ERROR_INTERNAL, "Serialized buffer size does not match");
      }
      std::memcpy(entry->buffers[i].first, allocator->serialized[i].data(), allocator->serialized[i].size());
    }
    return nullptr;
  }
  std::vector<std::pair<const void*, size_t>> buffers(entry->buffers.begin(), entry->buffers.end());
  std::string error;
  std::vector<core_copy::Response> built;
  if (!core_copy::DeserializeBuffers(buffers, allocator->responses, &built, &error)) {
    return Error(TRITONSERVER_ERROR_INTERNAL, error);
  }
  allocator->delivered = std::move(built);
  return nullptr;
}

}  // extern "C"
