// The JSON reader of both native libraries: the model configuration Triton hands the backend
// (TRITONBACKEND_ModelConfig serialized to JSON: int64 fields as strings or numbers) and the cache's
// `--cache-config` object. RapidJSON parses (strict RFC 8259, UTF-8 validated, no recursion: as
// Triton's own TritonJson wraps it); the result is a small owned tree whose numbers keep their
// literal text, so an int64 is never rounded through a double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fastpath {

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // a string's value, a number's literal text (exact for int64), "true"/"false"
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in document order; a repeated name stays repeated

  // The first member named `key` of an object, or nullptr.
  const Json* Find(const std::string& key) const;
  // A number or a string holding an integer (protobuf's JSON writes int64 as strings).
  bool AsInt64(int64_t* out) const;
  // A string's value; a number's or bool's text; "" otherwise.
  std::string AsString() const;
};

// Containers nested deeper than this are refused (the parse never recurses; walking the tree does).
constexpr int kMaxJsonDepth = 64;

// Parses `text` whole into `out`. On failure returns false and says what and where in `error`
// ("<why> at offset N"): malformed JSON, text after the value, invalid UTF-8, an escaped surrogate
// that is not half of a pair, or nesting past kMaxJsonDepth ("nesting too deep").
bool ParseJson(const char* data, size_t size, Json* out, std::string* error);
bool ParseJson(const std::string& text, Json* out, std::string* error);

}  // namespace fastpath
