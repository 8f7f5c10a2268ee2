// See fake_server.h. Lines are printed to stderr as well with FAKE_TRITON_PRINT_LOGS or
// FASTPATH_DRIVER_VERBOSE set.
#include "fake_server.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace fake_server {
namespace {

std::atomic<int64_t> live_errors{0};
std::atomic<int64_t> error_logs{0};
std::atomic<bool> verbose{false};
std::atomic<bool> record{true};
const bool print_logs = std::getenv("FAKE_TRITON_PRINT_LOGS") != nullptr || std::getenv("FASTPATH_DRIVER_VERBOSE");
std::mutex mu;
std::vector<std::string> lines;

}  // namespace

int64_t LiveErrors() { return live_errors.load(); }

Result Take(TRITONSERVER_Error* error) {
  Result result;
  if (error != nullptr) {
    result.code = error->code;
    result.message = error->message;
    TRITONSERVER_ErrorDelete(error);
  }
  return result;
}

void SetVerbose(bool on) { verbose = on; }
void SetRecordLogs(bool on) { record = on; }

std::vector<std::string> Logs() {
  std::lock_guard<std::mutex> lock(mu);
  return lines;
}

void ClearLogs() {
  std::lock_guard<std::mutex> lock(mu);
  lines.clear();
}

int64_t ErrorLogs() { return error_logs.load(); }

}  // namespace fake_server

extern "C" {

TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) {
  auto* error = new TRITONSERVER_Error{code, msg != nullptr ? msg : ""};
  ++fake_server::live_errors;
  return error;
}
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error) {
  if (error == nullptr) return;
  --fake_server::live_errors;
  delete error;
}
TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error) { return error->code; }
const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error) { return error->message.c_str(); }

bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level) {
  return level != TRITONSERVER_LOG_VERBOSE || fake_server::verbose.load();
}

TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char* filename, const int line,
                                            const char* msg) {
  static const char* names[] = {"INFO", "WARN", "ERROR", "VERBOSE"};
  if (level == TRITONSERVER_LOG_ERROR) ++fake_server::error_logs;
  const char* name = level >= 0 && level < 4 ? names[level] : "?";
  if (fake_server::print_logs) std::fprintf(stderr, "[%s] %s:%d %s\n", name, filename, line, msg);
  if (!fake_server::record.load()) return nullptr;
  std::string text = std::string(name) + " " + msg;
  std::lock_guard<std::mutex> lock(fake_server::mu);
  if (fake_server::lines.size() < 10000) fake_server::lines.push_back(std::move(text));
  return nullptr;
}

}  // extern "C"
