// Admission control, the C++ twin of python_backends/fastpath_backends/admission.py (read its
// docstring for why: in Triton 2.51 any queue policy exposes a 500 ms batcher stall, so the served
// batchers have none and the model sheds at dispatch instead).
//
// Per batch: requests ordered by priority (level 1 first), then arrival; each is admitted while
// the batch's estimated compute up to and including it (rows x measured seconds per row) stays
// within its level's budget; the first `min_rows` rows are always computed. The rest are answered
// at once with kOverloaded (UNAVAILABLE), before any compute. The cost of a row is learned from
// at least kLearnFromRows rows at a time (smaller Runs, e.g. length buckets of 1-3 rows, are pooled
// until they add up to that many), falling fast and rising slowly. Pure: no Triton calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

namespace fastpath {

constexpr char kPriorityParameter[] = "fastpath_priority";
constexpr char kOverloaded[] = "overloaded: the batch holds more work than fits the service level; retry with backoff";

class Admission {
 public:
  static constexpr int64_t kLearnFromRows = 4;

  Admission(std::map<int, double> budgets_s, int64_t min_rows)
      : budgets_s_(std::move(budgets_s)), min_rows_(min_rows) {
    lowest_ = budgets_s_.empty() ? 0 : budgets_s_.rbegin()->first;
  }

  bool enabled() const { return !budgets_s_.empty(); }
  double row_seconds() const { return row_s_; }

  // Which requests (rows per request, their priorities: 0 or unknown = the lowest level) to compute.
  std::vector<bool> Admit(const std::vector<int64_t>& rows, const std::vector<int64_t>& priorities) const {
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
      const bool within = static_cast<double>(spent) * row_s_ <= budgets_s_.at(Level(priorities[i]));
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

 private:
  int Level(int64_t priority) const {
    return budgets_s_.count(static_cast<int>(priority)) ? static_cast<int>(priority) : lowest_;
  }

  std::map<int, double> budgets_s_;
  int64_t min_rows_;
  int lowest_ = 0;
  double row_s_ = 0;  // measured seconds per row (0 until kLearnFromRows rows were timed)
  int64_t pooled_rows_ = 0;  // rows of Runs not yet learned from
  double pooled_s_ = 0;
};

}  // namespace fastpath
