// Reading tokenizer.json for the WordPiece tokenizer (wordpiece.h) with RapidJSON: what it
// reproduces is loaded, anything else refused by name.
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wordpiece.h"
#include "wordpiece_state.h"
#include "wordpiece_unicode.h"

namespace fastpath {
namespace wordpiece {

bool VocabTable::Build(const std::vector<std::pair<std::string, int64_t>>& entries, std::string* error) {
  size_t total = 0;
  for (const auto& entry : entries) total += entry.first.size();
  if (total > std::numeric_limits<uint32_t>::max()) {
    *error = "the vocabulary holds more than 4 GiB of token text";
    return false;
  }
  arena_.clear();
  arena_.reserve(total);
  size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity <<= 1;
  slots_.assign(capacity, Slot{0, 0, 0, -1});
  mask_ = capacity - 1;
  max_length_ = 0;
  for (const auto& entry : entries) {
    const std::string& token = entry.first;
    const uint64_t hash = Hash(token.data(), token.size());
    size_t i = hash & mask_;
    bool replaced = false;
    while (slots_[i].id >= 0) {
      if (slots_[i].hash == hash && slots_[i].length == token.size() &&
          std::memcmp(arena_.data() + slots_[i].offset, token.data(), token.size()) == 0) {
        slots_[i].id = entry.second;  // a repeated key: the last one wins, as in a map
        replaced = true;
        break;
      }
      i = (i + 1) & mask_;
    }
    if (replaced) continue;
    slots_[i] = Slot{hash, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size()), entry.second};
    arena_.append(token);
    max_length_ = std::max(max_length_, token.size());
  }
  return true;
}

}  // namespace wordpiece

namespace {

// Largest tokenizer.json read (the biggest BERT vocabularies are a few tens of MB).
constexpr size_t kMaxJsonBytes = size_t(1) << 30;

std::string Quoted(const char* s, size_t n) {
  std::string out = "\"";
  out.append(s, std::min<size_t>(n, 60));
  if (n > 60) out += "...";
  return out + "\"";
}

std::string JsonString(const rapidjson::Value& v) { return std::string(v.GetString(), v.GetStringLength()); }
std::string JsonQuoted(const rapidjson::Value& v) { return Quoted(v.GetString(), v.GetStringLength()); }

std::string TypeOf(const rapidjson::Value& v) {
  if (v.IsObject()) {
    auto it = v.FindMember("type");
    if (it != v.MemberEnd() && it->value.IsString()) return Quoted(it->value.GetString(), it->value.GetStringLength());
    return "an object without a \"type\"";
  }
  if (v.IsNull()) return "null";
  return "a non-object";
}

bool Refuse(const std::string& where, const std::string& what, std::string* error) {
  *error = where + ": " + what + "; only BERT WordPiece tokenizers (BertNormalizer, BertPreTokenizer, "
           "WordPiece, BertProcessing or a [CLS] $A [SEP]-like TemplateProcessing) are reproduced";
  return false;
}

bool GetBool(const rapidjson::Value& object, const char* key, bool* out, const std::string& where,
             std::string* error) {
  auto it = object.FindMember(key);
  if (it == object.MemberEnd() || !it->value.IsBool()) {
    *error = where + ": " + key + " must be true or false";
    return false;
  }
  *out = it->value.GetBool();
  return true;
}

bool ReadNormalizer(const rapidjson::Value& root, WordPieceTokenizer::State* s, const std::string& where,
                    std::string* error) {
  auto it = root.FindMember("normalizer");
  if (it == root.MemberEnd() || it->value.IsNull()) {
    s->has_normalizer = false;
    return true;
  }
  const rapidjson::Value& n = it->value;
  if (!n.IsObject() || TypeOf(n) != "\"BertNormalizer\"") {
    return Refuse(where, "normalizer " + TypeOf(n) + " is not reproduced (needs BertNormalizer or none)", error);
  }
  s->has_normalizer = true;
  const std::string at = where + ": normalizer";
  if (!GetBool(n, "clean_text", &s->clean_text, at, error) ||
      !GetBool(n, "handle_chinese_chars", &s->handle_chinese_chars, at, error) ||
      !GetBool(n, "lowercase", &s->lowercase, at, error)) {
    return false;
  }
  auto strip = n.FindMember("strip_accents");
  if (strip == n.MemberEnd() || strip->value.IsNull()) {
    s->strip_accents = s->lowercase;  // tokenizers: unset follows lowercase
  } else if (strip->value.IsBool()) {
    s->strip_accents = strip->value.GetBool();
  } else {
    *error = at + ": strip_accents must be true, false or null";
    return false;
  }
  return true;
}

bool ReadModel(const rapidjson::Value& root, WordPieceTokenizer::State* s, const std::string& where,
               std::string* error) {
  auto it = root.FindMember("model");
  if (it == root.MemberEnd() || !it->value.IsObject()) return Refuse(where, "no \"model\" object", error);
  const rapidjson::Value& model = it->value;
  if (TypeOf(model) != "\"WordPiece\"") {
    return Refuse(where, "model.type " + TypeOf(model) + " is not reproduced (needs \"WordPiece\")", error);
  }
  auto vocab = model.FindMember("vocab");
  auto unk = model.FindMember("unk_token");
  auto prefix = model.FindMember("continuing_subword_prefix");
  auto max_chars = model.FindMember("max_input_chars_per_word");
  if (vocab == model.MemberEnd() || !vocab->value.IsObject()) {
    *error = where + ": model.vocab must be an object {token: id}";
    return false;
  }
  if (unk == model.MemberEnd() || !unk->value.IsString()) {
    *error = where + ": model.unk_token must be a string";
    return false;
  }
  if (prefix == model.MemberEnd() || !prefix->value.IsString()) {
    *error = where + ": model.continuing_subword_prefix must be a string";
    return false;
  }
  if (max_chars == model.MemberEnd() || !max_chars->value.IsUint64()) {
    *error = where + ": model.max_input_chars_per_word must be a non-negative integer";
    return false;
  }
  s->max_input_chars_per_word = max_chars->value.GetUint64();
  const std::string prefix_text = JsonString(prefix->value);
  std::vector<std::pair<std::string, int64_t>> all;
  std::vector<std::pair<std::string, int64_t>> continued;
  all.reserve(vocab->value.MemberCount());
  for (auto m = vocab->value.MemberBegin(); m != vocab->value.MemberEnd(); ++m) {
    if (!m->value.IsUint()) {
      *error = where + ": model.vocab id of " + Quoted(m->name.GetString(), m->name.GetStringLength()) +
               " is not an integer in 0..4294967295";
      return false;
    }
    std::string token = JsonString(m->name);
    const int64_t id = m->value.GetUint();
    if (token.size() >= prefix_text.size() && token.compare(0, prefix_text.size(), prefix_text) == 0) {
      continued.emplace_back(token.substr(prefix_text.size()), id);
    }
    all.emplace_back(std::move(token), id);
  }
  if (!s->initial.Build(all, error) || !s->continuation.Build(continued, error)) {
    *error = where + ": " + *error;
    return false;
  }
  s->vocab_size = all.size();
  const std::string unk_text = JsonString(unk->value);
  s->unk_id = s->initial.Find(unk_text.data(), unk_text.size());
  if (s->unk_id < 0) {
    *error = where + ": model.unk_token " + Quoted(unk_text.data(), unk_text.size()) + " is not in model.vocab";
    return false;
  }
  return true;
}

bool ReadPreTokenizer(const rapidjson::Value& root, const std::string& where, std::string* error) {
  auto it = root.FindMember("pre_tokenizer");
  if (it == root.MemberEnd() || !it->value.IsObject() || TypeOf(it->value) != "\"BertPreTokenizer\"") {
    const std::string what = it == root.MemberEnd() ? "missing" : TypeOf(it->value);
    return Refuse(where, "pre_tokenizer " + what + " is not reproduced (needs BertPreTokenizer)", error);
  }
  return true;
}

bool ReadIdList(const rapidjson::Value& v, std::vector<int64_t>* out) {
  if (!v.IsArray()) return false;
  for (const auto& id : v.GetArray()) {
    if (!id.IsUint()) return false;
    out->push_back(id.GetUint());
  }
  return true;
}

bool ReadPostProcessor(const rapidjson::Value& root, WordPieceTokenizer::State* s, const std::string& where,
                       std::string* error) {
  auto it = root.FindMember("post_processor");
  if (it == root.MemberEnd() || it->value.IsNull()) return true;  // no special tokens
  const rapidjson::Value& p = it->value;
  const std::string type = TypeOf(p);
  if (type == "\"BertProcessing\"") {
    auto cls = p.FindMember("cls");
    auto sep = p.FindMember("sep");
    auto pair_id = [](const rapidjson::Value& v, int64_t* id) {
      if (!v.IsArray() || v.Size() != 2 || !v[0].IsString() || !v[1].IsUint()) return false;
      *id = v[1].GetUint();
      return true;
    };
    int64_t cls_id = 0;
    int64_t sep_id = 0;
    if (cls == p.MemberEnd() || sep == p.MemberEnd() || !pair_id(cls->value, &cls_id) ||
        !pair_id(sep->value, &sep_id)) {
      *error = where + ": post_processor BertProcessing needs cls and sep as [token, id]";
      return false;
    }
    s->prefix_ids = {cls_id};
    s->suffix_ids = {sep_id};
    return true;
  }
  if (type != "\"TemplateProcessing\"") {
    return Refuse(where, "post_processor " + type + " is not reproduced", error);
  }
  auto single = p.FindMember("single");
  auto specials = p.FindMember("special_tokens");
  if (single == p.MemberEnd() || !single->value.IsArray() || specials == p.MemberEnd() ||
      !specials->value.IsObject()) {
    *error = where + ": post_processor TemplateProcessing needs a single template and special_tokens";
    return false;
  }
  bool seen_sequence = false;
  for (const auto& piece : single->value.GetArray()) {
    if (!piece.IsObject() || piece.MemberCount() != 1) {
      return Refuse(where, "a post_processor single template piece is not one SpecialToken or Sequence", error);
    }
    const auto& entry = *piece.MemberBegin();
    const std::string kind = JsonString(entry.name);
    if (!entry.value.IsObject()) {
      return Refuse(where, "post_processor template piece " + kind + " is not an object", error);
    }
    auto id = entry.value.FindMember("id");
    if (id == entry.value.MemberEnd() || !id->value.IsString()) {
      *error = where + ": post_processor template piece " + kind + " has no string id";
      return false;
    }
    if (kind == "Sequence") {
      if (seen_sequence || JsonString(id->value) != "A") {
        return Refuse(where, "post_processor single template must hold exactly one Sequence, A", error);
      }
      seen_sequence = true;
    } else if (kind == "SpecialToken") {
      auto special = specials->value.FindMember(id->value);
      std::vector<int64_t>* out = seen_sequence ? &s->suffix_ids : &s->prefix_ids;
      if (special == specials->value.MemberEnd() || !special->value.IsObject()) {
        *error = where + ": post_processor special token " + JsonQuoted(id->value) + " is not in special_tokens";
        return false;
      }
      auto ids = special->value.FindMember("ids");
      if (ids == special->value.MemberEnd() || !ReadIdList(ids->value, out)) {
        *error = where + ": post_processor special_tokens " + JsonQuoted(id->value) + ".ids must be a list of ids";
        return false;
      }
    } else {
      return Refuse(where, "post_processor template piece " + Quoted(kind.data(), kind.size()), error);
    }
  }
  if (!seen_sequence) return Refuse(where, "post_processor single template has no Sequence A", error);
  return true;
}

bool ReadAddedTokens(const rapidjson::Value& root, WordPieceTokenizer::State* s, const std::string& where,
                     std::string* error) {
  auto it = root.FindMember("added_tokens");
  if (it == root.MemberEnd() || it->value.IsNull()) return true;
  if (!it->value.IsArray()) {
    *error = where + ": added_tokens must be a list";
    return false;
  }
  for (const auto& token : it->value.GetArray()) {
    auto content = token.IsObject() ? token.FindMember("content") : token.MemberEnd();
    if (!token.IsObject() || content == token.MemberEnd() || !content->value.IsString()) {
      *error = where + ": an added token has no string content";
      return false;
    }
    const std::string text = JsonString(content->value);
    const std::string name = "added token " + Quoted(text.data(), text.size());
    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) {
      auto f = token.FindMember(flag);
      if (f != token.MemberEnd() && !f->value.IsBool()) {
        *error = where + ": " + name + " " + flag + " must be true or false";
        return false;
      }
      if (f != token.MemberEnd() && f->value.GetBool()) {
        const bool normalized = std::strcmp(flag, "normalized") == 0;
        const std::string how = normalized ? "on the normalised text" : "with word or space rules";
        return Refuse(where, name + " has " + flag + "=true (matched " + how + ", not reproduced)", error);
      }
    }
    if (text.empty()) continue;  // tokenizers ignores empty added tokens
    const int64_t id = s->initial.Find(text.data(), text.size());
    if (id < 0) return Refuse(where, name + " is not in model.vocab (its id would be assigned at load)", error);
    s->added.push_back({text, id});
  }
  std::stable_sort(s->added.begin(), s->added.end(), [](const WordPieceTokenizer::State::Added& a,
                                                         const WordPieceTokenizer::State::Added& b) {
    return a.content.size() > b.content.size();
  });
  for (const auto& added : s->added) s->added_first_byte[static_cast<unsigned char>(added.content[0])] = true;
  return true;
}

}  // namespace


WordPieceTokenizer::WordPieceTokenizer(std::unique_ptr<State> state) : state_(std::move(state)) {}
WordPieceTokenizer::~WordPieceTokenizer() = default;

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::Load(const std::string& path, std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    *error = "cannot open tokenizer file " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) {
    if (text.size() + n > kMaxJsonBytes) {
      std::fclose(file);
      *error = path + ": larger than 1 GiB; not a tokenizer.json";
      return nullptr;
    }
    text.append(buffer, n);
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    *error = "cannot read tokenizer file " + path;
    return nullptr;
  }
  return FromJson(text.data(), text.size(), path, error);
}

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::FromJson(const char* json, size_t size,
                                                                 const std::string& where, std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  std::string unicode_error;
  if (!wordpiece::CheckUnicodeData(&unicode_error)) {
    *error = where + ": " + unicode_error;
    return nullptr;
  }
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseIterativeFlag>(json, size);
  if (doc.HasParseError()) {
    *error = where + ": not valid JSON (" + rapidjson::GetParseError_En(doc.GetParseError()) + " at byte " +
             std::to_string(doc.GetErrorOffset()) + ")";
    return nullptr;
  }
  if (!doc.IsObject()) {
    *error = where + ": not a JSON object";
    return nullptr;
  }
  auto version = doc.FindMember("version");
  if (version != doc.MemberEnd() && (!version->value.IsString() || JsonString(version->value) != "1.0")) {
    *error = where + ": version is not \"1.0\" (tokenizers reads only that)";
    return nullptr;
  }
  auto state = std::make_unique<State>();
  if (!ReadModel(doc, state.get(), where, error) || !ReadNormalizer(doc, state.get(), where, error) ||
      !ReadPreTokenizer(doc, where, error) || !ReadPostProcessor(doc, state.get(), where, error) ||
      !ReadAddedTokens(doc, state.get(), where, error)) {
    return nullptr;
  }
  for (uint32_t c = 0; c < 128; ++c) {
    int16_t mapped = static_cast<int16_t>(c);
    if (state->has_normalizer && state->clean_text) {
      if (c == 0 || wordpiece::IsControl(c)) {
        mapped = -1;
      } else if (wordpiece::IsWhitespace(c)) {
        mapped = ' ';
      }
    }
    if (mapped >= 0 && state->has_normalizer && state->lowercase && mapped >= 'A' && mapped <= 'Z') mapped += 32;
    state->ascii_map[c] = mapped;
  }
  return std::unique_ptr<WordPieceTokenizer>(new WordPieceTokenizer(std::move(state)));
}

}  // namespace fastpath
