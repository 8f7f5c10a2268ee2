// A stress driver of the whole response cache (L1 + Redis L2, through its four entry points and
// fake_triton.h) for ThreadSanitizer: two caches sharing one Redis (two replicas) with small L1s
// (entries are evicted and read back from Redis), several threads looking up and inserting the
// same keys, and one thread poisoning Redis (corrupt values, values copied between keys, keys of
// another type) so refusals and their deletes race with everything else. The Redis may be killed
// and restarted meanwhile (tests/reliability/test_tsan_cache.py does): lookups then miss, the
// breaker opens and closes again.
//
// Every answer delivered is checked (core's own reading, the value of its key); a wrong one fails
// the run. Usage: stress_fastpath_cache --redis-port N [--seconds S] [--threads T] [--keys K];
// prints "stress: ..." counts last; exit 1 on a wrong answer or when nothing was read from Redis.
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec.h"
#include "fake_triton.h"

namespace {

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// The answer of key i: one FP32 output "y" of shape [1, 4], each element i.
std::string Answer(int i) {
  const float v = static_cast<float>(i);
  std::string data;
  for (int k = 0; k < 4; ++k) data.append(reinterpret_cast<const char*>(&v), sizeof(v));
  std::string body;
  Put<uint32_t>(&body, 1);
  body += "y";
  Put<uint32_t>(&body, 4);
  body += "FP32";
  Put<uint32_t>(&body, 16);
  Put<int64_t>(&body, 1);
  Put<int64_t>(&body, 4);
  Put<uint64_t>(&body, data.size());
  body += data;
  std::string out;
  Put<uint32_t>(&out, 1);
  Put<uint64_t>(&out, body.size());
  return out + body;
}

std::string Key(int i) { return "key-" + std::to_string(i); }

struct Totals {
  std::atomic<uint64_t> lookups{0}, hits{0}, misses{0}, errors{0}, inserts{0}, wrong{0}, poisoned{0};
} totals;

void Worker(TRITONCACHE_Cache* cache, int keys, uint64_t seed, const std::atomic<bool>* stop) {
  std::mt19937_64 rng(seed);
  while (!stop->load()) {
    const int i = static_cast<int>(rng() % keys);
    const std::string key = Key(i);
    fake_triton::Allocator allocator;
    fake_triton::Entry entry;
    const fake_triton::Result looked = fake_triton::Take(TRITONCACHE_CacheLookup(
        cache, key.c_str(), fake_triton::AsHandle(&entry), fake_triton::AsHandle(&allocator)));
    ++totals.lookups;
    if (looked.ok()) {
      ++totals.hits;
      const std::string expected = Answer(i).substr(4 + 8 + 4 + 1 + 4 + 4 + 4 + 16 + 8);
      if (allocator.delivered.size() != 1 || allocator.delivered[0].size() != 1 ||
          allocator.delivered[0][0].data != expected) {
        ++totals.wrong;
      }
      continue;
    }
    if (looked.code != TRITONSERVER_ERROR_NOT_FOUND) {
      ++totals.errors;
      continue;
    }
    ++totals.misses;
    const std::vector<std::string> serialized = {Answer(i)};
    fake_triton::Allocator inserting;
    inserting.mode = fake_triton::Allocator::Mode::kInsert;
    inserting.serialized = serialized;
    fake_triton::Entry placeholders = fake_triton::InsertEntry(serialized);
    fake_triton::Take(TRITONCACHE_CacheInsert(cache, key.c_str(), fake_triton::AsHandle(&placeholders),
                                              fake_triton::AsHandle(&inserting)));
    ++totals.inserts;
  }
}

// Writes bad values under the caches' keys now and then (reconnecting after a Redis restart).
void Poisoner(int port, const std::string& ns, int keys, const std::atomic<bool>* stop) {
  std::mt19937_64 rng(7);
  redisContext* redis = nullptr;
  while (!stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (redis == nullptr || redis->err) {
      if (redis != nullptr) redisFree(redis);
      timeval timeout{0, 100000};
      redis = redisConnectWithTimeout("127.0.0.1", port, timeout);
      if (redis != nullptr && !redis->err) redisSetTimeout(redis, timeout);
      continue;
    }
    const int i = static_cast<int>(rng() % keys);
    const std::string key = fastpath_cache::L2Key("fastpath:", ns, Key(i));
    redisReply* reply = nullptr;
    switch (rng() % 3) {
      case 0: {  // the value of another key
        fastpath_cache::Entry entry;
        entry.buffers = {Answer((i + 1) % keys)};
        const std::string other = fastpath_cache::L2Key("fastpath:", ns, Key((i + 1) % keys));
        const std::string value = fastpath_cache::EncodeEntry(other, entry, nullptr);
        reply = static_cast<redisReply*>(
            redisCommand(redis, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
        break;
      }
      case 1: {  // a corrupt value: the crash shape
        fastpath_cache::Entry entry;
        entry.buffers = {Answer(i)};
        std::string value = fastpath_cache::EncodeEntry(key, entry, nullptr);
        const uint32_t crash = 0x7FFFFFF0;
        std::memcpy(&value[value.size() - entry.buffers[0].size() + 12], &crash, sizeof(crash));
        reply = static_cast<redisReply*>(
            redisCommand(redis, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
        break;
      }
      default:  // a key of another type
        reply = static_cast<redisReply*>(redisCommand(redis, "DEL %b", key.data(), key.size()));
        if (reply != nullptr) freeReplyObject(reply);
        reply = static_cast<redisReply*>(redisCommand(redis, "LPUSH %b x", key.data(), key.size()));
        break;
    }
    if (reply != nullptr) {
      freeReplyObject(reply);
      ++totals.poisoned;
    }
  }
  if (redis != nullptr) redisFree(redis);
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0, seconds = 8, threads = 4, keys = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--redis-port") port = value;
    if (flag == "--seconds") seconds = value;
    if (flag == "--threads") threads = value;
    if (flag == "--keys") keys = value;
  }
  if (port == 0) {
    std::fprintf(stderr, "usage: %s --redis-port N [--seconds S] [--threads T] [--keys K]\n", argv[0]);
    return 2;
  }
  const std::string ns = "stress-" + std::to_string(std::random_device{}() % 1000000);
  // 8 KiB L1s: ~25 of the 200 entries each, the rest read back from Redis.
  const std::string config = R"({"size":"8192","redis_url":"redis://127.0.0.1:)" + std::to_string(port) +
                             R"(/0","namespace":")" + ns + R"(","breaker_open_ms":"100","timeout_ms":"100",)" +
                             R"("mac_secret_env":"FASTPATH_STRESS_NO_SECRET"})";
  TRITONCACHE_Cache* caches[2] = {nullptr, nullptr};
  for (auto& cache : caches) {
    const fake_triton::Result init = fake_triton::Take(TRITONCACHE_CacheInitialize(&cache, config.c_str()));
    if (!init.ok()) {
      std::fprintf(stderr, "initialize: %s\n", init.message.c_str());
      return 1;
    }
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(Worker, caches[t % 2], keys, 1000 + t, &stop);
  pool.emplace_back(Poisoner, port, ns, keys, &stop);
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  const double l2_hits = fake_triton::MetricValue("fastpath_response_cache_hits_total", "tier", "l2");
  const double l1_hits = fake_triton::MetricValue("fastpath_response_cache_hits_total", "tier", "l1");
  const double opened = fake_triton::MetricValue("fastpath_response_cache_breaker_opened_total");
  double refused = 0;
  for (const char* reason : {"malformed", "foreign_key", "bad_mac", "wrong_type"}) {
    refused += fake_triton::MetricValue("fastpath_response_cache_l2_refused_total", "reason", reason);
  }
  const double deleted = fake_triton::MetricValue("fastpath_response_cache_l2_deletes_total", "outcome", "deleted");
  const double stored = fake_triton::MetricValue("fastpath_response_cache_l2_writes_total", "outcome", "stored");
  for (auto* cache : caches) fake_triton::Take(TRITONCACHE_CacheFinalize(cache));
  std::printf(
      "stress: lookups=%llu hits=%llu l1_hits=%.0f l2_hits=%.0f misses=%llu errors=%llu inserts=%llu "
      "l2_stored=%.0f refused=%.0f deleted=%.0f poisoned=%llu breaker_opened=%.0f wrong=%llu\n",
      static_cast<unsigned long long>(totals.lookups.load()), static_cast<unsigned long long>(totals.hits.load()),
      l1_hits, l2_hits, static_cast<unsigned long long>(totals.misses.load()),
      static_cast<unsigned long long>(totals.errors.load()), static_cast<unsigned long long>(totals.inserts.load()),
      stored, refused, deleted, static_cast<unsigned long long>(totals.poisoned.load()), opened,
      static_cast<unsigned long long>(totals.wrong.load()));
  return totals.wrong.load() == 0 && l2_hits > 0 ? 0 : 1;
}
