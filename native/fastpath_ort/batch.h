// Running the good requests of one batch: they are planned into Runs (length buckets, a cap on
// padded bytes), each Run stacks its requests' inputs (rows along -1 axes padded to the Run's longest), runs the graph
// once and hands every request its own rows back. A Run that fails is retried request by request,
// so only the request that fails gets the error; answers already computed are kept.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "request.h"
#include "state.h"

namespace fastpath {

// What one Run cost, for admission control to learn from.
struct RunCost {
  int64_t rows = 0;
  double seconds = 0;
};

// Called after each Run but the batch's last with that Run's requests (computed, or failed alone):
// they may be answered at once, before the later Runs (a length bucket's answer does not wait for
// its batch-mates); the last Run's are answered with the batch, as a one-Run batch's always were.
using RunDone = std::function<void(const std::vector<Pending*>& run)>;

// Runs `good` (requests that passed ReadRequest, admitted) and reports Triton's batch statistics;
// each whole Run's cost goes to `costs` when given, and each Run's requests to `run_done` when given.
void ExecuteGood(InstanceState* s, std::vector<Pending*> good, uint64_t exec_start_ns,
                 std::vector<RunCost>* costs = nullptr, const RunDone& run_done = nullptr);

}  // namespace fastpath
