// The subset of Triton's cache API (TRITONCACHE_*, tritoncache.h, cache API 0.1) and server API
// (TRITONSERVER_*, tritonserver.h, server API 1.34) this cache implementation uses, declared by
// hand because no Triton headers are installed here. Checked against upstream core at r24.10
// (Triton 2.51): include/triton/core/tritoncache.h and tritonserver.h. Nothing is linked: the
// server that loads the library resolves these symbols (the pytriton wheel's libtritonserver
// exports all of them; tests/unit/test_cache_plugin_build.py checks that).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct TRITONSERVER_Error;
struct TRITONSERVER_BufferAttributes;
struct TRITONSERVER_Parameter;
struct TRITONSERVER_MetricFamily;
struct TRITONSERVER_Metric;
struct TRITONCACHE_Cache;
struct TRITONCACHE_CacheEntry;
struct TRITONCACHE_Allocator;

// Enum values are positional in the upstream headers; the order below must not change.
enum TRITONSERVER_Error_Code {
  TRITONSERVER_ERROR_UNKNOWN = 0,
  TRITONSERVER_ERROR_INTERNAL = 1,
  TRITONSERVER_ERROR_NOT_FOUND = 2,
  TRITONSERVER_ERROR_INVALID_ARG = 3,
  TRITONSERVER_ERROR_UNAVAILABLE = 4,
  TRITONSERVER_ERROR_UNSUPPORTED = 5,
  TRITONSERVER_ERROR_ALREADY_EXISTS = 6,
  TRITONSERVER_ERROR_CANCELLED = 7,
};

enum TRITONSERVER_ParameterType {
  TRITONSERVER_PARAMETER_STRING = 0,
  TRITONSERVER_PARAMETER_INT = 1,
  TRITONSERVER_PARAMETER_BOOL = 2,
  TRITONSERVER_PARAMETER_DOUBLE = 3,
  TRITONSERVER_PARAMETER_BYTES = 4,
};

enum TRITONSERVER_LogLevel {
  TRITONSERVER_LOG_INFO = 0,
  TRITONSERVER_LOG_WARN = 1,
  TRITONSERVER_LOG_ERROR = 2,
  TRITONSERVER_LOG_VERBOSE = 3,
};

enum TRITONSERVER_MemoryType {
  TRITONSERVER_MEMORY_CPU = 0,
  TRITONSERVER_MEMORY_CPU_PINNED = 1,
  TRITONSERVER_MEMORY_GPU = 2,
};

enum TRITONSERVER_MetricKind {
  TRITONSERVER_METRIC_KIND_COUNTER = 0,
  TRITONSERVER_METRIC_KIND_GAUGE = 1,
  TRITONSERVER_METRIC_KIND_HISTOGRAM = 2,
};

// The cache API version this implementation is written against (tritoncache.h r24.10).
constexpr uint32_t TRITONCACHE_API_VERSION_MAJOR = 0;
constexpr uint32_t TRITONCACHE_API_VERSION_MINOR = 1;

// --- server API (tritonserver.h) ---
TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg);
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error);
const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);

bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level);
TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char* filename, const int line,
                                            const char* msg);

TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** buffer_attributes);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* buffer_attributes);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryTypeId(TRITONSERVER_BufferAttributes* buffer_attributes,
                                                                 int64_t memory_type_id);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(TRITONSERVER_BufferAttributes* buffer_attributes,
                                                               TRITONSERVER_MemoryType memory_type);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(TRITONSERVER_BufferAttributes* buffer_attributes,
                                                             size_t byte_size);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryType(TRITONSERVER_BufferAttributes* buffer_attributes,
                                                            TRITONSERVER_MemoryType* memory_type);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* buffer_attributes,
                                                          size_t* byte_size);

TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(const char* name, const TRITONSERVER_ParameterType type,
                                                  const void* value);
void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* parameter);

TRITONSERVER_Error* TRITONSERVER_MetricFamilyNew(TRITONSERVER_MetricFamily** family, const TRITONSERVER_MetricKind kind,
                                                 const char* name, const char* description);
TRITONSERVER_Error* TRITONSERVER_MetricFamilyDelete(TRITONSERVER_MetricFamily* family);
TRITONSERVER_Error* TRITONSERVER_MetricNew(TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family,
                                           const TRITONSERVER_Parameter** labels, const uint64_t label_count);
TRITONSERVER_Error* TRITONSERVER_MetricDelete(TRITONSERVER_Metric* metric);
TRITONSERVER_Error* TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* metric, double value);
TRITONSERVER_Error* TRITONSERVER_MetricSet(TRITONSERVER_Metric* metric, double value);

// --- cache API callbacks the server exports (tritoncache.h) ---
TRITONSERVER_Error* TRITONCACHE_ApiVersion(uint32_t* major, uint32_t* minor);
TRITONSERVER_Error* TRITONCACHE_CacheEntryBufferCount(TRITONCACHE_CacheEntry* entry, size_t* count);
// Adds a buffer (CPU, non-zero size from `buffer_attributes`) that the entry only references.
TRITONSERVER_Error* TRITONCACHE_CacheEntryAddBuffer(TRITONCACHE_CacheEntry* entry, void* base,
                                                    TRITONSERVER_BufferAttributes* buffer_attributes);
// Returns the buffer at `index` (on insert from a response: base nullptr, the size to allocate).
TRITONSERVER_Error* TRITONCACHE_CacheEntryGetBuffer(TRITONCACHE_CacheEntry* entry, size_t index, void** base,
                                                    TRITONSERVER_BufferAttributes* buffer_attributes);
// Points the buffer at `index` to `new_base` (the cache's own memory), keeping its size when
// `buffer_attributes` is null.
TRITONSERVER_Error* TRITONCACHE_CacheEntrySetBuffer(TRITONCACHE_CacheEntry* entry, size_t index, void* new_base,
                                                    TRITONSERVER_BufferAttributes* buffer_attributes);
// Insert: serializes the responses into the entry's buffers. Lookup: builds the responses from them.
TRITONSERVER_Error* TRITONCACHE_Copy(TRITONCACHE_Allocator* allocator, TRITONCACHE_CacheEntry* entry);

// --- what this library implements (the server looks these four up by name) ---
#define FASTPATH_CACHE_EXPORT __attribute__((visibility("default")))
FASTPATH_CACHE_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheInitialize(TRITONCACHE_Cache** cache, const char* config);
FASTPATH_CACHE_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheFinalize(TRITONCACHE_Cache* cache);
FASTPATH_CACHE_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheInsert(TRITONCACHE_Cache* cache, const char* key,
                                                                  TRITONCACHE_CacheEntry* entry,
                                                                  TRITONCACHE_Allocator* allocator);
FASTPATH_CACHE_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheLookup(TRITONCACHE_Cache* cache, const char* key,
                                                                  TRITONCACHE_CacheEntry* entry,
                                                                  TRITONCACHE_Allocator* allocator);

}  // extern "C"
