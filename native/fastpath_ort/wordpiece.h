// An exact BERT WordPiece tokenizer, read from a model's tokenizer.json.
//
// Gives the ids the `tokenizers` library (0.23) gives for the same tokenizer.json and text, with
// `no_padding()` and `enable_truncation(max_length)`:
//   added tokens (special tokens) matched on the raw text, leftmost-longest, before anything else;
//   BertNormalizer: clean_text (drop NUL, U+FFFD, Cc/Cf/Co but tab/newline/return; whitespace -> ' '),
//     handle_chinese_chars (spaces around the CJK ideograph blocks tokenizers lists), strip_accents
//     (NFD, then drop Mn; unset = follows lowercase), lowercase (Rust's char::to_lowercase);
//   BertPreTokenizer: split on whitespace, each punctuation character (ASCII or P*) on its own;
//   WordPiece: greedy longest match, continuing_subword_prefix, the whole word [UNK] when a piece
//     is missing or it is longer than max_input_chars_per_word characters;
//   post-processor: BertProcessing or a TemplateProcessing of special tokens around $A (or none);
//   truncation: the text's tokens cut to max_length minus the special tokens ("truncated").
// Unicode questions are answered as the tokenizers wheel answers them (wordpiece_unicode.h).
//
// Load() refuses, naming what, any tokenizer.json it would not reproduce (another model, normalizer,
// pre-tokenizer or post-processor; added tokens matched after normalisation or with strip/word
// options; added tokens outside the vocabulary), so callers keep the Python tokenizer. Its
// `truncation` and `padding` sections are ignored: the caller passes max_length and pads batches.
//
// Encode() is const and thread-safe: one tokenizer serves every thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fastpath {

class WordPieceTokenizer {
 public:
  // Reads tokenizer.json at `path`; nullptr with *error set when it cannot be read or is refused.
  static std::unique_ptr<WordPieceTokenizer> Load(const std::string& path, std::string* error);
  // The same from the file's contents (`where` names it in errors).
  static std::unique_ptr<WordPieceTokenizer> FromJson(const char* json, size_t size, const std::string& where,
                                                      std::string* error);

  ~WordPieceTokenizer();
  WordPieceTokenizer(const WordPieceTokenizer&) = delete;
  WordPieceTokenizer& operator=(const WordPieceTokenizer&) = delete;

  // Tokenizes one UTF-8 text into *ids (replaced): the special tokens around the text's tokens.
  // `ids` must not be null; `truncated` and `error` may be.
  // max_length 0: no truncation; otherwise at most max_length ids, *truncated telling whether
  // tokens were cut (truncated may be null). Returns false with *error set (ids left empty) on
  // invalid UTF-8 (naming the byte offset) or a max_length below special_token_count() (tokenizers
  // itself wraps around there and does not truncate at all).
  bool Encode(const char* utf8, size_t size, int max_length, std::vector<int64_t>* ids, bool* truncated,
              std::string* error) const;

  // The normalizer alone (tokenizers: `tokenizer.normalizer.normalize_str(text)`), for proofs.
  bool Normalize(const char* utf8, size_t size, std::string* normalized, std::string* error) const;
  // Normalizer and pre-tokenizer, no added tokens (tokenizers:
  // `pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))`), for proofs.
  bool PreTokenize(const char* utf8, size_t size, std::vector<std::string>* words, std::string* error) const;

  // Ids the post-processor adds around a text ([CLS] and [SEP]: 2).
  size_t special_token_count() const;
  size_t vocab_size() const;
  int64_t unk_id() const;
  // The id of the vocabulary token `token` (bytes as in tokenizer.json's model.vocab), or -1.
  int64_t TokenId(const std::string& token) const;

  struct State;  // defined in wordpiece.cc

 private:
  explicit WordPieceTokenizer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fastpath
