// Tests of fastpath_ort's pure parts, as C++: checks.cc (overflow-checked counts, request shape
// checks, Run planning), tensor_ops.cc (block copies, UTF-8, BYTES parsing, non-finite rows),
// config.cc (parameters, load-time refusals) and admission.h. Cases shared with the Python twins'
// tests come from cases.json (read with native/common's JSON reader, tested itself by test_common.cc).
//
// Built and run by tests/unit/test_native_cpp.py, also under AddressSanitizer and
// UndefinedBehaviorSanitizer. Usage: test_fastpath_ort <cases.json>; prints one line per failed
// check and "N passed, N failed" last; exit 1 on any failure (native/tests/harness.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "admission.h"
#include "checks.h"
#include "config.h"
#define FASTPATH_TEST_CUSTOM_MAIN
#include "harness.h"
#include "json.h"
#include "request_queue.h"
#include "tensor_ops.h"

using namespace fastpath;  // NOLINT

using fastpath_test::Check;
using fastpath_test::CheckError;
using fastpath_test::Contains;
using fastpath_test::current;

namespace {

Json shared_cases;  // cases.json, read by main

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

constexpr int64_t kWrap = (int64_t{1} << 61) + 1;  // x 8 bytes wraps to 8 in 64 bits

// --- checks.cc ---

FASTPATH_TEST(TestCheckedArithmetic) {
  current = "checked arithmetic";
  int64_t out = 0;
  Check(CheckedMul(3, 4, &out) && out == 12, "3 * 4");
  Check(!CheckedMul(kWrap, 8, &out), "(2^61+1) * 8 overflows");
  Check(!CheckedMul(-1, 8, &out), "a negative factor is refused");
  Check(!CheckedAdd(INT64_MAX, 1, &out), "INT64_MAX + 1 overflows");
  Check(CheckedElementCount({1, kWrap}, &out) && out == kWrap, "[1, 2^61+1] counts");
  Check(!CheckedByteSize({1, kWrap}, 8, &out), "[1, 2^61+1] x 8 bytes overflows");
  Check(!CheckedElementCount({4, -1}, &out), "a negative dim is refused");
  Check(!CheckedElementCount({int64_t{1} << 32, int64_t{1} << 32}, &out), "2^32 x 2^32 overflows");
  Check(CheckedElementCount({}, &out) && out == 1, "a scalar has one element");
  Check(CheckedElementCount({5, 0, kWrap}, &out) && out == 0, "a zero dim gives 0");
}

ModelSettings RaggedModel() {
  ModelSettings s;
  s.max_batch_size = 8;
  s.max_sequence_length = 64;
  TensorSpec ids;
  ids.name = "input_ids";
  ids.triton_type = TRITONSERVER_TYPE_INT64;
  ids.element_size = 8;
  ids.dims = {-1};
  ids.ragged = true;
  s.inputs = {ids};
  return s;
}

FASTPATH_TEST(TestCheckInputShape) {
  current = "CheckInputShape";
  const ModelSettings s = RaggedModel();
  const TensorSpec& ids = s.inputs[0];
  Check(CheckInputShape(s, ids, {2, 5}, 80).empty(), "a good request passes");
  CheckError(CheckInputShape(s, ids, {1, kWrap}, 8), "max_sequence_length");
  ModelSettings unbounded = s;
  unbounded.max_sequence_length = 0;
  CheckError(CheckInputShape(unbounded, ids, {1, kWrap}, 8), "overflows 64 bits");
  CheckError(CheckInputShape(unbounded, ids, {kWrap, 1}, 8), "max_batch_size");
  CheckError(CheckInputShape(s, ids, {9, 5}, 360), "9 rows; the most this model takes is 8");
  CheckError(CheckInputShape(s, ids, {0, 5}, 0), "no rows");
  CheckError(CheckInputShape(s, ids, {2, 0}, 0), "empty row");
  CheckError(CheckInputShape(s, ids, {2, -5}, 0), "has shape");
  CheckError(CheckInputShape(s, ids, {5}, 40), "has shape");
  CheckError(CheckInputShape(s, ids, {2, 5}, 79), "holds 79 bytes; shape [2,5] needs 80");
  CheckError(CheckInputShape(s, ids, {2, 65}, 1040), "rows are 65 long");
  TensorSpec fixed = ids;
  fixed.dims = {4};
  fixed.ragged = false;
  CheckError(CheckInputShape(s, fixed, {1, 5}, 40), "the model takes [-1,4]");
  TensorSpec text;
  text.name = "text";
  text.triton_type = TRITONSERVER_TYPE_BYTES;
  text.dims = {1};
  CheckError(CheckInputShape(s, text, {4, 1}, 12), "each string needs at least 4");
  Check(CheckInputShape(s, text, {3, 1}, 12).empty(), "three empty strings fit 12 bytes");
  ModelSettings unbatched = s;
  unbatched.max_batch_size = 0;
  Check(CheckInputShape(unbatched, ids, {7}, 56).empty(), "a model without batching takes the dims alone");
}

PlanItem Item(int64_t rows, int64_t length) {
  PlanItem item;
  item.rows = rows;
  item.length = length;
  item.shapes = {{length}, {length}};
  item.element_sizes = {8, 8};
  return item;
}

FASTPATH_TEST(TestBounds) {
  current = "FirstOutOfBounds";
  const std::vector<int64_t> ids = {1, 7999, 0, 8000, -1};
  int64_t value = 0;
  Check(FirstOutOfBounds(TRITONSERVER_TYPE_INT64, reinterpret_cast<const uint8_t*>(ids.data()), 3, 0, 8000, &value) == -1,
        "ids within the vocabulary");
  Check(FirstOutOfBounds(TRITONSERVER_TYPE_INT64, reinterpret_cast<const uint8_t*>(ids.data()), 5, 0, 8000, &value) == 3 &&
            value == 8000,
        "8000 is past a vocabulary of 8000");
  const std::vector<int32_t> narrow = {0, 1, -5};
  Check(FirstOutOfBounds(TRITONSERVER_TYPE_INT32, reinterpret_cast<const uint8_t*>(narrow.data()), 3, 0, 2, &value) == 2 &&
            value == -5,
        "INT32, a negative value");
}

FASTPATH_TEST(TestPlanRuns) {
  current = "PlanRuns";
  std::vector<PlanItem> items = {Item(1, 10), Item(2, 3), Item(1, 7)};
  RunPlan plan = PlanRuns(items, 0, 0);
  Check(plan.runs.size() == 1 && plan.runs[0] == std::vector<size_t>({0, 1, 2}), "no cap, no buckets: one Run in order");
  int64_t bytes = 0;
  Check(PaddedBytes(items, {0, 1, 2}, &bytes) && bytes == 4 * 10 * 8 * 2, "padded bytes: 4 rows x 10 x 8 B x 2 inputs");
  plan = PlanRuns(items, 2, 0);
  Check(plan.runs.size() == 2 && plan.runs[0] == std::vector<size_t>({1}) &&
            plan.runs[1] == std::vector<size_t>({2, 0}),
        "buckets of 2 rows, sorted by length");
  // A huge legitimate row beside short ones: it runs alone, its padding never reaches them.
  items = {Item(1, 5), Item(1, 100000), Item(1, 6), Item(1, 4)};
  plan = PlanRuns(items, 0, 4 << 20);
  Check(plan.too_big.empty(), "100k x 8 B x 2 fits 4 MiB alone");
  Check(plan.runs.size() == 2 && plan.runs[0] == std::vector<size_t>({3, 0, 2}) &&
            plan.runs[1] == std::vector<size_t>({1}),
        "the long row is a Run of its own");
  plan = PlanRuns(items, 0, 1000);
  Check(plan.too_big == std::vector<size_t>({1}), "a row past the cap alone is refused");
  Check(plan.runs.size() == 1 && plan.runs[0].size() == 3, "its batch-mates still run");
  items = {Item(1, 5), Item(1, kWrap)};
  plan = PlanRuns(items, 0, 0);
  Check(plan.too_big == std::vector<size_t>({1}), "an item whose padded size overflows is refused, even uncapped");
  Check(plan.runs.size() == 1 && plan.runs[0] == std::vector<size_t>({0}), "and its batch-mate runs");
}

// --- tensor_ops.cc ---

FASTPATH_TEST(TestCopyBlock) {
  current = "CopyBlock";
  const std::vector<int32_t> src = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<int32_t> dst(2 * 5, 0);                   // padded to [2, 5]
  CopyBlock(reinterpret_cast<const uint8_t*>(src.data()), {2, 3}, reinterpret_cast<uint8_t*>(dst.data()), {2, 5},
            {2, 3}, 4);
  Check(dst == std::vector<int32_t>({1, 2, 3, 0, 0, 4, 5, 6, 0, 0}), "pads rows with zeros");
  std::vector<int32_t> back(6, 0);
  CopyBlock(reinterpret_cast<const uint8_t*>(dst.data()), {2, 5}, reinterpret_cast<uint8_t*>(back.data()), {2, 3},
            {2, 3}, 4);
  Check(back == src, "trims them back");
  std::vector<int32_t> none(1, 9);
  CopyBlock(reinterpret_cast<const uint8_t*>(src.data()), {2, 0}, reinterpret_cast<uint8_t*>(none.data()), {2, 0},
            {2, 0}, 4);
  Check(none[0] == 9, "an empty block copies nothing");
}

FASTPATH_TEST(TestNonFinite) {
  current = "FirstNonFiniteRow";
  const std::vector<float> x = {1, 2, 3, std::numeric_limits<float>::quiet_NaN(), 5, 6};
  Check(FirstNonFiniteRow(TRITONSERVER_TYPE_FP32, reinterpret_cast<const uint8_t*>(x.data()), {3, 2}, 6) == 1,
        "NaN in row 1");
  const std::vector<double> y = {1, 2, 3, 4};
  Check(FirstNonFiniteRow(TRITONSERVER_TYPE_FP64, reinterpret_cast<const uint8_t*>(y.data()), {2, 2}, 4) == -1,
        "all finite");
  const std::vector<uint16_t> half = {0x3C00, 0x7C00};  // 1.0, +Inf
  Check(FirstNonFiniteRow(TRITONSERVER_TYPE_FP16, reinterpret_cast<const uint8_t*>(half.data()), {2, 1}, 2) == 1,
        "FP16 Inf in row 1");
}

FASTPATH_TEST(TestSharedCases) {
  const Json& cases = shared_cases;
  current = "utf8 cases";
  for (const Json& c : cases.Find("utf8")->items) {
    const std::string text = FromHex(c.Find("hex")->AsString());
    Check(IsValidUtf8(text) == c.Find("valid")->boolean, "IsValidUtf8(" + c.Find("hex")->AsString() + ")");
  }
  current = "bytes cases";
  for (const Json& c : cases.Find("bytes")->items) {
    const std::string data = FromHex(c.Find("hex")->AsString());
    int64_t elements = 0;
    c.Find("elements")->AsInt64(&elements);
    std::vector<std::string_view> out;
    const std::string error =
        ParseBytes(reinterpret_cast<const uint8_t*>(data.data()), data.size(), elements, &out);
    const std::string name = "ParseBytes(" + c.Find("hex")->AsString() + ")";
    if (const Json* expected = c.Find("error")) {
      Check(Contains(error, expected->AsString()), name + " error '" + error + "'");
      continue;
    }
    Check(error.empty(), name + " failed: " + error);
    const auto& parsed = c.Find("parsed")->items;
    bool same = out.size() == parsed.size();
    for (size_t i = 0; same && i < out.size(); ++i) same = std::string(out[i]) == FromHex(parsed[i].AsString());
    Check(same, name + " elements");
  }
  current = "admission cases";
  for (const Json& c : cases.Find("admission")->items) {
    std::map<int, double> budgets;
    for (const auto& member : c.Find("budgets_ms")->members) {
      budgets[std::stoi(member.first)] = std::stod(member.second.AsString()) / 1000.0;
    }
    int64_t min_rows = 1;
    c.Find("min_rows")->AsInt64(&min_rows);
    Admission admission(budgets, min_rows);
    for (const Json& sample : c.Find("observe")->items) {
      int64_t rows = 0;
      sample.items[0].AsInt64(&rows);
      admission.Observe(rows, std::stod(sample.items[1].AsString()));
    }
    std::vector<int64_t> rows, priorities;
    for (const Json& v : c.Find("rows")->items) rows.push_back(std::stoll(v.AsString()));
    for (const Json& v : c.Find("priorities")->items) priorities.push_back(std::stoll(v.AsString()));
    std::vector<bool> keep;
    for (const Json& v : c.Find("keep")->items) keep.push_back(v.boolean);
    Check(admission.Admit(rows, priorities) == keep, c.Find("why")->AsString());
  }
}

// --- request_queue.h, and admission on arrival and at take time (C++ only: the Python models
// shed per batch) ---

FASTPATH_TEST(TestRequestQueue) {
  current = "request queue";
  RequestQueue<int> queue;
  Check(queue.empty() && queue.RowsAhead(2) == 0, "an empty queue has nothing ahead");
  queue.Push({1, 4, 2, 2, 100});
  queue.Push({2, 3, 1, 1, 200});
  queue.Push({3, 5, 2, 2, 300});
  Check(queue.size() == 3, "three queued");
  Check(queue.RowsAhead(1) == 3, "level 1 waits only behind level 1");
  Check(queue.RowsAhead(2) == 12, "level 2 waits behind every queued row");
  Check(queue.front() != nullptr && queue.front()->item == 2, "the front is the first of the highest level");
  std::vector<RequestQueue<int>::Entry> high = queue.Take(8);
  Check(high.size() == 1 && high[0].item == 2 && high[0].computing,
        "level 1 first, in a batch of its own: no lower-level row shares it");
  Check(queue.computing_rows() == 3 && queue.RowsAhead(1) == 3 && queue.RowsAhead(2) == 12,
        "taken rows count as computing at their level until done");
  std::vector<RequestQueue<int>::Entry> low = queue.Take(8);
  Check(low.size() == 1 && low[0].item == 1, "then arrival order, whole requests while they fit");
  Check(queue.RowsAhead(1) == 3 && queue.RowsAhead(2) == 12, "level 2 computing is not ahead of level 1");
  std::vector<RequestQueue<int>::Entry> last = queue.Take(2);
  Check(last.size() == 1 && last[0].item == 3, "the first always comes, even past max_rows");
  queue.Done(&high[0]);
  Check(queue.RowsAhead(1) == 0 && queue.RowsAhead(2) == 9, "done at level 1: nothing ahead of level 1");
  queue.Done(&high[0]);
  Check(queue.computing_rows() == 9 && !high[0].computing, "an entry is done once: again counts nothing");
  queue.Done(&low[0]);
  queue.Done(&last[0]);
  Check(queue.empty() && queue.computing_rows() == 0 && queue.RowsAhead(2) == 0 && queue.front() == nullptr,
        "done: nothing ahead");
  queue.Push({4, 1, 3, 9, 400});
  queue.Push({5, 1, 1, 1, 500});
  RequestQueue<int>::Entry first, second, none;
  Check(queue.PopFront(&first) && queue.PopFront(&second) && !queue.PopFront(&none), "PopFront takes each, then none");
  Check(first.item == 5 && second.item == 4 && queue.empty() && queue.RowsAhead(3) == 0 && !first.computing,
        "PopFront empties the queue in order, counting nothing as computing");
}

// Priority 1 at 0.2x capacity beside a priority-2 flood at 3x (sentiment's budgets and min_rows):
// both workers compute a batch of the flood and more of it is queued; priority 1 is still admitted,
// since nothing of its level is ahead of it, and its batch is its own.
FASTPATH_TEST(TestLevelOneBesideAFlood) {
  current = "level 1 beside a flood";
  Admission admission({{1, 0.040}, {2, 0.025}}, 32);
  admission.Observe(64, 0.064);  // a Run: 1 ms a row
  admission.ObserveDrain(10, 0.010);  // the two workers together: 1 ms a row
  RequestQueue<int> queue;
  for (int i = 0; i < 160; ++i) queue.Push({i, 1, 2, 2, static_cast<uint64_t>(i)});
  std::vector<RequestQueue<int>::Entry> worker_a = queue.Take(64), worker_b = queue.Take(64);
  Check(worker_a.size() == 64 && worker_b.size() == 64 && queue.computing_rows() == 128, "two flood batches compute");
  Check(queue.RowsAhead(1) == 0, "the flood's 128 computing and 32 queued rows are not ahead of level 1");
  Check(admission.AdmitArrival(queue.RowsAhead(1), 1, 1, 2, true), "priority 1 is admitted beside the flood");
  Check(!admission.AdmitArrival(queue.RowsAhead(2), 1, 2, 2, true), "priority 2 is refused: 160 rows ahead of it");
  queue.Push({1000, 1, 1, 1, 1000});
  Check(queue.RowsAhead(1) == 1 && admission.AdmitArrival(queue.RowsAhead(1), 1, 1, 2, true),
        "a second priority-1 request counts only the first ahead of it");
  std::vector<RequestQueue<int>::Entry> next = queue.Take(64);
  Check(next.size() == 1 && next[0].item == 1000, "the next batch a worker takes is priority 1's alone");
  Check(admission.Admit({1}, {1}, {0.030}, true) == std::vector<bool>({true}),
        "taken, priority 1 is computed after waiting 30 ms for a flood batch to end, within its 40 ms");
  for (int i = 0; i < 40; ++i) queue.Push({2000 + i, 1, 1, 1, 2000});
  Check(!admission.AdmitArrival(queue.RowsAhead(1), 1, 1, 2, true),
        "priority 1 is refused only for priority-1 work: 41 rows of it ahead at 1 ms a row pass 40 ms");
}

// Overloaded (the queue refusing arrivals, rows waiting behind the batch), min_rows exempts no
// lowest-level request, a batch's compute is estimated at the pace of a busy host's Runs, and a
// lowest-level batch holds what fits its first request's budget left.
FASTPATH_TEST(TestAdmissionWhileOverloaded) {
  current = "admission while overloaded";
  Admission admission({{1, 0.040}, {2, 0.025}}, 32);
  admission.Observe(64, 0.064);  // a Run: 1 ms a row
  const std::vector<int64_t> rows(32, 1), flood(32, 2), high(32, 1);
  const std::vector<double> waited(32, 0.0105);
  auto kept = [](const std::vector<bool>& keep) { return std::count(keep.begin(), keep.end(), true); };
  Check(kept(admission.Admit(rows, flood, waited, false)) == 32, "not overloaded: min_rows (32) are computed");
  Check(kept(admission.Admit(rows, flood, waited, true)) == 14,
        "overloaded: 10.5 ms waited + 14 rows at a Run's 1 ms fit 25 ms, the rest is shed");
  Check(kept(admission.Admit(rows, high, waited, true)) == 32, "level 1 keeps its min_rows while overloaded");
  Check(admission.Admit({1}, {2}, {0.0245}, true) == std::vector<bool>({true}),
        "the first of a batch is computed unless it already waited past its budget");
  Check(admission.Admit({1, 1}, {2, 2}, {0.0255, 0.0}, true) == std::vector<bool>({false, true}),
        "one that waited past its budget is shed, first in its batch or not");
  Check(admission.BatchRows(2, 0.0105, 64) == 14, "a batch holds what fits its first request's budget left");
  admission.Observe(4, 0.012);  // a Run of 3 ms a row: the other worker shared the core
  Check(std::abs(admission.row_seconds() - 0.0011) < 1e-12, "a Run's pace rises slowly: 1.1 ms a row");
  Check(std::abs(admission.BusyRowSeconds() - 0.002) < 1e-12, "a busy host's pace rises fast: 2 ms a row");
  Check(kept(admission.Admit(rows, flood, waited, true)) == 7, "overloaded: 10.5 ms waited + 7 rows at 2 ms fit 25 ms");
  Check(kept(admission.Admit(rows, flood, waited, false)) == 32, "not overloaded: still min_rows");
  Check(admission.BatchRows(2, 0.0105, 64) == 7, "a batch holds 7 rows: 14.5 ms left at 2 ms a row");
  Check(admission.BatchRows(2, 0.0, 8) == 8, "never more than max_rows");
  Check(admission.BatchRows(2, 0.030, 64) == 1, "at least the first request, to be shed if it cannot fit");
  Check(admission.BatchRows(2, 0.030, 64, 4) == 4 && admission.BatchRows(2, 0.0105, 64, 4) == 7,
        "never below one Run's worth (a length bucket: smaller Runs cost more a row)");
  Check(admission.BatchRows(2, 0.030, 2, 4) == 2, "nor above max_rows, a length bucket larger than it");
  Check(admission.BatchRows(1, 0.030, 64) == 64, "level 1's batches are not capped");
  admission.Observe(64, 0.0064);  // 0.1 ms a row: a Run's pace falls fast, a busy host's slowly, never below it
  Check(admission.BusyRowSeconds() >= admission.row_seconds(), "a busy host's pace is never faster than a Run's");
  admission.ObserveDrain(10, 0.010);  // the workers together: 1 ms a row
  const double row_s = admission.row_seconds();
  Check(admission.AdmitArrival(30, 1, 2, 2, false), "not overloaded: 31 rows are within min_rows, admitted");
  Check(!admission.AdmitArrival(30, 1, 2, 2, true), "overloaded: 30 rows ahead at 1 ms + its own pass 25 ms, refused");
  Check(admission.AdmitArrival(23, 1, 2, 2, true) == (0.023 + row_s <= 0.025),
        "overloaded: 23 rows ahead at 1 ms and its own, against the budget");
  Check(admission.AdmitArrival(30, 1, 1, 2, true), "level 1 keeps the min_rows exemption while overloaded");
}

FASTPATH_TEST(TestAdmissionOnArrival) {
  current = "admission on arrival";
  Admission admission({{1, 0.040}, {2, 0.020}}, 4);
  Check(admission.AdmitArrival(1000, 1, 2, 1), "nothing learned yet: admitted");
  admission.Observe(10, 0.010);  // 1 ms a row
  Check(admission.AdmitArrival(2, 2, 2, 1), "within min_rows: admitted whatever the estimate");
  Check(admission.AdmitArrival(18, 1, 2, 1), "19 ms <= 20 ms: admitted");
  Check(!admission.AdmitArrival(20, 1, 2, 1), "21 ms > 20 ms: refused");
  Check(admission.AdmitArrival(30, 1, 1, 1), "level 1's budget is 40 ms");
  Check(!admission.AdmitArrival(30, 1, 7, 1), "an unknown priority is the lowest level");
  Check(admission.Level(int64_t{1} << 32 | 1) == 2, "a priority past int is the lowest level, never truncated to 1");
  Check(admission.Level(-5) == 2 && admission.Level(1) == 1, "negative: lowest; 1: its own");
  Admission one_row({{1, 0.040}, {2, 0.020}}, 1);
  one_row.Observe(10, 0.010);
  Check(one_row.Admit({1, 1, 1}, {2, 2, 1}, {0.0185, 0.0, 0.039}) == std::vector<bool>({false, true, true}),
        "at take, the time waited counts: 18.5 + 2 ms > 20 ms is shed; level 1 goes first whatever it waited");
  const std::vector<bool> waited = admission.Admit({1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2}, {0.1, 0.1, 0.1, 0.1, 0.1, 0.0});
  Check(waited == std::vector<bool>({true, true, true, true, false, true}),
        "min_rows are computed whatever they waited; past them, who waited beyond the budget is shed");
  const std::vector<bool> behind = admission.Admit({1, 1, 1, 1}, {2, 2, 1, 2}, {0.021, 0.0, 0.05, 0.0}, true);
  Check(behind == std::vector<bool>({false, true, true, true}),
        "overloaded (refusing, rows behind the batch), a lowest-level request that waited past its budget is shed even "
        "first and within min_rows; level 1 is kept whatever it waited");
  Check(admission.Admit({1}, {2}, {0.5}, false) == std::vector<bool>({true}),
        "not overloaded: a late request (a warmup on a slow start) is still computed");
}

FASTPATH_TEST(TestAdmissionDrainRate) {
  current = "admission drain rate";
  Admission admission({{1, 0.040}, {2, 0.020}}, 4);
  admission.Observe(10, 0.010);  // a Run takes 1 ms a row
  Check(admission.AdmitArrival(38, 1, 2, 2), "no drain measured yet: two workers at a Run's pace (19 + 1 ms)");
  Check(!admission.AdmitArrival(40, 1, 2, 2), "... 20 + 1 ms > 20 ms");
  admission.ObserveDrain(2, 0.004);
  Check(admission.drain_row_seconds() == 0, "under 5 ms of wall time is pooled, not learned");
  admission.ObserveDrain(1, 0.002);  // 3 rows in 6 ms: the workers together finish a row per 2 ms
  Check(std::abs(admission.drain_row_seconds() - 0.002) < 1e-12, "a window's rows over its wall time");
  Check(!admission.AdmitArrival(18, 1, 2, 2), "the measured drain (2 ms a row) wins over a Run's 1 ms");
  Check(admission.AdmitArrival(9, 1, 2, 2), "9 rows at 2 ms + 1 ms of its own = 19 ms <= 20 ms");
  Check(!admission.AdmitArrival(10, 1, 2, 2), "10 rows at 2 ms + 1 ms = 21 ms > 20 ms");
  admission.ObserveDrain(10, 0.005);  // 0.5 ms a row: faster, learned slowly
  const double faster = 0.9 * 0.002 + 0.1 * 0.0005;
  Check(std::abs(admission.drain_row_seconds() - faster) < 1e-12, "a faster drain is averaged in with weight 0.1");
  admission.ObserveDrain(1, 0.010);  // 10 ms a row: slower, learned fast
  const double slower = 0.5 * faster + 0.5 * 0.010;
  Check(std::abs(admission.drain_row_seconds() - slower) < 1e-12, "a slower drain is averaged in with weight 0.5");
  admission.ObserveDrain(0, 1.0);
  admission.ObserveDrain(5, -1.0);
  Check(std::abs(admission.drain_row_seconds() - slower) < 1e-12, "no rows or a negative interval teaches nothing");
  Admission bounded({{1, 0.040}, {2, 0.020}}, 4);
  bounded.Observe(10, 0.001);    // a Run takes 0.1 ms a row
  bounded.ObserveDrain(200, 0.005);  // 0.025 ms a row: 2x faster than two workers could, noise
  Check(bounded.AdmitArrival(380, 1, 2, 2) && !bounded.AdmitArrival(400, 1, 2, 2),
        "never faster than every worker at a Run's pace: 0.05 ms a row ahead");
  bounded.ObserveDrain(1, 10.0);  // a paused process: 10 s for a row
  Check(bounded.AdmitArrival(48, 1, 2, 2) && !bounded.AdmitArrival(50, 1, 2, 2),
        "never slower than 8x that (0.4 ms a row ahead): a backlog can still form and teach it");
}

// --- config.cc ---

std::string ParseConfig(const std::string& json, ModelSettings* settings) {
  Json config;
  std::string error;
  if (!ParseJson(json, &config, &error)) return "json: " + error;
  return ParseModelSettings(config, settings);
}

std::string Config(const std::string& parameters, const std::string& extra_output = "",
                   const std::string& input_extra = "") {
  return R"({"max_batch_size":"8","input":[{"name":"ids","data_type":"TYPE_INT64","dims":["-1"])" + input_extra +
         R"(}],"output":[{"name":"p","data_type":"TYPE_FP32","dims":["2"]})" + extra_output + R"(],"parameters":{)" +
         parameters + "}}";
}

std::string Param(const std::string& key, const std::string& value) {
  return "\"" + key + R"(":{"string_value":")" + value + "\"}";
}

// `response_cache { enable: true }` as Triton serializes it: every response then carries every output.
void TestResponseCacheConfig() {
  ModelSettings s;
  auto with = [](const std::string& cache) {
    std::string config = Config(Param("onnx_file", "m.onnx"));
    return config.insert(config.size() - 1, R"(,"response_cache":)" + cache);
  };
  Check(ParseConfig(Config(Param("onnx_file", "m.onnx")), &s).empty() && !s.response_cache, "no response_cache: off");
  Check(ParseConfig(with(R"({"enable":true})"), &s).empty() && s.response_cache, "enable true: on");
  Check(ParseConfig(with(R"({"enable":false})"), &s).empty() && !s.response_cache, "enable false: off");
  Check(ParseConfig(with("{}"), &s).empty() && !s.response_cache, "an empty response_cache: off");
  Check(ParseConfig(with("null"), &s).empty() && !s.response_cache, "a null response_cache: off");
  CheckError(ParseConfig(with(R"({"enable":"yes"})"), &s), "response_cache is not { enable: true|false }");
  CheckError(ParseConfig(with("true"), &s), "response_cache is not { enable: true|false }");
  Check(ParseConfig(with(R"({"enable":true})"), &s).empty() && ParseConfig(Config(""), &s).empty() &&
            !s.response_cache,
        "a reparse starts from the defaults");
}

// A text model (text_tokenizer): one text a row in, the graph fed the tokens.
void TestTextModelConfig() {
  ModelSettings s;
  auto text_model = [](const std::string& parameters, const std::string& input_dims = R"(["1"])",
                       const std::string& batch = "8") {
    return R"({"max_batch_size":")" + batch + R"(","input":[{"name":"text","data_type":"TYPE_STRING","dims":)" +
           input_dims + R"(}],"output":[{"name":"p","data_type":"TYPE_FP32","dims":["2"]},)" +
           R"({"name":"truncated","data_type":"TYPE_BOOL","dims":["1"]}],"parameters":{)" + parameters + "}}";
  };
  const std::string good = Param("text_tokenizer", "tokenizer.json") + "," + Param("max_length", "64") + "," +
                           Param("cut_flag_output", "truncated");
  Check(ParseConfig(text_model(good), &s).empty() && s.tokenizes() && s.max_length == 64, "a text model parses");
  Check(s.run_inputs.size() == 2 && s.run_inputs[0].name == "input_ids" && s.run_inputs[1].name == "attention_mask" &&
            s.run_inputs[0].triton_type == TRITONSERVER_TYPE_INT64 && s.run_inputs[0].ragged && s.pads(),
        "its graph is fed ragged int64 ids and mask, padded to each other");
  Check(ParseConfig(Config(Param("max_length", "64")), &s).empty() && !s.tokenizes() && s.run_inputs.size() == 1 &&
            s.run_inputs[0].name == "ids",
        "max_length without text_tokenizer: the inputs as sent");
  CheckError(ParseConfig(text_model(Param("text_tokenizer", "tokenizer.json")), &s), "give parameter 'max_length'");
  CheckError(ParseConfig(text_model(good, R"(["2"])"), &s), "exactly one input, TYPE_STRING with dims [1]");
  CheckError(ParseConfig(text_model(good, R"(["1"])", "0"), &s), "must batch");
  CheckError(ParseConfig(Config(Param("text_tokenizer", "t.json") + "," + Param("max_length", "8")), &s),
             "exactly one input, TYPE_STRING");
  CheckError(ParseConfig(text_model(Param("text_tokenizer", "../t.json") + "," + Param("max_length", "8")), &s),
             "a file name in the version folder");
  CheckError(ParseConfig(text_model(Param("text_tokenizer", "t.json") + "," + Param("max_length", "-1")), &s),
             "parameter 'max_length'");
}

// ParameterValues (what `--defaults` prints) names each key config.cc reads, and writes what it read.
void TestParameterValues() {
  ModelSettings s;
  const std::vector<std::pair<std::string, std::string>> defaults = ParameterValues(s);
  Check(defaults.size() == kBackendParameterCount, "ParameterValues: a value for every key of kBackendParameters");
  const std::string read = Param("graph_optimization_level", "basic") + "," + Param("reject_non_finite", "false") +
                           "," + Param("admission_budget_ms_2", "12.5") + "," + Param("value_bounds", "ids:0:9") +
                           "," + Param("ragged_outputs", "q");
  const std::string q = R"(,{"name":"q","data_type":"TYPE_FP32","dims":["-1"]})";
  Check(ParseConfig(Config(read, q), &s).empty(), "ParameterValues: the config parses");
  std::map<std::string, std::string> values;
  for (const auto& row : ParameterValues(s)) values[row.first] = row.second;
  Check(values["graph_optimization_level"] == "basic" && values["reject_non_finite"] == "false" &&
            values["admission_budget_ms_"] == "2:12.5" && values["value_bounds"] == "ids:0:9" &&
            values["ragged_outputs"] == "q" && values["onnx_file"] == "model.onnx",
        "ParameterValues: each value as the config gave it, the others at their defaults");
}

FASTPATH_TEST(TestConfig) {
  current = "ParseModelSettings";
  ModelSettings s;
  Check(ParseConfig(Config(Param("onnx_file", "m.onnx") + "," + Param("tokenizer_sha256", "ab")), &s).empty(),
        "a good configuration parses, informational keys accepted");
  Check(s.onnx_file == "m.onnx" && s.pads() && s.max_padded_bytes == (int64_t{64} << 20), "its settings");
  CheckError(ParseConfig(Config(Param("max_sequense_length", "64")), &s), "unknown parameter 'max_sequense_length'");
  CheckError(ParseConfig(Config(Param("intra_op_threads", "-3")), &s), "parameter 'intra_op_threads'");
  CheckError(ParseConfig(Config(Param("max_padded_bytes", "lots")), &s), "parameter 'max_padded_bytes'");
  CheckError(ParseConfig(Config(Param("admission_budget_ms_0", "5")), &s), "integer 1..1000");
  CheckError(ParseConfig(Config(Param("onnx_file", "m.onnx"), "", R"(,"reshape":{"shape":[]})"), &s),
             "reshape is not supported");
  CheckError(ParseConfig(Config(Param("onnx_file", "m.onnx"), "", R"(,"reshape":{"shape":["2"]})"), &s),
             "reshape is not supported");
  const std::string ragged_out = R"(,{"name":"tokens","data_type":"TYPE_FP32","dims":["-1"]})";
  CheckError(ParseConfig(Config(Param("onnx_file", "m.onnx"), ragged_out), &s), "list it in parameter 'ragged_outputs'");
  Check(ParseConfig(Config(Param("ragged_outputs", "tokens"), ragged_out), &s).empty() && s.is_ragged_output("tokens") &&
            !s.is_ragged_output("p"),
        "a declared ragged output");
  CheckError(ParseConfig(Config(Param("ragged_outputs", "p")), &s), "which has no -1 dim");
  CheckError(ParseConfig(Config(Param("ragged_outputs", "nope")), &s), "which is not an output");
  CheckError(ParseConfig(Config(Param("cut_flag_output", "p")), &s), "not a TYPE_BOOL output");
  Check(ParseConfig(Config(Param("value_bounds", "ids:0:8000")), &s).empty() && s.value_bounds["ids"].second == 8000,
        "value_bounds parses");
  CheckError(ParseConfig(Config(Param("value_bounds", "ids:5:5")), &s), "lo < hi");
  CheckError(ParseConfig(Config(Param("value_bounds", "nope:0:2")), &s), "which is not an input");
  CheckError(ParseConfig(R"({"max_batch_size":"8","input":[{"name":"x","data_type":"TYPE_FP32","dims":["0"]}]})", &s),
             "dims must be positive or -1");
  CheckError(ParseConfig(R"({"max_batch_size":"8","input":[{"name":"x","data_type":"TYPE_BF16","dims":["2"]}]})", &s),
             "is not served by fastpath_ort");
  Check(ParseConfig(Config(Param("onnx_file", "m.onnx")), &s).empty() && s.warmup_executes == 0, "no warmup: none");
  const std::string warmups = R"(,"model_warmup":[{"name":"b1","batch_size":1},{"name":"b0","batch_size":0},)"
                              R"({"name":"b64","batch_size":"64","count":"3"},{"name":"c0","batch_size":2,"count":0}]})";
  std::string config = Config(Param("onnx_file", "m.onnx"));
  config.insert(config.size() - 1, warmups.substr(0, warmups.size() - 1));
  Check(ParseConfig(config, &s).empty() && s.warmup_executes == 5,
        "warmup Executes per instance: 1 + (batch_size 0 skipped) + 3 + (count 0 runs once) 1");
  TestResponseCacheConfig();
  TestTextModelConfig();
  TestParameterValues();
}

}  // namespace

// `test_fastpath_ort --parameters`: the keys config.cc reads, one a line ("backend <key>", then
// "informational <key>"), for the Python contract test (fastpath_backends.parameters.FastpathOrtParameters).
int PrintParameters() {
  for (size_t i = 0; i < kBackendParameterCount; ++i) std::printf("backend %s\n", kBackendParameters[i]);
  for (size_t i = 0; i < kInformationalParameterCount; ++i) {
    std::printf("informational %s\n", kInformationalParameters[i]);
  }
  return 0;
}

// `test_fastpath_ort --defaults`: each key config.cc reads with its default, "<key>\t<value>" a line
// (ParameterValues of a default ModelSettings), checked against FastpathOrtParameters' defaults.
int PrintDefaults() {
  for (const auto& row : ParameterValues(ModelSettings())) {
    std::printf("%s\t%s\n", row.first.c_str(), row.second.c_str());
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--parameters") == 0) return PrintParameters();
  if (argc == 2 && std::strcmp(argv[1], "--defaults") == 0) return PrintDefaults();
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_fastpath_ort <cases.json> | --parameters | --defaults\n");
    return 2;
  }
  std::ifstream file(argv[1]);
  std::stringstream text;
  text << file.rdbuf();
  std::string error;
  if (!ParseJson(text.str(), &shared_cases, &error)) {
    std::fprintf(stderr, "cannot read %s: %s\n", argv[1], error.c_str());
    return 2;
  }
  fastpath_test::RunCases();
  return fastpath_test::Summary();
}
