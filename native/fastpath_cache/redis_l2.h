// Redis as the shared second tier, through hiredis, built so that Redis down, slow or full never
// fails or stalls a request:
// - a lookup only ever uses an idle, already-connected connection (none idle: L2 is skipped, not
//   waited for) and one GET bounded by `timeout_ms`;
// - connecting, writes (pipelined SET ... PX ttl) and the breaker's probes happen on one worker
//   thread; a write is queued (bounded; dropped and counted when full) and the request goes on;
// - `breaker_failures` failures in a row (I/O errors, timeouts, failed connects) open the breaker:
//   lookups and writes skip Redis for `breaker_open_ms`, then the worker probes (connect + PING)
//   and closes it on success. A rejected write (an error reply such as OOM when Redis is full) is
//   counted but leaves the breaker alone: lookups still work.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "metrics.h"
#include "settings.h"
#include "tiers.h"

struct redisContext;

namespace fastpath_cache {

class RedisL2 {
 public:
  enum class GetResult { kHit, kMiss, kSkipped, kFailed };

  RedisL2(const CacheSettings& settings, const RedisAddress& address, Metrics* metrics);
  ~RedisL2();
  RedisL2(const RedisL2&) = delete;
  RedisL2& operator=(const RedisL2&) = delete;

  // Connects once (bounded by the connect timeout; a failure only counts) and starts the worker.
  void Start();
  // One bounded GET of `key` on the request's thread.
  GetResult Get(const std::string& key, std::string* value);
  // Queues `entry` for a SET of `key`; never waits for Redis.
  void Put(std::string key, EntryPtr entry);
  bool BreakerOpen() const { return breaker_.IsOpen(); }

 private:
  struct Write {
    std::string key;
    EntryPtr entry;
  };

  redisContext* Connect(std::string* error);
  redisContext* Acquire();
  void Release(redisContext* context, bool healthy);
  void ClearPool();
  int PoolLive();
  void Failed(Counter counter, const std::string& what);
  void Maintain();
  void Probe();
  void FlushWrites(std::vector<Write>* batch);
  void WorkerLoop();
  void WakeWorker();

  const CacheSettings settings_;
  const RedisAddress address_;
  Metrics* const metrics_;
  Breaker breaker_;

  std::mutex pool_mu_;
  std::vector<redisContext*> idle_;
  int live_ = 0;  // idle + lent to lookups

  std::mutex mu_;  // the write queue and the worker's flags
  std::condition_variable cv_;
  std::deque<Write> queue_;
  bool stop_ = false;
  bool wake_ = false;
  redisContext* writer_ = nullptr;  // the worker's own connection
  std::thread worker_;
};

}  // namespace fastpath_cache
