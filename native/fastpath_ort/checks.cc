// See checks.h.
#include "checks.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace fastpath {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow(a, b, out);
}

bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_add_overflow(a, b, out);
}

bool CheckedElementCount(const std::vector<int64_t>& shape, int64_t* out) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (!CheckedMul(count, d, &count)) return false;
  }
  *out = count;
  return true;
}

bool CheckedByteSize(const std::vector<int64_t>& shape, size_t element_size, int64_t* out) {
  int64_t count = 0;
  if (element_size > static_cast<size_t>(INT64_MAX) || !CheckedElementCount(shape, &count)) return false;
  return CheckedMul(count, static_cast<int64_t>(element_size), out);
}

std::string CheckInputShape(const ModelSettings& settings, const TensorSpec& spec,
                            const std::vector<int64_t>& shape, uint64_t byte_size) {
  const std::string name = "input '" + spec.name + "'";
  const size_t batch_axes = settings.batched() ? 1 : 0;
  std::vector<int64_t> expected = spec.dims;
  if (batch_axes) expected.insert(expected.begin(), -1);
  bool shape_ok = shape.size() == expected.size();
  for (size_t i = 0; shape_ok && i < expected.size(); ++i) {
    shape_ok = expected[i] == -1 ? shape[i] >= 0 : shape[i] == expected[i];
  }
  if (!shape_ok) return name + " has shape " + ShapeString(shape) + "; the model takes " + ShapeString(expected);
  if (batch_axes) {
    if (shape[0] == 0) return name + " has no rows (batch size 0)";
    if (shape[0] > settings.max_batch_size) {
      return name + " has " + std::to_string(shape[0]) + " rows; the most this model takes is " +
             std::to_string(settings.max_batch_size) + " (max_batch_size)";
    }
  }
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    if (spec.dims[i] != -1) continue;
    const int64_t length = shape[i + batch_axes];
    if (length == 0) return name + " has an empty row (axis " + std::to_string(i + batch_axes) + " is 0)";
    if (settings.max_sequence_length > 0 && length > settings.max_sequence_length) {
      return name + " rows are " + std::to_string(length) + " long; the longest this model takes is " +
             std::to_string(settings.max_sequence_length) + " (max_sequence_length)";
    }
  }
  int64_t elements = 0;
  if (!CheckedElementCount(shape, &elements)) {
    return name + " has shape " + ShapeString(shape) + ", whose element count overflows 64 bits";
  }
  if (!spec.is_string()) {
    int64_t needed = 0;
    if (!CheckedMul(elements, static_cast<int64_t>(spec.element_size), &needed)) {
      return name + " has shape " + ShapeString(shape) + ", whose byte size overflows 64 bits";
    }
    if (byte_size != static_cast<uint64_t>(needed)) {
      return name + " holds " + std::to_string(byte_size) + " bytes; shape " + ShapeString(shape) + " needs " +
             std::to_string(needed);
    }
  } else if (static_cast<uint64_t>(elements) > byte_size / 4) {
    // Every BYTES element takes at least its 4-byte length prefix.
    return name + " has shape " + ShapeString(shape) + " (" + std::to_string(elements) + " strings) but only " +
           std::to_string(byte_size) + " bytes: each string needs at least 4";
  }
  return "";
}

int64_t FirstOutOfBounds(TRITONSERVER_DataType type, const uint8_t* data, int64_t elements, int64_t lo, int64_t hi,
                         int64_t* value) {
  for (int64_t i = 0; i < elements; ++i) {
    int64_t v = 0;
    if (type == TRITONSERVER_TYPE_INT64) {
      std::memcpy(&v, data + i * 8, 8);
    } else if (type == TRITONSERVER_TYPE_INT32) {
      int32_t narrow = 0;
      std::memcpy(&narrow, data + i * 4, 4);
      v = narrow;
    } else {
      return -1;
    }
    if (v < lo || v >= hi) {
      *value = v;
      return i;
    }
  }
  return -1;
}

bool PaddedBytes(const std::vector<PlanItem>& items, const std::vector<size_t>& indexes, int64_t* out) {
  if (indexes.empty()) {
    *out = 0;
    return true;
  }
  int64_t total = 0;
  int64_t rows = 0;
  for (size_t i : indexes) {
    if (!CheckedAdd(rows, items[i].rows, &rows)) return false;
  }
  const PlanItem& first = items[indexes[0]];
  for (size_t input = 0; input < first.shapes.size(); ++input) {
    std::vector<int64_t> shape = first.shapes[input];
    for (size_t i : indexes) {
      const std::vector<int64_t>& own = items[i].shapes[input];
      for (size_t a = 0; a < shape.size() && a < own.size(); ++a) shape[a] = std::max(shape[a], own[a]);
    }
    shape.insert(shape.begin(), rows);
    int64_t bytes = 0;
    if (!CheckedByteSize(shape, first.element_sizes[input], &bytes) || !CheckedAdd(total, bytes, &total)) {
      return false;
    }
  }
  *out = total;
  return true;
}

RunPlan PlanRuns(const std::vector<PlanItem>& items, int64_t bucket_rows, int64_t max_run_bytes) {
  RunPlan plan;
  if (items.empty()) return plan;
  auto fits = [&](const std::vector<size_t>& indexes) {
    int64_t bytes = 0;
    return PaddedBytes(items, indexes, &bytes) && (max_run_bytes <= 0 || bytes <= max_run_bytes);
  };
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  int64_t rows = 0;
  for (const PlanItem& item : items) rows += item.rows;  // each <= max_batch_size, checked on reading
  if ((bucket_rows <= 0 || rows <= bucket_rows) && fits(order)) {
    plan.runs.push_back(order);
    return plan;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].length < items[b].length; });
  std::vector<size_t> run;
  int64_t run_rows = 0;
  for (size_t i : order) {
    if (!fits({i})) {
      plan.too_big.push_back(i);
      continue;
    }
    run.push_back(i);
    if (!run.empty() && run.size() > 1 && !fits(run)) {
      run.pop_back();
      plan.runs.push_back(run);
      run = {i};
      run_rows = 0;
    }
    run_rows += items[i].rows;
    if (bucket_rows > 0 && run_rows >= bucket_rows) {
      plan.runs.push_back(run);
      run.clear();
      run_rows = 0;
    }
  }
  if (!run.empty()) plan.runs.push_back(run);
  return plan;
}

}  // namespace fastpath
