// An exact BERT WordPiece tokenizer (see wordpiece.h): the pipeline from text to ids.
// tokenizer.json is read by wordpiece_load.cc; Unicode answers come from wordpiece_unicode.h.
#include "wordpiece.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "wordpiece_state.h"
#include "wordpiece_unicode.h"

namespace fastpath {
namespace wordpiece {

// Per-thread buffers, so Encode allocates nothing in the steady state.
struct Scratch {
  std::vector<uint32_t> decoded;
  std::vector<uint32_t> stage;
  std::vector<uint32_t> decomposed;
  std::vector<uint32_t> normalized;
  std::vector<int64_t> body;
  std::string word;

  void Trim() {  // a huge text must not leave its buffers behind in every thread
    constexpr size_t kKeep = size_t(1) << 16;
    if (decoded.capacity() > kKeep) std::vector<uint32_t>().swap(decoded);
    if (stage.capacity() > kKeep) std::vector<uint32_t>().swap(stage);
    if (decomposed.capacity() > kKeep) std::vector<uint32_t>().swap(decomposed);
    if (normalized.capacity() > kKeep) std::vector<uint32_t>().swap(normalized);
    if (body.capacity() > kKeep) std::vector<int64_t>().swap(body);
    if (word.capacity() > kKeep) std::string().swap(word);
  }
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace wordpiece

namespace {

using wordpiece::AppendUtf8;
using wordpiece::Scratch;
using wordpiece::ThreadScratch;

// A text is normalised in pieces of about this many bytes, cut after an ASCII space (exact: a
// space is a starter that nothing reorders around and always ends a word), so a long text that
// truncation cuts early is not normalised whole.
constexpr size_t kChunkBytes = 2048;

}  // namespace

void WordPieceTokenizer::State::NormalizeCodePoints(const std::vector<uint32_t>& in, Scratch* scratch,
                                                    std::vector<uint32_t>* out) const {
  out->clear();
  if (!has_normalizer) {
    out->assign(in.begin(), in.end());
    return;
  }
  bool ascii = true;
  for (uint32_t c : in) ascii &= c < 0x80;
  if (ascii) {
    for (uint32_t c : in) {
      const int16_t mapped = ascii_map[c];
      if (mapped >= 0) out->push_back(static_cast<uint32_t>(mapped));
    }
    return;
  }
  // 1. clean_text and handle_chinese_chars, character by character.
  std::vector<uint32_t>& cleaned = scratch->stage;
  cleaned.clear();
  for (uint32_t c : in) {
    if (clean_text) {
      if (c == 0 || c == 0xFFFD || wordpiece::IsControl(c)) continue;
      if (wordpiece::IsWhitespace(c)) c = ' ';
    }
    if (handle_chinese_chars && wordpiece::IsChineseChar(c)) {
      cleaned.push_back(' ');
      cleaned.push_back(c);
      cleaned.push_back(' ');
    } else {
      cleaned.push_back(c);
    }
  }
  // 2. strip_accents: NFD (decompose, then order the marks), drop Mn.
  const std::vector<uint32_t>* source = &cleaned;
  if (strip_accents) {
    std::vector<uint32_t>& decomposed = scratch->decomposed;
    decomposed.clear();
    for (uint32_t c : cleaned) wordpiece::AppendDecomposition(c, &decomposed);
    wordpiece::CanonicalOrder(decomposed.data(), decomposed.data() + decomposed.size());
    size_t kept = 0;
    for (uint32_t c : decomposed) {
      if (!wordpiece::IsNonspacingMark(c)) decomposed[kept++] = c;
    }
    decomposed.resize(kept);
    source = &decomposed;
  }
  // 3. lowercase.
  if (lowercase) {
    for (uint32_t c : *source) wordpiece::AppendLowercase(c, out);
  } else {
    out->assign(source->begin(), source->end());
  }
}

template <typename OnWord>
void WordPieceTokenizer::State::Split(const std::vector<uint32_t>& normalized, std::string* word,
                                      OnWord on_word) const {
  word->clear();
  size_t chars = 0;
  for (uint32_t c : normalized) {
    if (wordpiece::IsWhitespace(c)) {
      if (chars > 0) on_word(*word, chars);
      word->clear();
      chars = 0;
    } else if (wordpiece::IsPunctuation(c)) {
      if (chars > 0) on_word(*word, chars);
      word->clear();
      AppendUtf8(c, word);
      on_word(*word, size_t(1));
      word->clear();
      chars = 0;
    } else {
      AppendUtf8(c, word);
      ++chars;
    }
  }
  if (chars > 0) on_word(*word, chars);
}

void WordPieceTokenizer::State::WordPiece(const char* word, size_t size, size_t chars,
                                          std::vector<int64_t>* ids) const {
  if (chars > max_input_chars_per_word) {
    ids->push_back(unk_id);
    return;
  }
  const size_t mark = ids->size();
  size_t start = 0;
  while (start < size) {
    const wordpiece::VocabTable& table = start == 0 ? initial : continuation;
    // Nothing longer than the table's longest key can match: start there, at a character boundary.
    size_t end = size - start > table.max_length() ? start + table.max_length() : size;
    while (end > start && end < size && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
    int64_t found = -1;
    while (end > start) {
      found = table.Find(word + start, end - start);
      if (found >= 0) break;
      --end;
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
    }
    if (found < 0) {
      ids->resize(mark);
      ids->push_back(unk_id);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

bool WordPieceTokenizer::State::TokenizeSegment(const char* text, size_t size, size_t limit, Scratch* scratch,
                                                std::vector<int64_t>* ids) const {
  size_t offset = 0;
  while (offset < size) {
    size_t cut = size;
    if (size - offset > kChunkBytes) {
      const void* space = std::memchr(text + offset + kChunkBytes, ' ', size - offset - kChunkBytes);
      if (space != nullptr) cut = static_cast<size_t>(static_cast<const char*>(space) - text) + 1;
    }
    scratch->decoded.clear();
    wordpiece::DecodeUtf8(text + offset, cut - offset, &scratch->decoded);
    NormalizeCodePoints(scratch->decoded, scratch, &scratch->normalized);
    bool over = false;
    Split(scratch->normalized, &scratch->word, [&](const std::string& word, size_t chars) {
      if (over) return;
      WordPiece(word.data(), word.size(), chars, ids);
      over = ids->size() > limit;
    });
    if (over) return false;
    offset = cut;
  }
  return true;
}

size_t WordPieceTokenizer::State::FindAdded(const char* text, size_t size, size_t from, size_t* which) const {
  if (added.empty()) return size;
  for (size_t i = from; i < size; ++i) {
    if (!added_first_byte[static_cast<unsigned char>(text[i])]) continue;
    for (size_t k = 0; k < added.size(); ++k) {  // longest first: the first hit is the longest
      const std::string& content = added[k].content;
      if (content.size() <= size - i && std::memcmp(text + i, content.data(), content.size()) == 0) {
        *which = k;
        return i;
      }
    }
  }
  return size;
}

namespace {

bool CheckText(const char* utf8, size_t size, std::string* error) {
  if (utf8 == nullptr && size > 0) {
    *error = "no text (null pointer)";
    return false;
  }
  size_t bad = 0;
  const char* reason = "";
  if (!wordpiece::ValidateUtf8(utf8, size, &bad, &reason)) {
    *error = "text is not valid UTF-8: " + std::string(reason) + " at byte " + std::to_string(bad);
    return false;
  }
  return true;
}

}  // namespace

bool WordPieceTokenizer::Encode(const char* utf8, size_t size, int max_length, std::vector<int64_t>* ids,
                                bool* truncated, std::string* error) const {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  ids->clear();
  if (truncated != nullptr) *truncated = false;
  const State& s = *state_;
  const size_t specials = s.prefix_ids.size() + s.suffix_ids.size();
  if (max_length < 0 || (max_length > 0 && static_cast<size_t>(max_length) < specials)) {
    *error = "max_length " + std::to_string(max_length) + " is below the " + std::to_string(specials) +
             " special tokens the post-processor adds (0 means no truncation)";
    return false;
  }
  if (!CheckText(utf8, size, error)) return false;
  const size_t limit = max_length == 0 ? std::numeric_limits<size_t>::max() - 1
                                       : static_cast<size_t>(max_length) - specials;
  Scratch& scratch = ThreadScratch();
  std::vector<int64_t>& body = scratch.body;
  body.clear();
  size_t offset = 0;
  while (offset < size && body.size() <= limit) {
    size_t which = 0;
    const size_t found = s.FindAdded(utf8, size, offset, &which);
    if (found > offset && !s.TokenizeSegment(utf8 + offset, found - offset, limit, &scratch, &body)) break;
    if (found == size) break;
    body.push_back(s.added[which].id);
    offset = found + s.added[which].content.size();
  }
  const bool cut = body.size() > limit;
  if (cut) body.resize(limit);
  if (truncated != nullptr) *truncated = cut;
  ids->reserve(specials + body.size());
  ids->insert(ids->end(), s.prefix_ids.begin(), s.prefix_ids.end());
  ids->insert(ids->end(), body.begin(), body.end());
  ids->insert(ids->end(), s.suffix_ids.begin(), s.suffix_ids.end());
  scratch.Trim();
  return true;
}

bool WordPieceTokenizer::Normalize(const char* utf8, size_t size, std::string* normalized, std::string* error) const {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  normalized->clear();
  if (!CheckText(utf8, size, error)) return false;
  Scratch& scratch = ThreadScratch();
  scratch.decoded.clear();
  wordpiece::DecodeUtf8(utf8, size, &scratch.decoded);
  state_->NormalizeCodePoints(scratch.decoded, &scratch, &scratch.normalized);
  for (uint32_t c : scratch.normalized) AppendUtf8(c, normalized);
  scratch.Trim();
  return true;
}

bool WordPieceTokenizer::PreTokenize(const char* utf8, size_t size, std::vector<std::string>* words,
                                     std::string* error) const {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  words->clear();
  if (!CheckText(utf8, size, error)) return false;
  Scratch& scratch = ThreadScratch();
  scratch.decoded.clear();
  wordpiece::DecodeUtf8(utf8, size, &scratch.decoded);
  state_->NormalizeCodePoints(scratch.decoded, &scratch, &scratch.normalized);
  state_->Split(scratch.normalized, &scratch.word, [&](const std::string& word, size_t) { words->push_back(word); });
  scratch.Trim();
  return true;
}

size_t WordPieceTokenizer::special_token_count() const {
  return state_->prefix_ids.size() + state_->suffix_ids.size();
}
size_t WordPieceTokenizer::vocab_size() const { return state_->vocab_size; }
int64_t WordPieceTokenizer::unk_id() const { return state_->unk_id; }
int64_t WordPieceTokenizer::TokenId(const std::string& token) const {
  return state_->initial.Find(token.data(), token.size());
}

}  // namespace fastpath
