// See dispatcher.h.
#include "dispatcher.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <utility>

#include <pthread.h>
#include <sched.h>

#include "batch.h"
#include "common.h"

namespace fastpath {

namespace {

constexpr char kUnloading[] = "the model is unloading with this request still queued; retry";
constexpr char kNotTaken[] = "fastpath_ort could not take this request (out of memory or an internal fault); retry";
constexpr char kBatchFailed[] =
    "fastpath_ort failed running this request's batch (out of memory or an internal fault); retry";

using Entry = RequestQueue<std::unique_ptr<Pending>>::Entry;

int64_t MaxRows(const ModelSettings& settings) { return settings.batched() ? settings.max_batch_size : 1; }

// Releases `request`. One that Triton refuses is still the backend's (tritonbackend.h): it is kept
// (Unreleased) for ReleaseKept, counted and logged, never dropped.
void Release(ModelState* model, TRITONBACKEND_Request* request) noexcept {
  TRITONSERVER_Error* err = TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
  if (err == nullptr) return;
  FASTPATH_LOG_NOTHROW(ERROR,
                       "fastpath_ort: Triton refused to release a request; the backend keeps it and releases it "
                       "again when the model's instances unload",
                       TRITONSERVER_ErrorMessage(err));
  TRITONSERVER_ErrorDelete(err);
  Unreleased& kept = model->unreleased;
  std::lock_guard<std::mutex> lock(kept.mutex);
  ++kept.failures;
  try {
    kept.requests.push_back(request);
  } catch (...) {
    ++kept.lost;
    FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: no memory to keep a request whose release failed; it is never released",
                         nullptr);
  }
}

// Replaces `p`'s response, which holds outputs written before `p` failed, with a fresh one for its
// error alone: Triton's response cache (inserting every response it is handed) and the client see
// no partial answer. Needs the request: called before its release.
void ReplacePartialResponse(Pending* p) noexcept {
  TRITONBACKEND_Response* fresh = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&fresh, p->request);
  if (err != nullptr) {
    FASTPATH_LOG_NOTHROW(ERROR,
                         "fastpath_ort: no fresh response for a request that failed after an output was written; "
                         "its error goes out in the partly written one",
                         TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
    return;
  }
  FASTPATH_LOG_IF_ERROR(TRITONBACKEND_ResponseDelete(p->response), "fastpath_ort: deleting a partly written response");
  p->response = fresh;
  p->has_outputs = false;
}

// Answers `request`, which has no Pending (making one failed), with `message`. Never throws.
void AnswerBare(InstanceState* s, TRITONBACKEND_Request* request, TRITONSERVER_Error_Code code, const char* message,
                uint64_t now) noexcept {
  Pending p;  // allocates nothing
  p.request = request;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&p.response, request);
  if (err != nullptr) {
    p.response = nullptr;
    FASTPATH_LOG_IF_ERROR(err, "fastpath_ort: creating a response");
  }
  p.Fail(TRITONSERVER_ErrorNew(code, message));
  Answer(s, &p, now, now);
}

// After an exception in Execute: every request not yet queued or answered gets an INTERNAL error,
// those with a Pending (`pending`, null entries already handed off) and those without (`rest`).
void AnswerAbandoned(InstanceState* s, std::vector<std::unique_ptr<Pending>>* pending, TRITONBACKEND_Request** rest,
                     uint32_t rest_count, const char* what) noexcept {
  FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: Execute failed; its requests not yet queued or answered get an error",
                       what != nullptr ? what : "an unknown exception");
  const uint64_t now = NowNs();
  for (std::unique_ptr<Pending>& p : *pending) {
    if (!p) continue;
    p->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, kNotTaken));
    Answer(s, p.get(), now, now);
    p.reset();
  }
  for (uint32_t r = 0; r < rest_count; ++r) AnswerBare(s, rest[r], TRITONSERVER_ERROR_INTERNAL, kNotTaken, now);
}

// The rows the next batch may hold, under the dispatcher's lock: max_batch_size, or while the queue
// is overloaded, what fits the budget its first request has left, at least a length bucket's worth
// (Admission::BatchRows).
int64_t BatchRows(Dispatcher& d, const ModelSettings& settings) {
  const int64_t max_rows = MaxRows(settings);
  const Entry* front = d.queue.front();
  if (!d.refusing || front == nullptr) return max_rows;
  const uint64_t now = NowNs();
  const double waited_s = static_cast<double>(now - std::min(now, front->arrival_ns)) / 1e9;
  return d.admission.BatchRows(front->level, waited_s, max_rows, settings.length_bucket_rows);
}

// Admission at take time, under the dispatcher's lock: which of `taken` to compute. Those shed are
// no longer counted as computing: they cost nothing, and a request arriving while the rest compute
// must not count them ahead of it.
std::vector<bool> AdmitTaken(Dispatcher* d, std::vector<Entry>* taken, uint64_t start, bool* overloaded) {
  std::vector<int64_t> rows, priorities;
  std::vector<double> waited_s;
  for (const Entry& entry : *taken) {
    rows.push_back(entry.rows);
    priorities.push_back(entry.priority);
    waited_s.push_back(static_cast<double>(start - std::min(start, entry.arrival_ns)) / 1e9);
  }
  // Overloaded: arrivals are being refused and more rows wait behind this batch. Not at a slow
  // start, where a lone request may wait past its budget with no one to make room for.
  if (d->queue.empty()) d->refusing = false;
  *overloaded = d->refusing;
  std::vector<bool> keep = d->admission.Admit(rows, priorities, waited_s, *overloaded);
  for (size_t i = 0; i < taken->size(); ++i) {
    if (!keep[i]) d->queue.Done(&(*taken)[i]);
  }
  return keep;
}

// Those not kept are shed, then one ExecuteGood over the rest, each Run's requests handed to
// `run_done` as soon as it ends (ServeTaken answers them there). Returns what the Runs cost and how
// many were shed.
void ComputeTaken(InstanceState* s, std::vector<Entry>* taken, std::vector<bool> keep, uint64_t start,
                  std::vector<RunCost>* costs, uint64_t* shed, const RunDone& run_done) {
  std::vector<Pending*> good;
  for (size_t i = 0; i < taken->size(); ++i) {
    Pending* p = (*taken)[i].item.get();
    if (keep[i]) {
      good.push_back(p);
    } else {
      p->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, kOverloaded));
      ++*shed;
    }
  }
  FASTPATH_FAULT_POINT("worker.compute");
  try {
    ExecuteGood(s, good, start, costs, run_done);
  } catch (const std::exception& e) {  // not expected: ExecuteGood catches per Run
    for (Pending* p : good) p->Fail(ExceptionError("fastpath_ort", e.what()));
  }
}

// After an exception while a worker held `taken`: each that has no answer yet gets an INTERNAL error
// (those of a Run that ended before it were answered then, and keep their answer).
void FailTaken(std::vector<Entry>* taken, const char* what) noexcept {
  FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: a batch from the queue failed; its requests get an error",
                       what != nullptr ? what : "an unknown exception");
  for (Entry& entry : *taken) {
    if (!entry.item->answered()) entry.item->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, kBatchFailed));
  }
}

// Each request's priority (0 for one already failed), read before the dispatcher's lock is taken.
std::vector<int64_t> Priorities(const std::vector<std::unique_ptr<Pending>>& requests) {
  std::vector<int64_t> priorities(requests.size(), 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Pending& p = *requests[i];
    if (p.good()) priorities[i] = RequestPriority(p.request);
  }
  return priorities;
}

// Under the dispatcher's lock: queues each good request of `requests` that admission accepts on
// arrival, failing the others (overloaded, or unloading with no worker); every one queued is left
// null in `requests` and counted in `*queued`. When it throws (std::bad_alloc), what was queued
// stays queued and the entries still there are the caller's.
void AdmitArrivals(Dispatcher* d, std::vector<std::unique_ptr<Pending>>* requests,
                   const std::vector<int64_t>& priorities, uint64_t arrival_ns, size_t* queued) {
  for (size_t i = 0; i < requests->size(); ++i) {
    std::unique_ptr<Pending>& p = (*requests)[i];
    if (p->good() && d->workers == 0) p->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, kUnloading));
    if (!p->good()) continue;  // answered by the caller
    const int level = d->admission.Level(priorities[i]);
    if (!d->admission.AdmitArrival(d->queue.RowsAhead(level), p->rows, priorities[i], d->workers, d->refusing)) {
      p->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, kOverloaded));
      ++d->shed;
      d->refusing = true;
      continue;
    }
    const int64_t rows = p->rows;
    Entry entry{std::move(p), rows, level, priorities[i], arrival_ns};
    try {
      FASTPATH_FAULT_POINT("enqueue.push");  // as the queue's allocation failing
      d->queue.Push(std::move(entry));
    } catch (...) {  // nothing was queued: the request goes back to the caller, who answers it
      p = std::move(entry.item);
      throw;
    }
    ++*queued;
  }
}

// Answers the requests of `requests` not queued (bad or refused ones), outside the lock.
void AnswerLeft(InstanceState* s, std::vector<std::unique_ptr<Pending>>* requests, uint64_t arrival_ns) noexcept {
  const uint64_t now = NowNs();
  for (std::unique_ptr<Pending>& p : *requests) {
    if (!p) continue;
    Answer(s, p.get(), arrival_ns, now);
    p.reset();
  }
}

// Computes and answers `taken`, a batch just taken from the queue on instance `s` (by its worker,
// or inline by Triton's thread), entered and left with `lock` held (released while computing and
// answering). Every request in `taken` is answered, whatever throws. Each counts as computing until
// Done (AdmitTaken marks those it sheds done at once).
void ServeTaken(InstanceState* s, std::unique_lock<std::mutex>* lock, std::vector<Entry>* batch) {
  std::vector<Entry>& taken = *batch;
  Dispatcher& d = *s->model->dispatcher;
  const uint64_t start = NowNs();
  bool overloaded = false;
  std::vector<RunCost> costs;
  uint64_t shed = 0;
  // Each Run's requests but the last Run's are answered as soon as it ends, their rows done first
  // (see below): with length buckets a batch is several Runs, and a request of the first no longer
  // waits for the last. The last Run's go out with the batch's bookkeeping, as before. Not while
  // overloaded: there the worker's core is the bottleneck, and answering between Runs put Triton's
  // threads before the batch's later Runs (sentiment's goodput under the 3x flood fell to 0.78-0.93
  // of the plain batch's, with one trial in five under the 0.8 gate); the whole batch goes out at
  // once and the worker yields after it.
  const RunDone answer_run = [s, &d, &taken, start](const std::vector<Pending*>& run) {
    {
      std::lock_guard<std::mutex> guard(d.mutex);
      for (Entry& entry : taken) {
        if (std::find(run.begin(), run.end(), entry.item.get()) != run.end()) d.queue.Done(&entry);
      }
    }
    const uint64_t now = NowNs();
    for (Pending* p : run) Answer(s, p, start, now);
  };
  try {
    FASTPATH_FAULT_POINT("worker.batch");
    std::vector<bool> keep = AdmitTaken(&d, &taken, start, &overloaded);
    lock->unlock();
    ComputeTaken(s, &taken, std::move(keep), start, &costs, &shed, overloaded ? RunDone() : answer_run);
  } catch (const std::exception& e) {
    FailTaken(&taken, e.what());
  } catch (...) {
    FailTaken(&taken, nullptr);
  }
  const uint64_t end = NowNs();
  // The rows are done before their answers go out: a client that sends its next request as soon
  // as it has an answer must not find its last request's rows still counted ahead of it (with 32
  // clients in a closed loop, that double count passed admission_min_rows and shed 19 requests
  // of sentiment in a benchmark run).
  if (!lock->owns_lock()) lock->lock();
  int64_t taken_rows = 0;
  for (Entry& entry : taken) {
    taken_rows += entry.rows;
    d.queue.Done(&entry);
  }
  d.shed += shed;
  for (const RunCost& cost : costs) d.admission.Observe(cost.rows, cost.seconds);
  // The drain rate: rows taken (computed or shed) since the last batch ended, if a backlog waited
  // all along: the pace at which the rows ahead of an arrival, shed or not, leave the queue.
  if (d.backlogged && end > d.last_done_ns) {
    d.admission.ObserveDrain(taken_rows, static_cast<double>(end - d.last_done_ns) / 1e9);
  }
  d.last_done_ns = end;
  d.backlogged = !d.queue.empty();
  lock->unlock();
  for (Entry& entry : taken) Answer(s, entry.item.get(), start, end);  // the rest: shed, failed, not run
  // Overloaded, the worker lets Triton's runnable threads (reading requests, refusing them,
  // writing answers) go before its next batch where they share a core. On the digits flood (one
  // server core): accepted p99 12-15 ms and refusals 0.4 ms, against 22 and 1.3 ms without; a
  // static lower priority (nice 10) did as well there but cost 20-35% of digits' throughput at 8
  // clients in the benchmark, so only overload yields.
  if (overloaded) sched_yield();
  lock->lock();
}

// Enqueue's path when the model is idle (entered with `lock` held): admits `requests` as Enqueue
// does, takes the batch they make and computes it on the calling thread (Triton's), answering every
// one; rows past one batch go to the workers. When it throws, the entries still in `requests` are
// the caller's to answer.
void ServeInline(InstanceState* s, std::vector<std::unique_ptr<Pending>>* requests,
                 const std::vector<int64_t>& priorities, uint64_t arrival_ns, std::unique_lock<std::mutex>* lock) {
  Dispatcher& d = *s->model->dispatcher;
  FASTPATH_FAULT_POINT("execute.inline");
  size_t queued = 0;
  std::vector<Entry> taken;
  try {
    AdmitArrivals(&d, requests, priorities, arrival_ns, &queued);
    if (queued > 0) taken = d.queue.Take(BatchRows(d, s->model->settings));
  } catch (...) {  // what was queued (a Take that throws takes nothing) goes to the workers
    if (queued > 0) d.wake.notify_all();
    throw;
  }
  if (!d.queue.empty()) d.wake.notify_all();  // rows past this batch's go to the workers
  lock->unlock();
  AnswerLeft(s, requests, arrival_ns);  // the refused and bad ones first: they wait for nothing
  if (taken.empty()) return;            // every request refused or bad
  // From here `taken` is this thread's. The workers, this instance's included, keep taking what
  // arrives meanwhile: a lone batch computed here never holds a lane the queue needs (with the
  // instance's worker made to wait, a benchmark at 32 clients computed batches half the size).
  lock->lock();
  ServeTaken(s, lock, &taken);
}

// The worker's loop, entered and left with `lock` held: takes a batch, computes it, answers it,
// until its instance is stopped.
void ServeBatches(InstanceState* s, std::unique_lock<std::mutex>* lock) {
  Dispatcher& d = *s->model->dispatcher;
  for (;;) {
    d.wake.wait(*lock, [&] { return s->stop || !d.queue.empty(); });
    if (s->stop) return;
    std::vector<Entry> taken;
    try {
      taken = d.queue.Take(BatchRows(d, s->model->settings));
    } catch (...) {  // nothing was taken (Take is all or nothing): a moment's pause, then again
      lock->unlock();
      FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: a worker could not take a batch (out of memory); it tries again",
                           nullptr);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock->lock();
      continue;
    }
    ServeTaken(s, lock, &taken);
  }
}

void WorkerLoop(InstanceState* s) noexcept {
  pthread_setname_np(pthread_self(), "fastpath_ort");  // `top -H` tells the workers from Triton's threads
  Dispatcher& d = *s->model->dispatcher;
  std::unique_lock<std::mutex> lock(d.mutex, std::defer_lock);
  try {
    lock.lock();
    ServeBatches(s, &lock);
  } catch (const std::exception& e) {  // not expected: each batch is guarded on its own
    FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: a worker stopped on an exception", e.what());
  } catch (...) {
    FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: a worker stopped on an unknown exception", nullptr);
  }
  if (!lock.owns_lock()) lock.lock();
  --d.workers;
  if (d.workers > 0) return;
  // The last worker: whatever is still queued is answered, one at a time (allocating nothing), and
  // Enqueue refuses new arrivals from now on (no worker).
  Entry entry;
  while (d.queue.PopFront(&entry)) {
    lock.unlock();
    entry.item->Fail(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, kUnloading));
    const uint64_t now = NowNs();
    Answer(s, entry.item.get(), now, now);
    entry.item.reset();
    lock.lock();
  }
}

}  // namespace

void Execute(InstanceState* s, TRITONBACKEND_Request** requests, const uint32_t request_count,
             const uint64_t exec_start) noexcept {
  std::vector<std::unique_ptr<Pending>> pending;
  uint32_t taken = 0;  // requests[0, taken) are in `pending`: answered or queued from there
  try {
    FASTPATH_FAULT_POINT("execute");
    const ModelSettings& settings = s->model->settings;
    pending.reserve(request_count);
    while (taken < request_count) {
      FASTPATH_FAULT_POINT("execute.pending");
      pending.push_back(std::make_unique<Pending>());  // reserved: only make_unique throws, before it is added
      Pending& p = *pending.back();
      p.request = requests[taken++];
      TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&p.response, p.request);
      if (err != nullptr) {
        p.response = nullptr;
        p.Fail(WithPrefix("cannot create a response: ", err));
        continue;
      }
      try {
        ReadRequest(settings, s->model->tokenizer.get(), &p);
      } catch (const std::exception& e) {  // e.g. bad_alloc gathering a huge input
        p.Fail(ExceptionError("fastpath_ort: reading the request", e.what()));
      }
    }
    // Warmup runs inline, never shed: Triton hands a warmup sample's requests to one Execute
    // and fails the model's load if any is refused, and a load on a busy host learns a cold Run's
    // cost (seen: a batch_64 sample refused as overloaded past admission_min_rows).
    const bool warmup = s->warmup_left > 0;
    if (warmup) --s->warmup_left;
    if (s->model->dispatcher && !warmup) {
      Enqueue(s, &pending, exec_start);
      return;
    }
    std::vector<Pending*> good;
    for (const auto& p : pending) {
      if (p->good()) good.push_back(p.get());
    }
    try {
      ExecuteGood(s, good, exec_start);
    } catch (const std::exception& e) {  // not expected: ExecuteGood catches per Run
      for (Pending* p : good) p->Fail(ExceptionError("fastpath_ort", e.what()));
    }
    const uint64_t exec_end = NowNs();
    for (auto& p : pending) {
      Answer(s, p.get(), exec_start, exec_end);
      p.reset();
    }
  } catch (const std::exception& e) {
    AnswerAbandoned(s, &pending, requests + taken, request_count - taken, e.what());
  } catch (...) {
    AnswerAbandoned(s, &pending, requests + taken, request_count - taken, nullptr);
  }
}

void Answer(InstanceState* s, Pending* p, uint64_t exec_start_ns, uint64_t exec_end_ns) noexcept {
  // Statistics, then the request's release, then its response. Triton allows a response after its
  // request's release (its own batcher's cache path notes the request may be gone by then). This
  // order was chosen after a SIGSEGV in Triton 2.51's gRPC front end under a streamed flood, but it
  // did not cure it: the crash came back in both orders, and its cause is the stream handler's race
  // (docs/known-issues.md). It is kept because it is allowed and costs nothing, not as a fix. A
  // failed request's fresh response needs the request, so it is made before the release.
  if (p->request != nullptr) {
    const uint64_t compute_start = p->compute_start_ns ? p->compute_start_ns : exec_end_ns;
    const uint64_t compute_end = p->compute_end_ns ? p->compute_end_ns : exec_end_ns;
    FASTPATH_LOG_IF_ERROR(TRITONBACKEND_ModelInstanceReportStatistics(s->triton, p->request, p->good(), exec_start_ns,
                                                                      compute_start, compute_end, exec_end_ns),
                          "fastpath_ort: request statistics");
    if (!p->good() && p->has_outputs) ReplacePartialResponse(p);  // needs the request: before its release
    if (p->response == nullptr) {
      FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: a request is released without a response (none could be created)",
                           p->good() ? nullptr : TRITONSERVER_ErrorMessage(p->error.get()));
    }
    TRITONBACKEND_Request* request = p->request;
    p->request = nullptr;
    Release(s->model, request);
  }
  if (p->response != nullptr) {
    TRITONBACKEND_Response* response = p->response;
    p->response = nullptr;
    FASTPATH_LOG_IF_ERROR(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, p->error.get()),
                          "fastpath_ort: sending a response");
  }
}

void Enqueue(InstanceState* s, std::vector<std::unique_ptr<Pending>>* requests, uint64_t arrival_ns) {
  Dispatcher& d = *s->model->dispatcher;
  FASTPATH_FAULT_POINT("enqueue");
  const std::vector<int64_t> priorities = Priorities(*requests);
  std::unique_lock<std::mutex> lock(d.mutex);
  // Idle: nothing queued, nothing computing (so no batch of this model runs anywhere), a worker left.
  if (s->model->settings.inline_when_idle && d.queue.empty() && d.queue.computing_rows() == 0 && d.workers > 0) {
    ServeInline(s, requests, priorities, arrival_ns, &lock);
    return;
  }
  size_t queued = 0;
  try {
    AdmitArrivals(&d, requests, priorities, arrival_ns, &queued);
  } catch (...) {
    if (queued > 0) d.wake.notify_all();  // what was queued is served
    throw;
  }
  lock.unlock();
  if (queued == 1) d.wake.notify_one();
  if (queued > 1) d.wake.notify_all();
  AnswerLeft(s, requests, arrival_ns);
}

TRITONSERVER_Error* StartWorker(InstanceState* s) {
  Dispatcher& d = *s->model->dispatcher;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    ++d.workers;
  }
  try {
    s->worker = std::thread(WorkerLoop, s);
  } catch (const std::exception& e) {  // std::system_error: no thread could be made
    std::lock_guard<std::mutex> lock(d.mutex);
    --d.workers;
    return ExceptionError("fastpath_ort: starting the instance's worker thread", e.what());
  }
  return nullptr;
}

void StopWorker(InstanceState* s) {
  if (!s->worker.joinable()) return;
  Dispatcher& d = *s->model->dispatcher;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    s->stop = true;
  }
  d.wake.notify_all();
  s->worker.join();
}

size_t ReleaseKept(ModelState* model, bool last) noexcept {
  Unreleased& kept = model->unreleased;
  std::vector<TRITONBACKEND_Request*> retry;
  {
    std::lock_guard<std::mutex> lock(kept.mutex);
    retry.swap(kept.requests);
  }
  if (retry.empty()) return 0;
  size_t released = 0;
  for (TRITONBACKEND_Request*& request : retry) {
    TRITONSERVER_Error* err = TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (err == nullptr) {
      request = nullptr;
      ++released;
      continue;
    }
    FASTPATH_LOG_NOTHROW(ERROR,
                         last ? "fastpath_ort: Triton refused a kept request's release again as the model unloads; "
                                "it is leaked"
                              : "fastpath_ort: Triton refused a kept request's release again; it stays kept",
                         TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
  retry.erase(std::remove(retry.begin(), retry.end(), nullptr), retry.end());
  std::lock_guard<std::mutex> lock(kept.mutex);
  kept.failures += retry.size();
  if (last) {
    kept.lost += retry.size();
  } else if (kept.requests.empty()) {
    kept.requests.swap(retry);
  } else {
    try {
      kept.requests.insert(kept.requests.end(), retry.begin(), retry.end());
    } catch (...) {
      kept.lost += retry.size();
      FASTPATH_LOG_NOTHROW(ERROR, "fastpath_ort: no memory to keep requests whose release failed; they are leaked",
                           nullptr);
    }
  }
  return released;
}

}  // namespace fastpath
