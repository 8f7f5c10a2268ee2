// Tests of the response cache, as C++: the pure parts (the L1's LRU order, byte bound and
// time-to-live, the Redis breaker, the write queue, key namespacing, SHA-256 and HMAC-SHA256, the
// complete check of Triton's serialized responses, the L2 value codec, the settings and Redis URL
// parsers), then the whole cache through its four entry points against a stand-in for tritonserver
// (fake_triton.h; a lookup's response is built by a faithful copy of core's deserializer): what
// Insert refuses, faults injected (FASTPATH_FAULT_INJECTION points and every allocation in turn
// failing) in Lookup and Insert, and, given `--redis-port N` (a real redis-server), the Redis tier:
// refused values (malformed, copied from another key, unauthenticated, wrong type) are misses,
// counted and deleted without opening the breaker, promotion after delivery only, the write queue's
// byte bound, and the worker surviving exceptions.
//
// Built and run by tests/unit/test_cache_plugin_build.py (no Redis), also under AddressSanitizer and
// UndefinedBehaviorSanitizer, and by tests/integration/test_response_cache_plugin.py with a Redis.
// Usage: test_fastpath_cache [--redis-port N]; prints one line per failed check and
// "N passed, N failed" last; exit 1 on any failure (native/tests/harness.h). The Redis cases are the
// "redis" group, run only with a port.
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec.h"
#include "core_deserialize.h"
#include "fake_triton.h"
#include "fault.h"  // native/common: SetFaultHook
#define FASTPATH_TEST_CUSTOM_MAIN
#include "harness.h"
#include "settings.h"
#include "sha256.h"
#include "tiers.h"

#ifndef FASTPATH_FAULT_INJECTION
#error "the driver injects faults: build it with -DFASTPATH_FAULT_INJECTION"
#endif

// Every allocation of this program goes through here, so a test can make the n-th allocation of
// its own thread fail (std::bad_alloc), as memory running out would.
namespace alloc_fault {
thread_local long countdown = -1;  // allocations left before one fails; -1: none fails
thread_local long failed = 0;
void* Allocate(size_t size) {
  if (countdown >= 0 && countdown-- == 0) {
    ++failed;
    throw std::bad_alloc();
  }
  void* p = std::malloc(size ? size : 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace alloc_fault

void* operator new(size_t size) { return alloc_fault::Allocate(size); }
void* operator new[](size_t size) { return alloc_fault::Allocate(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  try {
    return alloc_fault::Allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

using namespace fastpath_cache;  // NOLINT
using fastpath_test::Check;
using fastpath_test::Contains;
using fastpath_test::current;

// The cache's fault points (native/common/fault.h: "cache.lookup", "cache.insert", "cache.worker"),
// each armed to throw std::bad_alloc for its next `times` passes, as an allocation failure there would.
namespace armed_faults {
std::atomic<int> lookup{0}, insert{0}, worker{0};
std::atomic<int>* Slot(const char* point) {
  if (std::strcmp(point, "cache.lookup") == 0) return &lookup;
  if (std::strcmp(point, "cache.insert") == 0) return &insert;
  if (std::strcmp(point, "cache.worker") == 0) return &worker;
  return nullptr;
}
void Hook(const char* point) {
  std::atomic<int>* armed = Slot(point);
  if (armed == nullptr) return;
  int left = armed->load();
  while (left > 0) {
    if (armed->compare_exchange_weak(left, left - 1)) throw std::bad_alloc();
  }
}
void Arm(const char* point, int times) { Slot(point)->store(times); }
}  // namespace armed_faults

namespace {

int redis_port = 0;  // --redis-port: the "redis" group's server

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// One output's packed bytes after its size, the way Triton 2.51's cache_entry.cc writes them.
std::string OutputBody(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                       const std::string& data) {
  std::string body;
  Put<uint32_t>(&body, name.size());
  body += name;
  Put<uint32_t>(&body, dtype.size());
  body += dtype;
  Put<uint32_t>(&body, shape.size() * sizeof(int64_t));
  for (int64_t d : shape) Put<int64_t>(&body, d);
  Put<uint64_t>(&body, data.size());
  body += data;
  return body;
}

// One output serialized the way Triton 2.51's cache_entry.cc does: [u64 packed size][body].
std::string Output(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                   const std::string& data) {
  const std::string body = OutputBody(name, dtype, shape, data);
  std::string out;
  Put<uint64_t>(&out, body.size());
  return out + body;
}

std::string Response(const std::vector<std::string>& outputs) {
  std::string out;
  Put<uint32_t>(&out, outputs.size());
  for (const auto& o : outputs) out += o;
  return out;
}

std::string FloatResponse(float value) {
  std::string data(reinterpret_cast<const char*>(&value), sizeof(value));
  return Response({Output("y", "FP32", {1, 1}, data)});
}

// BYTES data: each element [u32 length][bytes].
std::string BytesData(const std::vector<std::string>& elements) {
  std::string out;
  for (const auto& e : elements) {
    Put<uint32_t>(&out, e.size());
    out += e;
  }
  return out;
}

EntryPtr MakeEntry(const std::string& response) {
  auto e = std::make_shared<Entry>();
  e->buffers.push_back(response);
  return e;
}

EntryPtr SizedEntry(size_t payload) {
  auto e = std::make_shared<Entry>();
  e->buffers.push_back(std::string(payload, 'x'));
  return e;
}

std::string Hex(const uint8_t* data, size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 15]);
  }
  return out;
}
std::string Hex(const Digest& d) { return Hex(d.data(), d.size()); }

// Core's own reading of a buffer (core_deserialize.h) on an exactly-sized copy succeeds.
bool CoreReads(const std::string& buffer, core_copy::Response* out = nullptr) {
  std::vector<core_copy::Response> built;
  std::string error;
  const bool ok = core_copy::DeserializeBuffers({{buffer.data(), buffer.size()}}, 1, &built, &error);
  if (ok && out != nullptr) *out = built[0];
  return ok;
}

constexpr uint64_t kSecond = 1'000'000'000ull;

// --- tiers.h: the L1 ---

FASTPATH_TEST(TestL1HitsAndLruOrder) {
  current = "L1 LRU order";
  const uint64_t charge = L1Cache::Charge("k0", *SizedEntry(100));
  L1Cache l1(3 * charge, 0);
  bool expired = false;
  for (int i = 0; i < 3; ++i) l1.Put("k" + std::to_string(i), SizedEntry(100), 0);
  Check(l1.entries() == 3 && l1.bytes() == 3 * charge, "three entries fill it exactly");
  Check(l1.Get("k0", 1, &expired) != nullptr, "k0 is there");  // k0 now the most recent
  const auto outcome = l1.Put("k3", SizedEntry(100), 2);
  Check(outcome.result == L1Cache::PutResult::kStored && outcome.evicted == 1, "one eviction for k3");
  Check(outcome.bytes == l1.bytes() && outcome.entries == 3, "the outcome says what the put left (the gauges)");
  Check(l1.Get("k1", 3, &expired) == nullptr && !expired, "the least recently used (k1) went");
  Check(l1.Get("k0", 3, &expired) != nullptr, "k0, used since, stayed");
  Check(l1.Get("k2", 3, &expired) != nullptr && l1.Get("k3", 3, &expired) != nullptr, "k2 and k3 are there");
  Check(l1.Put("k3", SizedEntry(100), 4).result == L1Cache::PutResult::kExists, "an existing key is kept");
}

FASTPATH_TEST(TestL1ByteBound) {
  current = "L1 byte bound";
  const uint64_t capacity = 64 * 1024;
  L1Cache l1(capacity, 0);
  uint64_t evicted = 0;
  bool held = true;
  for (int i = 0; i < 5000; ++i) {
    evicted += l1.Put("key-" + std::to_string(i), SizedEntry(17 + (i * 37) % 900), i).evicted;
    held = held && l1.bytes() <= capacity;
  }
  Check(held, "the bytes held never exceed the capacity");
  Check(evicted > 0 && evicted + l1.entries() == 5000, "every entry is held or was evicted");
  Check(l1.bytes() > capacity / 2, "the bound is used, not wasted");
  Check(l1.Put("huge", SizedEntry(capacity), 1).result == L1Cache::PutResult::kTooLarge,
        "an entry larger than the whole cache is refused");
  Check(l1.bytes() <= capacity, "a refused entry evicts nothing");
  L1Cache tiny(100, 0);
  Check(tiny.Put("a", SizedEntry(1), 0).result == L1Cache::PutResult::kTooLarge,
        "bookkeeping counts: 1 payload byte does not fit in 100");
}

FASTPATH_TEST(TestL1Ttl) {
  current = "L1 TTL";
  L1Cache l1(1 << 20, 10 * kSecond);
  bool expired = false;
  l1.Put("a", SizedEntry(10), 0);
  Check(l1.Get("a", 10 * kSecond - 1, &expired) != nullptr && !expired, "alive just before its TTL");
  Check(l1.Get("a", 10 * kSecond, &expired) == nullptr && expired, "gone at its TTL, reported expired");
  Check(l1.entries() == 0 && l1.bytes() == 0, "an expired entry frees its bytes");
  Check(l1.Put("a", SizedEntry(10), 20 * kSecond).result == L1Cache::PutResult::kStored, "the key can be stored again");
  l1.Put("b", SizedEntry(10), 21 * kSecond);
  Check(!l1.Contains("a", 30 * kSecond) && l1.Contains("b", 30 * kSecond), "Contains respects the TTL");
  const auto outcome = l1.Put("c", SizedEntry(10), 31 * kSecond);
  Check(outcome.expired == 2 && l1.entries() == 1, "expired entries at the cold end are swept on Put");
  Check(l1.Put("d", SizedEntry(10), 31 * kSecond).expired == 0, "nothing live is swept");
  L1Cache forever(1 << 20, 0);
  forever.Put("x", SizedEntry(10), 0);
  Check(forever.Get("x", UINT64_MAX / 2, &expired) != nullptr, "ttl 0 never expires");
}

FASTPATH_TEST(TestL1HeldEntrySurvivesEviction) {
  current = "L1 entry held during eviction";
  const uint64_t charge = L1Cache::Charge("a", *SizedEntry(64));
  L1Cache l1(charge, 0);
  bool expired = false;
  l1.Put("a", MakeEntry(std::string(64, 'q')), 0);
  EntryPtr held = l1.Get("a", 0, &expired);
  l1.Put("b", SizedEntry(64), 1);  // evicts a
  Check(l1.Get("a", 2, &expired) == nullptr, "a was evicted");
  Check(held != nullptr && held->buffers[0] == std::string(64, 'q'), "a lookup's reference still reads a");
}

FASTPATH_TEST(TestL1Concurrent) {
  current = "L1 concurrent use";
  L1Cache l1(32 * 1024, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&l1, t] {
      bool expired = false;
      for (int i = 0; i < 2000; ++i) {
        const std::string key = "k" + std::to_string((i * 7 + t) % 300);
        if (l1.Get(key, i, &expired) == nullptr) l1.Put(key, SizedEntry(50 + i % 200), i);
      }
    });
  }
  for (auto& th : threads) th.join();
  Check(l1.bytes() <= 32 * 1024, "the bound holds under concurrent puts");
  Check(l1.entries() > 0, "entries remain");
}

// --- tiers.h: the breaker ---

FASTPATH_TEST(TestBreaker) {
  current = "breaker";
  Breaker b(3, 2 * kSecond);
  Check(b.AllowRequest() && !b.IsOpen(), "starts closed");
  Check(!b.RecordFailure(0) && !b.RecordFailure(1), "two failures keep it closed");
  b.RecordSuccess();
  Check(!b.RecordFailure(2) && !b.RecordFailure(3), "a success restarts the count");
  Check(b.RecordFailure(4), "the third failure in a row opens it");
  Check(!b.AllowRequest() && b.IsOpen() && b.times_opened() == 1, "open: requests skip Redis");
  Check(!b.RecordFailure(5), "more failures while open do not re-open it");
  Check(!b.ShouldProbe(4 + 2 * kSecond - 1), "no probe before the open time has passed");
  Check(b.ShouldProbe(4 + 2 * kSecond), "a probe once it has passed");
  Check(!b.AllowRequest(), "requests still skip while the probe is due");
  Check(b.RecordFailure(5 * kSecond), "a failed probe opens it again");
  Check(b.times_opened() == 2 && !b.ShouldProbe(6 * kSecond) && b.ShouldProbe(7 * kSecond),
        "for another full open time");
  b.RecordSuccess();
  Check(b.IsOpen() && !b.AllowRequest(), "a late reply's success does not close it: only a probe does");
  b.Close();
  Check(b.AllowRequest() && !b.IsOpen(), "a successful probe closes it");
  Check(!b.RecordFailure(8 * kSecond), "and the count starts again from zero");
  Breaker one(1, kSecond);
  Check(one.RecordFailure(0) && one.IsOpen(), "a threshold of 1 opens on the first failure");
}

// --- tiers.h: the adaptive L2 bypass (no clock but the one passed in) ---

L2Gate::Options GateOptions(uint32_t window, uint32_t min_hits, uint32_t max_interval, uint64_t probe_ns = 0) {
  L2Gate::Options options;
  options.window = window;
  options.min_hits = min_hits;
  options.max_interval = max_interval;
  options.probe_ns = probe_ns;
  return options;
}

// How many of `misses` L1 misses in a row ask Redis, each asking one told Redis has no value.
int AskedOf(L2Gate* gate, int misses, uint64_t now = 0) {
  int asked = 0;
  for (int i = 0; i < misses; ++i) {
    if (!gate->ShouldAsk(now)) continue;
    ++asked;
    gate->Record(false, now);
  }
  return asked;
}

FASTPATH_TEST(TestL2GateSamplesWhileRedisIsCold) {
  current = "L2 bypass: cold";
  L2Gate gate(GateOptions(4, 1, 8));
  Check(gate.interval() == 1 && AskedOf(&gate, 3) == 3 && gate.interval() == 1,
        "every L1 miss asks until the window is full");
  Check(gate.ShouldAsk(0) && gate.Record(false, 0) && gate.interval() == 2,
        "a full window without a hit: 1 in 2 asks");
  Check(!gate.ShouldAsk(0) && gate.ShouldAsk(0), "the first is skipped, the second asks");
  Check(gate.Record(false, 0) && gate.interval() == 4, "a sampled miss doubles the interval");
  Check(AskedOf(&gate, 4) == 1 && gate.interval() == 8, "1 in 4, then 1 in 8");
  Check(AskedOf(&gate, 80) == 10 && gate.interval() == 8, "never sparser than max_interval: 10 of 80 ask");
  L2Gate two(GateOptions(1, 1, 2));
  Check(AskedOf(&two, 1) == 1 && AskedOf(&two, 100) == 50, "max_interval 2: every other L1 miss asks");
}

FASTPATH_TEST(TestL2GateResumesOnAHit) {
  current = "L2 bypass: resume";
  L2Gate gate(GateOptions(4, 1, 64));
  AskedOf(&gate, 4 + 2 + 4 + 8);  // cold: sampling 1 in 16 by now
  Check(gate.interval() == 16, "sampling 1 in 16");
  int skipped = 0;
  while (!gate.ShouldAsk(0)) ++skipped;
  Check(skipped == 15, "15 skipped before one asks");
  Check(gate.Record(true, 0) && gate.interval() == 1, "a sampled hit: every L1 miss asks again");
  Check(AskedOf(&gate, 3) == 3 && gate.interval() == 1, "judged over a new window: 3 misses keep full lookups");
  Check(AskedOf(&gate, 1) == 1 && gate.interval() == 2, "the 4th without a hit samples again");
  L2Gate warm(GateOptions(4, 1, 64));
  bool full = true;
  for (int i = 0; i < 100; ++i) {  // one hit in every four answers: never cold
    full = full && warm.ShouldAsk(0);
    warm.Record(i % 4 == 0, 0);
  }
  Check(full && warm.interval() == 1, "a hit in every window keeps every lookup");
  L2Gate sliding(GateOptions(4, 1, 64));
  sliding.Record(true, 0);
  AskedOf(&sliding, 3);
  Check(sliding.interval() == 1, "a hit among the last 4: full lookups");
  Check(AskedOf(&sliding, 1) == 1 && sliding.interval() == 2, "once it slides out of the window: sampling");
  L2Gate rate(GateOptions(10, 3, 64));
  for (int i = 0; i < 10; ++i) rate.Record(i < 2, 0);
  Check(rate.interval() == 2, "min_hits 3 of 10: 2 hits are a cold Redis");
}

FASTPATH_TEST(TestL2GateProbesByTime) {
  current = "L2 bypass: probe";
  L2Gate gate(GateOptions(2, 1, 1000, 10 * kSecond));
  AskedOf(&gate, 2, 0);
  Check(gate.interval() == 2, "cold at t=0");
  Check(AskedOf(&gate, 2, kSecond) == 1 && gate.interval() == 4, "the count still samples 1 in 2");
  Check(!gate.ShouldAsk(9 * kSecond) && gate.ShouldAsk(11 * kSecond + 1),
        "1 in 4 not reached, but 10 s passed since the last that asked: this one asks");
  Check(!gate.ShouldAsk(12 * kSecond), "and the next waits again");
  Check(!gate.ShouldAsk(5 * kSecond), "a clock reading older than the last ask is no probe");
  L2Gate count_only(GateOptions(2, 1, 1000, 0));
  AskedOf(&count_only, 2, 0);
  Check(AskedOf(&count_only, 3, 3600 * kSecond) == 1, "probe 0: only the count decides");
}

FASTPATH_TEST(TestL2GateOff) {
  current = "L2 bypass: off";
  L2Gate::Options options = GateOptions(4, 1, 64);
  options.adaptive = false;
  L2Gate gate(options);
  Check(AskedOf(&gate, 1000) == 1000 && gate.interval() == 1, "off: every L1 miss asks");
}

FASTPATH_TEST(TestL2GateConcurrent) {
  current = "L2 bypass: concurrent use";
  L2Gate gate(GateOptions(16, 1, 8));
  std::atomic<int> asked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&gate, &asked] {
      for (int i = 0; i < 4000; ++i) {
        if (!gate.ShouldAsk(0)) continue;
        ++asked;
        gate.Record(false, 0);
      }
    });
  }
  for (auto& th : threads) th.join();
  Check(gate.interval() == 8, "cold under concurrent misses: the bound");
  Check(asked >= 16000 / 8 && asked <= 16 + 2 + 4 + 16000 / 8 + 8, "about 1 in 8 asked: " + std::to_string(asked));
}

// --- tiers.h: the write queue ---

FASTPATH_TEST(TestWriteQueue) {
  current = "L2 write queue";
  const EntryPtr kb = SizedEntry(1000);
  const uint64_t write_cost = WriteQueue::Cost({"k", kb});
  Check(write_cost == 1000 + 1 + WriteQueue::kOpOverheadBytes, "a write costs its key, payload and overhead");
  WriteQueue by_count(3, 1 << 20);
  for (int i = 0; i < 3; ++i) Check(by_count.Push({"k" + std::to_string(i), kb}), "fits by count");
  Check(!by_count.Push({"k3", kb}) && by_count.size() == 3, "the 4th of 3 is refused");
  WriteQueue by_bytes(1000, 3 * write_cost);
  for (int i = 0; i < 3; ++i) by_bytes.Push({"k", kb});
  Check(!by_bytes.Push({"k", kb}) && by_bytes.bytes() == 3 * write_cost, "bytes bound: the 4th is refused");
  Check(!WriteQueue(10, write_cost - 1).Push({"k", kb}), "one write larger than the whole bound is refused");
  Check(by_bytes.Push({"k", nullptr}) == false, "a delete still needs room");
  std::vector<WriteQueue::Op> out;
  by_bytes.PopUpTo(2, &out);
  Check(out.size() == 2 && by_bytes.size() == 1 && by_bytes.bytes() == write_cost, "popping frees its bytes");
  Check(by_bytes.Push({"gone", nullptr}) && by_bytes.Push({"k9", kb}), "room again, for a delete and a write");
  out.clear();
  by_bytes.PopUpTo(10, &out);
  Check(out.size() == 3 && out[1].key == "gone" && out[1].entry == nullptr && out[2].key == "k9",
        "operations leave in the order they came (a delete before a later write of the key)");
  Check(by_bytes.empty() && by_bytes.bytes() == 0, "empty after all are taken");
  by_count.Push({"d", nullptr});
  uint64_t writes = 0, deletes = 0;
  by_count.Clear(&writes, &deletes);
  Check(writes == 3 && deletes == 0 && by_count.empty(), "Clear says what it dropped (the 4th did not fit)");
  WriteQueue mixed(10, 1 << 20);
  mixed.Push({"a", kb});
  mixed.Push({"b", nullptr});
  mixed.Clear(&writes, &deletes);
  Check(writes == 1 && deletes == 1 && mixed.bytes() == 0, "writes and deletes counted apart");
}

// --- codec.h: keys ---

FASTPATH_TEST(TestKeyNamespacing) {
  current = "key namespacing";
  Check(L2Key("fastpath:", "abc123", "98765") == "fastpath:rc:abc123:98765", "prefix, rc:, namespace, key");
  Check(L2Key("fastpath:", "ns-a", "1") != L2Key("fastpath:", "ns-b", "1"), "namespaces never share a key");
  Check(L2Key("p1:", "ns", "1") != L2Key("p2:", "ns", "1"), "prefixes never share a key");
  Check(L2Key("", "ns", "1") == "rc:ns:1", "an empty prefix");
  Check(ValidNamespace("sha256-0123abcdef") && ValidNamespace("a.b_c-d"), "hex, dots, dashes, underscores");
  Check(!ValidNamespace("") && !ValidNamespace("a:b") && !ValidNamespace("a b") && !ValidNamespace(std::string(129, 'a')),
        "empty, ':', spaces and >128 characters are refused (a namespace cannot forge another's keys)");
}

// --- sha256.h: FIPS 180-4 examples and RFC 4231's HMAC-SHA256 test cases ---

FASTPATH_TEST(TestSha256) {
  current = "SHA-256";
  Check(Hex(Sha256Of("", 0)) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "empty");
  Check(Hex(Sha256Of("abc", 3)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "abc");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Check(Hex(Sha256Of(two_blocks.data(), two_blocks.size())) ==
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
        "448 bits (padding spills into a second block)");
  const std::string million(1000000, 'a');
  Check(Hex(Sha256Of(million.data(), million.size())) ==
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
        "a million 'a'");
  Sha256 pieces;
  for (size_t at = 0, step = 1; at < million.size(); at += step, step = step % 97 + 13) {
    pieces.Update(million.data() + at, std::min(step, million.size() - at));
  }
  Check(Hex(pieces.Final()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
        "the same in uneven pieces");
  for (size_t n : {55, 56, 63, 64, 65, 119, 120}) {  // every padding boundary
    const std::string text(n, 'q');
    Sha256 byte_by_byte;
    for (char c : text) byte_by_byte.Update(&c, 1);
    Check(byte_by_byte.Final() == Sha256Of(text.data(), text.size()),
          "byte by byte equals one update, n=" + std::to_string(n));
  }
}

FASTPATH_TEST(TestHmacRfc4231) {
  current = "HMAC-SHA256 (RFC 4231)";
  auto mac = [](const std::string& key, const std::string& data) {
    return Hex(HmacSha256(key).Mac(data.data(), data.size()));
  };
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  Check(mac(std::string(20, '\x0b'), "Hi There") == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        "test case 1");
  Check(mac("Jefe", "what do ya want for nothing?") ==
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        "test case 2");
  Check(mac(std::string(20, '\xaa'), std::string(50, '\xdd')) ==
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
        "test case 3");
  Check(mac(key4, std::string(50, '\xcd')) == "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
        "test case 4");
  Check(mac(std::string(20, '\x0c'), "Test With Truncation").substr(0, 32) == "a3b6167473100ee06e0c796c2955552b",
        "test case 5 (truncated to 128 bits)");
  Check(mac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        "test case 6 (a key longer than a block is hashed first)");
  Check(mac(std::string(131, '\xaa'),
            "This is a test using a larger than block-size key and a larger than block-size data. The key needs to "
            "be hashed before being used by the HMAC algorithm.") ==
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        "test case 7");
  const HmacSha256 reused("Jefe");
  const std::string data = "what do ya want for nothing?";
  Check(reused.Mac(data.data(), data.size()) == reused.Mac(data.data(), data.size()), "one key, many MACs");
  const Digest a = Sha256Of("a", 1), b = Sha256Of("b", 1);
  Check(EqualDigests(a.data(), a.data(), 32) && !EqualDigests(a.data(), b.data(), 32), "digest comparison");
}

// --- codec.h: the serialized response ---

// `body` of one output, its packed size given (to lie about it).
std::string OneOutput(const std::string& body, uint64_t packed_size) {
  std::string out;
  Put<uint32_t>(&out, 1);
  Put<uint64_t>(&out, packed_size);
  return out + body;
}

FASTPATH_TEST(TestResponseCheck) {
  current = "serialized response check";
  auto check = [](const std::string& buffer) { return CheckSerializedResponse(buffer.data(), buffer.size()); };
  auto refused = [&](const std::string& buffer, const std::string& why_part) {
    std::string why;
    return CheckSerializedResponse(buffer.data(), buffer.size(), &why) == ResponseCheck::kMalformed &&
           Contains(why, why_part);
  };
  const std::string ok = FloatResponse(0.5f);
  Check(check(ok) == ResponseCheck::kOk && CoreReads(ok), "one output, read by core");
  const std::string two =
      Response({Output("a", "INT64", {1}, std::string(8, '\1')), Output("b", "BYTES", {1}, BytesData({"xyz"}))});
  core_copy::Response built;
  Check(check(two) == ResponseCheck::kOk && CoreReads(two, &built) && built.size() == 2 && built[1].name == "b" &&
            built[1].dtype == "BYTES" && built[1].data == BytesData({"xyz"}),
        "two outputs, core builds both");
  const std::string none = Response({});
  Check(none.size() == 4, "an error response serializes to 4 bytes");
  Check(check(none) == ResponseCheck::kNoOutputs, "zero outputs: an error");
  Check(refused(none + "x", "no outputs but"), "zero outputs and more bytes: malformed");
  Check(CheckSerializedResponse(ok.data(), ok.size() - 1) == ResponseCheck::kMalformed, "truncated");
  Check(refused(ok + "x", "after the last output"), "trailing bytes");
  Check(CheckSerializedResponse(ok.data(), 3) == ResponseCheck::kMalformed, "shorter than the count");
  Check(CheckSerializedResponse(nullptr, 0) == ResponseCheck::kMalformed, "no data");
  std::string lying = ok;
  const uint32_t many = 1000;
  std::memcpy(&lying[0], &many, sizeof(many));
  Check(refused(lying, "runs past"), "a count past the data");
  std::string huge;
  Put<uint32_t>(&huge, 1);
  Put<uint64_t>(&huge, UINT64_MAX - 4);
  Check(check(huge) == ResponseCheck::kMalformed, "a packed size that would wrap");

  // Every datatype with its element size; BF16 too.
  const std::pair<const char*, size_t> dtypes[] = {{"BOOL", 1},  {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4},
                                                   {"UINT64", 8}, {"INT8", 1},  {"INT16", 2},  {"INT32", 4},
                                                   {"INT64", 8},  {"FP16", 2},  {"FP32", 4},   {"FP64", 8},
                                                   {"BF16", 2}};
  bool all = true, sizes = true;
  for (const auto& [dtype, size] : dtypes) {
    all = all && check(Response({Output("o", dtype, {2, 3}, std::string(6 * size, '\0'))})) == ResponseCheck::kOk;
    sizes = sizes && check(Response({Output("o", dtype, {2, 3}, std::string(6 * size + 1, '\0'))})) ==
                         ResponseCheck::kMalformed;
  }
  Check(all, "every fixed-size datatype of Triton's with elements x size data bytes");
  Check(sizes, "and one byte more is refused for each");
  Check(refused(Response({Output("o", "FP32", {2}, std::string(4, '\0'))}), "data bytes for 2 FP32"),
        "data smaller than the shape says");
  Check(refused(Response({Output("o", "FLOAT", {1}, std::string(4, '\0'))}), "unknown datatype"),
        "a datatype not among Triton's protocol strings");
  Check(refused(Response({Output("o", "fp32", {1}, std::string(4, '\0'))}), "unknown datatype"),
        "datatypes are case-sensitive");
  Check(refused(Response({Output("o", "", {1}, std::string(4, '\0'))}), "datatype length"), "an empty datatype");
  Check(check(Response({Output("o", "FP32", {0, 4}, "")})) == ResponseCheck::kOk, "an empty tensor ([0, 4], no data)");
  Check(check(Response({Output("o", "FP32", {}, std::string(4, '\0'))})) == ResponseCheck::kOk,
        "a scalar (rank 0: one element)");

  // Names.
  Check(refused(Response({Output("", "FP32", {1}, std::string(4, '\0'))}), "name length 0"), "an empty name");
  Check(check(Response({Output(std::string(kMaxNameBytes, 'n'), "FP32", {1}, std::string(4, '\0'))})) ==
            ResponseCheck::kOk,
        "a name of the longest length");
  Check(refused(Response({Output(std::string(kMaxNameBytes + 1, 'n'), "FP32", {1}, std::string(4, '\0'))}),
                "name length 257"),
        "a name one byte longer");
  Check(refused(Response({Output("y", "FP32", {1}, std::string(4, '\0')), Output("y", "INT8", {1}, "z")}),
                "share a name"),
        "two outputs of the same name");

  // The crash of 2026-11-28: the outer framing intact, the first name length 0x7FFFFFF0.
  std::string crash = ok;
  const uint32_t crash_length = 0x7FFFFFF0;
  std::memcpy(&crash[4 + 8], &crash_length, sizeof(crash_length));
  Check(refused(crash, "name length 2147483632"), "a name length of 0x7FFFFFF0 (core would read 2 GiB past it)");

  // Inner lengths must add up to exactly the packed size.
  const std::string body = OutputBody("y", "FP32", {1}, std::string(4, '\0'));
  Check(check(OneOutput(body, body.size())) == ResponseCheck::kOk, "the body as its packed size says");
  Check(refused(OneOutput(body + "pad", body.size() + 3), "data length 4 where the output leaves 7"),
        "a packed size larger than the inner lengths (core's check catches it after reading)");
  Check(refused(OneOutput(body, body.size() - 1) + "x", "data length"), "a packed size smaller than the inner lengths");
  Check(CheckSerializedResponse(body.data(), 5) == ResponseCheck::kMalformed, "not even an output");

  // Shapes.
  std::string odd_shape;
  Put<uint32_t>(&odd_shape, 1);
  odd_shape += "y";
  Put<uint32_t>(&odd_shape, 4);
  odd_shape += "FP32";
  Put<uint32_t>(&odd_shape, 12);  // not a multiple of 8: core's memcpy would write past its vector
  Put<int64_t>(&odd_shape, 1);
  Put<uint32_t>(&odd_shape, 0);
  Put<uint64_t>(&odd_shape, 4);
  odd_shape += std::string(4, '\0');
  Check(refused(OneOutput(odd_shape, odd_shape.size()), "shape length 12"), "shape bytes not a multiple of 8");
  Check(refused(Response({Output("y", "FP32", std::vector<int64_t>(kMaxRank + 1, 1), std::string(4, '\0'))}),
                "shape length"),
        "a rank above the bound");
  Check(check(Response({Output("y", "FP32", std::vector<int64_t>(kMaxRank, 1), std::string(4, '\0'))})) ==
            ResponseCheck::kOk,
        "the largest rank");
  Check(refused(Response({Output("y", "FP32", {-1}, "")}), "negative dim"), "a negative dim");
  Check(refused(Response({Output("y", "INT8", {int64_t{1} << 33, int64_t{1} << 33}, "")}), "overflows"),
        "an element count past 64 bits");
  Check(refused(Response({Output("y", "INT64", {int64_t{1} << 61}, "")}), "data bytes"),
        "elements x size past 64 bits (2^61 INT64)");

  // BYTES framing.
  Check(check(Response({Output("s", "BYTES", {3}, BytesData({"a", "", "xyz"}))})) == ResponseCheck::kOk,
        "three BYTES elements, one empty");
  Check(check(Response({Output("s", "BYTES", {0}, "")})) == ResponseCheck::kOk, "no BYTES elements");
  Check(refused(Response({Output("s", "BYTES", {2}, BytesData({"a", "b", "c"}))}), "after the last BYTES element"),
        "more BYTES elements than the shape says");
  Check(refused(Response({Output("s", "BYTES", {3}, BytesData({"abcdefgh", "b"}))}), "BYTES element 2"),
        "fewer BYTES elements than the shape says");
  std::string cut = BytesData({"abcdef"});
  cut.resize(cut.size() - 2);
  Check(refused(Response({Output("s", "BYTES", {1}, cut)}), "runs past"), "a BYTES element longer than the data");
  Check(refused(Response({Output("s", "BYTES", {1}, "ab")}), "cannot fit"), "no room for a length");
  Check(refused(Response({Output("s", "BYTES", {int64_t{1} << 40}, BytesData({"a"}))}), "cannot fit"),
        "a huge element count is refused before walking");
}

// --- codec.h: the Redis value ---

FASTPATH_TEST(TestCodec) {
  current = "L2 value codec";
  const std::string key = "fastpath:rc:ns:123";
  Entry entry;
  entry.buffers = {FloatResponse(1.0f)};
  const std::string value = EncodeEntry(key, entry, nullptr);
  Check(value.compare(0, 4, "FPC2") == 0 && value[4] == 0, "FPC2 header, no MAC");
  Check(value.find(key) == 9, "the key is inside the value");
  Entry back;
  std::string error;
  Check(DecodeEntry(value, key, nullptr, &back, &error) == DecodeResult::kOk && back.buffers == entry.buffers,
        "round trip: " + error);
  Check(DecodeEntry(value, "fastpath:rc:ns:124", nullptr, &back, &error) == DecodeResult::kForeignKey &&
            Contains(error, "another key"),
        "a value read under another key (copied there) is refused");
  Check(DecodeEntry(value, "fastpath:rc:other:123", nullptr, &back, &error) == DecodeResult::kForeignKey,
        "and under another namespace");
  Check(DecodeEntry(value.substr(0, value.size() - 1), key, nullptr, &back, &error) == DecodeResult::kMalformed,
        "truncated value refused");
  Check(DecodeEntry(value + "z", key, nullptr, &back, &error) == DecodeResult::kMalformed &&
            Contains(error, "after the last"),
        "trailing bytes refused");
  Check(DecodeEntry("GARBAGE!", key, nullptr, &back, &error) == DecodeResult::kMalformed && Contains(error, "FPC2"),
        "a foreign value refused");
  std::string v1 = "FPC1";
  Put<uint32_t>(&v1, 1);
  Put<uint64_t>(&v1, entry.buffers[0].size());
  v1 += entry.buffers[0];
  Check(DecodeEntry(v1, key, nullptr, &back, &error) == DecodeResult::kMalformed, "a version-1 value is refused");
  Entry errors;
  errors.buffers = {Response({})};
  Check(DecodeEntry(EncodeEntry(key, errors, nullptr), key, nullptr, &back, &error) == DecodeResult::kMalformed &&
            Contains(error, "no outputs"),
        "an error response from Redis is refused too");
  Entry empty;
  Check(DecodeEntry(EncodeEntry(key, empty, nullptr), key, nullptr, &back, &error) == DecodeResult::kMalformed &&
            Contains(error, "buffer count 0"),
        "zero buffers refused");
  Entry pair;
  pair.buffers = {FloatResponse(1.0f), FloatResponse(2.0f)};
  Check(DecodeEntry(EncodeEntry(key, pair, nullptr), key, nullptr, &back, &error) == DecodeResult::kMalformed &&
            Contains(error, "buffer count 2"),
        "two buffers refused: Triton 2.51 asks for exactly one response");
  std::string bad = value;
  const uint64_t big = UINT64_MAX;
  std::memcpy(&bad[4 + 1 + 4 + key.size() + 4], &big, sizeof(big));
  Check(DecodeEntry(bad, key, nullptr, &back, &error) == DecodeResult::kMalformed, "a buffer size past the end");
  std::string crash = value;
  const uint32_t crash_length = 0x7FFFFFF0;
  std::memcpy(&crash[value.size() - entry.buffers[0].size() + 4 + 8], &crash_length, sizeof(crash_length));
  Check(DecodeEntry(crash, key, nullptr, &back, &error) == DecodeResult::kMalformed && Contains(error, "name length"),
        "the crash shape inside an intact value is refused: " + error);
  bool every_cut_refused = true;
  for (size_t n = 0; n < value.size(); ++n) {
    every_cut_refused =
        every_cut_refused && DecodeEntry(value.substr(0, n), key, nullptr, &back, &error) != DecodeResult::kOk;
  }
  Check(every_cut_refused, "every truncation is refused");
  Check(back.buffers == entry.buffers, "a refused value leaves the entry alone");

  // With the replicas' secret.
  const HmacSha256 secret("0123456789abcdef-secret");
  const HmacSha256 other("another-secret-of-16+");
  const std::string signed_value = EncodeEntry(key, entry, &secret);
  Check(signed_value[4] == 1 && signed_value.size() == value.size() + kMacBytes, "auth 1 and a 32-byte MAC at the end");
  const Digest tag = secret.Mac(signed_value.data(), signed_value.size() - kMacBytes);
  Check(std::memcmp(tag.data(), signed_value.data() + signed_value.size() - kMacBytes, kMacBytes) == 0,
        "the MAC covers everything before it");
  Check(DecodeEntry(signed_value, key, &secret, &back, &error) == DecodeResult::kOk, "the same secret reads it");
  Check(DecodeEntry(signed_value, key, &other, &back, &error) == DecodeResult::kBadMac && Contains(error, "MAC"),
        "another secret refuses it");
  Check(DecodeEntry(signed_value, key, nullptr, &back, &error) == DecodeResult::kBadMac, "no secret refuses it");
  Check(DecodeEntry(value, key, &secret, &back, &error) == DecodeResult::kBadMac && Contains(error, "no MAC"),
        "a value without a MAC is refused where a secret is set");
  Check(DecodeEntry(EncodeEntry("fastpath:rc:ns:9", entry, &secret), key, &secret, &back, &error) ==
            DecodeResult::kForeignKey,
        "a signed value copied to another key is still refused");
  bool every_flip_refused = true;
  for (size_t i = 0; i < signed_value.size(); ++i) {
    std::string flipped = signed_value;
    flipped[i] ^= 0x20;
    every_flip_refused = every_flip_refused && DecodeEntry(flipped, key, &secret, &back, &error) != DecodeResult::kOk;
  }
  Check(every_flip_refused, "any byte changed is refused");
  std::string unknown_auth = value;
  unknown_auth[4] = 7;
  Check(DecodeEntry(unknown_auth, key, nullptr, &back, &error) == DecodeResult::kMalformed, "an unknown auth byte");
  Check(std::string(DecodeResultName(DecodeResult::kForeignKey)) == "foreign_key" &&
            std::string(DecodeResultName(DecodeResult::kBadMac)) == "bad_mac",
        "reasons named as the metric labels them");
}

// --- settings.h ---

FASTPATH_TEST(TestSettings) {
  current = "settings";
  CacheSettings s;
  std::string error;
  Check(ParseSettings("{}", &s, &error) && s.l1_bytes == (64u << 20) && s.redis_url.empty() && s.ns.empty() &&
            s.write_queue_bytes == (64u << 20) && s.mac_secret_env == "FASTPATH_CACHE_MAC_SECRET",
        "defaults");
  Check(s.max_entry_bytes == s.l1_bytes / 4, "max entry defaults to a quarter of L1");
  Check(ParseSettings(R"({"size":"1048576","l1_ttl_s":"5","l2_ttl_s":"0","redis_url":"redis://127.0.0.1:6390/2",)"
                      R"("namespace":"abc-123","timeout_ms":"7","breaker_failures":"2","breaker_open_ms":"300",)"
                      R"("pool_size":"3","key_prefix":"t:","max_entry_bytes":"4096"})",
                      &s, &error),
        "every key: " + error);
  Check(s.l1_bytes == 1048576 && s.l1_ttl_ms == 5000 && s.l2_ttl_ms == 0 && s.ns == "abc-123" && s.timeout_ms == 7 &&
            s.breaker_failures == 2 && s.breaker_open_ms == 300 && s.pool_size == 3 && s.key_prefix == "t:" &&
            s.max_entry_bytes == 4096,
        "values read");
  Check(ParseSettings(R"({"size": 2048})", &s, &error) && s.l1_bytes == 2048, "a bare number is accepted");
  Check(!ParseSettings(R"({"sise":"1"})", &s, &error) && Contains(error, "unknown key 'sise'"), "typos are named");
  Check(!ParseSettings(R"({"size":"-1"})", &s, &error) && Contains(error, "size=-1"), "negative size");
  Check(!ParseSettings(R"({"size":"99999999999999999999999"})", &s, &error), "overflowing size");
  Check(!ParseSettings(R"({"timeout_ms":"0"})", &s, &error), "timeout 0 refused");
  Check(!ParseSettings(R"({"namespace":"a:b"})", &s, &error) && Contains(error, "namespace"), "a ':' namespace");
  Check(!ParseSettings(R"({"redis_url":"http://x","namespace":"n"})", &s, &error) && Contains(error, "redis_url"),
        "a non-redis URL");
  Check(!ParseSettings(R"({"redis_url":"redis://127.0.0.1:6379/0"})", &s, &error) && Contains(error, "namespace") &&
            Contains(error, "redis_url"),
        "redis_url without a namespace is refused, naming both settings (no shared 'default' namespace)");
  Check(ParseSettings(R"({"namespace":"n"})", &s, &error) && s.ns == "n", "a namespace without Redis is fine");
  Check(ParseSettings(R"({"write_queue_bytes":"1048576","write_queue":"10","mac_secret_env":"MY_SECRET"})", &s,
                      &error) &&
            s.write_queue_bytes == 1048576 && s.write_queue == 10 && s.mac_secret_env == "MY_SECRET",
        "write queue bounds and the secret's variable: " + error);
  Check(!ParseSettings(R"({"write_queue_bytes":"100"})", &s, &error) && Contains(error, "write_queue_bytes"),
        "a write queue of less than 64 KiB is refused");
  Check(!ParseSettings(R"({"mac_secret_env":"A-B"})", &s, &error) && Contains(error, "mac_secret_env"),
        "a secret's variable must be a variable name");
  Check(!ParseSettings(R"({"password_env":"1X"})", &s, &error) && Contains(error, "password_env"),
        "so must the password's");
  Check(ParseSettings("{}", &s, &error) && s.l2_bypass && s.l2_bypass_window == 100 && s.l2_bypass_min_hits == 1 &&
            s.l2_bypass_max_interval == 64 && s.l2_bypass_probe_ms == 1000,
        "the adaptive L2 bypass is on by default");
  Check(ParseSettings(R"({"l2_bypass":"off","l2_bypass_window":"8","l2_bypass_min_hits":"8",)"
                      R"("l2_bypass_max_interval":"2","l2_bypass_probe_ms":"0"})",
                      &s, &error) &&
            !s.l2_bypass && s.l2_bypass_window == 8 && s.l2_bypass_min_hits == 8 && s.l2_bypass_max_interval == 2 &&
            s.l2_bypass_probe_ms == 0,
        "its settings read: " + error);
  Check(!ParseSettings(R"({"l2_bypass":"true"})", &s, &error) && Contains(error, "adaptive or off"),
        "l2_bypass is adaptive or off");
  Check(!ParseSettings(R"({"l2_bypass_window":"10","l2_bypass_min_hits":"11"})", &s, &error) &&
            Contains(error, "l2_bypass_min_hits=11") && Contains(error, "l2_bypass_window"),
        "more hits than the window holds is refused");
  Check(!ParseSettings(R"({"l2_bypass_max_interval":"1"})", &s, &error) && Contains(error, "l2_bypass_max_interval"),
        "an interval of 1 is no sample (l2_bypass=off is)");
  Check(!ParseSettings(R"({"size":"1",})", &s, &error), "trailing comma");
  Check(!ParseSettings(R"({"size":"1"} x)", &s, &error), "trailing text");
  Check(!ParseSettings(R"({"size":"1","size":"2"})", &s, &error), "duplicate key");
  Check(!ParseSettings("[1]", &s, &error), "not an object");
  Check(ParseSettings(R"({"size":"0"})", &s, &error) && s.l1_bytes == 0 && s.max_entry_bytes == (16u << 20),
        "size 0: no L1, entries up to 16 MiB");
  std::map<std::string, std::string> values;
  Check(ParseFlatJsonObject(R"({"k":"a\"b\\c\u00e9\ud83d\ude00"})", &values, &error) &&
            values["k"] == "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80",
        "escapes and surrogate pairs");
  Check(!ParseFlatJsonObject(R"({"k":"\ud83d"})", &values, &error), "a lone surrogate");
}

FASTPATH_TEST(TestRedisUrl) {
  current = "redis URL";
  RedisAddress a;
  std::string error;
  Check(ParseRedisUrl("redis://127.0.0.1:6390/3", &a, &error) && a.host == "127.0.0.1" && a.port == 6390 && a.db == 3,
        "host, port, db");
  Check(ParseRedisUrl("redis://redis", &a, &error) && a.host == "redis" && a.port == 6379 && a.db == 0, "defaults");
  Check(ParseRedisUrl("redis://:s3cret@h:1/0", &a, &error) && a.password == "s3cret" && a.host == "h", "password");
  Check(ParseRedisUrl("redis://default:pw@h", &a, &error) && a.password == "pw", "the default user");
  Check(!ParseRedisUrl("redis://alice:pw@h", &a, &error), "another user refused");
  Check(ParseRedisUrl("redis://[::1]:7000/1", &a, &error) && a.host == "::1" && a.port == 7000, "IPv6");
  Check(!ParseRedisUrl("redis://h:0", &a, &error) && !ParseRedisUrl("redis://h:70000", &a, &error), "bad ports");
  Check(!ParseRedisUrl("redis://h/x", &a, &error), "a non-numeric db");
  Check(!ParseRedisUrl("redis://", &a, &error), "no host");
  Check(!ParseRedisUrl("rediss://h", &a, &error), "TLS URLs are not supported");
  Check(RedactedUrl("redis://:s3cret@h:1/0") == "redis://<redacted>@h:1/0", "the password never reaches a log");
  Check(RedactedUrl("redis://h:1/0") == "redis://h:1/0", "nothing to redact");
}

// --- the whole cache through its entry points, against fake_triton.h ---

using fake_triton::Result;

constexpr int kNotFound = TRITONSERVER_ERROR_NOT_FOUND;
constexpr int kInternal = TRITONSERVER_ERROR_INTERNAL;

double Metric(const std::string& name, const std::string& key = "", const std::string& value = "") {
  return fake_triton::MetricValue("fastpath_response_cache_" + name, key, value);
}

struct Cache {
  TRITONCACHE_Cache* handle = nullptr;
  Result init;
  explicit Cache(const std::string& config) {
    init = fake_triton::Take(TRITONCACHE_CacheInitialize(&handle, config.c_str()));
  }
  ~Cache() {
    if (handle != nullptr) fake_triton::Take(TRITONCACHE_CacheFinalize(handle));
  }
  Result Insert(const std::string& key, const std::vector<std::string>& serialized) {
    fake_triton::Allocator allocator;
    allocator.mode = fake_triton::Allocator::Mode::kInsert;
    allocator.serialized = serialized;
    fake_triton::Entry entry = fake_triton::InsertEntry(serialized);
    return fake_triton::Take(
        TRITONCACHE_CacheInsert(handle, key.c_str(), fake_triton::AsHandle(&entry), fake_triton::AsHandle(&allocator)));
  }
  Result Lookup(const std::string& key, fake_triton::Allocator* allocator) {
    fake_triton::Entry entry;
    return fake_triton::Take(
        TRITONCACHE_CacheLookup(handle, key.c_str(), fake_triton::AsHandle(&entry), fake_triton::AsHandle(allocator)));
  }
  // The data of the one output a lookup delivered ("" on a miss or an error).
  std::string LookupData(const std::string& key, Result* result = nullptr) {
    fake_triton::Allocator allocator;
    const Result r = Lookup(key, &allocator);
    if (result != nullptr) *result = r;
    return r.ok() && allocator.delivered.size() == 1 && allocator.delivered[0].size() == 1
               ? allocator.delivered[0][0].data
               : "";
  }
};

std::string FloatData(float value) { return std::string(reinterpret_cast<const char*>(&value), sizeof(value)); }

FASTPATH_TEST(TestCacheInsertAndLookup) {
  current = "cache: insert and lookup";
  Cache c(R"({"size":"1048576"})");
  Check(c.init.ok() && c.handle != nullptr, "initialized: " + c.init.message);
  Check(c.Insert("k1", {FloatResponse(1.5f)}).ok() && Metric("inserts_total") == 1, "a response is stored");
  fake_triton::Allocator allocator;
  Check(c.Lookup("k1", &allocator).ok() && allocator.copies == 1 && allocator.delivered.size() == 1 &&
            allocator.delivered[0][0].name == "y" && allocator.delivered[0][0].dtype == "FP32" &&
            allocator.delivered[0][0].shape == std::vector<int64_t>({1, 1}) &&
            allocator.delivered[0][0].data == FloatData(1.5f),
        "and core builds it back whole");
  Check(Metric("hits_total", "tier", "l1") == 1, "an L1 hit");
  Check(c.Insert("k1", {FloatResponse(2.0f)}).code == TRITONSERVER_ERROR_ALREADY_EXISTS, "a live key is kept");
  Result r;
  c.LookupData("absent", &r);
  Check(r.code == kNotFound && Metric("misses_total") == 1, "a miss is NOT_FOUND");
  const std::string strings = Response({Output("s", "BYTES", {2}, BytesData({"ab", "c"}))});
  Check(c.Insert("bytes", {strings}).ok() && c.LookupData("bytes") == BytesData({"ab", "c"}), "BYTES round trip");
}

FASTPATH_TEST(TestCacheRefusesWhatCoreCouldNotRead) {
  current = "cache: insert refuses";
  Cache c(R"({"size":"1048576"})");
  Result r;
  Check(c.Insert("err", {Response({})}).ok() && Metric("refused_total", "reason", "error_response") == 1,
        "an error response (no outputs) is refused, and Triton goes on");
  c.LookupData("err", &r);
  Check(r.code == kNotFound, "so its repeat is a miss, computed again");
  std::string crash = FloatResponse(1.0f);
  const uint32_t crash_length = 0x7FFFFFF0;
  std::memcpy(&crash[12], &crash_length, sizeof(crash_length));
  Check(c.Insert("crash", {crash}).ok() && Metric("refused_total", "reason", "malformed") == 1,
        "a malformed response (name length 0x7FFFFFF0) is refused");
  c.LookupData("crash", &r);
  Check(r.code == kNotFound, "and never handed to core");
  c.Insert("dup", {Response({Output("y", "FP32", {1}, FloatData(1)), Output("y", "FP32", {1}, FloatData(2))})});
  c.Insert("dtype", {Response({Output("y", "FP33", {1}, FloatData(1))})});
  c.Insert("bytes", {Response({Output("s", "BYTES", {2}, BytesData({"a"}))})});
  Check(Metric("refused_total", "reason", "malformed") == 4, "duplicate names, unknown datatype, cut BYTES: refused");
  Check(c.Insert("two", {FloatResponse(1.0f), FloatResponse(2.0f)}).ok() &&
            Metric("refused_total", "reason", "malformed") == 5,
        "two responses in one entry are refused (a lookup asks for one)");
  c.LookupData("two", &r);
  Check(r.code == kNotFound && Metric("inserts_total") == 0, "nothing of these was stored");
}

FASTPATH_TEST(TestCacheDeliveryFailure) {
  current = "cache: Triton's copy fails";
  Cache c(R"({"size":"1048576"})");
  c.Insert("k", {FloatResponse(3.0f)});
  fake_triton::Allocator failing;
  failing.fail = true;
  const Result r = c.Lookup("k", &failing);
  Check(r.code == kInternal && failing.copies == 1, "the copy's error is returned (Triton: a miss)");
  Check(Metric("hits_total", "tier", "l1") == 0, "and not counted a hit");
  Check(c.LookupData("k") == FloatData(3.0f), "the entry is still there");
}

FASTPATH_TEST(TestCacheSettings) {
  current = "cache: initialize";
  {
    Cache c(R"({"redis_url":"redis://127.0.0.1:1/0"})");
    Check(c.init.code == TRITONSERVER_ERROR_INVALID_ARG && Contains(c.init.message, "namespace") &&
              c.handle == nullptr,
          "redis_url without a namespace fails, naming the setting: " + c.init.message);
  }
  {
    Cache c(R"({"sise":"1"})");
    Check(!c.init.ok() && Contains(c.init.message, "sise"), "a typo fails");
  }
  {
    setenv("FASTPATH_TEST_SHORT_SECRET", "short-secret", 1);
    Cache c(R"({"redis_url":"redis://127.0.0.1:1/0","namespace":"n","mac_secret_env":"FASTPATH_TEST_SHORT_SECRET",)"
            R"("connect_timeout_ms":"5"})");
    Check(c.init.code == TRITONSERVER_ERROR_INVALID_ARG && Contains(c.init.message, "at least 16") &&
              Contains(c.init.message, "FASTPATH_TEST_SHORT_SECRET") && !Contains(c.init.message, "short-secret"),
          "a secret under 16 bytes fails, naming its variable, never its value: " + c.init.message);
    unsetenv("FASTPATH_TEST_SHORT_SECRET");
  }
  {
    fake_triton::SetMetricsEnabled(false);
    Cache c(R"({"size":"65536"})");
    fake_triton::SetMetricsEnabled(true);
    Check(c.init.ok() && c.Insert("k", {FloatResponse(1)}).ok() && c.LookupData("k") == FloatData(1),
          "metrics refused by the server: the cache still works");
  }
  Result r = fake_triton::Take(TRITONCACHE_CacheInitialize(nullptr, "{}"));
  Check(r.code == TRITONSERVER_ERROR_INVALID_ARG, "a null cache pointer is an error, not a crash");
  r = fake_triton::Take(TRITONCACHE_CacheLookup(nullptr, "k", nullptr, nullptr));
  Check(r.code == TRITONSERVER_ERROR_INVALID_ARG, "null arguments to Lookup");
}

// --- faults: the fault points, then every allocation in turn failing ---

FASTPATH_TEST(TestCacheFaultPoints) {
  current = "cache: injected faults";
  Cache c(R"({"size":"1048576"})");
  c.Insert("k", {FloatResponse(4.0f)});
  armed_faults::Arm("cache.lookup", 1);
  Result r;
  c.LookupData("k", &r);
  Check(r.code == kInternal && Contains(r.message, "bad_alloc") &&
            Metric("internal_errors_total", "where", "lookup") == 1,
        "bad_alloc in Lookup: an error (a miss for Triton), counted: " + r.message);
  Check(c.LookupData("k") == FloatData(4.0f), "the next lookup works");
  armed_faults::Arm("cache.insert", 1);
  r = c.Insert("k2", {FloatResponse(5.0f)});
  Check(r.code == kInternal && Metric("internal_errors_total", "where", "insert") == 1, "bad_alloc in Insert: counted");
  c.LookupData("k2", &r);
  Check(r.code == kNotFound, "nothing stored");
  Check(c.Insert("k2", {FloatResponse(5.0f)}).ok() && c.LookupData("k2") == FloatData(5.0f), "the next insert works");
}

// Calls `call` with the n-th allocation of this thread failing, for n = 0, 1, ... until a call
// makes no allocation fail; `after` judges each outcome. Returns how many allocations were failed.
long SweepAllocations(const std::function<TRITONSERVER_Error*(long)>& call,
                      const std::function<bool(long, const Result&)>& after, bool* all_good) {
  long n = 0;
  for (; n < 5000; ++n) {
    alloc_fault::failed = 0;
    alloc_fault::countdown = n;
    TRITONSERVER_Error* err = call(n);
    alloc_fault::countdown = -1;
    const bool hit = alloc_fault::failed != 0;
    const Result result = fake_triton::Take(err);
    *all_good = after(n, result) && *all_good;
    if (!hit) break;
  }
  return n;
}

void TestCacheAllocationFailures(const std::string& extra_config, const std::string& label) {
  current = "cache: every allocation failing in turn" + label;
  Cache c(R"({"size":"1048576")" + extra_config + "}");
  Check(c.init.ok(), "initialized: " + c.init.message);
  // Insert: each key either stored whole or not at all.
  std::vector<std::string> serialized;
  fake_triton::Allocator allocator;
  fake_triton::Entry entry;
  auto prepare = [&](long n) {  // the insert of round n, built outside the sweep
    serialized = {FloatResponse(static_cast<float>(n))};
    allocator = fake_triton::Allocator();
    allocator.mode = fake_triton::Allocator::Mode::kInsert;
    allocator.serialized = serialized;
    entry = fake_triton::InsertEntry(serialized);
  };
  prepare(0);
  bool consistent = true;
  const long insert_sweep = SweepAllocations(
      [&](long n) {
        return TRITONCACHE_CacheInsert(c.handle, ("ins-" + std::to_string(n)).c_str(), fake_triton::AsHandle(&entry),
                                       fake_triton::AsHandle(&allocator));
      },
      [&](long n, const Result& result) {
        Result looked;
        const std::string data = c.LookupData("ins-" + std::to_string(n), &looked);
        const bool whole = data == FloatData(static_cast<float>(n)) || (looked.code == kNotFound && !result.ok());
        prepare(n + 1);
        return whole;
      },
      &consistent);
  Check(consistent && insert_sweep >= 5, "every insert stored whole, or not at all and said so (" +
                                            std::to_string(insert_sweep) + " allocations failed in turn)");
  Check(Metric("internal_errors_total", "where", "insert") >= 5, "the failures were counted");
  // Lookup of a stored key: the right answer or an error, never a crash or a wrong answer.
  c.Insert("hot", {FloatResponse(7.0f)});
  fake_triton::Allocator lookup;
  fake_triton::Entry lookup_entry;
  bool right_or_error = true;
  const long lookup_sweep = SweepAllocations(
      [&](long) {
        return TRITONCACHE_CacheLookup(c.handle, "hot", fake_triton::AsHandle(&lookup_entry),
                                       fake_triton::AsHandle(&lookup));
      },
      [&](long, const Result& result) {
        const bool good = result.ok() ? lookup.delivered.size() == 1 && lookup.delivered[0][0].data == FloatData(7.0f)
                                      : result.code == kInternal;
        lookup = fake_triton::Allocator();
        lookup_entry = fake_triton::Entry();
        return good;
      },
      &right_or_error);
  Check(right_or_error && lookup_sweep >= 3, "every lookup answered right or failed cleanly (" +
                                                 std::to_string(lookup_sweep) + " allocations failed in turn)");
  Check(c.Insert("after", {FloatResponse(8.0f)}).ok() && c.LookupData("after") == FloatData(8.0f),
        "the cache works afterwards");
}

FASTPATH_TEST(TestCacheAllocationFailuresL1) { TestCacheAllocationFailures("", ""); }

// --- the Redis tier, against a real redis-server (--redis-port N) ---

class Redis {
 public:
  explicit Redis(int port) : context_(redisConnect("127.0.0.1", port)) {}
  ~Redis() {
    if (context_ != nullptr) redisFree(context_);
  }
  bool ok() const { return context_ != nullptr && !context_->err; }
  // The reply's string (for GET), or "" with `*type` the reply type.
  std::string Run(const std::vector<std::string>& args, int* type = nullptr, long long* integer = nullptr) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(args.size()), argv.data(), lengths.data()));
    if (reply == nullptr) return "";
    std::string out = reply->type == REDIS_REPLY_STRING ? std::string(reply->str, reply->len) : "";
    if (type != nullptr) *type = reply->type;
    if (integer != nullptr) *integer = reply->integer;
    freeReplyObject(reply);
    return out;
  }
  bool Exists(const std::string& key) {
    long long n = 0;
    Run({"EXISTS", key}, nullptr, &n);
    return n == 1;
  }

 private:
  redisContext* context_;
};

bool WaitFor(const std::function<bool()>& condition, double timeout_s = 5.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string UniqueNamespace(const std::string& what) {
  static std::mt19937_64 rng(std::random_device{}());
  return "cpp-" + what + "-" + std::to_string(rng() % 1000000000);
}

// A cache on that Redis; its secret is read from `secret_env` (by default one nobody sets: no MAC).
std::string L2Config(int port, const std::string& ns, const std::string& extra = "",
                     const std::string& secret_env = "FASTPATH_TEST_NO_SECRET") {
  return R"({"size":"1048576","redis_url":"redis://127.0.0.1:)" + std::to_string(port) + R"(/0","namespace":")" + ns +
         R"(","mac_secret_env":")" + secret_env + "\"" + extra + "}";
}

FASTPATH_TEST_GROUP("redis", TestCacheAllocationFailuresWithRedis) {
  TestCacheAllocationFailures(R"(,"redis_url":"redis://127.0.0.1:)" + std::to_string(redis_port) +
                                  R"(/0","namespace":")" + UniqueNamespace("alloc-insert") + "\"",
                              " (with Redis)");
}

FASTPATH_TEST_GROUP("redis", TestL2RefusedValuesAreMissesDeletedAndCounted) {
  const int port = redis_port;
  current = "L2: refused values";
  Redis redis(port);
  const std::string ns = UniqueNamespace("refused");
  auto key = [&](const std::string& k) { return L2Key("fastpath:", ns, k); };
  Entry entry;
  entry.buffers = {FloatResponse(6.0f)};
  const std::string valid = EncodeEntry(key("valid"), entry, nullptr);
  std::string crash = EncodeEntry(key("crash"), entry, nullptr);  // intact framing, the first name 0x7FFFFFF0 long
  const uint32_t crash_length = 0x7FFFFFF0;
  std::memcpy(&crash[crash.size() - entry.buffers[0].size() + 12], &crash_length, sizeof(crash_length));
  std::string v1 = "FPC1";
  Put<uint32_t>(&v1, 1);
  Put<uint64_t>(&v1, entry.buffers[0].size());
  v1 += entry.buffers[0];
  const HmacSha256 someone("a secret this cache does not have");
  redis.Run({"SET", key("valid"), valid});
  redis.Run({"SET", key("crash"), crash});
  redis.Run({"SET", key("copied"), valid});  // a valid value of another key
  redis.Run({"SET", key("v1"), v1});
  redis.Run({"SET", key("signed"), EncodeEntry(key("signed"), entry, &someone)});
  redis.Run({"DEL", key("list")});
  redis.Run({"LPUSH", key("list"), "x"});
  // breaker_failures 1: a single failure would open the breaker
  Cache c(L2Config(port, ns, R"(,"breaker_failures":"1")"));
  Check(c.init.ok(), "initialized: " + c.init.message);
  Result r;
  const struct {
    const char* key;
    const char* reason;
  } refused[] = {{"crash", "malformed"}, {"copied", "foreign_key"}, {"v1", "malformed"}, {"signed", "bad_mac"},
                 {"list", "wrong_type"}};
  for (const auto& p : refused) {
    const double before = Metric("l2_refused_total", "reason", p.reason);
    c.LookupData(p.key, &r);
    Check(r.code == kNotFound, std::string(p.key) + ": a miss");
    Check(Metric("l2_refused_total", "reason", p.reason) == before + 1, std::string(p.key) + ": counted " + p.reason);
  }
  Check(WaitFor([&] { return Metric("l2_deletes_total", "outcome", "deleted") == 5; }), "five deletes done");
  bool gone = true;
  for (const auto& p : refused) gone = gone && !redis.Exists(key(p.key));
  Check(gone, "the refused keys are deleted from Redis");
  Check(Metric("l2_failures_total", "op", "get") == 0 && Metric("breaker_opened_total") == 0 &&
            Metric("breaker_open") == 0,
        "no failure recorded: the breaker (threshold 1) stays closed");
  Check(c.LookupData("valid") == FloatData(6.0f) && Metric("hits_total", "tier", "l2") == 1,
        "a valid value is still an L2 hit");
  const double misses = Metric("misses_total");
  c.LookupData("crash", &r);
  Check(r.code == kNotFound && Metric("misses_total") == misses + 1 &&
            Metric("l2_refused_total", "reason", "malformed") == 2,
        "once deleted, a plain miss");
  Check(c.Insert("list", {FloatResponse(9.0f)}).ok() &&
            WaitFor([&] {
              return redis.Run({"GET", key("list")}) == EncodeEntry(key("list"), Entry{{FloatResponse(9.0f)}}, nullptr);
            }),
        "the recomputed answer is stored in place of the wrong-type key");
}

FASTPATH_TEST_GROUP("redis", TestL2ValuesCarryTheirKeyAndMac) {
  const int port = redis_port;
  current = "L2: MAC between replicas";
  Redis redis(port);
  const std::string ns = UniqueNamespace("mac");
  const std::string secret = "replicas-share-this-secret";
  setenv("FASTPATH_TEST_SECRET", secret.c_str(), 1);
  const std::string with_secret = L2Config(port, ns, "", "FASTPATH_TEST_SECRET");
  const std::string l2_key = L2Key("fastpath:", ns, "k");
  {
    Cache writer(with_secret);
    Check(writer.init.ok(), "initialized with a secret: " + writer.init.message);
    writer.Insert("k", {FloatResponse(2.5f)});
    Check(WaitFor([&] { return redis.Exists(l2_key); }), "written to Redis");
  }
  const std::string value = redis.Run({"GET", l2_key});
  const HmacSha256 mac(secret);
  const Digest tag = mac.Mac(value.data(), value.size() - kMacBytes);
  Check(value.size() > kMacBytes && value[4] == 1 &&
            std::memcmp(tag.data(), value.data() + value.size() - kMacBytes, kMacBytes) == 0,
        "the value ends with HMAC-SHA256(secret, the rest)");
  Check(value.find(l2_key) == 9, "and carries its own key");
  {
    Cache replica(with_secret);
    Check(replica.LookupData("k") == FloatData(2.5f) && Metric("hits_total", "tier", "l2") == 1,
          "a replica with the same secret reads it");
  }
  {
    Cache stranger(L2Config(port, ns));  // no secret
    Result r;
    stranger.LookupData("k", &r);
    Check(r.code == kNotFound && Metric("l2_refused_total", "reason", "bad_mac") == 1,
          "a cache without the secret refuses it");
    Check(WaitFor([&] { return !redis.Exists(l2_key); }), "and deletes it");
  }
  unsetenv("FASTPATH_TEST_SECRET");
}

FASTPATH_TEST_GROUP("redis", TestL2PromotionOnlyAfterDelivery) {
  const int port = redis_port;
  current = "L2: promotion after delivery";
  Redis redis(port);
  const std::string ns = UniqueNamespace("promote");
  const std::string l2_key = L2Key("fastpath:", ns, "k");
  redis.Run({"SET", l2_key, EncodeEntry(l2_key, Entry{{FloatResponse(1.25f)}}, nullptr)});
  Cache c(L2Config(port, ns));
  fake_triton::Allocator failing;
  failing.fail = true;
  const Result r = c.Lookup("k", &failing);
  Check(r.code == kInternal && Metric("hits_total", "tier", "l2") == 0, "Triton's copy failed: not a hit");
  Check(c.LookupData("k") == FloatData(1.25f) && Metric("hits_total", "tier", "l2") == 1 &&
            Metric("hits_total", "tier", "l1") == 0,
        "nor promoted: the next lookup reads Redis again");
  Check(c.LookupData("k") == FloatData(1.25f) && Metric("hits_total", "tier", "l1") == 1,
        "delivered once, it is promoted");
}

FASTPATH_TEST_GROUP("redis", TestL2WriteQueueBoundInBytes) {
  const int port = redis_port;
  current = "L2: write queue bytes";
  const std::string ns = UniqueNamespace("queue");
  Cache c(L2Config(port, ns, R"(,"write_queue_bytes":"65536","max_entry_bytes":"100000")"));
  const std::string big = Response({Output("y", "FP32", {5000}, std::string(20000, '\1'))});
  for (int i = 0; i < 20; ++i) c.Insert("big-" + std::to_string(i), {big});
  Check(WaitFor([&] {
          return Metric("l2_writes_total", "outcome", "stored") + Metric("l2_writes_total", "outcome", "dropped") == 20;
        }),
        "every write stored or dropped");
  Check(Metric("l2_writes_total", "outcome", "dropped") >= 1,
        "20 writes of 20 KB at once: those past 64 KiB queued are dropped, counted (" +
            std::to_string(Metric("l2_writes_total", "outcome", "dropped")) + ")");
  Check(Metric("l2_writes_total", "outcome", "stored") >= 2, "and the first are stored");
}

FASTPATH_TEST_GROUP("redis", TestL2WorkerSurvivesExceptions) {
  const int port = redis_port;
  current = "L2: worker exceptions";
  Redis redis(port);
  const std::string ns = UniqueNamespace("worker");
  Cache c(L2Config(port, ns));
  armed_faults::Arm("cache.worker", 3);
  c.Insert("lost", {FloatResponse(1)});
  Check(WaitFor([&] { return Metric("internal_errors_total", "where", "worker") == 3; }),
        "three rounds of the worker threw bad_alloc, each counted");
  Check(Metric("l2_writes_total", "outcome", "dropped") == 1, "the write of the round that threw is counted dropped");
  c.Insert("kept", {FloatResponse(2)});
  Check(WaitFor([&] { return redis.Exists(L2Key("fastpath:", ns, "kept")); }), "and the worker still writes");
}

FASTPATH_TEST_GROUP("redis", TestL2AllocationFailures) {
  const int port = redis_port;
  current = "L2: every allocation failing in turn";
  Redis redis(port);
  const std::string ns = UniqueNamespace("alloc");
  Cache c(L2Config(port, ns));
  auto key = [&](const std::string& k) { return L2Key("fastpath:", ns, k); };
  // An L2 hit (decoded, delivered, promoted) and a refused value (counted, deleted) per round.
  for (const bool poisoned : {false, true}) {
    fake_triton::Allocator allocator;
    fake_triton::Entry entry;
    auto prepare = [&](long n) {
      const std::string k = key((poisoned ? "bad-" : "ok-") + std::to_string(n));
      const std::string value = EncodeEntry(k, Entry{{FloatResponse(static_cast<float>(n))}}, nullptr);
      redis.Run({"SET", k, poisoned ? value.substr(0, value.size() - 1) : value});
      allocator = fake_triton::Allocator();
      entry = fake_triton::Entry();
    };
    prepare(0);
    std::string name;
    bool good = true;
    const long sweep = SweepAllocations(
        [&](long n) {
          name = (poisoned ? "bad-" : "ok-") + std::to_string(n);
          return TRITONCACHE_CacheLookup(c.handle, name.c_str(), fake_triton::AsHandle(&entry),
                                         fake_triton::AsHandle(&allocator));
        },
        [&](long n, const Result& result) {
          bool right;
          if (poisoned) {
            right = result.code == kNotFound || result.code == kInternal;
          } else {
            right = result.ok() ? allocator.delivered.size() == 1 &&
                                      allocator.delivered[0][0].data == FloatData(static_cast<float>(n))
                                : result.code == kInternal;
          }
          prepare(n + 1);
          return right;
        },
        &good);
    Check(good && sweep >= 5, std::string(poisoned ? "refused values" : "L2 hits") +
                                  ": the right answer or a clean miss (" + std::to_string(sweep) +
                                  " allocations failed)");
  }
  c.Insert("after", {FloatResponse(3)});
  Check(WaitFor([&] { return redis.Exists(key("after")); }) && c.LookupData("after") == FloatData(3),
        "the cache and its worker work afterwards");
}

FASTPATH_TEST_GROUP("redis", TestL2BypassSkipsWhileColdAndNeverAnswersWrong) {
  const int port = redis_port;
  current = "L2 bypass: the whole cache";
  Redis redis(port);
  const std::string ns = UniqueNamespace("bypass");
  auto key = [&](const std::string& k) { return L2Key("fastpath:", ns, k); };
  Cache c(L2Config(port, ns, R"(,"l2_bypass_window":"4","l2_bypass_max_interval":"4","l2_bypass_probe_ms":"0")"));
  Check(c.init.ok() && Metric("l2_bypass_interval") == 1, "initialized, every L1 miss asks Redis: " + c.init.message);
  Result r;
  for (int i = 0; i < 4; ++i) c.LookupData("cold-" + std::to_string(i), &r);
  Check(r.code == kNotFound && Metric("l2_lookups_total") == 4 && Metric("l2_bypass_interval") == 2,
        "4 unique requests, none in Redis: now 1 in 2 L1 misses asks");
  // Redis warms (a replica stored these): a skipped lookup is a miss, never another answer.
  for (const std::string k : {"warm-1", "warm-2"}) {
    redis.Run({"SET", key(k), EncodeEntry(key(k), Entry{{FloatResponse(7.5f)}}, nullptr)});
  }
  c.LookupData("warm-1", &r);
  Check(r.code == kNotFound && Metric("l2_skipped_total", "reason", "bypass") == 1 &&
            Metric("l2_lookups_total") == 4,
        "the first is skipped: a miss (Triton computes it)");
  Check(c.LookupData("warm-1") == FloatData(7.5f) && Metric("hits_total", "tier", "l2") == 1 &&
            Metric("l2_bypass_interval") == 1,
        "the second asks and hits: every L1 miss asks again");
  Check(c.LookupData("warm-2") == FloatData(7.5f) && Metric("hits_total", "tier", "l2") == 2 &&
            Metric("l2_skipped_total", "reason", "bypass") == 1,
        "the next L1 miss asks at once");
  for (int i = 4; i < 8; ++i) c.LookupData("cold-" + std::to_string(i));
  Check(Metric("l2_bypass_interval") == 2, "a window without a hit: sampling again");
  Check(c.Insert("stored-while-sampling", {FloatResponse(2.5f)}).ok() &&
            WaitFor([&] { return redis.Exists(key("stored-while-sampling")); }),
        "answers computed while sampling are still written to Redis (replicas and repeats warm it)");
  Check(Metric("l2_skipped_total", "reason", "breaker_open") == 0 &&
            Metric("l2_skipped_total", "reason", "no_connection") == 0,
        "no other reason to skip");
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--redis-port" && i + 1 < argc) {
      redis_port = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--redis-port N]\n", argv[0]);
      return 2;
    }
  }
  fastpath::SetFaultHook(armed_faults::Hook);
  fastpath_test::RunCases();
  if (redis_port != 0) {
    if (!Redis(redis_port).ok()) {
      std::printf("FAILED: no Redis on 127.0.0.1:%d\n", redis_port);
      return 1;
    }
    fastpath_test::RunCases("redis");
  }
  return fastpath_test::Summary();
}
