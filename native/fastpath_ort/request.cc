// See request.h.
#include "request.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "admission.h"
#include "checks.h"
#include "tensor_ops.h"
#include "wordpiece.h"

namespace fastpath {
namespace {

TRITONSERVER_Error* Invalid(const std::string& message) { return NewError(TRITONSERVER_ERROR_INVALID_ARG, message); }

// The first `chars` characters of valid UTF-8 `text` (all of it when shorter).
std::string_view FirstChars(std::string_view text, int64_t chars) {
  size_t at = 0;
  for (int64_t n = 0; at < text.size(); ++n) {
    if (n == chars) return text.substr(0, at);
    const unsigned char lead = static_cast<unsigned char>(text[at]);
    at += lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  }
  return text;
}

// The input's bytes, as one block: its single buffer, or its buffers gathered (several memory
// pieces, e.g. a client's chunks); their sizes must add up to the byte size Triton announced.
TRITONSERVER_Error* ReadBuffers(TRITONBACKEND_Input* input, const std::string& name, uint32_t buffers,
                                uint64_t byte_size, RequestInput* in) {
  uint64_t total = 0;
  for (uint32_t b = 0; b < buffers; ++b) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, b, &buffer, &size, &memory_type, &memory_id));
    if (memory_type == TRITONSERVER_MEMORY_GPU) return Invalid(name + " is in GPU memory; fastpath_ort serves CPU tensors");
    if (size > byte_size - total) {
      return Invalid(name + "'s buffers hold more than the " + std::to_string(byte_size) + " bytes announced");
    }
    total += size;
    if (buffers == 1) {
      in->data = static_cast<const uint8_t*>(buffer);
    } else if (size > 0) {
      const auto* bytes = static_cast<const uint8_t*>(buffer);
      in->gathered.insert(in->gathered.end(), bytes, bytes + size);
    }
  }
  if (total != byte_size) {
    return Invalid(name + "'s buffers hold " + std::to_string(total) + " bytes, not the " + std::to_string(byte_size) +
                   " announced");
  }
  if (buffers != 1) in->data = in->gathered.data();
  in->byte_size = byte_size;
  return nullptr;
}

TRITONSERVER_Error* ReadStrings(const ModelSettings& settings, const std::string& name, RequestInput* in) {
  std::vector<std::string_view> texts;
  std::string error = ParseBytes(in->data, in->byte_size, in->elements, &texts);
  if (!error.empty()) return Invalid(name + ": " + error);
  in->strings.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string_view text = texts[i];
    const std::string element = name + " element " + std::to_string(i);
    if (text.find('\0') != std::string_view::npos) return Invalid(element + " contains a NUL byte");
    if (settings.max_string_bytes > 0 && static_cast<int64_t>(text.size()) > settings.max_string_bytes) {
      return Invalid(element + " is " + std::to_string(text.size()) + " bytes; the limit is " +
                     std::to_string(settings.max_string_bytes) + " bytes (max_string_bytes)");
    }
    if (settings.validate_utf8 && !IsValidUtf8(text)) return Invalid(element + " is not valid UTF-8");
    if (settings.reject_blank_strings &&
        std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
      return Invalid(element + " is empty or whitespace only; send at least one word");
    }
    const std::string_view kept = settings.cut_string_chars > 0 ? FirstChars(text, settings.cut_string_chars) : text;
    in->cut.push_back(kept.size() < text.size() ? 1 : 0);
    in->strings.emplace_back(kept);
  }
  for (const std::string& text : in->strings) in->string_pointers.push_back(text.c_str());
  return nullptr;
}

TRITONSERVER_Error* ReadInput(const ModelSettings& settings, const TensorSpec& spec, TRITONBACKEND_Request* request,
                              RequestInput* in) {
  TRITONBACKEND_Input* input = nullptr;
  TRITONSERVER_Error* missing = TRITONBACKEND_RequestInput(request, spec.name.c_str(), &input);
  if (missing != nullptr || input == nullptr) {
    if (missing != nullptr) TRITONSERVER_ErrorDelete(missing);
    return Invalid("missing input '" + spec.name + "'");
  }
  TRITONSERVER_DataType type;
  const int64_t* shape = nullptr;
  uint32_t rank = 0;
  uint64_t byte_size = 0;
  uint32_t buffers = 0;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, nullptr, &type, &shape, &rank, &byte_size, &buffers));
  const std::string name = "input '" + spec.name + "'";
  if (type != spec.triton_type) {
    return Invalid(name + " is " + TritonTypeName(type) + "; the model takes " + TritonTypeName(spec.triton_type));
  }
  in->shape.assign(shape, shape + rank);
  const std::string bad_shape = CheckInputShape(settings, spec, in->shape, byte_size);
  if (!bad_shape.empty()) return Invalid(bad_shape);
  CheckedElementCount(in->shape, &in->elements);  // cannot fail: CheckInputShape counted it
  FASTPATH_RETURN_IF_ERROR(ReadBuffers(input, name, buffers, byte_size, in));
  if (spec.is_float() && settings.reject_non_finite) {
    const int64_t row = FirstNonFiniteRow(type, in->data, in->shape, in->elements);
    if (row >= 0) return Invalid(name + " row " + std::to_string(row) + " contains NaN or Inf; send finite values");
  }
  auto bound = settings.value_bounds.find(spec.name);
  if (bound != settings.value_bounds.end()) {
    int64_t value = 0;
    const int64_t at = FirstOutOfBounds(type, in->data, in->elements, bound->second.first, bound->second.second, &value);
    if (at >= 0) {
      const int64_t per_row = in->shape.empty() || in->shape[0] == 0 ? 1 : in->elements / in->shape[0];
      return Invalid(name + " holds " + std::to_string(value) + " at row " + std::to_string(at / per_row) +
                     "; its values must be in [" + std::to_string(bound->second.first) + ", " +
                     std::to_string(bound->second.second) + ") (value_bounds, e.g. the tokenizer's vocabulary)");
    }
  }
  if (spec.is_string()) FASTPATH_RETURN_IF_ERROR(ReadStrings(settings, name, in));
  return nullptr;
}

// Its longest row: elements along a -1 axis, or bytes of its longest text.
int64_t LongestRow(const TensorSpec& spec, const RequestInput& in, size_t batch_axes) {
  int64_t length = 0;
  if (spec.is_string()) {
    for (const std::string& text : in.strings) length = std::max<int64_t>(length, text.size());
  }
  for (size_t a = 0; a < spec.dims.size() && a + batch_axes < in.shape.size(); ++a) {
    if (spec.dims[a] == -1) length = std::max(length, in.shape[a + batch_axes]);
  }
  return length;
}

// A dense int64 [rows, length] input held in its own buffer.
RequestInput TokenInput(int64_t rows, int64_t length, int64_t fill) {
  RequestInput in;
  in.shape = {rows, length};
  in.elements = rows * length;  // rows <= max_batch_size, length <= max_length: both checked small
  in.gathered.resize(static_cast<size_t>(in.elements) * sizeof(int64_t));
  int64_t* values = reinterpret_cast<int64_t*>(in.gathered.data());
  std::fill(values, values + in.elements, fill);
  in.data = in.gathered.data();
  in.byte_size = in.gathered.size();
  return in;
}

// A text model's request: each row's text (checked by ReadStrings, cut at cut_string_chars) becomes
// its token ids at natural length; the request's rows are padded to its longest (ids with [PAD], the
// mask with 0), and `p->inputs` becomes {ids, mask}. A row is flagged when its text was cut or its
// tokens were cut at max_length.
void Tokenize(const ModelSettings& settings, const WordPieceTokenizer& tokenizer, Pending* p) {
  const RequestInput& text = p->inputs[0];
  const std::string name = "input '" + settings.inputs[0].name + "'";
  const int64_t rows = p->rows;
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(rows));
  p->flagged_rows.assign(static_cast<size_t>(rows), 0);
  int64_t longest = 0;
  std::string error;
  for (int64_t r = 0; r < rows; ++r) {  // dims [1]: element r is row r
    const std::string& row = text.strings[static_cast<size_t>(r)];
    bool truncated = false;
    if (!tokenizer.Encode(row.data(), row.size(), static_cast<int>(settings.max_length), &ids[r], &truncated,
                          &error)) {
      p->Fail(Invalid(name + " element " + std::to_string(r) + ": " + error));
      return;
    }
    p->flagged_rows[r] = (truncated || text.cut[r]) ? 1 : 0;
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids[r].size()));
  }
  const int64_t pad = std::max<int64_t>(0, tokenizer.TokenId("[PAD]"));
  RequestInput token_ids = TokenInput(rows, longest, pad);
  RequestInput mask = TokenInput(rows, longest, 0);
  int64_t* id_values = reinterpret_cast<int64_t*>(token_ids.gathered.data());
  int64_t* mask_values = reinterpret_cast<int64_t*>(mask.gathered.data());
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(ids[r].begin(), ids[r].end(), id_values + r * longest);
    std::fill_n(mask_values + r * longest, ids[r].size(), 1);
  }
  p->inputs.clear();
  p->inputs.push_back(std::move(token_ids));
  p->inputs.push_back(std::move(mask));
  p->length = longest;
}

}  // namespace

void ReadRequest(const ModelSettings& settings, const WordPieceTokenizer* tokenizer, Pending* p) {
  p->inputs.resize(settings.inputs.size());
  for (size_t i = 0; i < settings.inputs.size() && p->good(); ++i) {
    p->Fail(ReadInput(settings, settings.inputs[i], p->request, &p->inputs[i]));
  }
  if (!p->good()) return;
  if (settings.tokenizes()) {
    if (tokenizer == nullptr) {
      p->Fail(NewError(TRITONSERVER_ERROR_INTERNAL, "fastpath_ort: the model's tokenizer is not loaded"));
      return;
    }
    p->rows = p->inputs[0].shape[0];  // batched, checked by ParseModelSettings; dims [1]: a text a row
    Tokenize(settings, *tokenizer, p);
    return;
  }
  const size_t batch_axes = settings.batched() ? 1 : 0;
  p->rows = settings.batched() ? p->inputs[0].shape[0] : 1;
  int first_ragged = -1;
  for (size_t i = 0; i < p->inputs.size(); ++i) {
    const TensorSpec& spec = settings.inputs[i];
    const RequestInput& in = p->inputs[i];
    p->length = std::max(p->length, LongestRow(spec, in, batch_axes));
    if (settings.batched() && in.shape[0] != p->rows) {
      p->Fail(Invalid("inputs disagree on the batch size: '" + settings.inputs[0].name + "' has " +
                      std::to_string(p->rows) + " rows, '" + spec.name + "' has " + std::to_string(in.shape[0])));
      return;
    }
    if (!spec.ragged || !settings.ragged_lengths_agree) continue;
    if (first_ragged < 0) {
      first_ragged = static_cast<int>(i);
    } else if (in.shape != p->inputs[first_ragged].shape) {
      p->Fail(Invalid("inputs '" + settings.inputs[first_ragged].name + "' " + ShapeText(p->inputs[first_ragged].shape) +
                      " and '" + spec.name + "' " + ShapeText(in.shape) +
                      " disagree: send them with the same shape (one mask value per token id)"));
      return;
    }
  }
}

// The request's `fastpath_priority` parameter (INT, or a STRING holding an integer); 0 (the
// lowest level) when absent, of another type, or not a number.
int64_t RequestPriority(TRITONBACKEND_Request* request) {
  uint32_t count = 0;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestParameterCount(request, &count);
  if (err != nullptr) {
    TRITONSERVER_ErrorDelete(err);
    return 0;
  }
  for (uint32_t i = 0; i < count; ++i) {
    const char* key = nullptr;
    TRITONSERVER_ParameterType type;
    const void* value = nullptr;
    err = TRITONBACKEND_RequestParameter(request, i, &key, &type, &value);
    if (err != nullptr) {
      TRITONSERVER_ErrorDelete(err);
      continue;
    }
    if (key == nullptr || value == nullptr || std::strcmp(key, kPriorityParameter) != 0) continue;
    if (type == TRITONSERVER_PARAMETER_INT) return std::max<int64_t>(0, *static_cast<const int64_t*>(value));
    if (type == TRITONSERVER_PARAMETER_STRING) {
      const char* text = static_cast<const char*>(value);
      char* end = nullptr;
      const long long parsed = std::strtoll(text, &end, 10);  // saturates; never undefined like atoll
      return end != text && *end == '\0' ? std::max<int64_t>(0, parsed) : 0;
    }
    return 0;
  }
  return 0;
}

}  // namespace fastpath
