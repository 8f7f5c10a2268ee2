// See json.h. RapidJSON's SAX reader (iterative: no recursion however deep the input) builds the
// tree; numbers arrive as their literal text (kParseNumbersAsStringsFlag).
#include "json.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <cerrno>
#include <cstdlib>

namespace fastpath {
namespace {

constexpr unsigned kParseFlags = rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag |
                                 rapidjson::kParseNumbersAsStringsFlag;

// RapidJSON 1.1 turns an escaped low surrogate without its high half (\udc00) into the three bytes
// of a surrogate code point; those (ED A0..BF xx) are not a character in UTF-8.
bool HasSurrogate(const char* s, size_t n) {
  for (size_t i = 0; i + 1 < n; ++i) {
    if (static_cast<unsigned char>(s[i]) == 0xED && static_cast<unsigned char>(s[i + 1]) >= 0xA0) return true;
  }
  return false;
}

class TreeBuilder : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, TreeBuilder> {
 public:
  explicit TreeBuilder(Json* root) : root_(root) {}

  const std::string& error() const { return error_; }

  bool Null() { return Scalar(Json::Kind::kNull) != nullptr; }
  bool Bool(bool value) {
    Json* v = Scalar(Json::Kind::kBool);
    if (v == nullptr) return false;
    v->boolean = value;
    v->text = value ? "true" : "false";
    return true;
  }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool /*copy*/) {
    Json* v = Scalar(Json::Kind::kNumber);
    if (v == nullptr) return false;
    v->text.assign(s, n);
    return true;
  }
  bool String(const char* s, rapidjson::SizeType n, bool /*copy*/) {
    if (HasSurrogate(s, n)) return Fail("a lone surrogate is not a character");
    Json* v = Scalar(Json::Kind::kString);
    if (v == nullptr) return false;
    v->text.assign(s, n);
    return true;
  }
  bool Key(const char* s, rapidjson::SizeType n, bool /*copy*/) {
    if (HasSurrogate(s, n)) return Fail("a lone surrogate is not a character");
    key_.assign(s, n);
    return true;
  }
  bool StartObject() { return Open(Json::Kind::kObject); }
  bool EndObject(rapidjson::SizeType /*members*/) { return Close(); }
  bool StartArray() { return Open(Json::Kind::kArray); }
  bool EndArray(rapidjson::SizeType /*items*/) { return Close(); }

 private:
  bool Fail(const char* why) {
    error_ = why;
    return false;
  }

  // Where the next value goes: the root, the open object's member named by the last key, or the
  // open array's next item. Open containers are the last element of their parent, which grows only
  // after they close, so the pointers in open_ stay valid.
  Json* Slot() {
    if (open_.empty()) return root_;
    Json* container = open_.back();
    if (container->kind == Json::Kind::kObject) {
      container->members.emplace_back(std::move(key_), Json());
      key_.clear();
      return &container->members.back().second;
    }
    container->items.emplace_back();
    return &container->items.back();
  }
  Json* Scalar(Json::Kind kind) {
    Json* v = Slot();
    v->kind = kind;
    return v;
  }
  bool Open(Json::Kind kind) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      return Fail("nesting too deep (more than 64 levels of objects and arrays)");
    }
    Json* v = Scalar(kind);
    open_.push_back(v);
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  Json* root_;
  std::vector<Json*> open_;
  std::string key_;
  std::string error_;
};

}  // namespace

bool ParseJson(const char* data, size_t size, Json* out, std::string* error) {
  *out = Json();
  TreeBuilder builder(out);
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(data, size);
  const rapidjson::ParseResult result = reader.Parse<kParseFlags>(stream, builder);
  if (result) return true;
  std::string why = result.Code() == rapidjson::kParseErrorTermination && !builder.error().empty()
                        ? builder.error()
                        : std::string(rapidjson::GetParseError_En(result.Code()));
  if (!why.empty() && why.back() == '.') why.pop_back();  // RapidJSON's messages are sentences
  *error = why + " at offset " + std::to_string(result.Offset());
  *out = Json();
  return false;
}

bool ParseJson(const std::string& text, Json* out, std::string* error) {
  return ParseJson(text.data(), text.size(), out, error);
}

const Json* Json::Find(const std::string& key) const {
  if (kind != Kind::kObject) return nullptr;
  for (const auto& member : members) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

bool Json::AsInt64(int64_t* out) const {
  if (kind != Kind::kNumber && kind != Kind::kString) return false;
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  *out = v;
  return true;
}

std::string Json::AsString() const {
  if (kind == Kind::kString || kind == Kind::kNumber || kind == Kind::kBool) return text;
  return "";
}

}  // namespace fastpath
