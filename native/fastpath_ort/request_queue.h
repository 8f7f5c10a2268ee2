// A model's own request queue, in front of its instances' workers (pure: no Triton calls).
//
// Why the backend queues for itself: Triton 2.51's batcher cannot bound its queue without a queue
// policy, and any queue policy exposes the 500 ms batcher stall (docs/known-issues.md), while the
// backend API does not say how long a request waited there. So a model with admission budgets
// takes every request as Triton hands it over (Execute returns at once), and its queue knows each
// request's arrival, the rows ahead of it and its priority: a request that cannot be served within
// its level's budget is refused on arrival, in microseconds, instead of timing out in a queue
// nobody can see. Workers (one per instance, each with its instance's session) take batches from
// the front: level 1 first, then arrival order, whole requests up to max_batch_size rows, and never
// two levels in one batch: a level-1 request is computed and answered on its own batch, not after
// the lower-level rows a batch shared with it (its Runs are planned by length, not by level).
//
// What runs before a new request is counted per level (RowsAhead): the rows queued or computing at
// its level or a higher one. Lower-level rows, queued or computing, are not ahead of it: queued ones
// are taken after it, and the one lower-level batch a worker may still be computing when it arrives
// is bounded by the take-time rules (admission.h), which is what a higher level's larger budget
// leaves room for. So a level-1 request is refused only for level-1 work.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

namespace fastpath {

template <typename T>
class RequestQueue {
 public:
  struct Entry {
    T item;
    int64_t rows = 1;
    int level = 0;  // Admission::Level of its priority (1 = served first)
    int64_t priority = 0;
    uint64_t arrival_ns = 0;
    bool computing = false;  // taken by Take, not yet Done
  };

  bool empty() const { return queued_ == 0; }
  // The request Take would take first (highest level, then arrival), or nullptr.
  const Entry* front() const {
    for (const auto& [level, lane] : lanes_) {
      if (!lane.entries.empty()) return &lane.entries.front();
    }
    return nullptr;
  }
  size_t size() const { return queued_; }
  int64_t computing_rows() const { return computing_rows_; }

  // Rows that run before a new request at `level`: queued or computing at that level or a higher
  // one (a lower number). Lower-level rows are not counted, computing ones included.
  int64_t RowsAhead(int level) const {
    int64_t rows = 0;
    for (const auto& [queued_level, lane] : lanes_) {
      if (queued_level > level) break;
      rows += lane.rows;
    }
    for (const auto& [computing_level, computing] : computing_) {
      if (computing_level > level) break;
      rows += computing;
    }
    return rows;
  }

  // Queues `entry`. All or nothing: when it throws (std::bad_alloc), nothing was queued and `entry`
  // still holds its item, for the caller to answer.
  void Push(Entry&& entry) {
    const int64_t rows = entry.rows;
    Lane& lane = lanes_[entry.level];
    lane.entries.push_back(std::move(entry));  // deque::push_back: no effect when it throws
    lane.rows += rows;
    ++queued_;
  }

  // Whole requests from the front (highest level first, then arrival), all of the front's level,
  // while their rows fit `max_rows`; the first always comes (a request never needs more rows than
  // max_batch_size: the reader refused it). Their rows count as computing at their level until Done.
  // All or nothing: the allocations (room for at most `max_rows` requests, each having a row or
  // more, and the level's computing count) come before anything is taken, so when one throws the
  // queue is as it was.
  std::vector<Entry> Take(int64_t max_rows) {
    const size_t most = std::min(queued_, static_cast<size_t>(std::max<int64_t>(max_rows, 1)));
    std::vector<Entry> taken;
    taken.reserve(most);
    const Entry* first = Front();
    if (first == nullptr) return taken;
    const int level = first->level;
    int64_t& computing = computing_[level];  // may throw: nothing taken yet
    int64_t rows = 0;
    while (taken.size() < most) {
      const Entry* front = Front();
      if (front == nullptr || front->level != level || (!taken.empty() && rows + front->rows > max_rows)) break;
      rows += front->rows;
      taken.emplace_back();  // reserved: cannot throw
      PopFront(&taken.back());
      taken.back().computing = true;
    }
    computing += rows;
    computing_rows_ += rows;
    return taken;
  }

  // Moves the front request (highest level first, then arrival) into `out`, not counted as
  // computing; false when the queue is empty. Allocates nothing (for a model that unloads with
  // requests still queued: each is answered, whatever memory is left).
  bool PopFront(Entry* out) noexcept {
    if (Front() == nullptr) return false;
    auto lane = lanes_.begin();
    *out = std::move(lane->second.entries.front());
    lane->second.entries.pop_front();
    lane->second.rows -= out->rows;
    --queued_;
    if (lane->second.entries.empty()) lanes_.erase(lane);
    return true;
  }

  // `entry`, taken earlier, is no longer computing (answered, or shed when taken); once only: an
  // entry already done counts nothing again.
  void Done(Entry* entry) noexcept {
    if (!entry->computing) return;
    entry->computing = false;
    computing_rows_ -= entry->rows;
    auto computing = computing_.find(entry->level);
    if (computing == computing_.end()) return;  // not expected: Take counted it
    computing->second -= entry->rows;
    if (computing->second == 0) computing_.erase(computing);
  }

 private:
  struct Lane {
    std::deque<Entry> entries;
    int64_t rows = 0;
  };

  // The front request, or nullptr; drops the empty lane a failed Push may leave first.
  const Entry* Front() noexcept {
    while (!lanes_.empty() && lanes_.begin()->second.entries.empty()) lanes_.erase(lanes_.begin());
    return lanes_.empty() ? nullptr : &lanes_.begin()->second.entries.front();
  }

  std::map<int, Lane> lanes_;  // by level, level 1 first
  size_t queued_ = 0;
  std::map<int, int64_t> computing_;  // rows taken and not yet Done, by level (none at 0)
  int64_t computing_rows_ = 0;        // their sum
};

}  // namespace fastpath
