// Small helpers every part of the backend uses: Triton errors and logging, the
// return-if-error idiom, clocks and shape text. Errors travel as TRITONSERVER_Error* (code and
// message together) from where they happen to the response, as in Triton's own backends.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
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

// Logs `what` and, when given, `detail` after it, for paths that must not throw (answering,
// releasing, unloading, the C entry points' catch blocks): out of memory, `what` alone is logged.
inline void LogNoThrow(TRITONSERVER_LogLevel level, const char* file, int line, const char* what,
                       const char* detail = nullptr) noexcept {
  try {
    Log(level, file, line, detail != nullptr ? std::string(what) + ": " + detail : std::string(what));
  } catch (...) {
    TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, file, line, what);
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);
  }
}
#define FASTPATH_LOG_NOTHROW(level, what, detail) \
  ::fastpath::LogNoThrow(TRITONSERVER_LOG_##level, __FILE__, __LINE__, (what), (detail))

// Logs a failed Triton call that has no one to report to (statistics, release); consumes `err`.
// Never throws.
inline void LogIfError(TRITONSERVER_Error* err, const char* what, const char* file, int line) noexcept {
  if (err == nullptr) return;
  const char* message = TRITONSERVER_ErrorMessage(err);
  LogNoThrow(TRITONSERVER_LOG_WARN, file, line, what,
             message != nullptr && *message ? message : "unknown Triton error");
  TRITONSERVER_ErrorDelete(err);
}
#define FASTPATH_LOG_IF_ERROR(expr, what) ::fastpath::LogIfError((expr), (what), __FILE__, __LINE__)

// The error a C entry point returns for an exception it caught: INTERNAL, naming `where` and the
// exception's text (`what`, may be null), or `where` alone when even that cannot be built (out of
// memory). Never throws.
inline TRITONSERVER_Error* ExceptionError(const char* where, const char* what) noexcept {
  try {
    return NewError(TRITONSERVER_ERROR_INTERNAL,
                    std::string(where) + ": " + (what != nullptr ? what : "unknown exception"));
  } catch (...) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, where);
  }
}

// The catch blocks of a C entry point that returns TRITONSERVER_Error*: no exception crosses into
// Triton (it would terminate the server).
#define FASTPATH_CATCH_ALL_RETURN_ERROR(where)                  \
  catch (const std::exception& e) {                               \
    return ::fastpath::ExceptionError((where), e.what());         \
  }                                                               \
  catch (...) {                                                   \
    return ::fastpath::ExceptionError((where), nullptr);          \
  }

// Fault injection, for the test drivers only (-DFASTPATH_FAULT_INJECTION; never in the shipped
// build, where FASTPATH_FAULT_POINT is nothing). A driver sets the hook; it is called at each named
// point and may throw (e.g. std::bad_alloc) as an allocation there would.
#ifdef FASTPATH_FAULT_INJECTION
using FaultHook = void (*)(const char* point);
void SetFaultHook(FaultHook hook);
void FaultPoint(const char* point);
#define FASTPATH_FAULT_POINT(point) ::fastpath::FaultPoint(point)
#else
#define FASTPATH_FAULT_POINT(point) \
  do {                              \
  } while (false)
#endif

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
