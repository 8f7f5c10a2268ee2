// The kit's two-tier response cache for Triton (`--cache-config fastpath,...`): an in-process L1
// (LRU bounded in bytes, with a time-to-live) in front of Redis as a shared L2, keyed by Triton's
// key (model name, version and inputs) inside a namespace naming the served models' identity.
//
// The TRITONCACHE protocol (core r24.10, as the `local` cache uses it):
// - Insert: the entry's buffers are placeholders (base nullptr, the size of one serialized
//   response each); the cache allocates its own memory, points the entry at it with
//   TRITONCACHE_CacheEntrySetBuffer and calls TRITONCACHE_Copy, which serializes the responses
//   into it. The cache reads what it stored only after that copy.
// - Lookup: the cache adds references to its buffers with TRITONCACHE_CacheEntryAddBuffer and
//   calls TRITONCACHE_Copy, which builds the response from them before it returns; the entry is
//   kept alive (a shared reference) until then, so an eviction in between frees nothing in use.
// An error response reaches Insert too (Triton 2.51's dynamic batcher inserts every response):
// its serialized form has zero outputs, and it is refused (codec.h).
#include <cstdlib>
#include <memory>
#include <string>

#include "codec.h"
#include "common.h"
#include "metrics.h"
#include "redis_l2.h"
#include "settings.h"
#include "tiers.h"
#include "triton_cache_api.h"

namespace fastpath_cache {

namespace {

const char* CheckName(ResponseCheck check) {
  switch (check) {
    case ResponseCheck::kOk: return "ok";
    case ResponseCheck::kNoOutputs: return "a response with no outputs (an error response)";
    case ResponseCheck::kMalformed: return "a malformed serialized response";
  }
  return "?";
}

struct AttributesDeleter {
  void operator()(TRITONSERVER_BufferAttributes* attributes) const {
    if (attributes != nullptr) FASTPATH_CACHE_LOG_IF_ERROR(TRITONSERVER_BufferAttributesDelete(attributes), "attrs");
  }
};
using Attributes = std::unique_ptr<TRITONSERVER_BufferAttributes, AttributesDeleter>;

TRITONSERVER_Error* NewAttributes(Attributes* out) {
  TRITONSERVER_BufferAttributes* raw = nullptr;
  FASTPATH_CACHE_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesNew(&raw));
  out->reset(raw);
  return nullptr;
}

}  // namespace

class TwoTierCache {
 public:
  explicit TwoTierCache(const CacheSettings& settings)
      : settings_(settings), l1_(settings.l1_bytes, settings.l1_ttl_ms * 1'000'000) {}

  TRITONSERVER_Error* Init() {
    TRITONSERVER_Error* err = metrics_.Export();
    if (err != nullptr) {
      FASTPATH_CACHE_LOG(WARN, std::string("metrics not exported: ") + TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
    }
    std::string where = "no L2 (no redis_url)";
    if (!settings_.redis_url.empty()) {
      RedisAddress address;
      std::string error;
      if (!ParseRedisUrl(settings_.redis_url, &address, &error)) {
        return NewError(TRITONSERVER_ERROR_INVALID_ARG, "redis_url: " + error);
      }
      const char* password = settings_.password_env.empty() ? nullptr : std::getenv(settings_.password_env.c_str());
      if (password != nullptr && *password) address.password = password;
      l2_ = std::make_unique<RedisL2>(settings_, address, &metrics_);
      l2_->Start();  // never fails: an unreachable Redis only opens the breaker
      where = "L2 " + RedactedUrl(settings_.redis_url) + (address.password.empty() ? "" : " (password set)") +
              ", timeout " + std::to_string(settings_.timeout_ms) + " ms, breaker " +
              std::to_string(settings_.breaker_failures) + " failures / " + std::to_string(settings_.breaker_open_ms) +
              " ms, ttl " + std::to_string(settings_.l2_ttl_ms / 1000) + " s" +
              (l2_->BreakerOpen() ? " (not reachable yet)" : "");
    }
    FASTPATH_CACHE_LOG(INFO, "namespace '" + settings_.ns + "', L1 " + std::to_string(settings_.l1_bytes) +
                                 " bytes (ttl " + std::to_string(settings_.l1_ttl_ms / 1000) + " s, entries up to " +
                                 std::to_string(settings_.max_entry_bytes) + " bytes), " + where);
    return nullptr;
  }

  TRITONSERVER_Error* Lookup(const std::string& key, TRITONCACHE_CacheEntry* entry, TRITONCACHE_Allocator* allocator) {
    const uint64_t now = NowNs();
    bool expired = false;
    EntryPtr found = settings_.l1_bytes ? l1_.Get(key, now, &expired) : nullptr;
    if (expired) {
      metrics_.Add(Counter::kEvictedExpired);
      UpdateGauges();
    }
    if (found != nullptr) {
      metrics_.Add(Counter::kL1Hit);
      return Deliver(*found, entry, allocator);
    }
    if (l2_ != nullptr) {
      std::string value;
      if (l2_->Get(L2Key(settings_.key_prefix, settings_.ns, key), &value) == RedisL2::GetResult::kHit) {
        auto decoded = std::make_shared<Entry>();
        std::string error;
        if (DecodeEntry(value, decoded.get(), &error)) {
          metrics_.Add(Counter::kL2Hit);
          if (settings_.l1_bytes) Store(key, decoded, now);  // promoted: the next lookup is an L1 hit
          return Deliver(*decoded, entry, allocator);
        }
        metrics_.Add(Counter::kL2BadValue);
        if (FASTPATH_CACHE_VERBOSE_ENABLED()) FASTPATH_CACHE_LOG(VERBOSE, "ignoring the L2 value of " + key + ": " + error);
      }
    }
    metrics_.Add(Counter::kMiss);
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_NOT_FOUND, "fastpath cache: key not found");
  }

  TRITONSERVER_Error* Insert(const std::string& key, TRITONCACHE_CacheEntry* entry, TRITONCACHE_Allocator* allocator) {
    const uint64_t now = NowNs();
    if (settings_.l1_bytes && l1_.Contains(key, now)) {
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_ALREADY_EXISTS, "fastpath cache: key already exists");
    }
    size_t count = 0;
    FASTPATH_CACHE_RETURN_IF_ERROR(TRITONCACHE_CacheEntryBufferCount(entry, &count));
    if (count == 0) {
      metrics_.Add(Counter::kRefusedMalformed);
      return nullptr;
    }
    Attributes attributes;
    FASTPATH_CACHE_RETURN_IF_ERROR(NewAttributes(&attributes));
    auto stored = std::make_shared<Entry>();
    stored->buffers.resize(count);
    uint64_t total = 0;
    for (size_t i = 0; i < count; ++i) {
      void* base = nullptr;
      size_t size = 0;
      TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
      FASTPATH_CACHE_RETURN_IF_ERROR(TRITONCACHE_CacheEntryGetBuffer(entry, i, &base, attributes.get()));
      FASTPATH_CACHE_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesByteSize(attributes.get(), &size));
      FASTPATH_CACHE_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesMemoryType(attributes.get(), &memory_type));
      if (memory_type != TRITONSERVER_MEMORY_CPU && memory_type != TRITONSERVER_MEMORY_CPU_PINNED) {
        return NewError(TRITONSERVER_ERROR_INVALID_ARG, "only buffers in CPU memory can be cached");
      }
      total += size;
      if (total > settings_.max_entry_bytes) {
        metrics_.Add(Counter::kRefusedTooLarge);
        return nullptr;  // not an error of the request: it is simply not cached
      }
      stored->buffers[i].resize(size);
    }
    // Triton serializes the responses straight into the cache's buffers.
    for (size_t i = 0; i < count; ++i) {
      FASTPATH_CACHE_RETURN_IF_ERROR(TRITONCACHE_CacheEntrySetBuffer(entry, i, stored->buffers[i].data(), nullptr));
    }
    FASTPATH_CACHE_RETURN_IF_ERROR(TRITONCACHE_Copy(allocator, entry));
    for (const std::string& buffer : stored->buffers) {
      const ResponseCheck check = CheckSerializedResponse(buffer.data(), buffer.size());
      if (check == ResponseCheck::kOk) continue;
      metrics_.Add(check == ResponseCheck::kNoOutputs ? Counter::kRefusedErrorResponse : Counter::kRefusedMalformed);
      if (FASTPATH_CACHE_VERBOSE_ENABLED()) {
        FASTPATH_CACHE_LOG(VERBOSE, "not storing key " + key + ": " + CheckName(check) + ", " +
                                        std::to_string(count) + " buffer(s), this one " +
                                        std::to_string(buffer.size()) + " bytes");
      }
      return nullptr;  // Triton goes on as after a store; nothing is cached
    }
    if (settings_.l1_bytes) {
      const L1Cache::PutResult result = Store(key, stored, now);
      if (result == L1Cache::PutResult::kExists) {
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_ALREADY_EXISTS, "fastpath cache: key already exists");
      }
      if (result == L1Cache::PutResult::kStored) metrics_.Add(Counter::kInsert);
    }
    if (l2_ != nullptr) l2_->Put(L2Key(settings_.key_prefix, settings_.ns, key), std::move(stored));
    return nullptr;
  }

 private:
  L1Cache::PutResult Store(const std::string& key, EntryPtr entry, uint64_t now) {
    const L1Cache::PutOutcome outcome = l1_.Put(key, std::move(entry), now);
    if (outcome.result == L1Cache::PutResult::kTooLarge) metrics_.Add(Counter::kRefusedTooLarge);
    metrics_.Add(Counter::kEvictedCapacity, outcome.evicted);
    metrics_.Add(Counter::kEvictedExpired, outcome.expired);
    UpdateGauges();
    return outcome.result;
  }

  void UpdateGauges() {
    metrics_.Set(Gauge::kL1Bytes, static_cast<double>(l1_.bytes()));
    metrics_.Set(Gauge::kL1Entries, static_cast<double>(l1_.entries()));
  }

  TRITONSERVER_Error* Deliver(const Entry& stored, TRITONCACHE_CacheEntry* entry, TRITONCACHE_Allocator* allocator) {
    Attributes attributes;
    FASTPATH_CACHE_RETURN_IF_ERROR(NewAttributes(&attributes));
    FASTPATH_CACHE_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryType(attributes.get(), TRITONSERVER_MEMORY_CPU));
    FASTPATH_CACHE_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryTypeId(attributes.get(), 0));
    for (const std::string& buffer : stored.buffers) {
      FASTPATH_CACHE_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetByteSize(attributes.get(), buffer.size()));
      // The entry only references the buffer (it reads the size now); Triton copies out of it in
      // TRITONCACHE_Copy below, while `stored` is still held.
      FASTPATH_CACHE_RETURN_IF_ERROR(
          TRITONCACHE_CacheEntryAddBuffer(entry, const_cast<char*>(buffer.data()), attributes.get()));
    }
    return TRITONCACHE_Copy(allocator, entry);
  }

  const CacheSettings settings_;
  Metrics metrics_;  // declared before the tiers: destroyed after the L2 worker that counts into it
  L1Cache l1_;
  std::unique_ptr<RedisL2> l2_;
};

}  // namespace fastpath_cache

using fastpath_cache::NewError;
using fastpath_cache::TwoTierCache;

extern "C" {

TRITONSERVER_Error* TRITONCACHE_CacheInitialize(TRITONCACHE_Cache** cache, const char* config) {
  if (cache == nullptr) return NewError(TRITONSERVER_ERROR_INVALID_ARG, "cache was nullptr");
  *cache = nullptr;
  uint32_t major = 0, minor = 0;
  FASTPATH_CACHE_RETURN_IF_ERROR(TRITONCACHE_ApiVersion(&major, &minor));
  if (major != TRITONCACHE_API_VERSION_MAJOR || minor < TRITONCACHE_API_VERSION_MINOR) {
    return NewError(TRITONSERVER_ERROR_UNSUPPORTED, "the server's cache API " + std::to_string(major) + "." +
                                                        std::to_string(minor) + " does not support this cache (0.1)");
  }
  fastpath_cache::CacheSettings settings;
  std::string error;
  if (!fastpath_cache::ParseSettings(config == nullptr ? "{}" : config, &settings, &error)) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG, error);
  }
  try {
    auto created = std::make_unique<TwoTierCache>(settings);
    FASTPATH_CACHE_RETURN_IF_ERROR(created->Init());
    *cache = reinterpret_cast<TRITONCACHE_Cache*>(created.release());
  } catch (const std::exception& e) {
    return NewError(TRITONSERVER_ERROR_INTERNAL, std::string("initializing: ") + e.what());
  }
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_CacheFinalize(TRITONCACHE_Cache* cache) {
  if (cache == nullptr) return NewError(TRITONSERVER_ERROR_INVALID_ARG, "cache was nullptr");
  delete reinterpret_cast<TwoTierCache*>(cache);
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_CacheLookup(TRITONCACHE_Cache* cache, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  if (cache == nullptr || key == nullptr || entry == nullptr || allocator == nullptr) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG, "cache, key, entry or allocator was nullptr");
  }
  try {
    return reinterpret_cast<TwoTierCache*>(cache)->Lookup(key, entry, allocator);
  } catch (const std::exception& e) {  // e.g. bad_alloc: a miss, never a crash
    return NewError(TRITONSERVER_ERROR_INTERNAL, std::string("lookup: ") + e.what());
  }
}

TRITONSERVER_Error* TRITONCACHE_CacheInsert(TRITONCACHE_Cache* cache, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  if (cache == nullptr || key == nullptr || entry == nullptr || allocator == nullptr) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG, "cache, key, entry or allocator was nullptr");
  }
  try {
    return reinterpret_cast<TwoTierCache*>(cache)->Insert(key, entry, allocator);
  } catch (const std::exception& e) {
    return NewError(TRITONSERVER_ERROR_INTERNAL, std::string("insert: ") + e.what());
  }
}

}  // extern "C"
