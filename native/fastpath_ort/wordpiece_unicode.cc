// Unicode as the `tokenizers` wheel sees it: utf8proc plus the generated corrections.
#include "wordpiece_unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "wordpiece_unicode_tables.h"

namespace fastpath {
namespace wordpiece {
namespace {

using wordpiece_tables::CodePointRange;

template <size_t N>
bool InRanges(const CodePointRange (&table)[N], uint32_t c) {
  const CodePointRange* end = table + N;
  const CodePointRange* it =
      std::upper_bound(table, end, c, [](uint32_t value, const CodePointRange& r) { return value < r.first; });
  return it != table && c <= (it - 1)->last;
}

utf8proc_category_t Category(uint32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

}  // namespace

bool CheckUnicodeData(std::string* error) {
  const char* linked = utf8proc_unicode_version();
  if (std::strcmp(linked, wordpiece_tables::kUtf8procUnicodeVersion) == 0) return true;
  if (error != nullptr) {
    *error = std::string("utf8proc implements Unicode ") + linked + " but wordpiece_unicode_tables.h was made for " +
             wordpiece_tables::kUtf8procUnicodeVersion +
             ": regenerate it (python -m triton_fastpath.native.wordpiece_tables) and rerun the exactness tests";
  }
  return false;
}

bool ValidateUtf8(const char* text, size_t size, size_t* bad_offset, const char** reason) {
  const auto* s = reinterpret_cast<const unsigned char*>(text);
  size_t i = 0;
  while (i < size) {
    // Skip ASCII eight bytes at a time.
    while (i + 8 <= size) {
      uint64_t block;
      std::memcpy(&block, s + i, 8);
      if (block & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= size) break;
    const unsigned char b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t need;
    uint32_t min;
    uint32_t c;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1, min = 0x80, c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2, min = 0x800, c = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3, min = 0x10000, c = b & 0x07;
    } else {
      *bad_offset = i;
      *reason = (b >= 0x80 && b <= 0xBF) ? "a continuation byte without a lead byte"
                                         : "a byte that never occurs in UTF-8 (0xC0, 0xC1 or 0xF5-0xFF)";
      return false;
    }
    if (size - i <= need) {
      // Fewer than `need` bytes follow; check the ones that do, for the better message.
      for (size_t k = 1; i + k < size; ++k) {
        if ((s[i + k] & 0xC0) != 0x80) {
          *bad_offset = i;
          *reason = "a multi-byte sequence cut by a byte that is not a continuation byte";
          return false;
        }
      }
      *bad_offset = i;
      *reason = "a multi-byte sequence cut by the end of the text";
      return false;
    }
    for (size_t k = 1; k <= need; ++k) {
      const unsigned char cont = s[i + k];
      if ((cont & 0xC0) != 0x80) {
        *bad_offset = i;
        *reason = "a multi-byte sequence cut by a byte that is not a continuation byte";
        return false;
      }
      c = (c << 6) | (cont & 0x3F);
    }
    if (c < min) {
      *bad_offset = i;
      *reason = "an overlong encoding";
      return false;
    }
    if (c >= 0xD800 && c <= 0xDFFF) {
      *bad_offset = i;
      *reason = "an encoded surrogate (U+D800-U+DFFF)";
      return false;
    }
    if (c > 0x10FFFF) {
      *bad_offset = i;
      *reason = "a code point above U+10FFFF";
      return false;
    }
    i += need + 1;
  }
  return true;
}

void DecodeUtf8(const char* text, size_t size, std::vector<uint32_t>* out) {
  const auto* s = reinterpret_cast<const unsigned char*>(text);
  size_t i = 0;
  while (i < size) {
    const unsigned char b = s[i];
    if (b < 0x80) {
      out->push_back(b);
      i += 1;
    } else if (b < 0xE0) {
      out->push_back((uint32_t(b & 0x1F) << 6) | (s[i + 1] & 0x3F));
      i += 2;
    } else if (b < 0xF0) {
      out->push_back((uint32_t(b & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
      i += 3;
    } else {
      out->push_back((uint32_t(b & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
                     (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F));
      i += 4;
    }
  }
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsWhitespace(uint32_t c) {
  if (c < 0x80) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsControl(uint32_t c) {
  if (c < 0x80) return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F;
  const utf8proc_category_t category = Category(c);
  const bool other = category == UTF8PROC_CATEGORY_CC || category == UTF8PROC_CATEGORY_CF ||
                     category == UTF8PROC_CATEGORY_CO;
  return other != InRanges(wordpiece_tables::kOtherFlip, c);
}

bool IsPunctuation(uint32_t c) {
  if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                       (c >= 0x7B && c <= 0x7E);
  const utf8proc_category_t category = Category(c);
  const bool punct = category >= UTF8PROC_CATEGORY_PC && category <= UTF8PROC_CATEGORY_PO;
  return punct != InRanges(wordpiece_tables::kPunctuationFlip, c);
}

bool IsChineseChar(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool IsNonspacingMark(uint32_t c) {
  if (c < 0x300) return false;
  const bool mn = Category(c) == UTF8PROC_CATEGORY_MN;
  return mn != InRanges(wordpiece_tables::kNonspacingFlip, c);
}

int CombiningClass(uint32_t c) {
  if (c < 0x300) return 0;
  const int klass = utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
  if (klass == 0 || InRanges(wordpiece_tables::kCombiningClassZero, c)) return 0;
  return klass;
}

void AppendDecomposition(uint32_t c, std::vector<uint32_t>* out) {
  if (c < 0xC0 || InRanges(wordpiece_tables::kNoDecomposition, c)) {
    out->push_back(c);
    return;
  }
  utf8proc_int32_t buffer[8];
  int boundclass = 0;
  utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buffer, 8,
                                               static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE), &boundclass);
  if (n <= 0) {  // not a valid code point: validated input never gets here
    out->push_back(c);
    return;
  }
  if (n > 8) {  // longer than any canonical decomposition today (4); still handled
    std::vector<utf8proc_int32_t> longer(static_cast<size_t>(n));
    boundclass = 0;
    n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), longer.data(), n,
                                static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE), &boundclass);
    for (utf8proc_ssize_t i = 0; i < n; ++i) out->push_back(static_cast<uint32_t>(longer[static_cast<size_t>(i)]));
    return;
  }
  for (utf8proc_ssize_t i = 0; i < n; ++i) out->push_back(static_cast<uint32_t>(buffer[i]));
}

void CanonicalOrder(uint32_t* begin, uint32_t* end) {
  uint32_t* run = begin;
  while (run < end) {
    if (CombiningClass(*run) == 0) {
      ++run;
      continue;
    }
    uint32_t* run_end = run + 1;
    while (run_end < end && CombiningClass(*run_end) != 0) ++run_end;
    if (run_end - run > 1) {
      std::vector<std::pair<int, uint32_t>> keyed;
      keyed.reserve(static_cast<size_t>(run_end - run));
      for (uint32_t* p = run; p < run_end; ++p) keyed.emplace_back(CombiningClass(*p), *p);
      std::stable_sort(keyed.begin(), keyed.end(),
                       [](const std::pair<int, uint32_t>& a, const std::pair<int, uint32_t>& b) {
                         return a.first < b.first;
                       });
      for (size_t k = 0; k < keyed.size(); ++k) run[k] = keyed[k].second;
    }
    run = run_end;
  }
}

void AppendLowercase(uint32_t c, std::vector<uint32_t>* out) {
  if (c < 0x80) {
    out->push_back((c >= 'A' && c <= 'Z') ? c + 32 : c);
    return;
  }
  const auto* begin = std::begin(wordpiece_tables::kLowercase);
  const auto* end = std::end(wordpiece_tables::kLowercase);
  const auto* it = std::lower_bound(begin, end, c, [](const wordpiece_tables::LowercaseOverride& o, uint32_t value) {
    return o.code_point < value;
  });
  if (it != end && it->code_point == c) {
    for (uint32_t k = 0; k < it->length; ++k) out->push_back(it->mapped[k]);
    return;
  }
  out->push_back(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

}  // namespace wordpiece
}  // namespace fastpath
