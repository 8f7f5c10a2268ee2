// Pure checks on what a client sends, and the plan of a batch's Runs. Every count derived from a
// client's shape goes through the overflow-checked helpers here: Triton 2.51 does not check its
// own element and byte counts (a shape of [1, 2^61+1] with 8 bytes of data reaches the backend),
// so the backend must. No Triton or onnxruntime calls: tests/native/test_native.cc tests them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.h"

namespace fastpath {

// a * b into `out`; false when either is negative or the product passes INT64_MAX.
bool CheckedMul(int64_t a, int64_t b, int64_t* out);
// a + b into `out`; false when either is negative or the sum passes INT64_MAX.
bool CheckedAdd(int64_t a, int64_t b, int64_t* out);
// The element count of `shape`; false on a negative dim or an overflow.
bool CheckedElementCount(const std::vector<int64_t>& shape, int64_t* out);
// The byte size of `shape` with elements of `element_size` bytes; false on a negative dim or
// an overflow.
bool CheckedByteSize(const std::vector<int64_t>& shape, size_t element_size, int64_t* out);

// Why `shape` (as sent, the batch axis first when the model batches) with `byte_size` bytes of
// data cannot be input `spec` of a model with `settings`, or "" when it can. Checks rank, every
// fixed dim, -1 dims >= 1 and <= max_sequence_length, rows 1..max_batch_size, the element count
// without overflow, and (for fixed-size types) that the bytes are exactly what the shape needs.
std::string CheckInputShape(const ModelSettings& settings, const TensorSpec& spec,
                            const std::vector<int64_t>& shape, uint64_t byte_size);

// The index of the first of `elements` INT32/INT64 values in `data` outside [lo, hi) (its value in
// `value`), or -1 when all are inside (or the type is another).
int64_t FirstOutOfBounds(TRITONSERVER_DataType type, const uint8_t* data, int64_t elements, int64_t lo, int64_t hi,
                         int64_t* value);

// One request of a batch, as the planner sees it.
struct PlanItem {
  int64_t rows = 1;    // along the batch axis
  int64_t length = 0;  // its longest row along a -1 axis (or bytes of its longest text)
  // Per input: the shape without the batch axis and the bytes one element takes in the padded
  // tensor (sizeof(const char*) for strings).
  std::vector<std::vector<int64_t>> shapes;
  std::vector<size_t> element_sizes;
};

struct RunPlan {
  std::vector<std::vector<size_t>> runs;  // indexes into the items, one list per Run
  std::vector<size_t> too_big;            // items whose padded tensors alone pass the byte cap
};

// The bytes of the padded input tensors of one Run over `items[indexes]`; false on overflow.
bool PaddedBytes(const std::vector<PlanItem>& items, const std::vector<size_t>& indexes, int64_t* out);

// Splits a batch into Runs. One Run in arrival order when the whole batch fits `max_run_bytes`
// (0: no cap) and `bucket_rows` (0: no buckets) does not split it; otherwise the items sorted by
// length (stable), a Run closed once it holds `bucket_rows` rows or the next item would take its
// padded bytes past the cap. An item that passes the cap alone is listed in `too_big`, not run.
RunPlan PlanRuns(const std::vector<PlanItem>& items, int64_t bucket_rows, int64_t max_run_bytes);

}  // namespace fastpath
