// Helpers of the cache's Triton-facing parts: native/common's errors and logging with the cache's
// prefix ("fastpath cache: ") on every message, the no-allocation variants for catch handlers, and the
// fault points of the test drivers (FASTPATH_FAULT_POINT, native/common/fault.h).
#pragma once

#include <cstdint>
#include <string>

#include "fault.h"
#include "triton_cache_api.h"
#include "triton_errors.h"  // FASTPATH_RETURN_IF_ERROR

namespace fastpath_cache {

constexpr char kLogPrefix[] = "fastpath cache: ";

using fastpath::common::NowNs;

inline TRITONSERVER_Error* NewError(TRITONSERVER_Error_Code code, const std::string& message) {
  return fastpath::common::NewError(code, kLogPrefix, message);
}

inline void Log(TRITONSERVER_LogLevel level, const char* file, int line, const std::string& message) {
  fastpath::common::Log(level, file, line, kLogPrefix, message);
}
#define FASTPATH_CACHE_LOG(level, message) \
  ::fastpath_cache::Log(TRITONSERVER_LOG_##level, __FILE__, __LINE__, (message))
#define FASTPATH_CACHE_VERBOSE_ENABLED() TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE)

// Logs and deletes an error no caller can be told about. Never throws.
#define FASTPATH_CACHE_LOG_IF_ERROR(expr, what) \
  ::fastpath::common::LogIfError((expr), ::fastpath_cache::kLogPrefix, (what), __FILE__, __LINE__)

// For catch handlers, where memory may have run out: "fastpath cache: <what>: <detail>" built on the
// stack (at most 1 KiB).
inline TRITONSERVER_Error* ErrorNoThrow(TRITONSERVER_Error_Code code, const char* what, const char* detail) noexcept {
  return fastpath::common::ErrorNoThrow(code, kLogPrefix, what, detail != nullptr ? detail : "unknown error");
}
inline void LogNoThrow(TRITONSERVER_LogLevel level, const char* file, int line, const char* what,
                       const char* detail) noexcept {
  fastpath::common::LogNoThrow(level, file, line, kLogPrefix, what, detail != nullptr ? detail : "unknown error");
}

}  // namespace fastpath_cache
