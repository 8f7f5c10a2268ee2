// Helpers of the cache's Triton-facing parts: TRITONSERVER_Error* with a return-if-error macro,
// logging through the server's log, and both without allocating for catch handlers.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "triton_cache_api.h"

namespace fastpath_cache {

#define FASTPATH_CACHE_RETURN_IF_ERROR(expr) \
  do {                                       \
    TRITONSERVER_Error* err__ = (expr);      \
    if (err__ != nullptr) return err__;      \
  } while (false)

inline TRITONSERVER_Error* NewError(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, ("fastpath cache: " + message).c_str());
}

inline void Log(TRITONSERVER_LogLevel level, const char* file, int line, const std::string& message) {
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, file, line, ("fastpath cache: " + message).c_str());
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}
#define FASTPATH_CACHE_LOG(level, message) \
  ::fastpath_cache::Log(TRITONSERVER_LOG_##level, __FILE__, __LINE__, (message))
#define FASTPATH_CACHE_VERBOSE_ENABLED() TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE)

// Logs and deletes an error no caller can be told about.
inline void LogIfError(TRITONSERVER_Error* err, const std::string& what, const char* file, int line) {
  if (err == nullptr) return;
  const char* message = TRITONSERVER_ErrorMessage(err);
  Log(TRITONSERVER_LOG_WARN, file, line, what + ": " + (message ? message : "unknown error"));
  TRITONSERVER_ErrorDelete(err);
}
#define FASTPATH_CACHE_LOG_IF_ERROR(expr, what) ::fastpath_cache::LogIfError((expr), (what), __FILE__, __LINE__)

// For catch handlers, where memory may have run out: a message of at most 256 bytes built on the
// stack (the server still allocates its own copy; that is out of our hands).
inline void FormatNoThrow(char (&out)[256], const char* what, const char* detail) noexcept {
  std::snprintf(out, sizeof(out), "fastpath cache: %s: %s", what, detail != nullptr ? detail : "unknown error");
}
inline TRITONSERVER_Error* ErrorNoThrow(TRITONSERVER_Error_Code code, const char* what, const char* detail) noexcept {
  char message[256];
  FormatNoThrow(message, what, detail);
  return TRITONSERVER_ErrorNew(code, message);
}
inline void LogNoThrow(TRITONSERVER_LogLevel level, const char* file, int line, const char* what,
                       const char* detail) noexcept {
  char message[256];
  FormatNoThrow(message, what, detail);
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, file, line, message);
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}

inline uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace fastpath_cache
