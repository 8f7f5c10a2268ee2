// See dispatcher.h.
#include "dispatcher.h"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include <pthread.h>
#include <sched.h>

#include "batch.h"
#include "common.h"

namespace fastpath {
namespace {

constexpr char kUnloading[] = "the model is unloading with this request still queued; retry";

using Entry = RequestQueue<std::unique_ptr<Pending>>::Entry;

int64_t MaxRows(const ModelSettings& settings) { return settings.batched() ? settings.max_batch_size : 1; }

// Admission at take time (who waited too long is shed), then one ExecuteGood over the rest. Nothing
// is answered here: the caller marks the rows done first (see WorkerLoop). Returns what the Runs
// cost and how many were shed.
void ComputeTaken(InstanceState* s, std::vector<Entry>* taken, std::vector<bool> keep, uint64_t start,
                  std::vector<RunCost>* costs, uint64_t* shed) {
  std::vector<Pending*> good;
  for (size_t i = 0; i < taken->size(); ++i) {
    Pending* p = (*taken)[i].item.get();
    if (keep[i]) {
      good.push_back(p);
    } else {
      p->Fail(NewError(TRITONSERVER_ERROR_UNAVAILABLE, kOverloaded));
      ++*shed;
    }
  }
  try {
    ExecuteGood(s, good, start, costs);
  } catch (const std::exception& e) {  // not expected: ExecuteGood catches per Run
    for (Pending* p : good) p->Fail(NewError(TRITONSERVER_ERROR_INTERNAL, std::string("fastpath_ort: ") + e.what()));
  }
}

void WorkerLoop(InstanceState* s) {
  pthread_setname_np(pthread_self(), "fastpath_ort");  // `top -H` tells the workers from Triton's threads
  Dispatcher& d = *s->model->dispatcher;
  const int64_t max_rows = MaxRows(s->model->settings);
  std::unique_lock<std::mutex> lock(d.mutex);
  for (;;) {
    d.wake.wait(lock, [&] { return s->stop || !d.queue.empty(); });
    if (s->stop) break;
    std::vector<Entry> taken = d.queue.Take(max_rows);
    const uint64_t start = NowNs();
    std::vector<int64_t> rows, priorities;
    std::vector<double> waited_s;
    int64_t taken_rows = 0;
    for (const Entry& entry : taken) {
      rows.push_back(entry.rows);
      priorities.push_back(entry.priority);
      waited_s.push_back(static_cast<double>(start - std::min(start, entry.arrival_ns)) / 1e9);
      taken_rows += entry.rows;
    }
    // Overloaded: arrivals are being refused and more rows wait behind this batch. Not at a slow
    // start, where a lone request may wait past its budget with no one to make room for.
    if (d.queue.empty()) d.refusing = false;
    const bool overloaded = d.refusing;
    std::vector<bool> keep = d.admission.Admit(rows, priorities, waited_s, overloaded);
    lock.unlock();
    std::vector<RunCost> costs;
    uint64_t shed = 0;
    try {
      ComputeTaken(s, &taken, std::move(keep), start, &costs, &shed);
    } catch (const std::exception& e) {  // not expected; the worker must live on
      FASTPATH_LOG(ERROR, s->name + ": a batch from the queue failed: " + e.what());
    }
    const uint64_t end = NowNs();
    // The rows are done before their answers go out: a client that sends its next request as soon
    // as it has an answer must not find its last request's rows still counted ahead of it (with 32
    // clients in a closed loop, that double count passed admission_min_rows and shed 19 requests
    // of sentiment in a benchmark run).
    lock.lock();
    d.queue.Done(taken_rows);
    d.shed += shed;
    for (const RunCost& cost : costs) d.admission.Observe(cost.rows, cost.seconds);
    // The drain rate: rows finished since the last batch ended, if a backlog waited all along.
    if (d.backlogged && end > d.last_done_ns) {
      d.admission.ObserveDrain(taken_rows, static_cast<double>(end - d.last_done_ns) / 1e9);
    }
    d.last_done_ns = end;
    d.backlogged = !d.queue.empty();
    lock.unlock();
    for (Entry& entry : taken) Answer(s, entry.item.get(), start, end);
    // Overloaded, the worker lets Triton's runnable threads (reading requests, refusing them,
    // writing answers) go before its next batch where they share a core. On the digits flood (one
    // server core): accepted p99 12-15 ms and refusals 0.4 ms, against 22 and 1.3 ms without; a
    // static lower priority (nice 10) did as well there but cost 20-35% of digits' throughput at 8
    // clients in the benchmark, so only overload yields.
    if (overloaded) sched_yield();
    lock.lock();
  }
  --d.workers;
  if (d.workers > 0) return;
  std::vector<Entry> left = d.queue.TakeAll();
  lock.unlock();
  const uint64_t now = NowNs();
  for (Entry& entry : left) {
    entry.item->Fail(NewError(TRITONSERVER_ERROR_UNAVAILABLE, kUnloading));
    Answer(s, entry.item.get(), now, now);
  }
}

}  // namespace

void Answer(InstanceState* s, Pending* p, uint64_t exec_start_ns, uint64_t exec_end_ns) {
  // Statistics, then the request's release, then its response: the request is no longer touched
  // once its response is out. Sending first let a worker thread still be releasing a request while
  // Triton 2.51's gRPC front end, which had the response, deleted the request (SIGSEGV in
  // TRITONSERVER_InferenceRequestDelete under a 3x sentiment flood, reproduced twice). Triton
  // allows a response after its request's release (decoupled backends rely on it).
  const uint64_t compute_start = p->compute_start_ns ? p->compute_start_ns : exec_end_ns;
  const uint64_t compute_end = p->compute_end_ns ? p->compute_end_ns : exec_end_ns;
  FASTPATH_LOG_IF_ERROR(TRITONBACKEND_ModelInstanceReportStatistics(s->triton, p->request, p->good(), exec_start_ns,
                                                                    compute_start, compute_end, exec_end_ns),
                        "request statistics");
  FASTPATH_LOG_IF_ERROR(TRITONBACKEND_RequestRelease(p->request, TRITONSERVER_REQUEST_RELEASE_ALL),
                        "releasing a request");
  p->request = nullptr;
  if (p->response != nullptr) {
    FASTPATH_LOG_IF_ERROR(TRITONBACKEND_ResponseSend(p->response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, p->error.get()),
                          s->name + ": sending a response");
    p->response = nullptr;
  } else {
    FASTPATH_LOG(ERROR, s->name + ": " + ErrorMessage(p->error.get()));
  }
}

void Enqueue(InstanceState* s, std::vector<std::unique_ptr<Pending>> requests, uint64_t arrival_ns) {
  Dispatcher& d = *s->model->dispatcher;
  std::vector<int64_t> priorities;
  for (const auto& p : requests) priorities.push_back(p->good() ? RequestPriority(p->request) : 0);
  std::vector<std::unique_ptr<Pending>> answer_now;
  size_t queued = 0;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    for (size_t i = 0; i < requests.size(); ++i) {
      std::unique_ptr<Pending>& p = requests[i];
      if (p->good() && d.workers == 0) p->Fail(NewError(TRITONSERVER_ERROR_UNAVAILABLE, kUnloading));
      if (!p->good()) {
        answer_now.push_back(std::move(p));
        continue;
      }
      const int level = d.admission.Level(priorities[i]);
      if (!d.admission.AdmitArrival(d.queue.RowsAhead(level), p->rows, priorities[i], d.workers)) {
        p->Fail(NewError(TRITONSERVER_ERROR_UNAVAILABLE, kOverloaded));
        ++d.shed;
        d.refusing = true;
        answer_now.push_back(std::move(p));
        continue;
      }
      const int64_t rows = p->rows;
      d.queue.Push(Entry{std::move(p), rows, level, priorities[i], arrival_ns});
      ++queued;
    }
  }
  if (queued == 1) d.wake.notify_one();
  if (queued > 1) d.wake.notify_all();
  const uint64_t now = NowNs();
  for (auto& p : answer_now) Answer(s, p.get(), arrival_ns, now);
}

void StartWorker(InstanceState* s) {
  Dispatcher& d = *s->model->dispatcher;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    ++d.workers;
  }
  s->worker = std::thread(WorkerLoop, s);
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

}  // namespace fastpath
