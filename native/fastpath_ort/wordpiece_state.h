// Internals of the WordPiece tokenizer shared by wordpiece.cc (the pipeline) and
// wordpiece_load.cc (reading tokenizer.json); not part of its interface (wordpiece.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "wordpiece.h"

namespace fastpath {
namespace wordpiece {

// Open-addressing hash table from token bytes to id (load factor <= 1/2).
class VocabTable {
 public:
  // Replaces the table's contents; false (with *error) when the tokens hold more than 4 GiB.
  bool Build(const std::vector<std::pair<std::string, int64_t>>& entries, std::string* error);

  // The id of [data, data + size), or -1.
  int64_t Find(const char* data, size_t size) const {
    if (size > max_length_) return -1;
    const uint64_t hash = Hash(data, size);
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (slot.hash == hash && slot.length == size && std::memcmp(arena_.data() + slot.offset, data, size) == 0) {
        return slot.id;
      }
    }
  }

  size_t max_length() const { return max_length_; }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t offset;
    uint32_t length;
    int64_t id;  // -1: empty
  };

  static uint64_t Hash(const char* p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xFF51AFD7ED558CCDULL);
    while (n >= 8) {
      uint64_t k;
      std::memcpy(&k, p, 8);
      h = (h ^ k) * 0xC4CEB9FE1A85EC53ULL;
      h ^= h >> 31;
      p += 8;
      n -= 8;
    }
    uint64_t k = 0;
    std::memcpy(&k, p, n);
    h = (h ^ k) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    return h;
  }

  std::string arena_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t max_length_ = 0;
};

struct Scratch;  // per-thread buffers (wordpiece.cc)

}  // namespace wordpiece

struct WordPieceTokenizer::State {
  bool has_normalizer = false;
  bool clean_text = false;
  bool handle_chinese_chars = false;
  bool strip_accents = false;
  bool lowercase = false;

  wordpiece::VocabTable initial;       // every token
  wordpiece::VocabTable continuation;  // tokens that start with the prefix, keyed without it
  size_t vocab_size = 0;
  int64_t unk_id = -1;
  uint64_t max_input_chars_per_word = 100;

  std::vector<int64_t> prefix_ids;  // post-processor, before the text's tokens
  std::vector<int64_t> suffix_ids;  // and after

  struct Added {
    std::string content;
    int64_t id;
  };
  std::vector<Added> added;  // longest first
  bool added_first_byte[256] = {};

  // ASCII after clean_text and lowercase (chinese and accents never touch it); -1: dropped.
  int16_t ascii_map[128];

  // --- the pipeline ---
  void NormalizeCodePoints(const std::vector<uint32_t>& in, wordpiece::Scratch* scratch,
                           std::vector<uint32_t>* out) const;
  template <typename OnWord>
  void Split(const std::vector<uint32_t>& normalized, std::string* word, OnWord on_word) const;
  void WordPiece(const char* word, size_t size, size_t chars, std::vector<int64_t>* ids) const;
  // Tokenizes a segment without added tokens into *ids; stops (returning false) once *ids holds
  // more than `limit` ids at a word boundary.
  bool TokenizeSegment(const char* text, size_t size, size_t limit, wordpiece::Scratch* scratch,
                       std::vector<int64_t>* ids) const;
  // Leftmost-longest added token at or after `from`; returns its start (or `size`) and sets *which.
  size_t FindAdded(const char* text, size_t size, size_t from, size_t* which) const;
};

}  // namespace fastpath
