// Triton errors and logging for both native libraries (the backend, native/fastpath_ort, and the
// response cache, native/fastpath_cache): TRITONSERVER_Error* with a return-if-error macro, the
// server's log, and both without allocating for catch handlers and other paths that must not throw.
// Each library wraps these with its own log prefix in its common.h ("" for the backend, whose
// messages name the model; "fastpath cache: " for the cache). The Triton API comes from the vendored
// r24.10 headers (native/third_party/triton/core); nothing is linked: the server resolves it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "triton/core/tritonserver.h"

// An entry point the server looks up by name (the libraries are built with -fvisibility=hidden).
#define FASTPATH_EXPORT __attribute__((visibility("default")))

#define FASTPATH_RETURN_IF_ERROR(expr)  \
  do {                                  \
    TRITONSERVER_Error* err__ = (expr); \
    if (err__ != nullptr) return err__; \
  } while (false)

namespace fastpath {
namespace common {

// "" for success; else the error's message. The error stays the caller's.
inline std::string ErrorMessage(TRITONSERVER_Error* err) {
  if (err == nullptr) return "";
  const char* message = TRITONSERVER_ErrorMessage(err);
  return message != nullptr && *message ? message : "unknown Triton error";
}

inline TRITONSERVER_Error* NewError(TRITONSERVER_Error_Code code, const char* prefix, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, (prefix + message).c_str());
}

// An owned error: deleted when it goes out of scope.
struct ErrorDeleter {
  void operator()(TRITONSERVER_Error* err) const {
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);
  }
};
using OwnedError = std::unique_ptr<TRITONSERVER_Error, ErrorDeleter>;

inline void Log(TRITONSERVER_LogLevel level, const char* file, int line, const char* prefix,
                const std::string& message) {
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, file, line, (prefix + message).c_str());
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}

// The longest message built without allocating (longer ones are cut).
constexpr size_t kNoThrowMessageBytes = 1024;

// "<prefix><what>: <detail>" ("<prefix><what>" without a detail) on the stack, for paths where
// memory may have run out (the server still allocates its own copy; that is out of our hands).
inline void FormatNoThrow(char (&out)[kNoThrowMessageBytes], const char* prefix, const char* what,
                          const char* detail) noexcept {
  if (detail != nullptr) {
    std::snprintf(out, sizeof(out), "%s%s: %s", prefix, what, detail);
  } else {
    std::snprintf(out, sizeof(out), "%s%s", prefix, what);
  }
}

inline TRITONSERVER_Error* ErrorNoThrow(TRITONSERVER_Error_Code code, const char* prefix, const char* what,
                                        const char* detail) noexcept {
  char message[kNoThrowMessageBytes];
  FormatNoThrow(message, prefix, what, detail);
  return TRITONSERVER_ErrorNew(code, message);
}

inline void LogNoThrow(TRITONSERVER_LogLevel level, const char* file, int line, const char* prefix, const char* what,
                       const char* detail) noexcept {
  char message[kNoThrowMessageBytes];
  FormatNoThrow(message, prefix, what, detail);
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, file, line, message);
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}

// Logs (WARN, "<what>: <the error's message>") and deletes an error no caller can be told about
// (statistics, releases, deleting buffers or metrics). Never throws.
inline void LogIfError(TRITONSERVER_Error* err, const char* prefix, const char* what, const char* file,
                       int line) noexcept {
  if (err == nullptr) return;
  const char* message = TRITONSERVER_ErrorMessage(err);
  LogNoThrow(TRITONSERVER_LOG_WARN, file, line, prefix, what,
             message != nullptr && *message ? message : "unknown Triton error");
  TRITONSERVER_ErrorDelete(err);
}

inline uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace common
}  // namespace fastpath
