// Unicode as the `tokenizers` wheel sees it, for the WordPiece tokenizer (wordpiece.h).
//
// Categories, canonical decompositions, combining classes and lower-case mappings come from
// utf8proc (Debian's libutf8proc, linked statically); the code points where tokenizers answers
// otherwise (its crates use Unicode 8.0 and 9.0 tables, its lower-casing Rust's) are corrected by
// the generated wordpiece_unicode_tables.h. Every function here is pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fastpath {
namespace wordpiece {

// False (with *error naming both versions) when the linked utf8proc is not the Unicode version the
// generated tables were made against: its answers would no longer be the ones proven.
bool CheckUnicodeData(std::string* error);

// Checks that [text, text + size) is well-formed UTF-8 (no overlong forms, no surrogates, nothing
// above U+10FFFF, no cut sequence). On failure returns false and sets *bad_offset to the first byte
// of the offending sequence and *reason to a static description.
bool ValidateUtf8(const char* text, size_t size, size_t* bad_offset, const char** reason);

// Decodes UTF-8 that ValidateUtf8 accepted; appends code points to *out.
void DecodeUtf8(const char* text, size_t size, std::vector<uint32_t>* out);
void AppendUtf8(uint32_t code_point, std::string* out);

// Rust's char::is_whitespace (the White_Space property).
bool IsWhitespace(uint32_t c);
// BertNormalizer's is_control: Cc, Cf or Co (unicode_categories 0.1.1), but tab, newline, return.
bool IsControl(uint32_t c);
// BertPreTokenizer's is_bert_punc: ASCII punctuation or a Unicode P* category.
bool IsPunctuation(uint32_t c);
// BertNormalizer's is_chinese_char: the CJK ideograph blocks it lists.
bool IsChineseChar(uint32_t c);
// Mn, as BertNormalizer's strip_accents filters after NFD.
bool IsNonspacingMark(uint32_t c);
// Canonical combining class as tokenizers' NFD orders by.
int CombiningClass(uint32_t c);
// Appends the full canonical decomposition of c (c itself when it has none), not yet reordered.
void AppendDecomposition(uint32_t c, std::vector<uint32_t>* out);
// Canonical ordering: a stable sort by combining class of each run of non-starters in [begin, end).
void CanonicalOrder(uint32_t* begin, uint32_t* end);
// Rust's char::to_lowercase: appends one to three code points.
void AppendLowercase(uint32_t c, std::vector<uint32_t>* out);

}  // namespace wordpiece
}  // namespace fastpath
