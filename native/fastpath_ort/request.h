// Reading one request: its inputs checked on their own (type, shape and every count derived from
// it, buffers, finite floats, UTF-8 and string limits) before it may join a batch, and a text
// model's texts tokenized (text_tokenizer). A request that fails a check gets INVALID_ARGUMENT
// naming the input and the bound, and never touches its batch-mates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "config.h"

namespace fastpath {

class WordPieceTokenizer;

struct RequestInput {
  std::vector<int64_t> shape;  // as sent, batch axis included when the model batches
  int64_t elements = 0;        // of `shape`, counted without overflow
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  std::vector<uint8_t> gathered;             // when the input came in several buffers
  std::vector<std::string> strings;          // BYTES elements, NUL-terminated copies
  std::vector<const char*> string_pointers;  // into `strings`
  std::vector<uint8_t> cut;                  // per BYTES element: 1 when cut_string_chars cut it
};

// One request of an execution, from reading to its one FINAL response.
struct Pending {
  TRITONBACKEND_Request* request = nullptr;
  TRITONBACKEND_Response* response = nullptr;
  OwnedError error;    // null while the request is good
  // An output was added to `response`. A request that then fails is answered with a fresh response
  // holding only its error (Answer): nothing partial reaches the client or Triton's response cache.
  bool has_outputs = false;
  int64_t rows = 1;    // along the batch axis (1 when the model does not batch)
  int64_t length = 0;  // its longest row: elements along a -1 axis (tokens of a text model), or bytes of a text
  // What a Run feeds the graph (ModelSettings::run_inputs): the inputs as read, or a text model's
  // token ids and mask ([rows, the request's longest], padded with the tokenizer's [PAD] id and 0).
  std::vector<RequestInput> inputs;
  // A text model's rows whose text was cut (cut_string_chars) or whose tokens were cut at
  // max_length: 1 per such row (empty for other models, whose cut rows are in RequestInput::cut).
  std::vector<uint8_t> flagged_rows;
  uint64_t compute_start_ns = 0;
  uint64_t compute_end_ns = 0;

  bool good() const { return error == nullptr; }
  // Answered already (Answer released its request and sent its response).
  bool answered() const { return request == nullptr && response == nullptr; }
  // Records `err` (consumed) as the request's answer, unless it already has one.
  void Fail(TRITONSERVER_Error* err) noexcept {
    if (error == nullptr) {
      error.reset(err);
    } else if (err != nullptr) {
      TRITONSERVER_ErrorDelete(err);
    }
  }
};

// Reads and checks every input of `p`'s request and, for a text model (`tokenizer` not null, as
// ModelSettings::tokenizes()), tokenizes its texts into `p->inputs`; on a problem, `p` holds the error.
void ReadRequest(const ModelSettings& settings, const WordPieceTokenizer* tokenizer, Pending* p);

// The request's `fastpath_priority` parameter (INT, or a STRING holding an integer); 0 (the
// lowest level) when absent, of another type, or not a number.
int64_t RequestPriority(TRITONBACKEND_Request* request);

}  // namespace fastpath
