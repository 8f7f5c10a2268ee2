// The in-process tier and the Redis tier's pure parts (no Triton, no Redis): an LRU bounded in
// bytes with a time-to-live, a circuit breaker with an injected clock, and the queue of pending
// Redis writes bounded in count and bytes. Unit-tested as C++.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace fastpath_cache {

// One cached response set: Triton's serialized responses (one buffer per response), immutable once
// built; lookups copy out of it while holding a reference, so eviction never frees it under them.
struct Entry {
  std::vector<std::string> buffers;
  size_t payload_bytes() const {
    size_t n = 0;
    for (const auto& b : buffers) n += b.size();
    return n;
  }
};
using EntryPtr = std::shared_ptr<const Entry>;

// What an entry costs the L1's bound beyond its payload and key: the map and list nodes, the
// shared_ptr's control block and the vector (an estimate that errs high; 32 more per buffer).
constexpr size_t kEntryOverheadBytes = 160;

class L1Cache {
 public:
  enum class PutResult { kStored, kExists, kTooLarge };
  struct PutOutcome {
    PutResult result = PutResult::kStored;
    uint64_t evicted = 0;  // entries evicted for room
    uint64_t expired = 0;  // expired entries swept from the cold end
    uint64_t bytes = 0;    // held after the put (for the gauges, read under the put's lock)
    uint64_t entries = 0;
  };

  // `capacity_bytes` bounds the sum of Charge() over entries; `ttl_ns` 0 = no expiry.
  L1Cache(uint64_t capacity_bytes, uint64_t ttl_ns) : capacity_(capacity_bytes), ttl_ns_(ttl_ns) {}

  static uint64_t Charge(const std::string& key, const Entry& entry) {
    return entry.payload_bytes() + key.size() + kEntryOverheadBytes + entry.buffers.size() * 32;
  }

  // The entry under `key` unless absent or expired (an expired one is removed: `*expired` = true).
  EntryPtr Get(const std::string& key, uint64_t now_ns, bool* expired);
  bool Contains(const std::string& key, uint64_t now_ns);
  // Stores `entry` as the most recent, evicting least recently used entries for room. An entry
  // whose charge exceeds the capacity is refused; an existing live key is left as it is.
  PutOutcome Put(const std::string& key, EntryPtr entry, uint64_t now_ns);

  uint64_t bytes() const;
  uint64_t entries() const;
  uint64_t capacity() const { return capacity_; }

 private:
  struct Node {
    std::string key;
    EntryPtr entry;
    uint64_t expires_ns;  // 0 = never
    uint64_t charge;
  };
  void EraseLocked(std::list<Node>::iterator it);
  bool ExpiredLocked(const Node& node, uint64_t now_ns) const {
    return node.expires_ns != 0 && now_ns >= node.expires_ns;
  }

  const uint64_t capacity_;
  const uint64_t ttl_ns_;
  mutable std::mutex mu_;
  std::list<Node> lru_;  // front = most recently used
  std::unordered_map<std::string, std::list<Node>::iterator> index_;
  uint64_t bytes_ = 0;
};

// Closed: Redis is used. `failure_threshold` failures in a row open it: the request path skips
// Redis until `open_ns` have passed; then one probe (made off the request path) closes it or opens
// it again for another `open_ns`. A success while closed resets the count.
class Breaker {
 public:
  Breaker(int failure_threshold, uint64_t open_ns) : threshold_(failure_threshold), open_ns_(open_ns) {}

  bool AllowRequest() const { return !open_.load(std::memory_order_acquire); }
  bool IsOpen() const { return open_.load(std::memory_order_acquire); }
  // Open and its wait is over: time for a probe.
  bool ShouldProbe(uint64_t now_ns) const;
  // A success: the count of failures in a row restarts. An open breaker stays open: a reply that
  // was on its way when it opened proves little, and only a probe closes it (Close()).
  void RecordSuccess();
  // A probe succeeded: closed, the count restarted.
  void Close();
  // A failure; true when it is the one that opened the breaker (or re-opened it after a probe).
  bool RecordFailure(uint64_t now_ns);
  uint64_t times_opened() const { return times_opened_.load(std::memory_order_relaxed); }

 private:
  const int threshold_;
  const uint64_t open_ns_;
  mutable std::mutex mu_;
  std::atomic<int> failures_{0};  // read without the lock on the success path
  uint64_t reopen_at_ns_ = 0;
  std::atomic<bool> open_{false};
  std::atomic<uint64_t> times_opened_{0};
};

// Whether an L1 miss asks Redis: the adaptive L2 bypass. Asking costs a round trip on the request's
// thread, paid for nothing by every request Redis has never seen (unique traffic, a cold Redis).
// So while fewer than `min_hits` of the last `window` lookups that Redis answered were hits, only
// a sample of L1 misses asks: 1 in `interval`, which starts at 2 and doubles after each sampled
// miss up to `max_interval`, plus one whenever `probe_ns` have passed since the last that asked (a
// replica that warmed Redis is noticed within that time at any traffic; 0: no such probe). A hit
// resumes full lookups and restarts the window. A skipped lookup is only a miss: the request is
// computed and its answer stored in both tiers as always, so answers never change; what sampling
// can cost is a hit computed instead of read, while hits are rarer than min_hits in window.
// Pure and thread-safe: the clock is the caller's.
class L2Gate {
 public:
  struct Options {
    bool adaptive = true;        // false: every L1 miss asks Redis
    uint32_t window = 100;       // lookups answered by Redis that are judged
    uint32_t min_hits = 1;       // fewer hits than this in a full window: sample
    uint32_t max_interval = 64;  // the sample's bound: at least 1 in this many L1 misses asks
    uint64_t probe_ns = 1'000'000'000;  // one asks at least this often (0: only the count)
  };

  explicit L2Gate(const Options& options) : options_(options), outcomes_(options.adaptive ? options.window : 0) {}

  // Whether this L1 miss asks Redis (then its outcome goes to Record, unless Redis did not answer).
  bool ShouldAsk(uint64_t now_ns);
  // The answer to a lookup that asked: a hit (a value delivered), or not (no value, or one refused).
  // Returns true when the interval changed.
  bool Record(bool hit, uint64_t now_ns);
  // 1: every L1 miss asks; N: one in N does.
  uint32_t interval() const { return interval_.load(std::memory_order_relaxed); }

 private:
  const Options options_;
  std::atomic<uint32_t> interval_{1};
  std::mutex mu_;
  std::vector<uint8_t> outcomes_;  // a ring of the last `window` answers (1: a hit), while full
  uint32_t next_ = 0;              // where the next answer goes
  uint32_t filled_ = 0;            // answers in the ring (it restarts on a resume)
  uint32_t hits_ = 0;              // hits in the ring
  uint32_t passed_ = 0;            // L1 misses skipped since the last one that asked, while sampling
  uint64_t last_asked_ns_ = 0;     // when the last one asked, while sampling
};

// The L2's pending operations, in order: a write (SET of `entry`) or a delete (no entry: DEL of a
// refused key), bounded in count and in bytes (keys, entries' payloads and a fixed overhead each),
// so a slow Redis costs a bounded amount of memory. Not synchronized: RedisL2 holds its lock.
class WriteQueue {
 public:
  struct Op {
    std::string key;
    EntryPtr entry;  // nullptr: delete the key
  };
  static constexpr uint64_t kOpOverheadBytes = 64;
  static uint64_t Cost(const Op& op) {
    return kOpOverheadBytes + op.key.size() + (op.entry ? op.entry->payload_bytes() : 0);
  }

  WriteQueue(uint64_t max_ops, uint64_t max_bytes) : max_ops_(max_ops), max_bytes_(max_bytes) {}

  // Appends `op` unless that would pass either bound (then false: the caller counts it dropped).
  bool Push(Op op);
  // Moves up to `n` of the oldest operations to the end of `out`.
  void PopUpTo(size_t n, std::vector<Op>* out);
  // Empties the queue; how many writes and deletes it held.
  void Clear(uint64_t* writes, uint64_t* deletes);
  size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }
  uint64_t bytes() const { return bytes_; }

 private:
  const uint64_t max_ops_;
  const uint64_t max_bytes_;
  std::deque<Op> ops_;
  uint64_t bytes_ = 0;
};

}  // namespace fastpath_cache
