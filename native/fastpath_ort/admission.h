// Admission control, the C++ twin of python_backends/fastpath_backends/admission.py (read its
// docstring for why: in Triton 2.51 any queue policy exposes a 500 ms batcher stall, so the served
// batchers have none and the model sheds at dispatch instead). Pure: no Triton calls; the backend
// reads the clock and the model's statistics and hands them over. Tested with the Python twin on
// the shared cases of native/tests/cases.json.
//
// - Admission: per batch, requests ordered by priority (level 1 first), then arrival. A request is
//   computed when the time it already waited before this dispatch plus the batch's estimated
//   compute up to and including it (rows x measured seconds per row) fits its level's budget.
//   While its wait alone fits, the first request and the first `min_rows` rows are computed
//   whatever the estimate. The rest are answered at once with kOverloaded (UNAVAILABLE), before any
//   compute. The cost of a row is learned from Runs of at least kLearnFromRows rows; smaller Runs
//   (length buckets of 1-3 rows) are pooled until they add up to that many.
// - QueueWait: how long requests waited in Triton's queue. Triton 2.51's backend API gives no
//   request its enqueue time, but the model's statistics (TRITONSERVER_ServerModelStatistics) hold
//   the cumulative queue time of the answered requests and the duration of the failed ones (a shed
//   request's is its wait). Two readings give the mean wait of what was dispatched in between; the
//   queue is FIFO, so that is about what the next dispatched request waited. Shedding what waited
//   past its budget then drains the queue down to the budget, as a queue timeout would.
// - DispatchClock: the same estimate from one instance's own dispatches, for a backend that cannot
//   read the statistics (the Python models: their stub has no server API).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

#include "json.h"

namespace fastpath {

constexpr char kPriorityParameter[] = "fastpath_priority";
constexpr char kOverloaded[] =
    "overloaded: the request cannot be answered within the service level now; retry with backoff";

class Admission {
 public:
  static constexpr int64_t kLearnFromRows = 4;

  Admission(std::map<int, double> budgets_s, int64_t min_rows)
      : budgets_s_(std::move(budgets_s)), min_rows_(min_rows) {
    lowest_ = budgets_s_.empty() ? 0 : budgets_s_.rbegin()->first;
  }

  bool enabled() const { return !budgets_s_.empty(); }
  double row_seconds() const { return row_s_; }

  // Which requests to compute: rows per request, their priorities (0 or unknown = the lowest
  // level) and how long each already waited before this dispatch (seconds; missing = 0).
  std::vector<bool> Admit(const std::vector<int64_t>& rows, const std::vector<int64_t>& priorities,
                          const std::vector<double>& waited_s) const {
    std::vector<bool> keep(rows.size(), true);
    if (!enabled()) return keep;
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return Level(priorities[a]) < Level(priorities[b]); });
    int64_t spent = 0;
    for (const size_t i : order) {
      const double budget = budgets_s_.at(Level(priorities[i]));
      const double waited = i < waited_s.size() ? waited_s[i] : 0.0;
      spent += rows[i];
      const bool in_time = waited <= budget;  // it can still be answered within its level
      const bool within = waited + static_cast<double>(spent) * row_s_ <= budget;
      keep[i] = in_time && (spent == rows[i] || spent <= min_rows_ || within);
      if (!keep[i]) spent -= rows[i];  // a shed request costs nothing: later (smaller) ones may still fit
    }
    return keep;
  }

  // Every request of the batch waited `waited_s` (QueueWait::Estimate).
  std::vector<bool> Admit(const std::vector<int64_t>& rows, const std::vector<int64_t>& priorities,
                          double waited_s) const {
    return Admit(rows, priorities, std::vector<double>(rows.size(), waited_s));
  }

  // No wait known: only the batch's own compute counts.
  std::vector<bool> Admit(const std::vector<int64_t>& rows, const std::vector<int64_t>& priorities) const {
    return Admit(rows, priorities, std::vector<double>());
  }

  // Folds one computed Run (rows, seconds) into the cost per row, falling fast (a new low is
  // believed) and rising slowly (a hiccup is not a trend). Runs under kLearnFromRows rows are
  // pooled until they add up to it: one row's time is mostly the fixed cost of a call.
  void Observe(int64_t rows, double seconds) {
    if (rows <= 0 || !(seconds > 0)) return;
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
  double row_s_ = 0;         // measured seconds per row (0 until kLearnFromRows rows were timed)
  int64_t pooled_rows_ = 0;  // small Runs not folded in yet
  double pooled_s_ = 0;
};

// Cumulative counters of one model version's statistics (TRITONSERVER_ServerModelStatistics).
struct QueueCounters {
  uint64_t answered = 0;     // inference_stats.success.count: requests answered
  uint64_t answered_ns = 0;  // inference_stats.success.ns: their time from arrival to the answer
  uint64_t queue_ns = 0;     // inference_stats.queue.ns: their time from enqueue to execution
  uint64_t compute_ns = 0;   // inference_stats.compute_{input,infer,output}.ns together
  uint64_t failed = 0;       // inference_stats.fail.count: requests failed (shed ones included)
  uint64_t fail_ns = 0;      // inference_stats.fail.ns: their time from arrival to the error
};

// The counters of the first model in a statistics JSON (`{"model_stats": [{"inference_stats":
// {"success": {"count", "ns"}, "queue": ..., "compute_input": ..., "compute_infer": ...,
// "compute_output": ..., "fail": ...}}]}`, numbers or strings); false when one is missing.
inline bool QueueCountersFromStatistics(const Json& statistics, QueueCounters* out) {
  const Json* models = statistics.Find("model_stats");
  if (models == nullptr || models->kind != Json::Kind::kArray || models->items.empty()) return false;
  const Json* stats = models->items[0].Find("inference_stats");
  if (stats == nullptr) return false;
  const auto read = [stats](const char* group, uint64_t* count, uint64_t* ns) {
    const Json* g = stats->Find(group);
    if (g == nullptr || g->Find("count") == nullptr || g->Find("ns") == nullptr) return false;
    int64_t c = 0, n = 0;
    if (!g->Find("count")->AsInt64(&c) || !g->Find("ns")->AsInt64(&n) || c < 0 || n < 0) return false;
    if (count != nullptr) *count = static_cast<uint64_t>(c);
    *ns = static_cast<uint64_t>(n);
    return true;
  };
  QueueCounters c;
  uint64_t input = 0, infer = 0, output = 0;
  if (!read("success", &c.answered, &c.answered_ns) || !read("queue", nullptr, &c.queue_ns) ||
      !read("compute_input", nullptr, &input) || !read("compute_infer", nullptr, &infer) ||
      !read("compute_output", nullptr, &output) || !read("fail", &c.failed, &c.fail_ns)) {
    return false;
  }
  c.compute_ns = input + infer + output;
  *out = c;
  return true;
}

// How long the requests dispatched lately waited in Triton's queue, from readings of the model's
// statistics: one per model, shared by its instances (the queue is the model's; the caller locks).
class QueueWait {
 public:
  // Idle this long before a dispatch, an instance had found the queue empty: its batch is fresh.
  static constexpr double kIdleSeconds = 0.002;

  // Readings are due every `interval_s`, and at every dispatch while the estimate is at least
  // `near_s` (0: never; the backend passes half the smallest budget): near the budget the estimate
  // must follow the queue, dispatch by dispatch.
  explicit QueueWait(double interval_s = 0.002, double near_s = 0) : interval_s_(interval_s), near_s_(near_s) {}

  // The model's QueueWait for its admission budgets: every dispatch reads from half the smallest.
  static QueueWait ForBudgets(const std::map<int, double>& budgets_s, double interval_s = 0.002) {
    double smallest = 0;
    for (const auto& level : budgets_s) smallest = smallest == 0 ? level.second : std::min(smallest, level.second);
    return QueueWait(interval_s, smallest / 2);
  }

  bool Due(double now_s) const {
    return !read_ || (near_s_ > 0 && waited_s_ >= near_s_) || now_s - read_s_ >= interval_s_;
  }

  // One reading at `now_s`. The mean wait of what was answered or failed since the last reading
  // becomes the estimate (nothing since: it stands). An answered request's wait is its queue time;
  // a failed one has only its whole duration, from which the time outside queue and compute that
  // answered requests showed lately (reading before the queue, sending after) is taken. Counters
  // that went back (statistics reset, a reload) start over.
  void Update(double now_s, const QueueCounters& c) {
    const bool back = c.answered < last_.answered || c.answered_ns < last_.answered_ns ||
                      c.queue_ns < last_.queue_ns || c.compute_ns < last_.compute_ns ||
                      c.failed < last_.failed || c.fail_ns < last_.fail_ns;
    if (read_ && !back) {
      const uint64_t answered = c.answered - last_.answered, failed = c.failed - last_.failed;
      const double queue_s = static_cast<double>(c.queue_ns - last_.queue_ns) / 1e9;
      if (answered > 0) {
        const double whole_s = static_cast<double>(c.answered_ns - last_.answered_ns) / 1e9;
        const double compute_s = static_cast<double>(c.compute_ns - last_.compute_ns) / 1e9;
        outside_s_ = std::max(0.0, (whole_s - queue_s - compute_s) / static_cast<double>(answered));
      }
      const double fail_s = static_cast<double>(c.fail_ns - last_.fail_ns) / 1e9;
      const double failed_wait_s = std::max(0.0, fail_s - static_cast<double>(failed) * outside_s_);
      if (answered + failed > 0) waited_s_ = (queue_s + failed_wait_s) / static_cast<double>(answered + failed);
    }
    last_ = c;
    read_ = true;
    read_s_ = now_s;
  }

  double waited_s() const { return waited_s_; }

  // The wait to assume for a batch dispatched to an instance that sat idle `idle_s` before it.
  double Estimate(double idle_s) const { return idle_s >= kIdleSeconds ? 0.0 : waited_s_; }

 private:
  double interval_s_;
  double near_s_;
  bool read_ = false;
  double read_s_ = 0;
  QueueCounters last_;
  double outside_s_ = 0;  // per answered request, seconds outside queue and compute (lately)
  double waited_s_ = 0;
};

// How long each request of a batch waited, from one instance's own dispatches (for a backend that
// cannot read the statistics). Triton's batcher hands a free instance everything queued, up to
// `max_rows`: a batch that could have taken one more request took the whole queue. So after such a
// batch, the requests of the next one arrived after it started, and with `instances` instances
// taking turns, about after the last of them started one; a batch that could not take another
// request may have left older ones queued, so the bound stays where it was. An instance idle for
// kIdleSeconds before a batch that is not full had found the queue empty (before a full one, the
// gap is Triton handing over answers and requests). Within a batch that took the whole queue
// (arrival order) the wait is spread evenly from that bound down to 0; a full batch is the head of
// a longer queue, so all of it waited about as long as the bound.
class DispatchClock {
 public:
  static constexpr double kIdleSeconds = QueueWait::kIdleSeconds;

  DispatchClock(int64_t max_rows, int64_t instances)
      : max_rows_(max_rows), instances_(std::max<int64_t>(1, instances)) {}

  // At the start of an execution, `rows` per request in arrival order: the wait of each.
  std::vector<double> Waited(double now_s, const std::vector<int64_t>& rows) {
    std::vector<double> waited(rows.size(), 0.0);
    int64_t total = 0, smallest = rows.empty() ? 0 : rows[0];
    for (const int64_t r : rows) {
      total += r;
      smallest = std::min(smallest, r);
    }
    const bool full = rows.size() > 1 && total + smallest > max_rows_;  // one request alone tells nothing
    // a gap before a full batch is Triton handing over answers and requests, not an empty queue
    const bool idle = !started_ || (now_s - ended_s_ >= kIdleSeconds && !full);
    const double span = idle ? 0.0 : std::max(0.0, now_s - since_s_) / static_cast<double>(instances_);
    int64_t ahead = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      // a full batch is the head of a longer queue: all of it is about as old
      if (total > 0) waited[i] = full ? span : span * (1.0 - static_cast<double>(ahead) / static_cast<double>(total));
      ahead += rows[i];
    }
    if (!full || !started_) since_s_ = now_s;
    started_ = true;
    return waited;
  }

  // At the end of that execution.
  void Finished(double now_s) { ended_s_ = now_s; }

 private:
  int64_t max_rows_;
  int64_t instances_;
  bool started_ = false;
  double since_s_ = 0;  // requests dispatched next arrived after about this time
  double ended_s_ = 0;
};

}  // namespace fastpath
