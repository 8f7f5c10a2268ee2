#include "tiers.h"

#include <algorithm>

namespace fastpath_cache {

void L1Cache::EraseLocked(std::list<Node>::iterator it) {
  bytes_ -= it->charge;
  index_.erase(it->key);
  lru_.erase(it);
}

EntryPtr L1Cache::Get(const std::string& key, uint64_t now_ns, bool* expired) {
  *expired = false;
  std::lock_guard<std::mutex> lock(mu_);
  auto found = index_.find(key);
  if (found == index_.end()) return nullptr;
  auto it = found->second;
  if (ExpiredLocked(*it, now_ns)) {
    EraseLocked(it);
    *expired = true;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it);
  return it->entry;
}

bool L1Cache::Contains(const std::string& key, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = index_.find(key);
  return found != index_.end() && !ExpiredLocked(*found->second, now_ns);
}

L1Cache::PutOutcome L1Cache::Put(const std::string& key, EntryPtr entry, uint64_t now_ns) {
  PutOutcome outcome;
  const uint64_t charge = Charge(key, *entry);
  std::lock_guard<std::mutex> lock(mu_);
  outcome.bytes = bytes_;
  outcome.entries = index_.size();
  if (charge > capacity_) {
    outcome.result = PutResult::kTooLarge;
    return outcome;
  }
  auto found = index_.find(key);
  if (found != index_.end()) {
    if (!ExpiredLocked(*found->second, now_ns)) {
      outcome.result = PutResult::kExists;
      return outcome;
    }
    EraseLocked(found->second);
    ++outcome.expired;
  }
  // Expired entries at the cold end go first; then the least recently used until it fits.
  while (!lru_.empty() && ExpiredLocked(lru_.back(), now_ns)) {
    EraseLocked(std::prev(lru_.end()));
    ++outcome.expired;
  }
  while (!lru_.empty() && bytes_ + charge > capacity_) {
    EraseLocked(std::prev(lru_.end()));
    ++outcome.evicted;
  }
  const uint64_t expires = ttl_ns_ ? now_ns + ttl_ns_ : 0;
  // Either both containers hold the new node or neither does (an allocation may fail in each).
  lru_.push_front(Node{key, std::move(entry), expires, charge});
  try {
    index_[key] = lru_.begin();
  } catch (...) {
    lru_.pop_front();
    throw;
  }
  bytes_ += charge;
  outcome.bytes = bytes_;
  outcome.entries = index_.size();
  return outcome;
}

uint64_t L1Cache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

uint64_t L1Cache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

bool Breaker::ShouldProbe(uint64_t now_ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.load(std::memory_order_relaxed) && now_ns >= reopen_at_ns_;
}

void Breaker::RecordSuccess() {
  // The common case (closed, no failures) takes no lock: one per Redis round trip.
  if (failures_.load(std::memory_order_acquire) == 0 || open_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_.load(std::memory_order_relaxed)) failures_.store(0, std::memory_order_release);
}

void Breaker::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.store(0, std::memory_order_release);
  open_.store(false, std::memory_order_release);
}

bool Breaker::RecordFailure(uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.load(std::memory_order_relaxed)) {
    // Open already: only a failed probe (its wait over) starts another wait.
    if (now_ns >= reopen_at_ns_) {
      reopen_at_ns_ = now_ns + open_ns_;
      times_opened_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    return false;
  }
  if (failures_.fetch_add(1, std::memory_order_acq_rel) + 1 < threshold_) return false;
  open_.store(true, std::memory_order_release);
  reopen_at_ns_ = now_ns + open_ns_;
  times_opened_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool L2Gate::ShouldAsk(uint64_t now_ns) {
  if (interval_.load(std::memory_order_relaxed) == 1) return true;  // full lookups: no lock
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t interval = interval_.load(std::memory_order_relaxed);
  // (another thread may have asked with a later clock reading than this one's)
  const bool probe_due =
      options_.probe_ns != 0 && now_ns >= last_asked_ns_ && now_ns - last_asked_ns_ >= options_.probe_ns;
  if (interval > 1 && passed_ + 1 < interval && !probe_due) {
    ++passed_;
    return false;
  }
  passed_ = 0;
  last_asked_ns_ = now_ns;
  return true;
}

bool L2Gate::Record(bool hit, uint64_t now_ns) {
  if (!options_.adaptive) return false;
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t interval = interval_.load(std::memory_order_relaxed);
  if (hit && interval > 1) {  // Redis hits again: every miss asks, judged over a new window
    interval_.store(1, std::memory_order_relaxed);
    next_ = filled_ = hits_ = passed_ = 0;
    return true;
  }
  if (interval > 1) {  // a sampled miss: sample less
    const uint32_t doubled = interval > options_.max_interval / 2 ? options_.max_interval : interval * 2;
    interval_.store(doubled, std::memory_order_relaxed);
    return doubled != interval;
  }
  if (filled_ == options_.window) {
    hits_ -= outcomes_[next_];
  } else {
    ++filled_;
  }
  outcomes_[next_] = hit ? 1 : 0;
  hits_ += outcomes_[next_];
  next_ = next_ + 1 == options_.window ? 0 : next_ + 1;
  if (filled_ < options_.window || hits_ >= options_.min_hits) return false;
  interval_.store(std::min<uint32_t>(2, options_.max_interval), std::memory_order_relaxed);  // Redis is cold
  next_ = filled_ = hits_ = passed_ = 0;
  last_asked_ns_ = now_ns;
  return true;
}

bool WriteQueue::Push(Op op) {
  const uint64_t cost = Cost(op);
  if (ops_.size() >= max_ops_ || cost > max_bytes_ || bytes_ > max_bytes_ - cost) return false;
  bytes_ += cost;
  ops_.push_back(std::move(op));
  return true;
}

void WriteQueue::PopUpTo(size_t n, std::vector<Op>* out) {
  for (; n > 0 && !ops_.empty(); --n) {
    bytes_ -= Cost(ops_.front());
    out->push_back(std::move(ops_.front()));
    ops_.pop_front();
  }
}

void WriteQueue::Clear(uint64_t* writes, uint64_t* deletes) {
  *writes = 0;
  *deletes = 0;
  for (const Op& op : ops_) ++(op.entry ? *writes : *deletes);
  ops_.clear();
  bytes_ = 0;
}

}  // namespace fastpath_cache
