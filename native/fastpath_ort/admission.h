// Admission control, the C++ twin of python_backends/fastpath_backends/admission.py (read its
// docstring for why: in Triton 2.51 any queue policy exposes a 500 ms batcher stall, so the served
// batchers have none and the model sheds itself instead).
//
// Two decisions, both against a level's budget (the time from arrival to the end of compute a
// request of that level may take):
// - On arrival (AdmitArrival, the queue): the rows that will run before it (queued or computing at
//   its level or higher: request_queue.h, RowsAhead) at the queue's measured drain rate, then its
//   own at the measured seconds per row; a request that cannot finish within its budget is refused
//   at once.
// - Per batch taken from the queue (Admit): requests ordered by priority (level 1 first), then
//   arrival; each is admitted while the time it already waited plus the batch's estimated compute
//   up to and including it stays within its level's budget.
// The first `min_rows` rows are always computed, and a queue with fewer rows ahead always accepts,
// so normal load is never shed however slow the host is for a moment. Not so at the lowest level
// while the queue is overloaded (refusing arrivals, and at take time more rows wait behind the
// batch): then a lowest-level request is admitted only when its estimate fits its budget and
// computed only when the time it waited plus its batch's compute up to it does; one that already
// waited past its budget is shed even when it is first in its batch; its batch's compute is
// estimated at a busy host's pace (BusyRowSeconds: the same Runs averaged rising fast, not a Run's
// pace, which falls fast and so follows the fastest Runs); and a batch holds only what a worker
// computes in the budget its first request has left, at least one length bucket (BatchRows: the
// rest stay queued for the next worker). A request past its budget has missed its service level,
// and computing it delays everyone behind it: on the digits flood (one server core) all 958 of
// 36,071 accepted requests that waited past the 10 ms budget had been kept for being first in
// their batch; on the sentiment flood, with min_rows (32) rows computed whatever they waited and
// every answer held until its whole batch ended, the accepted p99 was 43-87 ms against a 50 ms
// service level. The rest are answered at once with kOverloaded (UNAVAILABLE), before any compute.
//
// What a higher level (level 1) gets: its arrival counts only rows at its level or higher, so it is
// never refused for lower-level work, queued or computing, only when work of its own level ahead of
// it would pass its budget; it is taken before any queued lower-level row, in a batch of its own
// level; what it may wait for is the rest of the lower-level batch a worker is computing when it
// arrives, which the rules above cut to the lowest level's budget while overloaded, and which its
// larger budget leaves room for. Under the sentiment flood (priority 1 at 0.2x capacity beside a
// priority-2 flood at 3x) the old count, every computing row ahead of every level, refused 0.3-14%
// of priority 1 in each of ten trials.
//
// The cost of a row is learned from at least kLearnFromRows rows at a time (smaller Runs, e.g.
// length buckets of 1-3 rows, are pooled until they add up to that many), falling fast and rising
// slowly.
//
// The drain rate (ObserveDrain) is what the workers together take from the queue (computed or
// shed) per second of wall time while a backlog waits. It is measured, not taken as workers / a
// Run's seconds per row, because a Run's time leaves out the time its worker waits for a core: on a
// server with one core for two instances under a 3x flood, that estimate was 3x too fast and the
// queue held 23 ms of work against a 10 ms budget. The estimate used is kept between those two
// bounds: never faster than every worker running a Run's pace, never slower than kMaxSlowdown times
// that (drain is measured only while a backlog waits, and an estimate so slow that no backlog forms
// would never be corrected: seen once, a trial of the digits flood answered 0.38x its capacity).
// Until a drain is measured, the workers are taken to run the rows ahead at a Run's pace. Pure: no
// Triton calls.
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

// Seconds per row learned from (rows, seconds) samples: pooled until the pool is full (`full` of the
// pooled rows and seconds says when), then averaged in with weight `up` when the pooled sample is
// larger than the average, `down` when it is not; the first sample is taken as it is. 0 until then.
class PerRowAverage {
 public:
  PerRowAverage(double up, double down) : up_(up), down_(down) {}
  double value() const { return value_; }

  template <typename Full>
  void Add(int64_t rows, double seconds, Full full) {
    rows_ += rows;
    seconds_ += seconds;
    if (!full(rows_, seconds_)) return;
    const double sample = seconds_ / static_cast<double>(rows_);
    rows_ = 0;
    seconds_ = 0;
    const double weight = value_ == 0 ? 1.0 : (sample > value_ ? up_ : down_);
    value_ = (1 - weight) * value_ + weight * sample;
  }

 private:
  double up_, down_;
  double value_ = 0;
  int64_t rows_ = 0;  // pooled, not yet learned from
  double seconds_ = 0;
};

class Admission {
 public:
  static constexpr int64_t kLearnFromRows = 4;
  static constexpr double kDrainWindowS = 0.005;  // a drain sample spans at least this much wall time
  // How much slower than every worker at a Run's pace the drain is ever taken to be (measured:
  // 3.3x on one server core shared by two instances and Triton's front end under a 3x flood).
  static constexpr double kMaxSlowdown = 8.0;

  Admission(std::map<int, double> budgets_s, int64_t min_rows)
      : budgets_s_(std::move(budgets_s)), min_rows_(min_rows) {
    lowest_ = budgets_s_.empty() ? 0 : budgets_s_.rbegin()->first;
  }

  bool enabled() const { return !budgets_s_.empty(); }
  double row_seconds() const { return row_s_.value(); }
  double drain_row_seconds() const { return drain_row_s_.value(); }

  // Whether a request of `rows` rows and `priority` may join the queue, with `rows_ahead` rows to
  // run before it (queued or computing at its level or higher) on `workers` workers; `overloaded`:
  // the queue is refusing arrivals (then min_rows exempts no lowest-level request).
  bool AdmitArrival(int64_t rows_ahead, int64_t rows, int64_t priority, int workers, bool overloaded = false) const {
    const double row_s = row_s_.value();
    if (!enabled() || row_s == 0) return true;
    const int level = Level(priority);
    if (rows_ahead + rows <= min_rows_ && !(overloaded && level == lowest_)) return true;
    const double ahead_s = static_cast<double>(rows_ahead) * DrainRowSeconds(workers);
    return ahead_s + static_cast<double>(rows) * row_s <= budgets_s_.at(level);
  }

  // Which requests (rows per request, their priorities: 0 or unknown = the lowest level, seconds
  // each already waited: none when empty) to compute; `overloaded`: the queue refuses arrivals and
  // more rows wait behind this batch.
  std::vector<bool> Admit(const std::vector<int64_t>& rows, const std::vector<int64_t>& priorities,
                          const std::vector<double>& waited_s = {}, bool overloaded = false) const {
    std::vector<bool> keep(rows.size(), true);
    if (!enabled()) return keep;
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return Level(priorities[a]) < Level(priorities[b]); });
    const double compute_row_s = overloaded ? BusyRowSeconds() : row_s_.value();
    int64_t spent = 0;
    for (size_t position = 0; position < order.size(); ++position) {
      const size_t i = order[position];
      spent += rows[i];
      const double waited = waited_s.empty() ? 0.0 : waited_s[i];
      const double budget_s = budgets_s_.at(Level(priorities[i]));
      const bool within = waited + static_cast<double>(spent) * compute_row_s <= budget_s;
      if (overloaded && Level(priorities[i]) == lowest_) {
        keep[i] = position == 0 ? waited <= budget_s : within;  // min_rows exempts none of them
      } else {
        keep[i] = position == 0 || spent <= min_rows_ || within;
      }
      if (!keep[i]) spent -= rows[i];  // a shed request costs nothing: later (smaller) ones may still fit
    }
    return keep;
  }

  // The rows a batch of `level` taken while overloaded may hold (Take's max_rows): for the lowest
  // level, what a worker computes (BusyRowSeconds) in what is left of its first request's budget,
  // that request having waited `front_waited_s` (the longest in its batch, whose answers all go out
  // when the batch is done); at least `least_rows` (one Run's worth: smaller Runs cost more a row),
  // at most `max_rows`. The rest stay queued for the next worker instead of being shed for a batch
  // too long to answer in time. Other levels: `max_rows`.
  int64_t BatchRows(int level, double front_waited_s, int64_t max_rows, int64_t least_rows = 1) const {
    if (!enabled() || level != lowest_ || row_s_.value() == 0 || max_rows <= 1) return max_rows;
    const double fit = (budgets_s_.at(level) - front_waited_s) / BusyRowSeconds();
    if (!(fit < static_cast<double>(max_rows))) return max_rows;  // NaN-safe
    const int64_t least = std::min(std::max<int64_t>(1, least_rows), max_rows);
    return std::max(least, static_cast<int64_t>(std::max(fit, 0.0)));
  }

  // Seconds per row of the rows ahead of an arrival: the measured drain, kept between every worker
  // at a Run's pace and kMaxSlowdown times slower; every worker at a Run's pace until measured.
  double DrainRowSeconds(int workers) const {
    const double fastest = row_s_.value() / std::max(1, workers);
    const double drain_row_s = drain_row_s_.value();
    return drain_row_s > 0 ? std::clamp(drain_row_s, fastest, kMaxSlowdown * fastest) : fastest;
  }

  // A Run's seconds per row as a busy host makes it: the same Runs as row_seconds(), averaged rising
  // fast and falling slowly, kept between a Run's pace and kMaxSlowdown times it.
  double BusyRowSeconds() const {
    const double row_s = row_s_.value();
    return std::clamp(busy_row_s_.value(), row_s, kMaxSlowdown * row_s);
  }

  // Folds one computed Run (rows, seconds) into the cost per row; Runs under kLearnFromRows rows
  // are pooled until they add up to that many (a lone row's time is mostly fixed per-call cost).
  void Observe(int64_t rows, double seconds) {
    if (rows <= 0 || seconds <= 0) return;
    auto full = [](int64_t pooled_rows, double) { return pooled_rows >= kLearnFromRows; };
    row_s_.Add(rows, seconds, full);
    busy_row_s_.Add(rows, seconds, full);
  }

  // Folds in `rows` taken over `seconds` of wall time during which a backlog waited (every
  // worker had work): pooled into windows of at least kDrainWindowS, then averaged, rising fast
  // (weight 0.5) and falling slowly (0.1): a queue admitted on a drain that then slows overruns
  // its budget, one admitted on a slow estimate only sheds a little early. Measured on the digits
  // flood (one server core): queue wait p99 16 -> 14 ms, client p50 10.6 -> 7.6 ms, same goodput.
  void ObserveDrain(int64_t rows, double seconds) {
    if (rows <= 0 || seconds < 0) return;
    drain_row_s_.Add(rows, seconds, [](int64_t, double pooled_s) { return pooled_s >= kDrainWindowS; });
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
  PerRowAverage row_s_{0.05, 0.5};       // a Run's seconds per row: rising slowly, falling fast
  PerRowAverage busy_row_s_{0.5, 0.1};   // the same Runs, rising fast, falling slowly
  PerRowAverage drain_row_s_{0.5, 0.1};  // wall seconds per row drained while backlogged
};

}  // namespace fastpath
