// Redis as the shared second tier, through hiredis, built so that Redis down, slow or full never
// fails or stalls a request:
// - a lookup only ever uses an idle, already-connected connection (none idle: L2 is skipped, not
//   waited for) and one GET bounded by `timeout_ms`;
// - connecting, writes (pipelined SET ... PX ttl), deletes of refused keys and the breaker's probes
//   happen on one worker thread; a write or delete is queued (bounded in count and bytes; dropped
//   and counted when full) and the request goes on, waking the worker only at the start of a burst
//   (it polls every 2 ms while writes keep coming); the worker survives any exception (counted);
// - `breaker_failures` failures in a row (I/O errors, timeouts, failed connects) open the breaker:
//   lookups and writes skip Redis for `breaker_open_ms`, then the worker probes (connect + PING)
//   and closes it on success. A rejected write (an error reply such as OOM when Redis is full) is
//   counted but leaves the breaker alone: lookups still work. So does a key of another type than a
//   string (WRONGTYPE): Redis answered, that key is simply not a cache value (kWrongType).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "metrics.h"
#include "settings.h"
#include "sha256.h"
#include "tiers.h"

struct redisContext;

namespace fastpath_cache {

class RedisL2 {
 public:
  enum class GetResult { kHit, kMiss, kWrongType, kSkipped, kFailed };

  // `mac`: the replicas' secret for the values written (nullptr: none); outlives this object.
  RedisL2(const CacheSettings& settings, const RedisAddress& address, const HmacSha256* mac, Metrics* metrics);
  ~RedisL2();
  RedisL2(const RedisL2&) = delete;
  RedisL2& operator=(const RedisL2&) = delete;

  // Connects once (bounded by the connect timeout; a failure only counts) and starts the worker.
  void Start();
  // One bounded GET of `key` on the request's thread.
  GetResult Get(const std::string& key, std::string* value);
  // Queues `entry` for a SET of `key` (encoded with the key and MAC, codec.h); never waits for Redis.
  void Put(std::string key, EntryPtr entry);
  // Queues a DEL of `key` (a refused value); never waits for Redis. A write of the same key queued
  // after it still lands: the queue keeps its order.
  void Delete(std::string key);
  bool BreakerOpen() const { return breaker_.IsOpen(); }

 private:
  using Write = WriteQueue::Op;

  redisContext* Connect(std::string* error);
  redisContext* Acquire();
  void Release(redisContext* context, bool healthy);
  void ClearPool();
  int PoolLive();
  void Failed(Counter counter, const std::string& what);
  void Maintain();
  void Probe();
  void Enqueue(Write write);
  void FlushWrites(std::vector<Write>* batch);
  bool WorkerRound(std::vector<Write>* batch);
  void WorkerLoop();
  void WakeWorker();

  const CacheSettings settings_;
  const RedisAddress address_;
  const HmacSha256* const mac_;
  Metrics* const metrics_;
  Breaker breaker_;

  std::mutex pool_mu_;
  std::vector<redisContext*> idle_;
  int live_ = 0;  // idle + lent to lookups

  std::mutex mu_;  // the write queue and the worker's flags
  std::condition_variable cv_;
  WriteQueue queue_;
  bool stop_ = false;
  bool wake_ = false;
  bool worker_quiet_ = true;  // the worker's last round sent nothing: the next write wakes it
  redisContext* writer_ = nullptr;  // the worker's own connection
  std::thread worker_;
};

}  // namespace fastpath_cache
