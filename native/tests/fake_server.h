// The part of a stand-in for tritonserver every C++ driver needs: TRITONSERVER_Error (counted while
// alive, so a driver can check that none leaks) and the server's log (recorded). The cache's drivers
// add buffer attributes, metrics and the TRITONCACHE_* callbacks (fake_triton.h); the backend's
// dispatcher driver adds its TRITONBACKEND_* calls (test_dispatcher.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "triton/core/tritonserver.h"

struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  std::string message;
};

namespace fake_server {

// Errors made by TRITONSERVER_ErrorNew and not deleted yet.
int64_t LiveErrors();

// An error's code and message, and deleting it (nullptr: success, kept as -1 / "").
struct Result {
  int code = -1;
  std::string message;
  bool ok() const { return code == -1; }
};
Result Take(TRITONSERVER_Error* error);

// Whether TRITONSERVER_LogIsEnabled(VERBOSE) says yes (the other levels always do).
void SetVerbose(bool verbose);
// Whether log lines are kept for Logs() (under a lock; a ThreadSanitizer driver that must not gain
// synchronization from logging turns it off). On by default; ERROR lines are counted either way.
void SetRecordLogs(bool record);
// Log lines so far (each "LEVEL message", the first 10,000); Clear empties them.
std::vector<std::string> Logs();
void ClearLogs();
// Lines logged at ERROR level.
int64_t ErrorLogs();

}  // namespace fake_server
