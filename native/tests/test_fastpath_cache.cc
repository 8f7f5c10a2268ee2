// Tests of the response cache's pure parts, as C++: the L1 (LRU order, byte bound, time-to-live),
// the Redis breaker, the key namespacing, the check that tells an error response (no outputs)
// apart, the L2 value codec, and the settings and Redis URL parsers.
//
// Built and run by tests/unit/test_cache_plugin_build.py, also under AddressSanitizer and
// UndefinedBehaviorSanitizer. Usage: test_fastpath_cache; prints one line per failed check and
// "N passed, N failed" last; exit 1 on any failure.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "codec.h"
#include "settings.h"
#include "tiers.h"

using namespace fastpath_cache;  // NOLINT

namespace {

int passed = 0;
int failed = 0;
std::string current;

void Check(bool condition, const std::string& what) {
  if (condition) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAILED %s: %s\n", current.c_str(), what.c_str());
  }
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// One output serialized the way Triton 2.51's cache_entry.cc does.
std::string Output(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
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

constexpr uint64_t kSecond = 1'000'000'000ull;

// --- tiers.h: the L1 ---

void TestL1HitsAndLruOrder() {
  current = "L1 LRU order";
  const uint64_t charge = L1Cache::Charge("k0", *SizedEntry(100));
  L1Cache l1(3 * charge, 0);
  bool expired = false;
  for (int i = 0; i < 3; ++i) l1.Put("k" + std::to_string(i), SizedEntry(100), 0);
  Check(l1.entries() == 3 && l1.bytes() == 3 * charge, "three entries fill it exactly");
  Check(l1.Get("k0", 1, &expired) != nullptr, "k0 is there");  // k0 now the most recent
  const auto outcome = l1.Put("k3", SizedEntry(100), 2);
  Check(outcome.result == L1Cache::PutResult::kStored && outcome.evicted == 1, "one eviction for k3");
  Check(l1.Get("k1", 3, &expired) == nullptr && !expired, "the least recently used (k1) went");
  Check(l1.Get("k0", 3, &expired) != nullptr, "k0, used since, stayed");
  Check(l1.Get("k2", 3, &expired) != nullptr && l1.Get("k3", 3, &expired) != nullptr, "k2 and k3 are there");
  Check(l1.Put("k3", SizedEntry(100), 4).result == L1Cache::PutResult::kExists, "an existing key is kept");
}

void TestL1ByteBound() {
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

void TestL1Ttl() {
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

void TestL1HeldEntrySurvivesEviction() {
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

void TestL1Concurrent() {
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

void TestBreaker() {
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

// --- codec.h ---

void TestKeyNamespacing() {
  current = "key namespacing";
  Check(L2Key("fastpath:", "abc123", "98765") == "fastpath:rc:abc123:98765", "prefix, rc:, namespace, key");
  Check(L2Key("fastpath:", "ns-a", "1") != L2Key("fastpath:", "ns-b", "1"), "namespaces never share a key");
  Check(L2Key("p1:", "ns", "1") != L2Key("p2:", "ns", "1"), "prefixes never share a key");
  Check(L2Key("", "ns", "1") == "rc:ns:1", "an empty prefix");
  Check(ValidNamespace("sha256-0123abcdef") && ValidNamespace("a.b_c-d"), "hex, dots, dashes, underscores");
  Check(!ValidNamespace("") && !ValidNamespace("a:b") && !ValidNamespace("a b") && !ValidNamespace(std::string(129, 'a')),
        "empty, ':', spaces and >128 characters are refused (a namespace cannot forge another's keys)");
}

void TestResponseCheck() {
  current = "serialized response check";
  const std::string ok = FloatResponse(0.5f);
  Check(CheckSerializedResponse(ok.data(), ok.size()) == ResponseCheck::kOk, "one output");
  const std::string two = Response({Output("a", "INT64", {1}, std::string(8, '\1')), Output("b", "BYTES", {1}, "xyz")});
  Check(CheckSerializedResponse(two.data(), two.size()) == ResponseCheck::kOk, "two outputs");
  const std::string none = Response({});
  Check(none.size() == 4, "an error response serializes to 4 bytes");
  Check(CheckSerializedResponse(none.data(), none.size()) == ResponseCheck::kNoOutputs, "zero outputs: an error");
  Check(CheckSerializedResponse(ok.data(), ok.size() - 1) == ResponseCheck::kMalformed, "truncated");
  Check(CheckSerializedResponse((ok + "x").data(), ok.size() + 1) == ResponseCheck::kMalformed, "trailing bytes");
  Check(CheckSerializedResponse(ok.data(), 3) == ResponseCheck::kMalformed, "shorter than the count");
  Check(CheckSerializedResponse(nullptr, 0) == ResponseCheck::kMalformed, "no data");
  std::string lying = ok;
  const uint32_t many = 1000;
  std::memcpy(&lying[0], &many, sizeof(many));
  Check(CheckSerializedResponse(lying.data(), lying.size()) == ResponseCheck::kMalformed, "a count past the data");
  std::string huge;
  Put<uint32_t>(&huge, 1);
  Put<uint64_t>(&huge, UINT64_MAX - 4);
  Check(CheckSerializedResponse(huge.data(), huge.size()) == ResponseCheck::kMalformed, "a size that would wrap");
}

void TestCodec() {
  current = "L2 value codec";
  Entry entry;
  entry.buffers = {FloatResponse(1.0f), FloatResponse(2.0f)};
  const std::string value = EncodeEntry(entry);
  Check(value.compare(0, 4, "FPC1") == 0, "FPC1 header");
  Entry back;
  std::string error;
  Check(DecodeEntry(value, &back, &error) && back.buffers == entry.buffers, "round trip");
  Check(!DecodeEntry(value.substr(0, value.size() - 1), &back, &error), "truncated value refused");
  Check(!DecodeEntry(value + "z", &back, &error) && Contains(error, "after the last"), "trailing bytes refused");
  Check(!DecodeEntry("GARBAGE!", &back, &error) && Contains(error, "FPC1"), "a foreign value refused");
  Entry errors;
  errors.buffers = {Response({})};
  Check(!DecodeEntry(EncodeEntry(errors), &back, &error), "an error response from Redis is refused too");
  Entry empty;
  Check(!DecodeEntry(EncodeEntry(empty), &back, &error), "zero buffers refused");
  std::string bad = value;
  const uint64_t big = UINT64_MAX;
  std::memcpy(&bad[8], &big, sizeof(big));
  Check(!DecodeEntry(bad, &back, &error), "a buffer size past the end refused");
}

// --- settings.h ---

void TestSettings() {
  current = "settings";
  CacheSettings s;
  std::string error;
  Check(ParseSettings("{}", &s, &error) && s.l1_bytes == (64u << 20) && s.redis_url.empty() && s.ns == "default",
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
  Check(!ParseSettings(R"({"redis_url":"http://x"})", &s, &error) && Contains(error, "redis_url"), "a non-redis URL");
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

void TestRedisUrl() {
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

}  // namespace

int main() {
  TestL1HitsAndLruOrder();
  TestL1ByteBound();
  TestL1Ttl();
  TestL1HeldEntrySurvivesEviction();
  TestL1Concurrent();
  TestBreaker();
  TestKeyNamespacing();
  TestResponseCheck();
  TestCodec();
  TestSettings();
  TestRedisUrl();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
