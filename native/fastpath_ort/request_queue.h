// A model's own request queue, in front of its instances' workers (pure: no Triton calls).
//
// Why the backend queues for itself: Triton 2.51's batcher cannot bound its queue without a queue
// policy, and any queue policy exposes the 500 ms batcher stall (docs/known-issues.md), while the
// backend API does not say how long a request waited there. So a model with admission budgets
// takes every request as Triton hands it over (Execute returns at once), and its queue knows each
// request's arrival, the rows ahead of it and its priority: a request that cannot be served within
// its level's budget is refused on arrival, in microseconds, instead of timing out in a queue
// nobody can see. Workers (one per instance, each with its instance's session) take batches from
// the front: level 1 first, then arrival order, whole requests up to max_batch_size rows.
#pragma once

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
  };

  bool empty() const { return queued_ == 0; }
  size_t size() const { return queued_; }
  int64_t computing_rows() const { return computing_rows_; }

  // Rows that run before a new request at `level`: queued at that level or a higher one (a lower
  // number), and computing now.
  int64_t RowsAhead(int level) const {
    int64_t rows = computing_rows_;
    for (const auto& [queued_level, lane] : lanes_) {
      if (queued_level > level) break;
      rows += lane.rows;
    }
    return rows;
  }

  void Push(Entry entry) {
    Lane& lane = lanes_[entry.level];
    lane.rows += entry.rows;
    lane.entries.push_back(std::move(entry));
    ++queued_;
  }

  // Whole requests from the front (highest level first, then arrival) while their rows fit
  // `max_rows`; the first always comes (a request never needs more rows than max_batch_size: the
  // reader refused it). Their rows count as computing until Done.
  std::vector<Entry> Take(int64_t max_rows) {
    std::vector<Entry> taken;
    int64_t rows = 0;
    for (auto lane = lanes_.begin(); lane != lanes_.end();) {
      while (!lane->second.entries.empty()) {
        Entry& front = lane->second.entries.front();
        if (!taken.empty() && rows + front.rows > max_rows) return Finish(std::move(taken), rows);
        rows += front.rows;
        lane->second.rows -= front.rows;
        taken.push_back(std::move(front));
        lane->second.entries.pop_front();
        --queued_;
      }
      lane = lanes_.erase(lane);
    }
    return Finish(std::move(taken), rows);
  }

  // Every queued request, in order (for a model that unloads with requests still queued).
  std::vector<Entry> TakeAll() {
    std::vector<Entry> taken;
    for (auto& [level, lane] : lanes_) {
      for (Entry& entry : lane.entries) taken.push_back(std::move(entry));
    }
    lanes_.clear();
    queued_ = 0;
    return taken;
  }

  // `rows` taken earlier are no longer computing.
  void Done(int64_t rows) { computing_rows_ -= rows; }

 private:
  struct Lane {
    std::deque<Entry> entries;
    int64_t rows = 0;
  };

  std::vector<Entry> Finish(std::vector<Entry> taken, int64_t rows) {
    computing_rows_ += rows;
    return taken;
  }

  std::map<int, Lane> lanes_;  // by level, level 1 first
  size_t queued_ = 0;
  int64_t computing_rows_ = 0;
};

}  // namespace fastpath
