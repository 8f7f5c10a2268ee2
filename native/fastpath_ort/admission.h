// Admission control, the C++ twin of python_backends/fastpath_backends/admission.py (read its
// docstring for why: in Triton 2.51 any queue policy exposes a 500 ms batcher stall, so the served
// batchers have none and the model sheds itself instead).
//
// Two decisions, both against a level's budget (the time from arrival to the end of compute a
// request of that level may take):
// - On arrival (AdmitArrival, the queue): the rows that will run before it (queued at its
//   level or higher, plus those computing, shared by the workers) and its own, at the measured
//   seconds per row; a request that cannot finish within its budget is refused at once.
// - Per batch taken from the queue (Admit): requests ordered by priority (level 1 first), then
//   arrival; each is admitted while the time it already waited plus the batch's estimated compute
//   up to and including it stays within its level's budget.
// The first `min_rows` rows are always computed. The rest are answered at once with kOverloaded
// (UNAVAILABLE), before any compute. The cost of a row is learned from
// at least kLearnFromRows rows at a time (smaller Runs, e.g. length buckets of 1-3 rows, are pooled
// until they add up to that many), falling fast and rising slowly. Pure: no Triton calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

namespace fastpath {

constexpr char kPriorityParameter[] = "fastpath_priority";
constexpr char kOverloaded[] =
    "overloaded: more work is queued ahead of this request than fits its service level; retry with backoff";

class Admission {
 public:
  static constexpr int64_t kLearnFromRows = 4;

  Admission(std::map<int, double> budgets_s, int64_t min_rows)
      : budgets_s_(std::move(budgets_s)), min_rows_(min_rows) {
    lowest_ = budgets_s_.empty() ? 0 : budgets_s_.rbegin()->first;
  }

  bool enabled() const { return !budgets_s_.empty(); }
  double row_seconds() const { return row_s_; }

  // Whether a request of `rows` rows and `priority` may join the queue, with `rows_ahead` rows to
  // run before it (queued at its level or higher, and computing) on `workers` workers.
  bool AdmitArrival(int64_t rows_ahead, int64_t rows, int64_t priority, int workers) const {
    if (!enabled() || row_s_ == 0 || rows_ahead + rows <= min_rows_) return true;
    const double ahead_s = static_cast<double>(rows_ahead) * row_s_ / std::max(1, workers);
    return ahead_s + static_cast<double>(rows) * row_s_ <= budgets_s_.at(Level(priority));
  }

  // Which requests (rows per request, their priorities: 0 or unknown = the lowest level, seconds
  // each already waited: none when empty) to compute.
  std::vector<bool> Admit(const std::vector<int64_t>& rows, const std::vector<int64_t>& priorities,
                          const std::vector<double>& waited_s = {}) const {
    std::vector<bool> keep(rows.size(), true);
    if (!enabled()) return keep;
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return Level(priorities[a]) < Level(priorities[b]); });
    int64_t spent = 0;
    for (size_t position = 0; position < order.size(); ++position) {
      const size_t i = order[position];
      spent += rows[i];
      const double waited = waited_s.empty() ? 0.0 : waited_s[i];
      const bool within = waited + static_cast<double>(spent) * row_s_ <= budgets_s_.at(Level(priorities[i]));
      keep[i] = position == 0 || spent <= min_rows_ || within;
      if (!keep[i]) spent -= rows[i];  // a shed request costs nothing: later (smaller) ones may still fit
    }
    return keep;
  }

  // Folds one computed Run (rows, seconds) into the cost per row; Runs under kLearnFromRows rows
  // are pooled until they add up to that many (a lone row's time is mostly fixed per-call cost).
  void Observe(int64_t rows, double seconds) {
    if (rows <= 0 || seconds <= 0) return;
    pooled_rows_ += rows;
    pooled_s_ += seconds;
    if (pooled_rows_ < kLearnFromRows) return;
    const double sample = pooled_s_ / static_cast<double>(pooled_rows_);
    pooled_rows_ = 0;
    pooled_s_ = 0;
    if (row_s_ == 0) {
      row_s_ = sample;
      return;
    }
    const double weight = sample < row_s_ ? 0.5 : 0.05;
    row_s_ = (1 - weight) * row_s_ + weight * sample;
  }

  // The level a priority is served at: its own when it has a budget, else the lowest.
  int Level(int64_t priority) const {
    if (priority < 1 || priority > std::numeric_limits<int>::max()) return lowest_;  // never truncated
    return budgets_s_.count(static_cast<int>(priority)) ? static_cast<int>(priority) : lowest_;
  }

 private:
  std::map<int, double> budgets_s_;
  int64_t min_rows_;
  int lowest_ = 0;
  double row_s_ = 0;  // measured seconds per row (0 until kLearnFromRows rows were timed)
  int64_t pooled_rows_ = 0;  // rows of Runs not yet learned from
  double pooled_s_ = 0;
};

}  // namespace fastpath
