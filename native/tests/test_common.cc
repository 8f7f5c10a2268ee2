// Tests of native/common, the layer both libraries share, as C++: the JSON reader (json.h: RapidJSON
// building a tree whose numbers keep their text), the Triton error and log helpers
// (triton_errors.h) with each library's prefix kept (fastpath_ort/common.h: none;
// fastpath_cache/common.h: "fastpath cache: "), and the fault hook (fault.h), against the fake
// server functions of fake_server.h.
//
// Built and run by tests/unit/test_native_cpp.py (`build.build_common_test_driver`), plainly and
// under AddressSanitizer + UBSan. Usage: test_common [--list | --case NAME]; prints one line per
// failed check and "N passed, N failed" last; exit 1 on any failure (harness.h).
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "../fastpath_cache/common.h"
#include "../fastpath_ort/common.h"
#include "fake_server.h"
#include "fault.h"
#include "harness.h"
#include "json.h"
#include "triton_errors.h"

#ifndef FASTPATH_FAULT_INJECTION
#error "the driver tests the fault hook: build it with -DFASTPATH_FAULT_INJECTION"
#endif

using fastpath::Json;
using fastpath::ParseJson;
using fastpath_test::Check;
using fastpath_test::CheckError;
using fastpath_test::Contains;
using fastpath_test::current;

namespace {

// Parses `text`, expecting a failure whose message contains `part` and an offset.
void ExpectRefused(const std::string& text, const std::string& part, const std::string& why) {
  Json out;
  out.kind = Json::Kind::kArray;
  std::string error;
  const bool parsed = ParseJson(text, &out, &error);
  Check(!parsed, why + ": refused");
  if (parsed) return;
  CheckError(error, part);
  Check(Contains(error, " at offset "), why + ": the error says where: " + error);
  Check(out.kind == Json::Kind::kNull && out.members.empty() && out.items.empty(), why + ": nothing half-built");
}

// --- json.h ---

FASTPATH_TEST(TestJsonTree) {
  current = "ParseJson: the tree";
  Json out;
  std::string error;
  Check(ParseJson(R"( {"a":[1,"x",true,null,{"b":"\u00e9\ud83d\ude00"}], "c": false, "d": -2.5e3} )", &out, &error),
        "parses, whitespace around the value: " + error);
  Check(out.kind == Json::Kind::kObject && out.members.size() == 3 && out.members[0].first == "a" &&
            out.members[2].first == "d",
        "members in document order");
  const Json* a = out.Find("a");
  Check(a != nullptr && a->kind == Json::Kind::kArray && a->items.size() == 5, "an array of five");
  if (a == nullptr || a->items.size() != 5) return;
  Check(a->items[1].kind == Json::Kind::kString && a->items[1].text == "x", "a string");
  Check(a->items[2].kind == Json::Kind::kBool && a->items[2].boolean && a->items[2].AsString() == "true", "true");
  Check(a->items[3].kind == Json::Kind::kNull && a->items[3].AsString().empty(), "null has no text");
  Check(a->items[4].Find("b")->text == "\xc3\xa9\xf0\x9f\x98\x80", "\\u escapes and surrogate pairs as UTF-8");
  Check(out.Find("c")->kind == Json::Kind::kBool && !out.Find("c")->boolean && out.Find("c")->text == "false",
        "false");
  Check(out.Find("d")->kind == Json::Kind::kNumber && out.Find("d")->AsString() == "-2.5e3",
        "a number keeps its literal text");
  Check(out.Find("nope") == nullptr && a->Find("a") == nullptr, "Find: absent, or not an object");
  Check(ParseJson(R"("just a string")", &out, &error) && out.kind == Json::Kind::kString, "any value at the root");
  Check(ParseJson(R"({"k":1,"k":2})", &out, &error) && out.members.size() == 2 && out.Find("k")->text == "1",
        "a repeated name stays repeated; Find takes the first (callers that care refuse it)");
  const char buffer[] = "{\"a\":\"x\"}garbage";
  Check(ParseJson(buffer, 9, &out, &error) && out.Find("a")->text == "x", "only `size` bytes are read");
}

FASTPATH_TEST(TestJsonIntegers) {
  current = "ParseJson: int64";
  Json out;
  std::string error;
  Check(ParseJson(R"([9223372036854775807, "-9223372036854775808", 9223372036854775808, 1.5, "12x", "", 7])", &out,
                  &error),
        "parses: " + error);
  int64_t v = 0;
  Check(out.items[0].AsInt64(&v) && v == INT64_MAX, "INT64_MAX as a number, exact (never through a double)");
  Check(out.items[1].AsInt64(&v) && v == INT64_MIN, "INT64_MIN as a string (protobuf's JSON writes int64 so)");
  Check(!out.items[2].AsInt64(&v), "2^63 overflows");
  Check(!out.items[3].AsInt64(&v), "1.5 is not an integer");
  Check(!out.items[4].AsInt64(&v) && !out.items[5].AsInt64(&v), "'12x' and '' are not integers");
  Check(out.items[6].AsInt64(&v) && v == 7, "7");
  Check(!out.AsInt64(&v), "an array is not an integer");
}

FASTPATH_TEST(TestJsonRefusals) {
  current = "ParseJson: refusals";
  ExpectRefused(R"({"a":1,})", "", "a trailing comma");
  ExpectRefused(R"({"a":"\ud83d"})", "surrogate", "a lone high surrogate");
  ExpectRefused(R"({"a":"\udc00"})", "surrogate", "a lone low surrogate");
  ExpectRefused(R"({"\udc00":1})", "surrogate", "a lone surrogate in a name");
  ExpectRefused("{\"a\":1} x", "root", "text after the value");
  ExpectRefused("\"abc", "", "an unterminated string");
  ExpectRefused("", "empty", "no value");
  ExpectRefused("{\"a\":\"\xff\"}", "encoding", "invalid UTF-8");
  ExpectRefused("{\"a\":\"\xed\xa0\x80\"}", "", "a raw surrogate (not UTF-8)");
  ExpectRefused("{\"a\":\"x\ty\"}", "", "a raw control character in a string");
  ExpectRefused("[NaN]", "", "NaN");
  ExpectRefused("[01]", "", "a leading zero");
  ExpectRefused("[1] // note", "", "a comment");
  ExpectRefused("{a:1}", "", "an unquoted name");
  ExpectRefused("[\"\\x\"]", "", "an unknown escape");
}

FASTPATH_TEST(TestJsonDepth) {
  current = "ParseJson: nesting";
  Json out;
  std::string error;
  const int max = fastpath::kMaxJsonDepth;
  Check(ParseJson(std::string(max, '[') + std::string(max, ']'), &out, &error), "64 levels parse: " + error);
  ExpectRefused(std::string(max + 1, '[') + std::string(max + 1, ']'), "too deep", "65 levels");
  ExpectRefused(std::string(100, '[') + std::string(100, ']'), "too deep", "nesting past 64");
  // The parse never recurses: a million open brackets end in an error, not a stack overflow.
  ExpectRefused(std::string(1'000'000, '['), "too deep", "a million levels");
  ExpectRefused(std::string(1'000'000, '{'), "", "a million open objects");
}

// --- triton_errors.h, and each library's prefix ---

FASTPATH_TEST(TestErrors) {
  current = "errors";
  using fastpath::common::ErrorMessage;
  const int64_t live = fake_server::LiveErrors();
  TRITONSERVER_Error* err = fastpath::common::NewError(TRITONSERVER_ERROR_INVALID_ARG, "p: ", "message");
  Check(TRITONSERVER_ErrorCode(err) == TRITONSERVER_ERROR_INVALID_ARG && ErrorMessage(err) == "p: message",
        "NewError: the code, the prefix and the message");
  {
    fastpath::common::OwnedError owned(err);
    Check(fake_server::LiveErrors() == live + 1, "one error alive");
  }
  Check(fake_server::LiveErrors() == live, "OwnedError deletes it");
  Check(ErrorMessage(nullptr).empty(), "success has no message");
  fastpath::common::OwnedError empty(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, ""));
  Check(ErrorMessage(empty.get()) == "unknown Triton error", "an empty message is named");

  const std::string long_detail(5000, 'x');
  fastpath::common::OwnedError cut(
      fastpath::common::ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, "pre: ", "what", long_detail.c_str()));
  const std::string cut_message = ErrorMessage(cut.get());
  Check(cut_message.size() == fastpath::common::kNoThrowMessageBytes - 1 && cut_message.rfind("pre: what: xxx", 0) == 0,
        "ErrorNoThrow cuts a long message at 1 KiB, prefix and what first");
  fastpath::common::OwnedError bare(fastpath::common::ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, "", "what", nullptr));
  Check(ErrorMessage(bare.get()) == "what", "no detail: what alone");
}

FASTPATH_TEST(TestLogs) {
  current = "logs";
  fake_server::ClearLogs();
  const int64_t live = fake_server::LiveErrors();
  fastpath::common::LogIfError(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "refused"), "p: ", "releasing",
                               __FILE__, __LINE__);
  fastpath::common::LogIfError(nullptr, "p: ", "nothing", __FILE__, __LINE__);
  fastpath::common::LogNoThrow(TRITONSERVER_LOG_ERROR, __FILE__, __LINE__, "p: ", "alone", nullptr);
  fastpath::common::Log(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, "p: ", "informed");
  const std::vector<std::string> logs = fake_server::Logs();
  Check(logs == std::vector<std::string>{"WARN p: releasing: refused", "ERROR p: alone", "INFO p: informed"},
        "LogIfError logs a WARN and deletes; nothing for success; LogNoThrow and Log as given");
  Check(fake_server::LiveErrors() == live, "LogIfError deleted the error");
}

FASTPATH_TEST(TestEachLibraryKeepsItsPrefix) {
  current = "prefixes";
  fastpath::common::OwnedError backend(fastpath::NewError(TRITONSERVER_ERROR_INVALID_ARG, "model 'm': bad"));
  Check(fastpath::ErrorMessage(backend.get()) == "model 'm': bad", "the backend's messages carry no prefix");
  fastpath::common::OwnedError caught(fastpath::ExceptionError("fastpath_ort: loading", nullptr));
  Check(fastpath::ErrorMessage(caught.get()) == "fastpath_ort: loading: unknown exception" &&
            TRITONSERVER_ErrorCode(caught.get()) == TRITONSERVER_ERROR_INTERNAL,
        "an exception of unknown type: INTERNAL, named");
  fastpath::common::OwnedError wrapped(
      fastpath::WithPrefix("instance 0: ", TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "busy")));
  Check(fastpath::ErrorMessage(wrapped.get()) == "instance 0: busy" &&
            TRITONSERVER_ErrorCode(wrapped.get()) == TRITONSERVER_ERROR_UNAVAILABLE,
        "WithPrefix keeps the code");
  fastpath::common::OwnedError cache(fastpath_cache::NewError(TRITONSERVER_ERROR_INVALID_ARG, "bad size"));
  Check(fastpath::ErrorMessage(cache.get()) == "fastpath cache: bad size", "the cache's messages say so");
  fastpath::common::OwnedError cache_caught(
      fastpath_cache::ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, "lookup", nullptr));
  Check(fastpath::ErrorMessage(cache_caught.get()) == "fastpath cache: lookup: unknown error",
        "the cache's no-throw error");
  fake_server::ClearLogs();
  FASTPATH_LOG(INFO, "loaded");
  FASTPATH_CACHE_LOG(WARN, "Redis down");
  FASTPATH_CACHE_LOG_IF_ERROR(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "gone"), "deleting a metric");
  Check(fake_server::Logs() == std::vector<std::string>{"INFO loaded", "WARN fastpath cache: Redis down",
                                                        "WARN fastpath cache: deleting a metric: gone"},
        "each library's log lines");
}

// --- fault.h ---

std::vector<std::string> points_seen;
void RecordPoint(const char* point) {
  points_seen.emplace_back(point);
  if (std::strcmp(point, "throws") == 0) throw std::bad_alloc();
}

FASTPATH_TEST(TestFaultHook) {
  current = "fault hook";
  FASTPATH_FAULT_POINT("before");  // no hook: nothing
  fastpath::SetFaultHook(RecordPoint);
  FASTPATH_FAULT_POINT("a");
  bool threw = false;
  try {
    FASTPATH_FAULT_POINT("throws");
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  fastpath::SetFaultHook(nullptr);
  FASTPATH_FAULT_POINT("after");
  Check(points_seen == std::vector<std::string>{"a", "throws"} && threw,
        "the hook sees each named point while set, and may throw");
}

}  // namespace
