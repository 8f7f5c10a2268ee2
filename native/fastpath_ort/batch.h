// Running the good requests of one execution: admission control sheds what does not fit the
// service level, the rest are planned into Runs (length buckets, a cap on padded bytes), each Run
// stacks its requests' inputs (rows along -1 axes padded to the Run's longest), runs the graph
// once and hands every request its own rows back. A Run that fails is retried request by request,
// so only the request that fails gets the error; answers already computed are kept.
#pragma once

#include <cstdint>
#include <vector>

#include "request.h"
#include "state.h"

namespace fastpath {

// Runs `good` (requests that passed ReadRequest) and reports Triton's batch statistics.
void ExecuteGood(InstanceState* s, std::vector<Pending*> good, uint64_t exec_start_ns);

}  // namespace fastpath
