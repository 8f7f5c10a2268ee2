// Small helpers every part of the backend uses: Triton errors and logging, the
// return-if-error idiom, clocks and shape text. Errors travel as TRITONSERVER_Error* (code and
// message together) from where they happen to the response, as in Triton's own backends.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "triton_api.h"

namespace fastpath {

#define FASTPATH_RETURN_IF_ERROR(expr)  \
  do {                                  \
    TRITONSERVER_Error* err__ = (expr); \
    if (err__ != nullptr) return err__; \
  } while (false)

inline TRITONSERVER_Error* NewError(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, message.c_str());
}

// "" for success; else the error's message. The error stays the caller's.
inline std::string ErrorMessage(TRITONSERVER_Error* err) {
  if (err == nullptr) return "";
  const char* message = TRITONSERVER_ErrorMessage(err);
  return message != nullptr && *message ? message : "unknown Triton error";
}

// The same error with `prefix` before its message, keeping its code; `err` is consumed.
inline TRITONSERVER_Error* WithPrefix(const std::string& prefix, TRITONSERVER_Error* err) {
  if (err == nullptr) return nullptr;
  TRITONSERVER_Error* wrapped = NewError(TRITONSERVER_ErrorCode(err), prefix + ErrorMessage(err));
  TRITONSERVER_ErrorDelete(err);
  return wrapped;
}

// An owned error: deleted when it goes out of scope.
struct ErrorDeleter {
  void operator()(TRITONSERVER_Error* err) const {
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);
  }
};
using OwnedError = std::unique_ptr<TRITONSERVER_Error, ErrorDeleter>;

inline void Log(TRITONSERVER_LogLevel level, const char* file, int line, const std::string& message) {
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, file, line, message.c_str());
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}
#define FASTPATH_LOG(level, message) ::fastpath::Log(TRITONSERVER_LOG_##level, __FILE__, __LINE__, (message))

// Logs a failed Triton call that has no one to report to (statistics, release); consumes `err`.
inline void LogIfError(TRITONSERVER_Error* err, const std::string& what, const char* file, int line) {
  if (err == nullptr) return;
  Log(TRITONSERVER_LOG_WARN, file, line, what + ": " + ErrorMessage(err));
  TRITONSERVER_ErrorDelete(err);
}
#define FASTPATH_LOG_IF_ERROR(expr, what) ::fastpath::LogIfError((expr), (what), __FILE__, __LINE__)

inline uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace fastpath
