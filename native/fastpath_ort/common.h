// Small helpers every part of the backend uses: Triton errors and logging (native/common's, with the
// backend's messages unprefixed: they name the model or the backend themselves), the return-if-error
// idiom, the catch-all of a C entry point, fault points for the test drivers, clocks and shape text.
// Errors travel as TRITONSERVER_Error* (code and message together) from where they happen to the
// response, as in Triton's own backends.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "fault.h"  // FASTPATH_FAULT_POINT, SetFaultHook (native/common)
#include "triton_api.h"
#include "triton_errors.h"  // FASTPATH_RETURN_IF_ERROR (native/common)

namespace fastpath {

constexpr char kLogPrefix[] = "";

using common::ErrorDeleter;
using common::ErrorMessage;
using common::NowNs;
using common::OwnedError;

inline TRITONSERVER_Error* NewError(TRITONSERVER_Error_Code code, const std::string& message) {
  return common::NewError(code, kLogPrefix, message);
}

// The same error with `prefix` before its message, keeping its code; `err` is consumed.
inline TRITONSERVER_Error* WithPrefix(const std::string& prefix, TRITONSERVER_Error* err) {
  if (err == nullptr) return nullptr;
  TRITONSERVER_Error* wrapped = NewError(TRITONSERVER_ErrorCode(err), prefix + ErrorMessage(err));
  TRITONSERVER_ErrorDelete(err);
  return wrapped;
}

inline void Log(TRITONSERVER_LogLevel level, const char* file, int line, const std::string& message) {
  common::Log(level, file, line, kLogPrefix, message);
}
#define FASTPATH_LOG(level, message) ::fastpath::Log(TRITONSERVER_LOG_##level, __FILE__, __LINE__, (message))

// Logs `what` and, when given, `detail` after it, for paths that must not throw (answering,
// releasing, unloading, the C entry points' catch blocks): built without allocating.
inline void LogNoThrow(TRITONSERVER_LogLevel level, const char* file, int line, const char* what,
                       const char* detail = nullptr) noexcept {
  common::LogNoThrow(level, file, line, kLogPrefix, what, detail);
}
#define FASTPATH_LOG_NOTHROW(level, what, detail) \
  ::fastpath::LogNoThrow(TRITONSERVER_LOG_##level, __FILE__, __LINE__, (what), (detail))

// Logs a failed Triton call that has no one to report to (statistics, release); consumes `err`.
// Never throws.
inline void LogIfError(TRITONSERVER_Error* err, const char* what, const char* file, int line) noexcept {
  common::LogIfError(err, kLogPrefix, what, file, line);
}
#define FASTPATH_LOG_IF_ERROR(expr, what) ::fastpath::LogIfError((expr), (what), __FILE__, __LINE__)

// The error a C entry point returns for an exception it caught: INTERNAL, naming `where` and the
// exception's text (`what`, may be null), built without allocating. Never throws.
inline TRITONSERVER_Error* ExceptionError(const char* where, const char* what) noexcept {
  return common::ErrorNoThrow(TRITONSERVER_ERROR_INTERNAL, kLogPrefix, where,
                              what != nullptr ? what : "unknown exception");
}

// The catch blocks of a C entry point that returns TRITONSERVER_Error*: no exception crosses into
// Triton (it would terminate the server).
#define FASTPATH_CATCH_ALL_RETURN_ERROR(where)          \
  catch (const std::exception& e) {                     \
    return ::fastpath::ExceptionError((where), e.what()); \
  }                                                     \
  catch (...) {                                         \
    return ::fastpath::ExceptionError((where), nullptr);  \
  }

inline std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace fastpath
