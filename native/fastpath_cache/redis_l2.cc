#include "redis_l2.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <chrono>
#include <cstdarg>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

#include "codec.h"
#include "common.h"

namespace fastpath_cache {

namespace {

constexpr size_t kMaxPipeline = 256;
constexpr auto kWorkerTick = std::chrono::milliseconds(100);
// Writes are gathered this long, then sent as one pipeline. While writes keep coming the worker
// wakes by itself every kGatherWrites; only the first write after a quiet round wakes it (and a
// full pipeline): a wake is a futex call on Triton's thread, and on a busy machine often a switch
// to the worker on that thread's core (measured: 3-7 us of a unique request's insert when every
// drained queue's first write woke it, against 0.05 us for the rest of the enqueue).
constexpr auto kGatherWrites = std::chrono::milliseconds(2);

timeval Millis(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* reply) const {
    if (reply != nullptr) freeReplyObject(reply);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

std::string ContextError(redisContext* context) {
  if (context == nullptr) return "no connection";
  return context->errstr[0] ? context->errstr : "I/O error";
}

// A command on a connection; nullptr with `*error` set when the connection failed.
Reply Command(redisContext* context, std::string* error, const char* format, ...) {
  va_list args;
  va_start(args, format);
  void* raw = redisvCommand(context, format, args);
  va_end(args);
  if (raw == nullptr) *error = ContextError(context);
  return Reply(static_cast<redisReply*>(raw));
}

}  // namespace

RedisL2::RedisL2(const CacheSettings& settings, const RedisAddress& address, const HmacSha256* mac,
                 Metrics* metrics)
    : settings_(settings),
      address_(address),
      mac_(mac),
      metrics_(metrics),
      breaker_(settings.breaker_failures, static_cast<uint64_t>(settings.breaker_open_ms) * 1'000'000),
      queue_(settings.write_queue, settings.write_queue_bytes) {}

RedisL2::~RedisL2() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (writer_ != nullptr) redisFree(writer_);
  ClearPool();
}

void RedisL2::Start() {
  Maintain();
  worker_ = std::thread([this] { WorkerLoop(); });
}

redisContext* RedisL2::Connect(std::string* error) {
  redisContext* context = redisConnectWithTimeout(address_.host.c_str(), address_.port,
                                                  Millis(settings_.connect_timeout_ms));
  if (context == nullptr || context->err) {
    *error = "connect to " + address_.host + ":" + std::to_string(address_.port) + ": " + ContextError(context);
    if (context != nullptr) redisFree(context);
    return nullptr;
  }
  if (redisSetTimeout(context, Millis(settings_.timeout_ms)) != REDIS_OK) {
    *error = "setting the command timeout: " + ContextError(context);
    redisFree(context);
    return nullptr;
  }
  auto check = [&](Reply reply, const char* what) {
    if (reply == nullptr) {
      *error = std::string(what) + ": " + *error;
      return false;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
      *error = std::string(what) + " refused: " + std::string(reply->str, reply->len);
      return false;
    }
    return true;
  };
  bool ok = true;
  if (!address_.password.empty()) {
    ok = check(Command(context, error, "AUTH %b", address_.password.data(), address_.password.size()), "AUTH");
  }
  if (ok && address_.db != 0) ok = check(Command(context, error, "SELECT %d", address_.db), "SELECT");
  if (ok) ok = check(Command(context, error, "PING"), "PING");
  if (!ok) {
    redisFree(context);
    return nullptr;
  }
  return context;
}

redisContext* RedisL2::Acquire() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (idle_.empty()) return nullptr;
  redisContext* context = idle_.back();
  idle_.pop_back();
  return context;
}

void RedisL2::Release(redisContext* context, bool healthy) {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (healthy) {
      idle_.push_back(context);
      return;
    }
    --live_;
  }
  redisFree(context);  // after a timeout its stream may hold a late reply: never reused
  WakeWorker();
}

void RedisL2::ClearPool() {
  std::vector<redisContext*> idle;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    idle.swap(idle_);
    live_ -= static_cast<int>(idle.size());
  }
  for (redisContext* context : idle) redisFree(context);
}

int RedisL2::PoolLive() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  return live_;
}

void RedisL2::WakeWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

void RedisL2::Failed(Counter counter, const std::string& what) {
  metrics_->Add(counter);
  if (breaker_.RecordFailure(NowNs())) {
    metrics_->Add(Counter::kBreakerOpened);
    metrics_->Set(Gauge::kBreakerOpen, 1);
    FASTPATH_CACHE_LOG(WARN, "Redis breaker open for " + std::to_string(settings_.breaker_open_ms) +
                                 " ms (requests go on without Redis): " + what);
  }
}

RedisL2::GetResult RedisL2::Get(const std::string& key, std::string* value) {
  if (!breaker_.AllowRequest()) {
    metrics_->Add(Counter::kL2SkippedBreaker);
    return GetResult::kSkipped;
  }
  redisContext* context = Acquire();
  if (context == nullptr) {
    metrics_->Add(Counter::kL2SkippedNoConnection);
    WakeWorker();
    return GetResult::kSkipped;
  }
  std::string error;
  Reply reply = Command(context, &error, "GET %b", key.data(), key.size());
  if (reply == nullptr) {
    Release(context, false);
    Failed(Counter::kL2GetFailure, "GET: " + error);
    return GetResult::kFailed;
  }
  Release(context, true);
  if (reply->type == REDIS_REPLY_STRING) {
    breaker_.RecordSuccess();
    value->assign(reply->str, reply->len);
    metrics_->Add(Counter::kL2BytesRead, reply->len);
    return GetResult::kHit;
  }
  if (reply->type == REDIS_REPLY_NIL) {
    breaker_.RecordSuccess();
    return GetResult::kMiss;
  }
  // A key holding a list, set, ...: Redis answered, only this key is not a cache value.
  constexpr char kWrongType[] = "WRONGTYPE";
  if (reply->type == REDIS_REPLY_ERROR && reply->len >= sizeof(kWrongType) - 1 &&
      std::memcmp(reply->str, kWrongType, sizeof(kWrongType) - 1) == 0) {
    breaker_.RecordSuccess();
    return GetResult::kWrongType;
  }
  // Any other error reply (NOAUTH, LOADING, ...): Redis cannot answer lookups.
  const std::string text = reply->type == REDIS_REPLY_ERROR ? std::string(reply->str, reply->len) : "unexpected reply";
  Failed(Counter::kL2GetFailure, "GET: " + text);
  return GetResult::kFailed;
}

void RedisL2::Put(std::string key, EntryPtr entry) { Enqueue(Write{std::move(key), std::move(entry)}); }

void RedisL2::Delete(std::string key) { Enqueue(Write{std::move(key), nullptr}); }

void RedisL2::Enqueue(Write write) {
  const Counter dropped = write.entry ? Counter::kL2WriteDropped : Counter::kL2DeleteDropped;
  if (!breaker_.AllowRequest()) {
    metrics_->Add(dropped);
    return;
  }
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.Push(std::move(write))) {  // full, in operations or in bytes
      metrics_->Add(dropped);
      return;
    }
    // the first of a burst (the worker sleeps for a tick), or a full pipeline
    wake = (worker_quiet_ && queue_.size() == 1) || queue_.size() == kMaxPipeline;
  }
  if (wake) cv_.notify_one();
}

void RedisL2::Maintain() {
  std::string error;
  if (writer_ == nullptr) {
    writer_ = Connect(&error);
    if (writer_ == nullptr) {
      Failed(Counter::kL2ConnectFailure, error);
      return;
    }
  }
  while (PoolLive() < settings_.pool_size) {
    redisContext* context = Connect(&error);
    if (context == nullptr) {
      Failed(Counter::kL2ConnectFailure, error);
      return;
    }
    std::lock_guard<std::mutex> lock(pool_mu_);
    idle_.push_back(context);
    ++live_;
  }
}

void RedisL2::Probe() {
  std::string error;
  redisContext* context = Connect(&error);  // connect, AUTH, SELECT and PING
  if (context == nullptr) {
    Failed(Counter::kL2ConnectFailure, "probe: " + error);
    return;
  }
  writer_ = context;
  breaker_.Close();
  metrics_->Set(Gauge::kBreakerOpen, 0);
  FASTPATH_CACHE_LOG(INFO, "Redis reachable again at " + address_.host + ":" + std::to_string(address_.port) +
                               "; breaker closed");
}

namespace {

void CountDropped(Metrics* metrics, const std::vector<WriteQueue::Op>& ops, size_t from) {
  uint64_t writes = 0, deletes = 0;
  for (size_t i = from; i < ops.size(); ++i) ++(ops[i].entry ? writes : deletes);
  metrics->Add(Counter::kL2WriteDropped, writes);
  metrics->Add(Counter::kL2DeleteDropped, deletes);
}

}  // namespace

void RedisL2::FlushWrites(std::vector<Write>* batch) {
  if (writer_ == nullptr) {
    CountDropped(metrics_, *batch, 0);
    return;
  }
  std::vector<uint64_t> sizes;
  sizes.reserve(batch->size());
  for (const Write& write : *batch) {
    if (write.entry == nullptr) {
      sizes.push_back(0);
      redisAppendCommand(writer_, "DEL %b", write.key.data(), write.key.size());
      continue;
    }
    const std::string value = EncodeEntry(write.key, *write.entry, mac_);
    sizes.push_back(value.size());
    if (settings_.l2_ttl_ms) {
      redisAppendCommand(writer_, "SET %b %b PX %llu", write.key.data(), write.key.size(), value.data(), value.size(),
                         static_cast<unsigned long long>(settings_.l2_ttl_ms));
    } else {
      redisAppendCommand(writer_, "SET %b %b", write.key.data(), write.key.size(), value.data(), value.size());
    }
  }
  std::string rejected;
  uint64_t rejected_count = 0;
  for (size_t i = 0; i < batch->size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(writer_, &raw) != REDIS_OK || raw == nullptr) {
      const std::string error = ContextError(writer_);
      redisFree(writer_);
      writer_ = nullptr;
      CountDropped(metrics_, *batch, i + 1);
      Failed(Counter::kL2SetFailure, "SET: " + error);
      break;
    }
    Reply reply(static_cast<redisReply*>(raw));
    if ((*batch)[i].entry == nullptr) {  // a DEL: deleted (or already gone), else counted as not done
      metrics_->Add(reply->type == REDIS_REPLY_ERROR ? Counter::kL2DeleteDropped : Counter::kL2Deleted);
      continue;
    }
    if (reply->type == REDIS_REPLY_ERROR) {  // e.g. OOM: Redis is full; lookups still work
      metrics_->Add(Counter::kL2SetFailure);
      if (rejected.empty()) rejected.assign(reply->str, reply->len);
      ++rejected_count;
    } else {
      breaker_.RecordSuccess();
      metrics_->Add(Counter::kL2Written);
      metrics_->Add(Counter::kL2BytesWritten, sizes[i]);
    }
  }
  if (rejected_count && FASTPATH_CACHE_VERBOSE_ENABLED()) {
    FASTPATH_CACHE_LOG(VERBOSE, std::to_string(rejected_count) + " SETs refused by Redis: " + rejected);
  }
}

// One round of the worker: wait for work (or the tick), then probe or reconnect, then send a batch
// of queued operations. False once stopping.
bool RedisL2::WorkerRound(std::vector<Write>* batch) {
  uint64_t dropped_writes = 0, dropped_deletes = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Quiet (the last round sent nothing): sleep until the first write of a burst (or a wake, or
    // the tick). Then, and every round while writes keep coming, gather them for kGatherWrites.
    if (worker_quiet_) cv_.wait_for(lock, kWorkerTick, [this] { return stop_ || wake_ || !queue_.empty(); });
    if (!stop_ && (!worker_quiet_ || !queue_.empty()) && queue_.size() < kMaxPipeline) {
      cv_.wait_for(lock, kGatherWrites, [this] { return stop_ || queue_.size() >= kMaxPipeline; });
    }
    if (stop_) return false;
    wake_ = false;
    worker_quiet_ = queue_.empty();  // read by Enqueue under this lock: it wakes a quiet worker
    if (breaker_.IsOpen()) {
      queue_.Clear(&dropped_writes, &dropped_deletes);
    } else {
      queue_.PopUpTo(kMaxPipeline, batch);
    }
  }
  metrics_->Add(Counter::kL2WriteDropped, dropped_writes);
  metrics_->Add(Counter::kL2DeleteDropped, dropped_deletes);
  FASTPATH_FAULT_POINT("cache.worker");
  if (breaker_.IsOpen()) {
    // Connections made before the failure are dropped, so a closed breaker starts afresh.
    ClearPool();
    if (writer_ != nullptr) {
      redisFree(writer_);
      writer_ = nullptr;
    }
    if (breaker_.ShouldProbe(NowNs())) Probe();
    if (breaker_.IsOpen()) {  // it opened after this batch was taken: the batch is dropped
      CountDropped(metrics_, *batch, 0);
      batch->clear();
      return true;
    }
  }
  Maintain();
  if (!batch->empty()) FlushWrites(batch);
  return true;
}

void RedisL2::WorkerLoop() {
  while (true) {
    std::vector<Write> batch;
    try {
      if (!WorkerRound(&batch)) return;
      continue;
    } catch (const std::exception& e) {
      LogNoThrow(TRITONSERVER_LOG_ERROR, __FILE__, __LINE__, "the Redis worker skipped a round", e.what());
    } catch (...) {
      LogNoThrow(TRITONSERVER_LOG_ERROR, __FILE__, __LINE__, "the Redis worker skipped a round", "unknown exception");
    }
    // e.g. std::bad_alloc: this round's operations count as dropped (some may have landed) and the
    // writer's connection, which may hold replies not read yet, is closed; the worker goes on: an
    // exception leaving this thread would abort the server.
    metrics_->Add(Counter::kInternalErrorWorker);
    CountDropped(metrics_, batch, 0);
    if (writer_ != nullptr) {
      redisFree(writer_);
      writer_ = nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // no busy loop while memory is short
  }
}

}  // namespace fastpath_cache
