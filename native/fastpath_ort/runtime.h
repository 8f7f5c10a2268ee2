// onnxruntime for the whole process: the library, one OrtEnv created on first use and never torn
// down (onnxruntime's maintainers advise one environment per process for its whole life; a model
// unload/load cycle must not create another), and custom-op libraries loaded once each.
#pragma once

#include <string>

#include "ort_api.h"
#include "triton_api.h"

namespace fastpath {

struct Runtime {
  OrtFunctions ort;
  std::string path;     // the libonnxruntime the process uses
  std::string version;
  OrtEnv* env = nullptr;
};

// The process's runtime, loading onnxruntime from `path` and creating the OrtEnv the first time.
// A later call naming another library fails: one process, one onnxruntime.
TRITONSERVER_Error* AcquireRuntime(const std::string& path, const Runtime** out);

// Adds the custom ops of the library at `path` to `options`. The library is dlopen-ed once per
// process (RTLD_GLOBAL after `python_library`, when given, for op libraries that are Python
// extension modules) and kept for the process's life; its `RegisterCustomOps` entry is called
// under a process-wide lock, since onnxruntime's schema registry is not safe against concurrent
// registration of a domain (two text graphs loaded at once failed with "the domain is already
// exist").
TRITONSERVER_Error* AddCustomOps(const Runtime& runtime, OrtSessionOptions* options, const std::string& path,
                                 const std::string& python_library);

// `status` (consumed) as a Triton error: "" -> nullptr; onnxruntime's INVALID_ARGUMENT ->
// `invalid_code`, any other failure -> INTERNAL. `what` says what was being done.
TRITONSERVER_Error* OrtError(const OrtFunctions& ort, OrtStatus* status, const std::string& what,
                             TRITONSERVER_Error_Code invalid_code = TRITONSERVER_ERROR_INVALID_ARG);

}  // namespace fastpath
