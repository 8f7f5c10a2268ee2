// See runtime.h.
#include "runtime.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "common.h"

namespace fastpath {
namespace {

std::mutex& RuntimeMutex() {
  static std::mutex mutex;
  return mutex;
}

Runtime& TheRuntime() {
  static Runtime runtime;
  return runtime;
}

using RegisterCustomOpsFn = OrtStatus* (*)(OrtSessionOptions*, const OrtApiBase*);

struct OpLibrary {
  RegisterCustomOpsFn register_ops = nullptr;
  const OrtApiBase* api_base = nullptr;
};

}  // namespace

TRITONSERVER_Error* AcquireRuntime(const std::string& path, const Runtime** out) {
  std::lock_guard<std::mutex> lock(RuntimeMutex());
  Runtime& rt = TheRuntime();
  if (rt.path.empty()) {
    std::string error = LoadOrt(path, &rt.ort, &rt.version);
    if (!error.empty()) return NewError(TRITONSERVER_ERROR_NOT_FOUND, error);
    rt.path = path;
  } else if (rt.path != path) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                    "this process already uses onnxruntime from '" + rt.path + "', not '" + path + "'");
  }
  if (rt.env == nullptr) {
    FASTPATH_RETURN_IF_ERROR(OrtError(rt.ort, rt.ort.CreateEnv(ORT_LOGGING_LEVEL_WARNING, "fastpath_ort", &rt.env),
                                      "onnxruntime CreateEnv", TRITONSERVER_ERROR_INTERNAL));
  }
  *out = &rt;
  return nullptr;
}

TRITONSERVER_Error* AddCustomOps(const Runtime& runtime, OrtSessionOptions* options, const std::string& path,
                                 const std::string& python_library) {
  static std::map<std::string, OpLibrary> loaded;  // never unloaded: sessions use the ops
  std::lock_guard<std::mutex> lock(RuntimeMutex());
  auto it = loaded.find(path);
  if (it == loaded.end()) {
    if (!python_library.empty() && dlopen(python_library.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* why = dlerror();
      return NewError(TRITONSERVER_ERROR_NOT_FOUND,
                      "custom_op_library needs python_library '" + python_library + "', which does not load: " +
                          (why ? why : "?") +
                          " (install it, or set python_library to \"\" for an op library that needs no Python)");
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return NewError(TRITONSERVER_ERROR_NOT_FOUND,
                      "cannot load custom_op_library '" + path + "': " + (why ? why : "unknown dlopen error"));
    }
    OpLibrary library;
    library.register_ops = reinterpret_cast<RegisterCustomOpsFn>(dlsym(handle, "RegisterCustomOps"));
    if (library.register_ops == nullptr) {
      return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                      "custom_op_library '" + path + "' has no RegisterCustomOps symbol: not an onnxruntime op library");
    }
    void* ort_handle = dlopen(runtime.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    using GetApiBaseFn = const OrtApiBase* (*)();
    auto get_base = ort_handle ? reinterpret_cast<GetApiBaseFn>(dlsym(ort_handle, "OrtGetApiBase")) : nullptr;
    if (get_base == nullptr) {
      return NewError(TRITONSERVER_ERROR_INTERNAL, "onnxruntime '" + runtime.path + "' is not loaded");
    }
    library.api_base = get_base();
    it = loaded.emplace(path, library).first;
  }
  return OrtError(runtime.ort, it->second.register_ops(options, it->second.api_base),
                  "registering custom_op_library '" + path + "'", TRITONSERVER_ERROR_INVALID_ARG);
}

TRITONSERVER_Error* OrtError(const OrtFunctions& ort, OrtStatus* status, const std::string& what,
                             TRITONSERVER_Error_Code invalid_code) {
  if (status == nullptr) return nullptr;
  const OrtErrorCode code = ort.GetErrorCode(status);
  const char* message = ort.GetErrorMessage(status);
  TRITONSERVER_Error* err =
      NewError(code == ORT_INVALID_ARGUMENT ? invalid_code : TRITONSERVER_ERROR_INTERNAL,
               what + ": " + (message != nullptr && *message ? message : "onnxruntime error (no message)"));
  ort.ReleaseStatus(status);
  return err;
}

}  // namespace fastpath
