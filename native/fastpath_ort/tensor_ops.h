// Pure helpers for batching: block copies between shapes (padding and trimming), checks on
// request data (finite floats, UTF-8), and Triton's BYTES wire format (4-byte little-endian
// length before each element).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "triton_api.h"

namespace fastpath {

// Copies the leading `copy` block (one extent per axis) from a dense tensor of shape `src_shape`
// into a dense tensor of shape `dst_shape`; both shapes are at least `copy` on every axis, and
// their element counts were checked against overflow by the caller (checks.h). Used
// to pad rows into a batch (copy = src_shape) and to trim rows out of one (copy = dst_shape).
void CopyBlock(const uint8_t* src, const std::vector<int64_t>& src_shape, uint8_t* dst,
               const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& copy,
               size_t element_size);

// The first row (index along axis 0 of `shape`) holding NaN or Inf, or -1. FP16/FP32/FP64 only.
// `data` holds the `elements` elements of `shape` (counted by the caller with checks.h).
int64_t FirstNonFiniteRow(TRITONSERVER_DataType type, const uint8_t* data,
                          const std::vector<int64_t>& shape, int64_t elements);

bool IsValidUtf8(std::string_view text);

// Splits a BYTES buffer into its elements. Returns "" or what is wrong with the buffer.
std::string ParseBytes(const uint8_t* data, size_t size, int64_t expected,
                       std::vector<std::string_view>* out);

// Appends one BYTES element (length prefix + bytes) to `out`.
void AppendBytes(std::string_view element, std::string* out);

}  // namespace fastpath
