// The kit's two-tier response cache for Triton (`--cache-config fastpath,...`): an in-process L1
// (LRU bounded in bytes, with a time-to-live) in front of Redis as a shared L2, keyed by Triton's
// key (model name, version and inputs) inside a namespace naming the served models' identity.
//
// The TRITONCACHE protocol (core r24.10, as the `local` cache uses it):
// - Insert: the entry's buffers are placeholders (base nullptr, the size of one serialized
//   response each); the cache allocates its own memory, points the entry at it with
//   TRITONCACHE_CacheEntrySetBuffer and calls TRITONCACHE_Copy, which serializes the responses
//   into it. The cache reads what it stored only after that copy, and stores it only if it is one
//   response that passes the complete check of codec.h.
// - Lookup: the cache adds references to its buffers with TRITONCACHE_CacheEntryAddBuffer and
//   calls TRITONCACHE_Copy, which builds the response from them before it returns; the entry is
//   kept alive (a shared reference) until then, so an eviction in between frees nothing in use.
//   Core's deserializer trusts every length in a buffer: a value from Redis is parsed completely
//   and checked against the key it was read under (and its MAC) first; a refused one is a miss,
//   counted and deleted from Redis. An L2 hit is promoted to L1 only once the copy succeeded.
// Where a unique request's time goes (Triton 2.51: the lookup runs on the thread that enqueues the
// request, before the batcher; the insert in the response delegator, on the model instance's thread,
// before that response is sent, one response after another for a batch): hashing the inputs, the
// L1 miss, one Redis GET round trip (~60-100 us on 2 shared cores: most of it), then the insert
// (~4 us: sizing, Triton's serialization into our buffer, the complete check, the L1 put, queueing
// the Redis write for the worker). So an L1 miss asks Redis only while Redis hits (tiers.h, L2Gate:
// the adaptive L2 bypass); while it does not, a sample does, and a hit resumes every lookup.
// An error response reaches Insert too (Triton 2.51's dynamic batcher inserts every response):
// its serialized form has zero outputs, and it is refused (codec.h).
// No exception leaves the four entry points: one (e.g. std::bad_alloc) becomes an error Triton
// treats as a miss or an unstored response, and is counted.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "codec.h"
#include "common.h"
#include "metrics.h"
#include "redis_l2.h"
#include "settings.h"
#include "sha256.h"
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

Counter RefusedCounter(DecodeResult result) {
  switch (result) {
    case DecodeResult::kForeignKey: return Counter::kL2RefusedForeignKey;
    case DecodeResult::kBadMac: return Counter::kL2RefusedBadMac;
    default: return Counter::kL2RefusedMalformed;
  }
}

struct AttributesDeleter {
  void operator()(TRITONSERVER_BufferAttributes* attributes) const {
    if (attributes != nullptr) FASTPATH_CACHE_LOG_IF_ERROR(TRITONSERVER_BufferAttributesDelete(attributes), "attrs");
  }
};
using Attributes = std::unique_ptr<TRITONSERVER_BufferAttributes, AttributesDeleter>;

TRITONSERVER_Error* NewAttributes(Attributes* out) {
  TRITONSERVER_BufferAttributes* raw = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesNew(&raw));
  out->reset(raw);
  return nullptr;
}

}  // namespace

class TwoTierCache {
 public:
  explicit TwoTierCache(const CacheSettings& settings)
      : settings_(settings), l1_(settings.l1_bytes, settings.l1_ttl_ms * 1'000'000), gate_(GateOptions(settings)) {}

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
      const char* secret = std::getenv(settings_.mac_secret_env.c_str());
      if (secret != nullptr && *secret) {
        const size_t secret_bytes = std::strlen(secret);
        if (secret_bytes < kMinSecretBytes) {
          return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                          "the secret in $" + settings_.mac_secret_env + " (mac_secret_env) is " +
                              std::to_string(secret_bytes) + " bytes; expected at least " +
                              std::to_string(kMinSecretBytes) + " (or leave it unset: no MAC)");
        }
        mac_ = std::make_unique<HmacSha256>(secret);
      }
      l2_ = std::make_unique<RedisL2>(settings_, address, mac_.get(), &metrics_);
      l2_->Start();  // never fails: an unreachable Redis only opens the breaker
      where = "L2 " + RedactedUrl(settings_.redis_url) + (address.password.empty() ? "" : " (password set)") +
              ", values bound to their key" +
              (mac_ ? " and authenticated (HMAC-SHA256, secret from $" + settings_.mac_secret_env + ")"
                    : " (no MAC: $" + settings_.mac_secret_env + " not set)") +
              ", timeout " + std::to_string(settings_.timeout_ms) + " ms, breaker " +
              std::to_string(settings_.breaker_failures) + " failures / " + std::to_string(settings_.breaker_open_ms) +
              " ms, ttl " + std::to_string(settings_.l2_ttl_ms / 1000) + " s, write queue " +
              std::to_string(settings_.write_queue) + " / " + std::to_string(settings_.write_queue_bytes) + " bytes" +
              (settings_.l2_bypass ? ", adaptive L2 bypass (fewer than " +
                                         std::to_string(settings_.l2_bypass_min_hits) + " hits in the last " +
                                         std::to_string(settings_.l2_bypass_window) + " lookups: 1 in 2.." +
                                         std::to_string(settings_.l2_bypass_max_interval) +
                                         " L1 misses asks Redis, and one every " +
                                         std::to_string(settings_.l2_bypass_probe_ms) + " ms)"
                                   : ", every L1 miss asks Redis (l2_bypass=off)") +
              (l2_->BreakerOpen() ? " (not reachable yet)" : "");
      metrics_.Set(Gauge::kL2BypassInterval, 1);
    }
    FASTPATH_CACHE_LOG(INFO, "namespace '" + settings_.ns + "', L1 " + std::to_string(settings_.l1_bytes) +
                                 " bytes (ttl " + std::to_string(settings_.l1_ttl_ms / 1000) + " s, entries up to " +
                                 std::to_string(settings_.max_entry_bytes) + " bytes), " + where);
    return nullptr;
  }

  TRITONSERVER_Error* Lookup(const std::string& key, TRITONCACHE_CacheEntry* entry, TRITONCACHE_Allocator* allocator) {
    FASTPATH_FAULT_POINT("cache.lookup");
    const uint64_t now = NowNs();
    bool expired = false;
    EntryPtr found = settings_.l1_bytes ? l1_.Get(key, now, &expired) : nullptr;
    if (expired) {
      metrics_.Add(Counter::kEvictedExpired);
      UpdateGauges();
    }
    if (found != nullptr) {
      FASTPATH_RETURN_IF_ERROR(Deliver(*found, entry, allocator));
      metrics_.Add(Counter::kL1Hit);
      return nullptr;
    }
    if (l2_ != nullptr && AsksL2(now)) {
      const std::string l2_key = L2Key(settings_.key_prefix, settings_.ns, key);
      std::string value;
      const RedisL2::GetResult got = l2_->Get(l2_key, &value);
      if (got == RedisL2::GetResult::kHit) {
        auto decoded = std::make_shared<Entry>();
        std::string error;
        const DecodeResult result = DecodeEntry(value, l2_key, mac_.get(), decoded.get(), &error);
        if (result == DecodeResult::kOk) {
          FASTPATH_RETURN_IF_ERROR(Deliver(*decoded, entry, allocator));
          metrics_.Add(Counter::kL2Hit);
          Answered(true, now);
          // Promoted once Triton has built the response from it: the next lookup is an L1 hit.
          if (settings_.l1_bytes) Store(key, decoded, NowNs());
          return nullptr;
        }
        Refuse(l2_key, RefusedCounter(result), DecodeResultName(result), error);
        Answered(false, now);
      } else if (got == RedisL2::GetResult::kWrongType) {
        Refuse(l2_key, Counter::kL2RefusedWrongType, "wrong_type", "the key holds another type than a string");
        Answered(false, now);
      } else if (got == RedisL2::GetResult::kMiss) {
        Answered(false, now);
      }  // skipped (breaker, no idle connection) or failed: Redis said nothing about its contents
    }
    metrics_.Add(Counter::kMiss);
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_NOT_FOUND, "fastpath cache: key not found");
  }

  void CountInternalError(Counter counter) noexcept { metrics_.Add(counter); }

  TRITONSERVER_Error* Insert(const std::string& key, TRITONCACHE_CacheEntry* entry, TRITONCACHE_Allocator* allocator) {
    FASTPATH_FAULT_POINT("cache.insert");
    const uint64_t now = NowNs();
    if (settings_.l1_bytes && l1_.Contains(key, now)) {
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_ALREADY_EXISTS, "fastpath cache: key already exists");
    }
    size_t count = 0;
    FASTPATH_RETURN_IF_ERROR(TRITONCACHE_CacheEntryBufferCount(entry, &count));
    if (count != kResponsesPerEntry) {  // a lookup could never hand it back (codec.h)
      metrics_.Add(Counter::kRefusedMalformed);
      if (FASTPATH_CACHE_VERBOSE_ENABLED()) {
        FASTPATH_CACHE_LOG(VERBOSE, "not storing key " + key + ": " + std::to_string(count) + " responses");
      }
      return nullptr;
    }
    Attributes attributes;
    FASTPATH_RETURN_IF_ERROR(NewAttributes(&attributes));
    auto stored = std::make_shared<Entry>();
    stored->buffers.resize(count);
    uint64_t total = 0;
    for (size_t i = 0; i < count; ++i) {
      void* base = nullptr;
      size_t size = 0;
      TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
      FASTPATH_RETURN_IF_ERROR(TRITONCACHE_CacheEntryGetBuffer(entry, i, &base, attributes.get()));
      FASTPATH_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesByteSize(attributes.get(), &size));
      FASTPATH_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesMemoryType(attributes.get(), &memory_type));
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
      FASTPATH_RETURN_IF_ERROR(TRITONCACHE_CacheEntrySetBuffer(entry, i, stored->buffers[i].data(), nullptr));
    }
    FASTPATH_RETURN_IF_ERROR(TRITONCACHE_Copy(allocator, entry));
    // The same complete check as a value read from Redis: what is stored is what a lookup accepts.
    for (const std::string& buffer : stored->buffers) {
      std::string why;
      const ResponseCheck check = CheckSerializedResponse(buffer.data(), buffer.size(), &why);
      if (check == ResponseCheck::kOk) continue;
      metrics_.Add(check == ResponseCheck::kNoOutputs ? Counter::kRefusedErrorResponse : Counter::kRefusedMalformed);
      if (FASTPATH_CACHE_VERBOSE_ENABLED()) {
        FASTPATH_CACHE_LOG(VERBOSE, "not storing key " + key + ": " + CheckName(check) +
                                        (check == ResponseCheck::kMalformed ? " (" + why + ")" : "") + ", " +
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
  static L2Gate::Options GateOptions(const CacheSettings& settings) {
    L2Gate::Options options;
    options.adaptive = settings.l2_bypass;
    options.window = settings.l2_bypass_window;
    options.min_hits = settings.l2_bypass_min_hits;
    options.max_interval = settings.l2_bypass_max_interval;
    options.probe_ns = settings.l2_bypass_probe_ms * 1'000'000;
    return options;
  }

  // Whether this L1 miss asks Redis. With the breaker open it goes to RedisL2::Get, which counts it
  // skipped for that reason; otherwise the adaptive bypass decides (counted when it skips).
  bool AsksL2(uint64_t now) {
    if (l2_->BreakerOpen() || gate_.ShouldAsk(now)) return true;
    metrics_.Add(Counter::kL2SkippedBypass);
    return false;
  }

  // Redis answered a lookup: `hit` when a value was delivered.
  void Answered(bool hit, uint64_t now) {
    metrics_.Add(Counter::kL2Lookup);
    if (gate_.Record(hit, now)) metrics_.Set(Gauge::kL2BypassInterval, gate_.interval());
  }

  // A value from Redis not handed to Triton: the lookup goes on as a miss, and the key is deleted
  // (queued for the worker, off the request's thread).
  void Refuse(const std::string& l2_key, Counter counter, const char* reason, const std::string& error) {
    metrics_.Add(counter);
    if (FASTPATH_CACHE_VERBOSE_ENABLED()) {
      FASTPATH_CACHE_LOG(VERBOSE, "refused the L2 value of " + l2_key + " (" + reason + "): " + error);
    }
    l2_->Delete(l2_key);
  }

  L1Cache::PutResult Store(const std::string& key, EntryPtr entry, uint64_t now) {
    const L1Cache::PutOutcome outcome = l1_.Put(key, std::move(entry), now);
    if (outcome.result == L1Cache::PutResult::kTooLarge) metrics_.Add(Counter::kRefusedTooLarge);
    metrics_.Add(Counter::kEvictedCapacity, outcome.evicted);
    metrics_.Add(Counter::kEvictedExpired, outcome.expired);
    SetGauges(outcome.bytes, outcome.entries);  // as the put left them: no second look under the lock
    return outcome.result;
  }

  void UpdateGauges() { SetGauges(l1_.bytes(), l1_.entries()); }

  void SetGauges(uint64_t bytes, uint64_t entries) {
    metrics_.Set(Gauge::kL1Bytes, static_cast<double>(bytes));
    metrics_.Set(Gauge::kL1Entries, static_cast<double>(entries));
  }

  TRITONSERVER_Error* Deliver(const Entry& stored, TRITONCACHE_CacheEntry* entry, TRITONCACHE_Allocator* allocator) {
    Attributes attributes;
    FASTPATH_RETURN_IF_ERROR(NewAttributes(&attributes));
    FASTPATH_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryType(attributes.get(), TRITONSERVER_MEMORY_CPU));
    FASTPATH_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryTypeId(attributes.get(), 0));
    for (const std::string& buffer : stored.buffers) {
      FASTPATH_RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetByteSize(attributes.get(), buffer.size()));
      // The entry only references the buffer (it reads the size now); Triton copies out of it in
      // TRITONCACHE_Copy below, while `stored` is still held.
      FASTPATH_RETURN_IF_ERROR(
          TRITONCACHE_CacheEntryAddBuffer(entry, const_cast<char*>(buffer.data()), attributes.get()));
    }
    return TRITONCACHE_Copy(allocator, entry);
  }

  static constexpr size_t kMinSecretBytes = 16;

  const CacheSettings settings_;
  Metrics metrics_;  // declared before the tiers: destroyed after the L2 worker that counts into it
  std::unique_ptr<HmacSha256> mac_;  // the replicas' secret (nullptr: none); outlives the L2 worker too
  L1Cache l1_;
  L2Gate gate_;  // whether an L1 miss asks Redis
  std::unique_ptr<RedisL2> l2_;
};

}  // namespace fastpath_cache

using fastpath_cache::Counter;
using fastpath_cache::ErrorNoThrow;
using fastpath_cache::NewError;
using fastpath_cache::TwoTierCache;

namespace {

// An exception stopped a lookup or an insert: counted, and an error Triton treats as a miss or an
// unstored response (built without allocating where it can: memory may have run out).
TRITONSERVER_Error* Caught(TwoTierCache* cache, Counter counter, const char* what, const char* detail) noexcept {
  cache->CountInternalError(counter);
  return ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, what, detail);
}

}  // namespace

extern "C" {

TRITONSERVER_Error* TRITONCACHE_CacheInitialize(TRITONCACHE_Cache** cache, const char* config) {
  if (cache == nullptr) return ErrorNoThrow(TRITONSERVER_ERROR_INVALID_ARG, "initializing", "cache was nullptr");
  *cache = nullptr;
  try {
    uint32_t major = 0, minor = 0;
    FASTPATH_RETURN_IF_ERROR(TRITONCACHE_ApiVersion(&major, &minor));
    if (major != TRITONCACHE_API_VERSION_MAJOR || minor < TRITONCACHE_API_VERSION_MINOR) {
      return NewError(TRITONSERVER_ERROR_UNSUPPORTED,
                      "the server's cache API " + std::to_string(major) + "." + std::to_string(minor) +
                          " does not support this cache (" + std::to_string(TRITONCACHE_API_VERSION_MAJOR) + "." +
                          std::to_string(TRITONCACHE_API_VERSION_MINOR) + ")");
    }
    fastpath_cache::CacheSettings settings;
    std::string error;
    if (!fastpath_cache::ParseSettings(config == nullptr ? "{}" : config, &settings, &error)) {
      return NewError(TRITONSERVER_ERROR_INVALID_ARG, error);
    }
    auto created = std::make_unique<TwoTierCache>(settings);
    FASTPATH_RETURN_IF_ERROR(created->Init());
    *cache = reinterpret_cast<TRITONCACHE_Cache*>(created.release());
  } catch (const std::exception& e) {
    return ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, "initializing", e.what());
  } catch (...) {
    return ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, "initializing", "an exception of unknown type");
  }
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_CacheFinalize(TRITONCACHE_Cache* cache) {
  if (cache == nullptr) return ErrorNoThrow(TRITONSERVER_ERROR_INVALID_ARG, "finalizing", "cache was nullptr");
  try {
    delete reinterpret_cast<TwoTierCache*>(cache);
  } catch (const std::exception& e) {  // destructors do not throw; this is the last line of defence
    return ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, "finalizing", e.what());
  } catch (...) {
    return ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, "finalizing", "an exception of unknown type");
  }
  return nullptr;
}

TRITONSERVER_Error* TRITONCACHE_CacheLookup(TRITONCACHE_Cache* cache, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  if (cache == nullptr || key == nullptr || entry == nullptr || allocator == nullptr) {
    return ErrorNoThrow(TRITONSERVER_ERROR_INVALID_ARG, "lookup", "cache, key, entry or allocator was nullptr");
  }
  auto* two_tier = reinterpret_cast<TwoTierCache*>(cache);
  try {
    return two_tier->Lookup(key, entry, allocator);
  } catch (const std::exception& e) {  // e.g. bad_alloc: a miss, never a crash
    return Caught(two_tier, Counter::kInternalErrorLookup, "lookup", e.what());
  } catch (...) {
    return Caught(two_tier, Counter::kInternalErrorLookup, "lookup", "an exception of unknown type");
  }
}

TRITONSERVER_Error* TRITONCACHE_CacheInsert(TRITONCACHE_Cache* cache, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  if (cache == nullptr || key == nullptr || entry == nullptr || allocator == nullptr) {
    return ErrorNoThrow(TRITONSERVER_ERROR_INVALID_ARG, "insert", "cache, key, entry or allocator was nullptr");
  }
  auto* two_tier = reinterpret_cast<TwoTierCache*>(cache);
  try {
    return two_tier->Insert(key, entry, allocator);
  } catch (const std::exception& e) {  // e.g. bad_alloc: the response is not stored, the request goes on
    return Caught(two_tier, Counter::kInternalErrorInsert, "insert", e.what());
  } catch (...) {
    return Caught(two_tier, Counter::kInternalErrorInsert, "insert", "an exception of unknown type");
  }
}

}  // extern "C"
