// See tensor_ops.h.
#include "tensor_ops.h"

#include <cmath>
#include <cstring>

namespace fastpath {
namespace {

void CopyAxis(const uint8_t* src, const int64_t* src_shape, uint8_t* dst, const int64_t* dst_shape,
              const int64_t* copy, size_t rank, size_t element_size) {
  if (rank == 1) {
    std::memcpy(dst, src, static_cast<size_t>(copy[0]) * element_size);
    return;
  }
  size_t src_stride = element_size;
  size_t dst_stride = element_size;
  for (size_t i = 1; i < rank; ++i) {
    src_stride *= static_cast<size_t>(src_shape[i]);
    dst_stride *= static_cast<size_t>(dst_shape[i]);
  }
  bool contiguous = true;  // inner axes equal: the whole block is one run
  for (size_t i = 1; i < rank; ++i) {
    contiguous = contiguous && src_shape[i] == copy[i] && dst_shape[i] == copy[i];
  }
  if (contiguous) {
    std::memcpy(dst, src, static_cast<size_t>(copy[0]) * src_stride);
    return;
  }
  for (int64_t i = 0; i < copy[0]; ++i) {
    CopyAxis(src + i * src_stride, src_shape + 1, dst + i * dst_stride, dst_shape + 1, copy + 1,
             rank - 1, element_size);
  }
}
}  // namespace

void CopyBlock(const uint8_t* src, const std::vector<int64_t>& src_shape, uint8_t* dst,
               const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& copy,
               size_t element_size) {
  if (copy.empty()) {
    std::memcpy(dst, src, element_size);
    return;
  }
  for (int64_t extent : copy) {
    if (extent == 0) return;
  }
  CopyAxis(src, src_shape.data(), dst, dst_shape.data(), copy.data(), copy.size(), element_size);
}

int64_t FirstNonFiniteRow(TRITONSERVER_DataType type, const uint8_t* data,
                          const std::vector<int64_t>& shape, int64_t elements) {
  const int64_t total = elements;
  if (total == 0) return -1;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t per_row = rows == 0 ? 0 : total / rows;
  for (int64_t i = 0; i < total; ++i) {
    bool finite = true;
    if (type == TRITONSERVER_TYPE_FP32) {
      float v;
      std::memcpy(&v, data + i * 4, 4);
      finite = std::isfinite(v);
    } else if (type == TRITONSERVER_TYPE_FP64) {
      double v;
      std::memcpy(&v, data + i * 8, 8);
      finite = std::isfinite(v);
    } else if (type == TRITONSERVER_TYPE_FP16) {
      uint16_t v;
      std::memcpy(&v, data + i * 2, 2);
      finite = (v & 0x7C00) != 0x7C00;  // exponent bits all ones: Inf or NaN
    }
    if (!finite) return per_row == 0 ? 0 : i / per_row;
  }
  return -1;
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t extra;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= n) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const unsigned char cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

std::string ParseBytes(const uint8_t* data, size_t size, int64_t expected,
                       std::vector<std::string_view>* out) {
  out->clear();
  size_t pos = 0;
  while (pos < size) {
    if (size - pos < 4) return "a BYTES element is cut short (no room for its 4-byte length)";
    uint32_t length;
    std::memcpy(&length, data + pos, 4);
    pos += 4;
    if (length > size - pos) return "a BYTES element's length runs past the end of the tensor";
    out->emplace_back(reinterpret_cast<const char*>(data + pos), length);
    pos += length;
    if (static_cast<int64_t>(out->size()) > expected) break;
  }
  if (static_cast<int64_t>(out->size()) != expected) {
    return "the BYTES tensor holds " + std::to_string(out->size()) + " elements, its shape says " +
           std::to_string(expected);
  }
  if (pos != size) return "the BYTES tensor has bytes after its last element";
  return "";
}

void AppendBytes(std::string_view element, std::string* out) {
  const uint32_t length = static_cast<uint32_t>(element.size());
  out->append(reinterpret_cast<const char*>(&length), 4);
  out->append(element.data(), element.size());
}

}  // namespace fastpath
