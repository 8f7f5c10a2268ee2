// Answering the requests of an Execute call: each is read and checked, then run inline, or, for a
// model with admission budgets, handed to the model's own queue (request_queue.h says why), from
// which each instance's worker thread takes batches and runs them with that instance's session.
// An Execute call that finds such a model idle (nothing queued, nothing computing) takes its batch
// through the same queue and admission but computes it on Triton's thread (Enqueue's inline path,
// ServeInline in dispatcher.cc), saving the worker's wake-up; requests arriving meanwhile are queued
// and taken by the workers as usual (the inline rows count as computing ahead of them). At most one
// batch of a model runs inline at a time (it needs nothing computing), so an instance's session
// runs at most two Runs at once.
// Admission control (admission.h) refuses on arrival a request that cannot finish within its
// level's budget behind the work of its level or higher, and sheds at take time one that waited too
// long; a batch holds one level (priority 1 first), and while overloaded a lowest-level batch holds
// only what fits its first request's budget.
//
// Every request Triton hands over gets exactly one FINAL response and one release, whatever fails:
// a request whose work throws (std::bad_alloc included) is answered with an INTERNAL error; a
// request that fails after an output went into its response gets a fresh response holding only the
// error (nothing partial reaches the client or Triton's response cache); a release that Triton
// refuses is kept and retried (state.h, Unreleased). Nothing here lets an exception out.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "request.h"
#include "state.h"

namespace fastpath {

// Reads, checks and runs (inline or through the queue) `requests` on instance `s`; every request
// is answered and released, here or by a worker. Never throws.
void Execute(InstanceState* s, TRITONBACKEND_Request** requests, uint32_t request_count,
             uint64_t exec_start_ns) noexcept;

// Sends `p`'s one FINAL response (its outputs, or its error alone), reports its statistics on `s`'s
// instance and releases the request. Safe to call again after it returned: what was done is not
// done twice. Never throws.
void Answer(InstanceState* s, Pending* p, uint64_t exec_start_ns, uint64_t exec_end_ns) noexcept;

// Queues each good request of `requests` (read and checked), or refuses it as overloaded on
// arrival; bad and refused ones are answered at once. Every entry it queued or answered is left
// null in `requests`; when it throws (std::bad_alloc), the entries still there are the caller's
// to answer. Returns at once: the workers answer the rest. With inline_when_idle, a model found idle
// (nothing queued or computing) has its batch computed and answered here, on the calling thread.
void Enqueue(InstanceState* s, std::vector<std::unique_ptr<Pending>>* requests, uint64_t arrival_ns);

// Starts `s`'s worker on its model's queue.
TRITONSERVER_Error* StartWorker(InstanceState* s);

// Stops `s`'s worker; the last one to stop answers whatever is still queued (UNAVAILABLE).
void StopWorker(InstanceState* s);

// Releases again the requests of `model` whose release failed earlier (Unreleased); those that
// fail again stay kept, unless `last` (the model finalizes: they are logged as leaked). Returns how
// many were released. Never throws.
size_t ReleaseKept(ModelState* model, bool last) noexcept;

}  // namespace fastpath
