// A stress and fault driver for fastpath_ort's request path: dispatcher.cc (Execute, Enqueue, the
// workers, Answer, releases kept and retried) with request_queue.h and admission.h, linked against
// fake Triton functions (TRITONSERVER_* errors and logging, TRITONBACKEND_* responses, releases and
// statistics) and fake collaborators (ReadRequest, RequestPriority, ExecuteGood), so that every
// answer and release is recorded and can be checked exactly once.
//
// Scenarios: requests run inline and through the model's queue, and inline on an idle queued model;
// producer threads (one per instance, as Triton calls Execute) enqueue while workers take batches;
// instances finalize while other instances still enqueue, and while requests are queued (the last
// worker answers them);
// admission sheds under a tight budget; priority 1 is admitted beside a held lower-level flood and
// computed in a batch of its own; std::bad_alloc is injected at every fault point of
// dispatcher.cc (FASTPATH_FAULT_INJECTION); releases are refused once or always; outputs are
// written and then the request fails (it must be answered with its error alone).
//
// Built with -DFASTPATH_FAULT_INJECTION, plainly, under AddressSanitizer + UBSan
// (tests/unit/test_native_cpp.py) and under ThreadSanitizer (tests/reliability/test_tsan_backend.py),
// by triton_fastpath.native.ort_backend.build_dispatcher_driver, with fake_server.cc (Triton's errors,
// counted, and its log). Usage: test_dispatcher [scale]; prints one line per failed check and
// "N passed, N failed" last; exit 1 on any failure (native/tests/harness.h).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "admission.h"
#include "batch.h"
#include "dispatcher.h"
#include "fake_server.h"
#define FASTPATH_TEST_CUSTOM_MAIN
#include "harness.h"
#include "state.h"

#ifndef FASTPATH_FAULT_INJECTION
#error "build the dispatcher driver with -DFASTPATH_FAULT_INJECTION"
#endif

using namespace fastpath;  // NOLINT

// --- fake Triton: what the backend calls, recording every answer and release ------------------

extern "C" {

struct TRITONBACKEND_ModelInstance {
  int id = 0;
};

struct TRITONBACKEND_Request {
  int id = 0;
  int64_t rows = 1;
  int64_t priority = 0;
  bool bad = false;                   // ReadRequest fails it (INVALID_ARG)
  bool partial = false;               // ExecuteGood writes one output, then fails it
  bool first_response_fails = false;  // its first ResponseNew fails
  bool fresh_response_fails = false;  // its second ResponseNew (the fresh one for an error) fails
  int release_refusals = 0;           // release calls refused before one succeeds
  std::atomic<int> response_news{0};
  std::atomic<int> release_calls{0};
  std::atomic<int> releases{0};
  std::atomic<int> sends{0};
  std::atomic<int> misuse{0};  // touched after its release, or sent twice
  std::atomic<int> sent_outputs{-1};
  std::atomic<int> sent_code{-2};  // -1: success
  std::atomic<int> batch_requests{0};  // the requests of the ExecuteGood call that computed it
  std::mutex mutex;
  std::string sent_message;
  std::thread::id computed_on;  // the thread of the ExecuteGood call that computed it (under `mutex`)
};

struct TRITONBACKEND_Response {
  TRITONBACKEND_Request* request = nullptr;
  int outputs = 0;
};

}  // extern "C"

namespace {

std::atomic<int64_t> live_responses{0};

TRITONSERVER_Error* FakeError(TRITONSERVER_Error_Code code, const char* message) {
  return TRITONSERVER_ErrorNew(code, message);  // fake_server.cc: counted until deleted
}

}  // namespace

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response, TRITONBACKEND_Request* request) {
  const int n = ++request->response_news;
  if (request->releases > 0) ++request->misuse;
  if ((n == 1 && request->first_response_fails) || (n == 2 && request->fresh_response_fails)) {
    return FakeError(TRITONSERVER_ERROR_INTERNAL, "fake: no response");
  }
  ++live_responses;
  *response = new TRITONBACKEND_Response{request, 0};
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response) {
  --live_responses;
  delete response;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response, TRITONBACKEND_Output** output,
                                                 const char* /*name*/, const TRITONSERVER_DataType /*datatype*/,
                                                 const int64_t* /*shape*/, const uint32_t /*dims_count*/) {
  if (response == nullptr) return FakeError(TRITONSERVER_ERROR_INVALID_ARG, "response was nullptr");
  ++response->outputs;
  *output = reinterpret_cast<TRITONBACKEND_Output*>(response);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response, const uint32_t send_flags,
                                               TRITONSERVER_Error* error) {
  TRITONBACKEND_Request* request = response->request;
  if (++request->sends > 1 || send_flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL) ++request->misuse;
  request->sent_outputs = response->outputs;
  request->sent_code = error == nullptr ? -1 : static_cast<int>(error->code);
  if (error != nullptr) {
    std::lock_guard<std::mutex> lock(request->mutex);
    request->sent_message = error->message;
  }
  --live_responses;
  delete response;  // sent: Triton's now (a response may go out after its request's release)
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t release_flags) {
  const int call = ++request->release_calls;
  if (request->releases > 0 || release_flags != TRITONSERVER_REQUEST_RELEASE_ALL) ++request->misuse;
  if (call <= request->release_refusals) return FakeError(TRITONSERVER_ERROR_INTERNAL, "fake: release refused");
  ++request->releases;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance* /*instance*/,
                                                                TRITONBACKEND_Request* request, const bool /*success*/,
                                                                const uint64_t, const uint64_t, const uint64_t,
                                                                const uint64_t) {
  if (request->releases > 0) ++request->misuse;  // statistics belong to a request not yet released
  return nullptr;
}

}  // extern "C"

// --- fake collaborators of the dispatcher (request.cc, batch.cc) --------------------------------

namespace {

std::atomic<int> work_us{20};  // what a batch's compute takes (slept)

// A gate the fake compute waits at while it is closed: holds batches in the workers so that
// requests are still queued when the instances finalize.
struct Gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool closed = false;

  void Close() {
    std::lock_guard<std::mutex> lock(mutex);
    closed = true;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      closed = false;
    }
    opened.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mutex);
    opened.wait(lock, [&] { return !closed; });
  }
} gate, later_runs;  // later_runs: a batch's second and later Runs wait there

std::atomic<int> run_requests{0};  // requests per fake Run (0: the whole batch is one Run)
std::atomic<int> early_runs{0};    // Runs whose requests ExecuteGood handed to `run_done`

}  // namespace

namespace fastpath {

void ReadRequest(const ModelSettings& /*settings*/, const WordPieceTokenizer* /*tokenizer*/, Pending* p) {
  p->rows = p->request->rows;
  if (p->request->bad) p->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "fake: a bad input"));
}

int64_t RequestPriority(TRITONBACKEND_Request* request) { return request->priority; }

// One fake Run: sleeps work_us, then writes each request's outputs (or fails a `partial` one).
void ComputeFakeRun(const std::vector<Pending*>& run, int batch_requests, std::vector<RunCost>* costs) {
  const uint64_t start = NowNs();
  std::this_thread::sleep_for(std::chrono::microseconds(work_us.load()));
  const uint64_t end = NowNs();
  int64_t rows = 0;
  for (Pending* p : run) {
    p->request->batch_requests = batch_requests;
    {
      std::lock_guard<std::mutex> lock(p->request->mutex);
      p->request->computed_on = std::this_thread::get_id();
    }
    p->compute_start_ns = start;
    p->compute_end_ns = end;
    for (int output = 0; output < 2 && p->good(); ++output) {
      if (output == 1 && p->request->partial) {  // e.g. a client's shared-memory region too small for it
        p->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "fake: no buffer for the second output"));
        break;
      }
      TRITONBACKEND_Output* out = nullptr;
      TRITONSERVER_Error* err =
          TRITONBACKEND_ResponseOutput(p->response, &out, "y", TRITONSERVER_TYPE_FP32, nullptr, 0);
      if (err != nullptr) {
        p->Fail(err);
      } else {
        p->has_outputs = true;
      }
    }
    if (p->good()) rows += p->rows;
  }
  if (costs != nullptr && rows > 0) costs->push_back({rows, static_cast<double>(end - start) / 1e9});
}

// The batch as Runs of run_requests requests (0: one Run), as batch.cc plans length buckets; each
// Run's requests but the last Run's go to `run_done` when it ends, and later Runs wait at `later_runs`.
void ExecuteGood(InstanceState* /*s*/, std::vector<Pending*> good, uint64_t /*exec_start_ns*/,
                 std::vector<RunCost>* costs, const RunDone& run_done) {
  gate.Pass();
  const size_t per_run = run_requests > 0 ? static_cast<size_t>(run_requests) : std::max<size_t>(1, good.size());
  for (size_t first = 0; first < good.size(); first += per_run) {
    if (first > 0) later_runs.Pass();
    const size_t last = std::min(good.size(), first + per_run);
    const std::vector<Pending*> run(good.begin() + first, good.begin() + last);
    ComputeFakeRun(run, static_cast<int>(good.size()), costs);
    if (run_done && last < good.size()) {  // as batch.cc: the last Run's with the batch
      ++early_runs;
      run_done(run);
    }
  }
}

}  // namespace fastpath

// --- fault injection ------------------------------------------------------------------------------

namespace {

struct FaultPointCount {
  const char* name;
  std::atomic<uint64_t> injected{0};
};
FaultPointCount fault_points[] = {{"execute"},      {"execute.pending"}, {"execute.inline"}, {"enqueue"},
                                  {"enqueue.push"}, {"worker.batch"},    {"worker.compute"}};
std::atomic<uint64_t> unknown_points{0};
std::atomic<unsigned> fault_per_mille{0};

void InjectBadAlloc(const char* point) {
  thread_local std::minstd_rand rng(static_cast<unsigned>(std::hash<std::thread::id>()(std::this_thread::get_id())));
  FaultPointCount* found = nullptr;
  for (FaultPointCount& p : fault_points) {
    if (std::strcmp(p.name, point) == 0) found = &p;
  }
  if (found == nullptr) ++unknown_points;
  const unsigned chance = fault_per_mille.load();
  if (chance == 0 || rng() % 1000 >= chance) return;
  if (found != nullptr) ++found->injected;
  throw std::bad_alloc();
}

// --- checks -----------------------------------------------------------------------------------------

using fastpath_test::Check;
using fastpath_test::current;

int scale = 1;  // the driver's argument: multiplies the requests sent

struct Scenario {
  const char* name;
  bool queued = true;       // the model has admission budgets: its own queue and workers
  double budget_s = 10.0;   // its one level's budget (tiny: admission sheds)
  int instances = 3;
  int calls = 300;          // Execute calls per producer
  unsigned faults = 0;      // per mille at each fault point
  bool unload_while_queued = true;
  int gap_us = 40;                   // arrivals of a producer spread over [0, gap_us) apart
  const char* injected_at = nullptr;  // the one fault point checked (nullptr: every reachable one)
};

using Requests = std::vector<std::unique_ptr<TRITONBACKEND_Request>>;

Requests MakeRequests(size_t count, unsigned seed) {
  std::minstd_rand rng(seed);
  Requests requests;
  for (size_t i = 0; i < count; ++i) {
    auto r = std::make_unique<TRITONBACKEND_Request>();
    r->id = static_cast<int>(i);
    r->rows = 1 + static_cast<int64_t>(rng() % 3);
    r->priority = static_cast<int64_t>(rng() % 3);
    const unsigned kind = rng() % 100;
    r->bad = kind < 10;
    r->partial = kind >= 10 && kind < 16;
    r->fresh_response_fails = kind >= 14 && kind < 16;  // partial, and no fresh response either
    r->first_response_fails = kind >= 16 && kind < 18;
    r->release_refusals = kind >= 18 && kind < 22 ? 1 : kind == 22 ? 1000 : 0;
    requests.push_back(std::move(r));
  }
  return requests;
}

// Finalizes instance `s` as TRITONBACKEND_ModelInstanceFinalize does.
void FinalizeInstance(std::unique_ptr<InstanceState>* s) {
  if ((*s)->model->dispatcher) StopWorker(s->get());
  ReleaseKept((*s)->model, false);
  s->reset();
}

// One instance per entry of `tritons` (its id set), named "<model>_<i>", each with its worker
// started when the model has a queue, as TRITONBACKEND_ModelInstanceInitialize does.
std::vector<std::unique_ptr<InstanceState>> StartInstances(ModelState* model,
                                                           std::vector<TRITONBACKEND_ModelInstance>* tritons) {
  std::vector<std::unique_ptr<InstanceState>> instances;
  for (size_t i = 0; i < tritons->size(); ++i) {
    (*tritons)[i].id = static_cast<int>(i);
    auto s = std::make_unique<InstanceState>();
    s->model = model;
    s->triton = &(*tritons)[i];
    s->name = model->name + "_" + std::to_string(i);
    if (model->dispatcher) {
      TRITONSERVER_Error* err = StartWorker(s.get());
      Check(err == nullptr, "a worker starts");
      if (err != nullptr) TRITONSERVER_ErrorDelete(err);
    }
    instances.push_back(std::move(s));
  }
  return instances;
}

// Sends `slice` through `s` in Execute calls of 1-6 requests.
void Produce(InstanceState* s, TRITONBACKEND_Request* const* slice, size_t count, unsigned seed, int gap_us = 40) {
  std::minstd_rand rng(seed);
  for (size_t at = 0; at < count;) {
    const size_t n = std::min<size_t>(count - at, 1 + rng() % 6);
    std::vector<TRITONBACKEND_Request*> batch(slice + at, slice + at + n);
    Execute(s, batch.data(), static_cast<uint32_t>(n), NowNs());
    at += n;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % gap_us));  // arrivals spread a little
  }
}

// Waits (up to 10 s) until the model's queue is empty and nothing is computing.
void AwaitDrained(ModelState* model) {
  if (!model->dispatcher) return;
  Dispatcher& d = *model->dispatcher;
  for (int i = 0; i < 10000; ++i) {
    {
      std::lock_guard<std::mutex> lock(d.mutex);
      if (d.queue.empty() && d.queue.computing_rows() == 0) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Run(const Scenario& scenario) {
  current = scenario.name;
  auto model = std::make_unique<ModelState>();
  model->name = scenario.name;
  model->settings.max_batch_size = 8;
  if (scenario.queued) {
    model->dispatcher = std::make_unique<Dispatcher>(std::map<int, double>{{1, scenario.budget_s}}, 1);
  }
  std::vector<TRITONBACKEND_ModelInstance> tritons(scenario.instances);
  std::vector<std::unique_ptr<InstanceState>> instances = StartInstances(model.get(), &tritons);
  const size_t per_call = 4;  // about 3.5 requests a call: room for the last burst
  const size_t per_producer = static_cast<size_t>(scenario.calls) * per_call;
  const size_t burst = 20 * per_call;
  Requests requests = MakeRequests(per_producer * scenario.instances + burst, 7 + scenario.instances);
  std::vector<TRITONBACKEND_Request*> pointers;
  for (auto& r : requests) pointers.push_back(r.get());
  for (FaultPointCount& p : fault_points) p.injected = 0;
  fault_per_mille = scenario.faults;

  // One producer per instance (Triton never runs one instance's Execute twice at once); instance 0
  // has fewer requests and finalizes while the others still enqueue.
  std::vector<std::thread> producers;
  for (int i = 0; i < scenario.instances; ++i) {
    const size_t count = i == 0 ? per_producer / 4 : per_producer;
    producers.emplace_back(Produce, instances[i].get(), pointers.data() + i * per_producer, count, 100u + i,
                           scenario.gap_us);
  }
  producers[0].join();
  FinalizeInstance(&instances[0]);
  for (size_t i = 1; i < producers.size(); ++i) producers[i].join();
  AwaitDrained(model.get());

  // The rest unload with requests queued: batches held at the gate, every worker told to stop
  // before it opens, so the last one to stop answers the queue. The burst is sent from this thread
  // to an idle model: it goes through the queue (inline, its first batch would hold this thread at
  // the gate). No Execute runs now: the setting is read by none while it changes.
  model->settings.inline_when_idle = false;
  const int last = scenario.instances - 1;
  if (scenario.unload_while_queued && model->dispatcher) gate.Close();
  if (last > 0) Produce(instances[last].get(), pointers.data() + scenario.instances * per_producer, burst, 99u);
  if (model->dispatcher) {
    std::lock_guard<std::mutex> lock(model->dispatcher->mutex);
    for (int i = 1; i <= last; ++i) instances[i]->stop = true;
  }
  std::thread opener([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.Open();
  });
  for (int i = 1; i <= last; ++i) FinalizeInstance(&instances[i]);
  opener.join();
  fault_per_mille = 0;
  ReleaseKept(model.get(), true);  // TRITONBACKEND_ModelFinalize

  // Every request: one release (none for those Triton always refuses: kept, then counted lost), one
  // FINAL response (none where no response could be created), an error with no outputs unless it
  // succeeded, nothing touched after its release.
  size_t sent = 0, ok = 0, unloading = 0, overloaded = 0, injected_answers = 0, always_refused = 0;
  int reported = 0;
  auto report = [&](bool condition, const TRITONBACKEND_Request& r, const std::string& what) {
    if (condition) return true;
    if (reported++ < 10) Check(false, "request " + std::to_string(r.id) + ": " + what);
    return false;
  };
  bool all_good = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    const TRITONBACKEND_Request& r = *requests[i];
    const bool sent_to_backend = i < per_producer / 4 || (i >= per_producer && scenario.instances > 1);
    if (!sent_to_backend) continue;
    const int expected_releases = r.release_refusals >= 1000 ? 0 : 1;
    always_refused += r.release_refusals >= 1000;
    all_good &= report(r.releases == expected_releases, r, "released exactly once");
    all_good &= report(r.misuse == 0, r, "not touched after its release, nor sent twice");
    if (r.first_response_fails) {
      all_good &= report(r.sends == 0, r, "no response could be made: none sent");
      continue;
    }
    all_good &= report(r.sends == 1, r, "exactly one FINAL response");
    ++sent;
    if (r.sent_code == -1) {
      ++ok;
      all_good &= report(!r.bad && !r.partial, r, "only a good request succeeds");
      all_good &= report(r.sent_outputs == 2, r, "a success holds every output");
      continue;
    }
    const std::string message = r.sent_message;
    unloading += message.find("unloading") != std::string::npos;
    overloaded += message.find("overloaded") != std::string::npos;
    injected_answers += message.find("out of memory or an internal fault") != std::string::npos;
    const bool injected = message.find("out of memory or an internal fault") != std::string::npos;
    if (r.bad && !injected) {
      all_good &= report(r.sent_code == TRITONSERVER_ERROR_INVALID_ARG, r, "a bad input is INVALID_ARG: " + message);
    }
    // The partial response goes out only when no fresh one could be made for the error.
    const bool fallback = r.partial && r.fresh_response_fails && message.find("second output") != std::string::npos;
    const int expected_outputs = fallback ? 1 : 0;
    all_good &= report(r.sent_outputs == expected_outputs, r,
                       "an error carries no outputs (got " + std::to_string(r.sent_outputs.load()) + ")");
  }
  Check(all_good, "every request answered and released exactly once, errors without outputs");
  Check(ok > 0 && sent > ok, "some succeeded, some failed: " + std::to_string(ok) + " of " + std::to_string(sent));
  Check(model->unreleased.lost == always_refused && model->unreleased.requests.empty(),
        "releases refused once are retried at finalize; those always refused are counted lost (" +
            std::to_string(model->unreleased.lost) + " of " + std::to_string(always_refused) + ")");
  Check(live_responses == 0, "no response left unsent or undeleted: " + std::to_string(live_responses.load()));
  Check(fake_server::LiveErrors() == 0, "no error object leaked: " + std::to_string(fake_server::LiveErrors()));
  Check(unknown_points == 0, "every fault point is known to the driver");
  if (scenario.unload_while_queued && scenario.queued) {
    Check(unloading > 0, "requests queued at unload are answered UNAVAILABLE (" + std::to_string(unloading) + ")");
  }
  if (scenario.budget_s < 0.01) Check(overloaded > 0, "a tight budget sheds (" + std::to_string(overloaded) + ")");
  if (scenario.faults > 0) {
    Check(injected_answers > 0, "injected faults are answered as errors (" + std::to_string(injected_answers) + ")");
    for (const FaultPointCount& p : fault_points) {
      if (scenario.injected_at != nullptr) {
        const bool named = std::strcmp(p.name, scenario.injected_at) == 0;
        if (named) Check(p.injected > 0, std::string("bad_alloc injected at ") + p.name);
        continue;
      }
      // execute.inline: reached only where a queued model is found idle, which a busy scenario
      // may never do; QueuedIdleBadAllocInjected names it
      if (std::strcmp(p.name, "execute.inline") == 0) continue;
      const bool reachable = scenario.queued || std::strncmp(p.name, "execute", 7) == 0;
      if (reachable) Check(p.injected > 0, std::string("bad_alloc injected at ") + p.name);
    }
  }
  std::printf("%s: %zu answered (%zu ok, %zu unloading, %zu overloaded, %zu injected faults)\n", scenario.name, sent,
              ok, unloading, overloaded, injected_answers);
}


FASTPATH_TEST(InlineBadAllocInjected) {
  Scenario scenario{"inline, bad_alloc injected"};
  scenario.queued = false;
  scenario.instances = 2;
  scenario.calls = 150 * scale;
  scenario.faults = 30;
  scenario.unload_while_queued = false;
  Run(scenario);
}

FASTPATH_TEST(QueuedProducersAndWorkers) {
  Scenario scenario{"queued, producers and workers"};
  scenario.calls = 200 * scale;
  Run(scenario);
}

FASTPATH_TEST(QueuedBadAllocInjected) {
  Scenario scenario{"queued, bad_alloc injected"};
  scenario.calls = 200 * scale;
  scenario.faults = 30;
  Run(scenario);
}

// Arrivals far apart: most find the model idle and are computed inline, some meet another
// instance's batch and are queued; bad_alloc at the inline path's own point is answered too.
FASTPATH_TEST(QueuedIdleBadAllocInjected) {
  Scenario scenario{"queued, mostly idle (inline), bad_alloc injected"};
  scenario.instances = 2;
  scenario.calls = 150 * scale;
  scenario.faults = 30;
  scenario.gap_us = 400;
  scenario.injected_at = "execute.inline";
  Run(scenario);
}

FASTPATH_TEST(QueuedTightBudgetSheds) {
  Scenario scenario{"queued, a tight budget sheds"};
  scenario.calls = 150 * scale;
  scenario.budget_s = 0.0002;
  scenario.unload_while_queued = false;  // its burst is refused on arrival: nothing is left queued
  Run(scenario);
}

// A model of 8 rows a batch with a queue: admission budget `budget_s` seconds at level 1, one row always computed.
std::unique_ptr<ModelState> QueuedModel(const char* name, double budget_s) {
  auto model = std::make_unique<ModelState>();
  model->name = name;
  model->settings.max_batch_size = 8;
  model->dispatcher = std::make_unique<Dispatcher>(std::map<int, double>{{1, budget_s}}, 1);
  return model;
}

// Polls `done` every 100 us for up to a second; its last answer.
bool Until(const std::function<bool()>& done) {
  for (int wait = 0; wait < 10000 && !done(); ++wait) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return done();
}

// The rows the model's queue counts as computing.
int64_t ComputingRows(Dispatcher& d) {
  std::lock_guard<std::mutex> lock(d.mutex);
  return d.queue.computing_rows();
}

// Priority 1 beside a priority-2 flood, held at the gate: both workers compute a flood batch, more of
// it is queued and the next flood request is refused as overloaded; a priority-1 request is still
// admitted (nothing of its level is ahead of it), taken before the queued flood, computed in a batch
// of its own and answered. Deterministic: nothing is computed, so nothing is learned, until the
// gate opens (the cost of a row is set, 1 ms); no time is asserted.
FASTPATH_TEST(QueuedLevelOneBesideAHeldFlood) {
  current = "queued, priority 1 beside a held flood";
  auto model = std::make_unique<ModelState>();
  model->name = "level_one";
  model->settings.max_batch_size = 8;
  model->settings.inline_when_idle = false;  // sent from this thread with the gate closed: queued, not inline
  model->dispatcher = std::make_unique<Dispatcher>(std::map<int, double>{{1, 0.010}, {2, 0.022}}, 1);
  Dispatcher& d = *model->dispatcher;
  d.admission.Observe(8, 0.008);  // 1 ms a row; nothing else is learned while the gate is closed
  std::vector<TRITONBACKEND_ModelInstance> tritons(2);
  std::vector<std::unique_ptr<InstanceState>> instances = StartInstances(model.get(), &tritons);
  auto request = [](int id, int64_t priority) {
    auto r = std::make_unique<TRITONBACKEND_Request>();
    r->id = id;
    r->rows = 8;
    r->priority = priority;
    return r;
  };
  auto send = [&](TRITONBACKEND_Request* r) {
    TRITONBACKEND_Request* one[] = {r};
    Execute(instances[0].get(), one, 1, NowNs());
  };
  auto computing = [&] { return ComputingRows(d); };
  gate.Close();
  Requests flood;
  for (int i = 0; i < 2; ++i) {  // 8 ms, then 8 rows ahead at 0.5 ms + 8 ms: each worker takes one
    flood.push_back(request(i, 2));
    send(flood.back().get());
    for (int wait = 0; wait < 10000 && computing() < 8 * (i + 1); ++wait) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  Check(computing() == 16, "both workers hold a flood batch at the gate");
  for (int i = 2; i < 5; ++i) {  // 16 and 24 rows ahead: queued (16, 20 ms); 32: 24 ms > 22 ms, refused
    flood.push_back(request(i, 2));
    send(flood.back().get());
  }
  Check(flood[4]->sends == 1 && flood[4]->sent_code == TRITONSERVER_ERROR_UNAVAILABLE,
        "the flood is refused as overloaded on arrival past its budget");
  auto high = request(100, 1);
  send(high.get());  // HEAD counted the 16 computing rows: 8 + 8 ms > 10 ms, refused
  Check(high->sends == 0, "priority 1 is admitted beside the flood: no answer before the gate opens");
  gate.Open();
  AwaitDrained(model.get());
  for (auto& s : instances) FinalizeInstance(&s);
  ReleaseKept(model.get(), true);
  Check(high->sends == 1 && high->sent_code == -1, "priority 1 is answered: " + high->sent_message);
  Check(high->batch_requests == 1, "priority 1 is computed in a batch of its own, not after the queued flood (" +
                                       std::to_string(high->batch_requests.load()) + " requests)");
  for (const auto& r : flood) Check(r->sends == 1 && r->releases == 1, "every flood request answered and released");
  Check(flood[0]->sent_code == -1 && flood[1]->sent_code == -1, "the batches held at the gate are answered");
  Check(live_responses == 0 && fake_server::LiveErrors() == 0, "nothing leaked");
}

// A model with a queue computes a batch that finds it idle on the calling thread (Triton's), through
// the same admission; while that batch computes, requests arriving are queued and both workers take
// them (the inline instance's worker included: no lane is lost to the inline batch), and no second
// batch runs inline (the model is not idle). With inline_when_idle false, a lone request goes to a
// worker. Deterministic: the batches are held at the gate.
FASTPATH_TEST(QueuedInlineWhenIdle) {
  current = "queued, inline when idle";
  std::unique_ptr<ModelState> model = QueuedModel("inline", 10.0);
  Dispatcher& d = *model->dispatcher;
  std::vector<TRITONBACKEND_ModelInstance> tritons(2);
  std::vector<std::unique_ptr<InstanceState>> instances = StartInstances(model.get(), &tritons);
  auto request = [](int id) {
    auto r = std::make_unique<TRITONBACKEND_Request>();
    r->id = id;
    return r;
  };
  auto send = [](InstanceState* s, TRITONBACKEND_Request* r) {
    TRITONBACKEND_Request* one[] = {r};
    Execute(s, one, 1, NowNs());
  };
  auto computed_on = [](TRITONBACKEND_Request* r) {
    std::lock_guard<std::mutex> lock(r->mutex);
    return r->computed_on;
  };
  auto computing = [&] { return ComputingRows(d); };
  auto queued = [&] {
    std::lock_guard<std::mutex> lock(d.mutex);
    return d.queue.size();
  };
  const std::thread::id here = std::this_thread::get_id();

  auto lone = request(1);
  send(instances[0].get(), lone.get());
  Check(lone->sends == 1 && lone->sent_code == -1,
        "a lone request on an idle model is answered before Execute returns");
  Check(computed_on(lone.get()) == here, "a lone request on an idle model is computed on Triton's thread");

  gate.Close();
  auto held = request(2), beside = request(3), behind = request(4);
  std::thread triton0([&] { send(instances[0].get(), held.get()); });
  Check(Until([&] { return computing() == 1; }), "the inline batch is held at the gate");
  send(instances[1].get(), beside.get());  // not idle: queued, a worker takes it
  Check(Until([&] { return computing() == 2; }), "a request beside the inline batch is taken by a worker");
  send(instances[1].get(), behind.get());  // queued: the other worker takes it, though its instance is inline
  Check(Until([&] { return computing() == 3; }) && queued() == 0,
        "both workers take batches while a batch computes inline");
  gate.Open();
  const std::thread::id triton0_id = triton0.get_id();
  triton0.join();
  Check(Until([&] { return behind->sends == 1 && beside->sends == 1; }), "the queued requests are answered");
  Check(held->sends == 1 && held->sent_code == -1 && computed_on(held.get()) == triton0_id,
        "the held batch was computed inline, on its Triton thread, and answered");
  for (TRITONBACKEND_Request* r : {beside.get(), behind.get()}) {
    Check(r->sent_code == -1 && computed_on(r) != triton0_id && computed_on(r) != here,
          "a request queued beside an inline batch is computed by a worker, not inline");
  }

  model->settings.inline_when_idle = false;  // no Execute runs while it changes
  auto off = request(5);
  send(instances[0].get(), off.get());
  Check(Until([&] { return off->sends == 1; }) && off->sent_code == -1 && computed_on(off.get()) != here,
        "with inline_when_idle false a lone request is computed by a worker");
  for (auto& s : instances) FinalizeInstance(&s);
  ReleaseKept(model.get(), true);
  for (TRITONBACKEND_Request* r : {lone.get(), held.get(), beside.get(), behind.get(), off.get()}) {
    Check(r->releases == 1 && r->misuse == 0, "every request released once, nothing touched after");
  }
  Check(live_responses == 0 && fake_server::LiveErrors() == 0, "nothing leaked");
}

// A batch of several Runs (length buckets) answers each Run's requests when that Run ends: the
// first is answered while the second is still held, its rows no longer counted as computing.
FASTPATH_TEST(QueuedAnswersEachRunAtOnce) {
  current = "queued, each Run answered at once";
  std::unique_ptr<ModelState> model = QueuedModel("runs", 10000.0);
  Dispatcher& d = *model->dispatcher;
  std::vector<TRITONBACKEND_ModelInstance> tritons(2);
  std::vector<std::unique_ptr<InstanceState>> instances = StartInstances(model.get(), &tritons);
  auto computing = [&] { return ComputingRows(d); };
  std::vector<std::unique_ptr<TRITONBACKEND_Request>> requests;
  for (int id = 1; id <= 3; ++id) {
    requests.push_back(std::make_unique<TRITONBACKEND_Request>());
    requests.back()->id = id;
  }
  TRITONBACKEND_Request* batch[] = {requests[0].get(), requests[1].get(), requests[2].get()};
  run_requests = 2;  // Runs: {1, 2}, {3}
  later_runs.Close();
  std::thread triton([&] { Execute(instances[0].get(), batch, 3, NowNs()); });  // idle: one batch, inline
  Check(Until([&] { return batch[0]->sends == 1 && batch[1]->sends == 1; }),
        "the first Run's requests are answered while the batch's second Run is held");
  Check(batch[2]->sends == 0 && computing() == 1, "the held Run's request is still computing, alone");
  Check(batch[0]->releases == 1 && batch[0]->sent_code == -1 && batch[0]->batch_requests == 3,
        "an early answer is a whole answer of the batch, its request released");
  later_runs.Open();
  triton.join();
  Check(batch[2]->sends == 1 && batch[2]->sent_code == -1 && computing() == 0, "the second Run is answered");
  run_requests = 0;
  for (auto& s : instances) FinalizeInstance(&s);
  ReleaseKept(model.get(), true);
  for (TRITONBACKEND_Request* r : batch) {
    Check(r->releases == 1 && r->sends == 1 && r->misuse == 0, "every request answered and released once");
  }
  Check(live_responses == 0 && fake_server::LiveErrors() == 0, "nothing leaked");
}

// While the queue is overloaded (arrivals refused, more rows queued behind the batch taken), a batch
// of several Runs is answered whole when it ends: no answers between its Runs on the busy core. One
// worker; A is taken while nothing waits, B while C waits behind it after D was refused, C when the
// queue is empty again: only A's and C's first Runs are answered early. Deterministic: everything
// is sent while the gate holds A.
FASTPATH_TEST(QueuedOverloadedBatchAnsweredWhole) {
  current = "queued, overloaded: a batch answered whole";
  std::unique_ptr<ModelState> model = QueuedModel("whole", 0.026);
  model->settings.inline_when_idle = false;
  Dispatcher& d = *model->dispatcher;
  d.admission.Observe(8, 0.008);  // 1 ms a row until A is computed
  std::vector<TRITONBACKEND_ModelInstance> tritons(1);
  std::vector<std::unique_ptr<InstanceState>> instances = StartInstances(model.get(), &tritons);
  Requests requests;
  auto send_two = [&] {  // one Execute call of 2 requests of 4 rows: a batch of 8 rows, 2 Runs
    TRITONBACKEND_Request* two[2];
    for (TRITONBACKEND_Request*& r : two) {
      requests.push_back(std::make_unique<TRITONBACKEND_Request>());
      requests.back()->id = static_cast<int>(requests.size());
      requests.back()->rows = 4;
      r = requests.back().get();
    }
    Execute(instances[0].get(), two, 2, NowNs());
  };
  run_requests = 1;
  early_runs = 0;
  gate.Close();
  send_two();  // A: taken at once, held at the gate
  Check(Until([&] { return ComputingRows(d) == 8; }), "A is taken and held");
  send_two();  // B: 8 + 4 and 12 + 4 rows ahead at 1 ms: queued
  send_two();  // C: 20 and 24 ms: queued
  send_two();  // D: 28 ms > 26: refused, the queue now refusing
  Check(requests[6]->sends == 1 && requests[6]->sent_code == TRITONSERVER_ERROR_UNAVAILABLE,
        "D is refused as overloaded on arrival");
  gate.Open();
  AwaitDrained(model.get());
  run_requests = 0;
  for (auto& s : instances) FinalizeInstance(&s);
  ReleaseKept(model.get(), true);
  for (size_t i = 0; i < 6; ++i) {
    Check(requests[i]->sends == 1 && requests[i]->sent_code == -1, "A, B and C are answered: " +
                                                                        requests[i]->sent_message);
  }
  Check(early_runs == 2, "only the batches taken while not overloaded answer a Run early (" +
                             std::to_string(early_runs.load()) + " did)");
  for (const auto& r : requests) Check(r->releases == 1 && r->misuse == 0, "every request released once");
  Check(live_responses == 0 && fake_server::LiveErrors() == 0, "nothing leaked");
}

}  // namespace

int main(int argc, char** argv) {
  scale = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  SetFaultHook(InjectBadAlloc);
  fake_server::SetRecordLogs(false);  // logging must add no synchronization ThreadSanitizer would see
  fastpath_test::RunCases();
  return fastpath_test::Summary();
}
