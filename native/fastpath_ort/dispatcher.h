// Serving a model through its own queue (request_queue.h says why): Execute hands requests over
// and returns; each instance's worker thread takes batches from the model's queue and runs them
// with that instance's session. Admission control (admission.h) refuses on arrival a request that
// cannot finish within its level's budget, and sheds at take time one that waited too long.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "request.h"
#include "state.h"

namespace fastpath {

// Sends `p`'s one FINAL response (its outputs, or its error), reports its statistics on `s`'s
// instance and releases the request.
void Answer(InstanceState* s, Pending* p, uint64_t exec_start_ns, uint64_t exec_end_ns);

// Queues each good request of `requests` (read and checked), or refuses it as overloaded on
// arrival; bad ones are answered at once. Returns at once: the workers answer the rest.
void Enqueue(InstanceState* s, std::vector<std::unique_ptr<Pending>> requests, uint64_t arrival_ns);

// Starts `s`'s worker on its model's queue.
void StartWorker(InstanceState* s);

// Stops `s`'s worker; the last one to stop answers whatever is still queued (UNAVAILABLE).
void StopWorker(InstanceState* s);

}  // namespace fastpath
