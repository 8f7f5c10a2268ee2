// The WordPiece tokenizer's C++ driver (native/fastpath_ort/wordpiece.h): unit cases, and the
// batch modes Python uses to compare it with `tokenizers` at scale and to time it.
//
//   test_wordpiece unit                               unit cases; "N passed, N failed"; exit 1 on a failure
//   test_wordpiece load TOKENIZER_JSON                "ok ..." or the refusal; exit 2 when refused
//   test_wordpiece encode TOKENIZER_JSON MAX_LENGTH   frames in, one result frame per text out
//   test_wordpiece normalize TOKENIZER_JSON           frames in: the normalizer's text out
//   test_wordpiece pretokenize TOKENIZER_JSON         frames in: normalizer + pre-tokenizer words out
//   test_wordpiece bench TOKENIZER_JSON MAX_LENGTH MIN_SECONDS   frames in; one JSON line out
//
// Frames (little-endian): a text is u32 length + bytes. `encode` answers u8 0, u8 truncated,
// u32 n, n x i64 ids; or u8 1, u32 length + error message. `normalize` answers u8 0, u32 length +
// normalized text; `pretokenize` u8 0, u32 words, each u32 length + bytes; or the same error frame.
// Built and run by triton_fastpath/native/tokenizer_driver.py (tests/unit/test_wordpiece_exact.py).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#define FASTPATH_TEST_CUSTOM_MAIN
#include "harness.h"
#include "wordpiece.h"
#include "wordpiece_unicode.h"

using fastpath::WordPieceTokenizer;
using fastpath_test::Check;
using fastpath_test::Contains;
using fastpath_test::current;

namespace {

// ---------------------------------------------------------------------------------------------
// Unit cases (native/tests/harness.h).

std::string Join(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

// A small BERT tokenizer.json: ids are the tokens' positions in `kVocab`.
const char* const kVocab[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a",   "b",     "##b", "##c", "hello",
                              "world", "##s",   ",",     "!",     "i",      "##a", "\xCC\x87" /* U+0307 */,
                              "##\xCC\x87",     "\xE4\xB8\x80" /* U+4E00 */,    "x",   "y"};
constexpr int64_t kUnk = 1, kCls = 2, kSep = 3, kMask = 4, kA = 5, kB = 6, kHashB = 7, kHello = 9, kWorld = 10;
constexpr int64_t kComma = 12, kBang = 13, kI = 14, kHashA = 15, kHashDot = 17, kYi = 18, kX = 19, kY = 20;

std::string VocabJson() {
  std::string out = "{";
  size_t id = 0;
  for (const char* token : kVocab) {
    out += id > 0 ? ", \"" : "\"";
    out += std::string(token) + "\": " + std::to_string(id);
    ++id;
  }
  return out + "}";
}

std::string TokenizerJson(const std::string& normalizer = R"({"type": "BertNormalizer", "clean_text": true,
    "handle_chinese_chars": true, "strip_accents": null, "lowercase": true})",
                          const std::string& model_type = "WordPiece",
                          const std::string& post = R"({"type": "BertProcessing", "sep": ["[SEP]", 3],
    "cls": ["[CLS]", 2]})",
                          const std::string& added = R"([{"id": 4, "content": "[MASK]", "single_word": false,
    "lstrip": false, "rstrip": false, "normalized": false, "special": true}])",
                          const std::string& pre = R"({"type": "BertPreTokenizer"})", int max_chars = 100) {
  return R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": )" + added +
         R"(, "normalizer": )" + normalizer + R"(, "pre_tokenizer": )" + pre + R"(, "post_processor": )" + post +
         R"(, "decoder": null, "model": {"type": ")" + model_type +
         R"(", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": )" +
         std::to_string(max_chars) + R"(, "vocab": )" + VocabJson() + "}}";
}

std::unique_ptr<WordPieceTokenizer> Make(const std::string& json, std::string* error) {
  return WordPieceTokenizer::FromJson(json.data(), json.size(), "test tokenizer.json", error);
}

std::vector<int64_t> Ids(const WordPieceTokenizer& t, const std::string& text, int max_length = 0,
                         bool* truncated = nullptr) {
  std::vector<int64_t> ids;
  std::string error;
  bool cut = false;
  if (!t.Encode(text.data(), text.size(), max_length, &ids, &cut, &error)) {
    Check(false, "Encode failed on '" + text + "': " + error);
  }
  if (truncated != nullptr) *truncated = cut;
  return ids;
}

std::string Normalized(const WordPieceTokenizer& t, const std::string& text) {
  std::string out;
  std::string error;
  if (!t.Normalize(text.data(), text.size(), &out, &error)) Check(false, "Normalize failed: " + error);
  return out;
}

void ExpectIds(const WordPieceTokenizer& t, const std::string& text, const std::vector<int64_t>& want,
               int max_length = 0) {
  const std::vector<int64_t> got = Ids(t, text, max_length);
  Check(got == want, "'" + text + "' -> " + Join(got) + ", expected " + Join(want));
}

FASTPATH_TEST(TestEncode) {
  current = "encode";
  std::string error;
  auto t = Make(TokenizerJson(), &error);
  Check(t != nullptr, "the test tokenizer loads: " + error);
  if (!t) return;
  Check(t->special_token_count() == 2 && t->unk_id() == kUnk, "two special tokens, [UNK] = 1");
  Check(t->TokenId("[PAD]") == 0 && t->TokenId("##b") == kHashB && t->TokenId("nope") == -1 && t->TokenId("") == -1,
        "TokenId looks tokens up in the vocabulary");
  ExpectIds(*t, "Hello, World!", {kCls, kHello, kComma, kWorld, kBang, kSep});
  ExpectIds(*t, "ab", {kCls, kA, kHashB, kSep});
  ExpectIds(*t, "", {kCls, kSep});
  ExpectIds(*t, " \t\n ", {kCls, kSep});
  ExpectIds(*t, "abq hello", {kCls, kUnk, kHello, kSep});  // whole word [UNK]: not "a ##b [UNK]"
  ExpectIds(*t, "a\xC2\xA2" "b", {kCls, kUnk, kSep});       // a¢b: one [UNK] (the op gives a [UNK])
  ExpectIds(*t, "x[MASK]y", {kCls, kX, kMask, kY, kSep});   // added tokens are matched on the raw text
  ExpectIds(*t, "x[mask]y", {kCls, kX, kUnk, kUnk, kUnk, kY, kSep});  // "[", "mask", "]"
  ExpectIds(*t, "\xC3\x80" "B", {kCls, kA, kHashB, kSep});  // ÀB -> ab (NFD, drop Mn, lowercase)
  ExpectIds(*t, "\xE4\xB8\x80x", {kCls, kYi, kX, kSep});    // 一x: CJK ideographs stand alone
  ExpectIds(*t, "a\xE2\x80\x8B" "b", {kCls, kA, kHashB, kSep});  // zero-width space (Cf) dropped
  ExpectIds(*t, std::string("a\0b", 3), {kCls, kA, kHashB, kSep});
  ExpectIds(*t, "\xC4\xB0", {kCls, kI, kSep});  // İ: NFD I + U+0307, mark dropped, lowercase i
}

FASTPATH_TEST(TestMaxInputChars) {
  current = "max_input_chars_per_word";
  std::string error;
  auto t = Make(TokenizerJson(), &error);
  if (!t) return Check(false, error);
  std::vector<int64_t> hundred = {kCls, kA};
  for (int i = 1; i < 100; ++i) hundred.push_back(kHashA);
  hundred.push_back(kSep);
  ExpectIds(*t, std::string(100, 'a'), hundred);
  ExpectIds(*t, std::string(101, 'a'), {kCls, kUnk, kSep});
  // Counted in characters, not bytes: 60 x U+00E0 (120 bytes) is 60 characters.
  std::string accented;
  for (int i = 0; i < 60; ++i) accented += "\xC3\xA0";
  std::vector<int64_t> sixty = {kCls, kA};
  for (int i = 1; i < 60; ++i) sixty.push_back(kHashA);
  sixty.push_back(kSep);
  ExpectIds(*t, accented, sixty);
  // A huge word and a long text of them: one [UNK] each, no quadratic work.
  ExpectIds(*t, std::string(1 << 20, 'a'), {kCls, kUnk, kSep});
}

FASTPATH_TEST(TestTruncation) {
  current = "truncation";
  std::string error;
  auto t = Make(TokenizerJson(), &error);
  if (!t) return Check(false, error);
  bool cut = false;
  Check(Ids(*t, "a a a a", 4, &cut) == std::vector<int64_t>({kCls, kA, kA, kSep}) && cut, "cut to 4 ids, flagged");
  Check(Ids(*t, "a a a a", 6, &cut) == std::vector<int64_t>({kCls, kA, kA, kA, kA, kSep}) && !cut, "exactly 6 fits");
  Check(Ids(*t, "a a a a", 0, &cut).size() == 6 && !cut, "0 = no truncation");
  Check(Ids(*t, "a a", 2, &cut) == std::vector<int64_t>({kCls, kSep}) && cut, "max_length = specials: no text");
  Check(Ids(*t, "", 2, &cut) == std::vector<int64_t>({kCls, kSep}) && !cut, "empty text is never cut");
  // The whole word counts: "ab ab" is a ##b a ##b; cut after 3 tokens.
  Check(Ids(*t, "ab ab", 5, &cut) == std::vector<int64_t>({kCls, kA, kHashB, kA, kSep}) && cut, "cut inside a word");
  std::vector<int64_t> ids;
  for (int bad : {1, -1}) {
    error.clear();
    Check(!t->Encode("a", 1, bad, &ids, &cut, &error) && Contains(error, "max_length"),
          "max_length " + std::to_string(bad) + " refused: " + error);
  }
  // A long text (many chunks) cut early gives the first tokens.
  std::string long_text;
  for (int i = 0; i < 100000; ++i) long_text += "hello world ";
  const auto got = Ids(*t, long_text, 8, &cut);
  Check(got == std::vector<int64_t>({kCls, kHello, kWorld, kHello, kWorld, kHello, kWorld, kSep}) && cut,
        "long text cut to 8: " + Join(got));
  Check(Ids(*t, long_text, 0, &cut).size() == 200002 && !cut, "long text whole");
}

FASTPATH_TEST(TestNormalizer) {
  current = "normalizer";
  std::string error;
  auto t = Make(TokenizerJson(), &error);
  if (!t) return Check(false, error);
  Check(Normalized(*t, "A\tB\r\nC\xC2\x85" "D") == "a b  cd", "tab/CR/LF -> space, NEL (Cc) dropped: " +
                                                                     Normalized(*t, "A\tB\r\nC\xC2\x85" "D"));
  Check(Normalized(*t, "a\xEF\xBF\xBD" "b") == "ab", "U+FFFD dropped");
  Check(Normalized(*t, "\xE4\xB8\x80\xE4\xBA\x8C") == " \xE4\xB8\x80  \xE4\xBA\x8C ", "spaces around CJK");
  Check(Normalized(*t, "\xC3\x85ngstr\xC3\xB6m") == "angstrom", "Ångström -> angstrom");
  // strip_accents false, lowercase true: İ -> i + U+0307 (Rust's char::to_lowercase).
  auto keep = Make(TokenizerJson(R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
      "strip_accents": false, "lowercase": true})"),
                   &error);
  if (!keep) return Check(false, error);
  Check(Normalized(*keep, "\xC4\xB0") == "i\xCC\x87", "İ -> i̇");
  ExpectIds(*keep, "\xC4\xB0", {kCls, kI, kHashDot, kSep});
  Check(Normalized(*keep, "\xC3\x80") == "\xC3\xA0", "À -> à without stripping");
  // Cased, no accents stripped, no Chinese handling, no cleaning.
  auto raw = Make(TokenizerJson(R"({"type": "BertNormalizer", "clean_text": false, "handle_chinese_chars": false,
      "strip_accents": null, "lowercase": false})"),
                  &error);
  if (!raw) return Check(false, error);
  Check(Normalized(*raw, "A\x01\xC3\x80") == "A\x01\xC3\x80", "everything kept");
  // Canonical order: U+1D16D (Mc, class 226) before U+1D165 (Mc, 216) is reordered; both survive.
  Check(Normalized(*t, "a\xF0\x9D\x85\xAD\xF0\x9D\x85\xA5") == "a\xF0\x9D\x85\xA5\xF0\x9D\x85\xAD",
        "marks put in canonical order");
  Check(Normalized(*t, "a\xCC\x95\xCC\x80" "b") == "ab", "Mn marks dropped");
  std::vector<int64_t> ids;
  Check(t->Encode("ab", 2, 0, &ids, nullptr, nullptr) && ids.size() == 4, "null truncated and error pointers");
  Check(!t->Encode("\xFF", 1, 0, &ids, nullptr, nullptr), "an error without an error string");
  auto none = Make(TokenizerJson("null"), &error);
  Check(none != nullptr && Normalized(*none, "\xC3\x80X") == "\xC3\x80X", "no normalizer: text unchanged");
  std::vector<std::string> words;
  Check(t->PreTokenize("Hi, you!", 8, &words, &error) &&
            words == std::vector<std::string>({"hi", ",", "you", "!"}),
        "pre-tokenized words");
}

FASTPATH_TEST(TestInvalidUtf8) {
  current = "invalid UTF-8";
  std::string error;
  auto t = Make(TokenizerJson(), &error);
  if (!t) return Check(false, error);
  const std::vector<std::string> bad = {
      "\x80",          "a\xBF",         "\xC0\x80",         "\xC1\xBF",  "\xE0\x80\x80", "\xE0\x9F\xBF",
      "\xED\xA0\x80",  "\xED\xBF\xBF",  "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",
      "\xFF",          "\xFE",          "a\xC3",            "\xE2\x82",  "\xF0\x9F\x98", "\xE2\x28\xA1",
      "ok \xC3\x28 ok", std::string("\xC3\x00", 2)};
  for (const std::string& text : bad) {
    std::vector<int64_t> ids = {99};
    bool cut = true;
    error.clear();
    const bool ok = t->Encode(text.data(), text.size(), 16, &ids, &cut, &error);
    Check(!ok && Contains(error, "not valid UTF-8") && ids.empty() && !cut, "refused with a message: " + error);
    std::string normalized;
    Check(!t->Normalize(text.data(), text.size(), &normalized, &error), "Normalize refuses it too");
  }
  std::vector<int64_t> ids;
  Check(t->Encode(nullptr, 0, 0, &ids, nullptr, &error) && ids.size() == 2, "null with size 0 is the empty text");
  Check(!t->Encode(nullptr, 5, 0, &ids, nullptr, &error), "null with a size is refused");
  // The largest valid sequences of each length are accepted.
  for (const char* good : {"\x7F", "\xDF\xBF", "\xEF\xBF\xBF", "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF", "\xEE\x80\x80"}) {
    Check(t->Encode(good, std::strlen(good), 0, &ids, nullptr, &error), std::string("accepted: ") + error);
  }
}

void ExpectRefused(const std::string& json, const std::string& part) {
  std::string error;
  auto t = Make(json, &error);
  Check(t == nullptr && Contains(error, part), "refused naming '" + part + "': " + error);
}

FASTPATH_TEST(TestRefusals) {
  current = "refusals";
  ExpectRefused(TokenizerJson(R"({"type": "NFKC"})"), "normalizer \"NFKC\"");
  ExpectRefused(TokenizerJson(R"({"type": "Sequence", "normalizers": []})"), "normalizer \"Sequence\"");
  ExpectRefused(TokenizerJson(R"({"type": "BertNormalizer", "clean_text": true})"), "handle_chinese_chars");
  ExpectRefused(TokenizerJson(R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
      "strip_accents": 1, "lowercase": true})"),
                "strip_accents");
  ExpectRefused(TokenizerJson("null", "BPE"), "model.type \"BPE\"");
  ExpectRefused(TokenizerJson(R"(null)", "Unigram"), "model.type \"Unigram\"");
  ExpectRefused(TokenizerJson("null", "WordPiece", R"({"type": "RobertaProcessing"})"),
                "post_processor \"RobertaProcessing\"");
  ExpectRefused(TokenizerJson("null", "WordPiece", R"({"type": "TemplateProcessing", "single": [
      {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}})"),
                "exactly one Sequence");
  ExpectRefused(TokenizerJson("null", "WordPiece", R"({"type": "TemplateProcessing", "single": [
      {"SpecialToken": {"id": "[BOS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {}})"),
                "\"[BOS]\" is not in special_tokens");
  ExpectRefused(TokenizerJson("null", "WordPiece", "null", R"([{"id": 21, "content": "<new>", "single_word": false,
      "lstrip": false, "rstrip": false, "normalized": false, "special": true}])"),
                "\"<new>\" is not in model.vocab");
  ExpectRefused(TokenizerJson("null", "WordPiece", "null", R"([{"id": 4, "content": "[MASK]", "single_word": false,
      "lstrip": true, "rstrip": false, "normalized": false, "special": true}])"),
                "lstrip=true");
  ExpectRefused(TokenizerJson("null", "WordPiece", "null", R"([{"id": 5, "content": "a", "single_word": false,
      "lstrip": false, "rstrip": false, "normalized": true, "special": false}])"),
                "normalized=true");
  ExpectRefused(TokenizerJson("null", "WordPiece", "null", "[]", R"({"type": "Whitespace"})"),
                "pre_tokenizer \"Whitespace\"");
  ExpectRefused(TokenizerJson("null", "WordPiece", "null", "[]", "null"), "pre_tokenizer null");
  std::string json = TokenizerJson();
  ExpectRefused(json.substr(0, json.size() / 2), "not valid JSON");
  ExpectRefused("[1, 2]", "not a JSON object");
  ExpectRefused(R"({"version": "2.0"})", "version");
  ExpectRefused(std::string(200000, '[') + std::string(200000, ']'), "not a JSON object");  // no stack overflow
  std::string unk_missing = TokenizerJson();
  unk_missing.replace(unk_missing.find("\"unk_token\": \"[UNK]\""), 20, "\"unk_token\": \"<unk>\"");
  ExpectRefused(unk_missing, "unk_token \"<unk>\" is not in model.vocab");
  std::string bad_id = TokenizerJson();
  bad_id.replace(bad_id.find("\"y\": 20"), 7, "\"y\": -3");
  ExpectRefused(bad_id, "vocab id of \"y\"");
  std::string bad_utf8 = TokenizerJson();
  bad_utf8.replace(bad_utf8.find("\"y\": 20"), 7, "\"\xC3\": 20");
  ExpectRefused(bad_utf8, "not valid JSON");
  std::string error;
  Check(WordPieceTokenizer::Load("/nonexistent/tokenizer.json", &error) == nullptr &&
            Contains(error, "cannot open"),
        "missing file: " + error);
}

FASTPATH_TEST(TestTemplate) {
  current = "TemplateProcessing";
  std::string error;
  auto t = Make(TokenizerJson("null", "WordPiece", R"({"type": "TemplateProcessing", "single": [
      {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
      "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
      "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}})"),
                &error);
  if (!t) return Check(false, error);
  Check(t->special_token_count() == 3, "three special ids");
  ExpectIds(*t, "a", {kCls, kA, kSep, kSep});
  auto bare = Make(TokenizerJson("null", "WordPiece", "null"), &error);
  if (!bare) return Check(false, error);
  ExpectIds(*bare, "a b", {kA, kB});
  ExpectIds(*bare, "a b", {kA}, 1);
}

FASTPATH_TEST(TestUnicodeHelpers) {
  current = "unicode helpers";
  using namespace fastpath::wordpiece;  // NOLINT
  Check(IsWhitespace(0x3000) && IsWhitespace(0x85) && !IsWhitespace(0x1C) && !IsWhitespace(0x200B), "whitespace");
  Check(IsControl(0x200B) && IsControl(0xE000) && !IsControl('\t') && IsControl(0x0B), "control");
  Check(!IsControl(0x13430), "U+13430 (Cf since Unicode 12) is not a control for tokenizers");
  Check(IsPunctuation('$') && IsPunctuation(0x00BF) && !IsPunctuation(0x2E43), "punctuation (U+2E43 is newer)");
  Check(IsChineseChar(0x4E00) && !IsChineseChar(0x3042) && IsChineseChar(0x2F800), "chinese");
  Check(IsNonspacingMark(0x0301) && !IsNonspacingMark(0x1ABF), "Mn (U+1ABF is newer)");
  std::vector<uint32_t> out;
  AppendLowercase(0x130, &out);
  Check(out == std::vector<uint32_t>({0x69, 0x307}), "İ lower-cases to two code points");
  out.clear();
  AppendLowercase(0xA7CB, &out);  // Unicode 16: utf8proc 2.8 does not know it, Rust does
  Check(out == std::vector<uint32_t>({0x264}), "U+A7CB -> U+0264");
  out.clear();
  AppendDecomposition(0x11938, &out);
  Check(out == std::vector<uint32_t>({0x11938}), "U+11938 left whole (tokenizers' NFD is Unicode 9)");
  out.clear();
  AppendDecomposition(0xAC00, &out);
  Check(out == std::vector<uint32_t>({0x1100, 0x1161}), "Hangul syllable decomposed");
  std::string error;
  Check(CheckUnicodeData(&error), "utf8proc version matches the tables: " + error);
}

int RunUnit() {
  fastpath_test::RunCases();
  return fastpath_test::Summary();
}

// ---------------------------------------------------------------------------------------------
// Batch modes.

constexpr uint32_t kMaxFrameBytes = 1u << 30;

bool ReadFrame(std::FILE* in, std::string* text, bool* bad) {
  unsigned char header[4];
  const size_t got = std::fread(header, 1, 4, in);
  if (got == 0) return false;
  if (got != 4) {
    *bad = true;
    return false;
  }
  const uint32_t size = uint32_t(header[0]) | (uint32_t(header[1]) << 8) | (uint32_t(header[2]) << 16) |
                        (uint32_t(header[3]) << 24);
  if (size > kMaxFrameBytes) {
    *bad = true;
    return false;
  }
  text->resize(size);
  if (size > 0 && std::fread(&(*text)[0], 1, size, in) != size) {
    *bad = true;
    return false;
  }
  return true;
}

void WriteU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void WriteBytes(std::string* out, const std::string& bytes) {
  WriteU32(out, static_cast<uint32_t>(bytes.size()));
  out->append(bytes);
}

void WriteError(std::string* out, const std::string& error) {
  out->push_back(1);
  WriteBytes(out, error);
}

std::unique_ptr<WordPieceTokenizer> LoadOrDie(const char* path) {
  std::string error;
  auto t = WordPieceTokenizer::Load(path, &error);
  if (!t) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(2);
  }
  return t;
}

int ParseMaxLength(const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1 << 30) {
    std::fprintf(stderr, "max_length must be an integer >= 0, got '%s'\n", text);
    std::exit(2);
  }
  return static_cast<int>(value);
}

int RunLoad(const char* path) {
  auto t = LoadOrDie(path);
  std::printf("ok vocab=%zu special_tokens=%zu unk_id=%lld\n", t->vocab_size(), t->special_token_count(),
              static_cast<long long>(t->unk_id()));
  return 0;
}

int RunEncode(const char* path, int max_length) {
  auto t = LoadOrDie(path);
  std::string text;
  std::string out;
  std::vector<int64_t> ids;
  std::string error;
  bool bad = false;
  while (ReadFrame(stdin, &text, &bad)) {
    out.clear();
    bool truncated = false;
    if (t->Encode(text.data(), text.size(), max_length, &ids, &truncated, &error)) {
      out.push_back(0);
      out.push_back(truncated ? 1 : 0);
      WriteU32(&out, static_cast<uint32_t>(ids.size()));
      for (int64_t id : ids) {
        for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((static_cast<uint64_t>(id) >> (8 * i)) & 0xFF));
      }
    } else {
      WriteError(&out, error);
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  if (bad) std::fprintf(stderr, "input is not a sequence of frames (u32 length + bytes)\n");
  return bad ? 2 : 0;
}

int RunNormalize(const char* path, bool words_only) {
  auto t = LoadOrDie(path);
  std::string text;
  std::string out;
  std::string normalized;
  std::vector<std::string> words;
  std::string error;
  bool bad = false;
  while (ReadFrame(stdin, &text, &bad)) {
    out.clear();
    if (!words_only && t->Normalize(text.data(), text.size(), &normalized, &error)) {
      out.push_back(0);
      WriteBytes(&out, normalized);
    } else if (words_only && t->PreTokenize(text.data(), text.size(), &words, &error)) {
      out.push_back(0);
      WriteU32(&out, static_cast<uint32_t>(words.size()));
      for (const std::string& word : words) WriteBytes(&out, word);
    } else {
      WriteError(&out, error);
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return bad ? 2 : 0;
}

int RunBench(const char* path, int max_length, double min_seconds) {
  auto t = LoadOrDie(path);
  std::vector<std::string> texts;
  std::string text;
  bool bad = false;
  while (ReadFrame(stdin, &text, &bad)) texts.push_back(text);
  if (bad || texts.empty()) {
    std::fprintf(stderr, "bench needs at least one text frame\n");
    return 2;
  }
  std::vector<int64_t> ids;
  std::string error;
  size_t tokens = 0;
  size_t encoded = 0;
  size_t passes = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  do {
    for (const std::string& one : texts) {
      bool truncated = false;
      if (t->Encode(one.data(), one.size(), max_length, &ids, &truncated, &error)) tokens += ids.size();
      ++encoded;
    }
    ++passes;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (seconds < min_seconds);
  std::printf("{\"texts\": %zu, \"passes\": %zu, \"seconds\": %.6f, \"texts_per_s\": %.1f, \"tokens\": %zu}\n",
              texts.size(), passes, seconds, static_cast<double>(encoded) / seconds, tokens);
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: test_wordpiece unit | load TOKENIZER_JSON | encode TOKENIZER_JSON MAX_LENGTH |\n"
               "       normalize TOKENIZER_JSON | pretokenize TOKENIZER_JSON |\n"
               "       bench TOKENIZER_JSON MAX_LENGTH MIN_SECONDS\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "unit";
  if (mode == "unit" && argc <= 2) return RunUnit();
  if (mode == "load" && argc == 3) return RunLoad(argv[2]);
  if (mode == "encode" && argc == 4) return RunEncode(argv[2], ParseMaxLength(argv[3]));
  if (mode == "normalize" && argc == 3) return RunNormalize(argv[2], false);
  if (mode == "pretokenize" && argc == 3) return RunNormalize(argv[2], true);
  if (mode == "bench" && argc == 5) return RunBench(argv[2], ParseMaxLength(argv[3]), std::atof(argv[4]));
  return Usage();
}
