// The cache's settings, read from the JSON object Triton builds of `--cache-config fastpath,k=v`
// (every value a string), and the Redis URL. Pure: no Triton symbols, unit-tested as C++.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace fastpath_cache {

struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string password;  // from the URL's user-info, if any (`fastpath serve` passes it by env)
};

struct CacheSettings {
  uint64_t l1_bytes = 64ull << 20;  // "size": the L1's bound, entries' bytes plus bookkeeping; 0 = no L1
  uint64_t max_entry_bytes = 0;     // one entry's bound (0: a quarter of the L1, or 16 MiB without one)
  uint64_t l1_ttl_ms = 300'000;     // "l1_ttl_s"; 0 = entries live until evicted
  uint64_t l2_ttl_ms = 86'400'000;  // "l2_ttl_s"; 0 = no expiry in Redis
  std::string redis_url;            // "" = L1 only
  std::string password_env = "FASTPATH_REDIS_PASSWORD";  // env var holding the password
  // env var holding the replicas' shared secret: when set (16 bytes or more), every L2 value
  // carries an HMAC-SHA256 under it and a value without a valid one is refused
  std::string mac_secret_env = "FASTPATH_CACHE_MAC_SECRET";
  std::string key_prefix = "fastpath:";
  std::string ns;                   // "namespace": the served models' identity; required with redis_url
  int connect_timeout_ms = 50;
  int timeout_ms = 50;              // every Redis command on a request's path
  int breaker_failures = 3;         // consecutive L2 failures that open the breaker
  int breaker_open_ms = 1000;       // how long it skips Redis before one probe
  int pool_size = 4;                // connections for lookups (a lookup never waits for one)
  uint64_t write_queue = 4096;      // pending L2 writes and deletes; more are dropped (counted)
  uint64_t write_queue_bytes = 64ull << 20;  // their keys' and entries' bytes; past it, dropped too
  // The adaptive L2 bypass (tiers.h, L2Gate): while fewer than l2_bypass_min_hits of the last
  // l2_bypass_window lookups Redis answered hit, only a sample of L1 misses asks Redis
  bool l2_bypass = true;                // "l2_bypass": adaptive (true) or off (every L1 miss asks)
  uint32_t l2_bypass_window = 100;
  uint32_t l2_bypass_min_hits = 1;      // at most l2_bypass_window
  uint32_t l2_bypass_max_interval = 64;  // at least 1 in this many L1 misses asks
  uint64_t l2_bypass_probe_ms = 1000;   // and one at least this often (0: only the count)
};

// Parses a flat JSON object whose values are strings, numbers or booleans into their text (a number
// as written, a boolean as true/false) with native/common's reader; a repeated key is refused.
bool ParseFlatJsonObject(const std::string& text, std::map<std::string, std::string>* out, std::string* error);

// Parses Triton's config JSON into `settings` (defaults for absent keys). Unknown keys, malformed
// numbers and out-of-range values are refused with the key named, and so is a redis_url without a
// namespace (a shared Redis needs the served models' identity in every key: no default).
bool ParseSettings(const std::string& json, CacheSettings* settings, std::string* error);

// redis://[[user]:password@]host[:port][/db]; a user name other than "default" is refused.
bool ParseRedisUrl(const std::string& url, RedisAddress* out, std::string* error);

// The URL without its password, for logs.
std::string RedactedUrl(const std::string& url);

// [A-Za-z0-9._-]{1,128}
bool ValidNamespace(const std::string& ns);

// An environment variable's name: [A-Za-z_][A-Za-z0-9_]{0,127}
bool ValidEnvName(const std::string& name);

}  // namespace fastpath_cache
