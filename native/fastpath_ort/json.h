// A small, strict JSON reader for the model configuration Triton hands the backend
// (TRITONBACKEND_ModelConfig serialized to JSON: compact, int64 fields as strings or numbers).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fastpath {

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // a string's value, or a number's literal text (exact for int64)
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  // The member named `key` of an object, or nullptr.
  const Json* Find(const std::string& key) const;
  // A number or a string holding an integer (protobuf's JSON writes int64 as strings).
  bool AsInt64(int64_t* out) const;
  // A string's value; a number's or bool's text; "" otherwise.
  std::string AsString() const;
};

// Parses `text` whole; on failure returns false and says where in `error`.
bool ParseJson(const std::string& text, Json* out, std::string* error);

}  // namespace fastpath
