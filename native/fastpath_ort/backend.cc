// fastpath_ort: a Triton backend that serves an ONNX graph with onnxruntime on the CPU, for the
// embedded tritonserver (whose build has no onnxruntime backend). Installed once as
// `<backend-directory>/fastpath_ort/libtriton_fastpath_ort.so` (`backend: "fastpath_ort"`), with
// onnxruntime found next to it and dlopen-ed (ort_api.h, runtime.h).
//
// This file holds Triton's entry points only; the work is found by job:
//   config.cc    the model configuration -> ModelSettings (pure)
//   runtime.cc   the process's onnxruntime, OrtEnv and custom-op libraries (created once)
//   session.cc   an instance's session, checked against the configuration at load
//   request.cc   reading and checking one request (every count a client controls: checks.cc)
//   dispatcher.cc  with admission budgets: the model's own queue and a worker per instance
//                (request_queue.h says why), answering each request (Answer)
//   batch.cc     planning Runs, stacking, running, handing each request its rows
// Every request gets exactly one FINAL response; a bad one fails alone.
#include <sys/stat.h>

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "batch.h"
#include "common.h"
#include "dispatcher.h"
#include "json.h"
#include "request.h"
#include "state.h"

namespace fastpath {
namespace {

constexpr uint32_t kApiMajor = 1;
constexpr uint32_t kApiMinor = 19;

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string Join(const std::string& dir, const std::string& path) {
  return (path.empty() || path[0] == '/') ? path : dir + "/" + path;
}

// The folder this backend library was loaded from.
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// libonnxruntime.so, else the newest libonnxruntime.so.1.* in `dir`; "" when there is none.
std::string FindOrtIn(const std::string& dir) {
  if (dir.empty()) return "";
  if (FileExists(dir + "/libonnxruntime.so")) return dir + "/libonnxruntime.so";
  std::vector<std::string> found;
  if (DIR* handle = opendir(dir.c_str())) {
    while (dirent* entry = readdir(handle)) {
      std::string name = entry->d_name;
      if (name.rfind("libonnxruntime.so.1", 0) == 0 && FileExists(dir + "/" + name)) found.push_back(dir + "/" + name);
    }
    closedir(handle);
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? "" : found.back();
}

TRITONSERVER_Error* LoadModelSettings(TRITONBACKEND_Model* model, ModelSettings* settings) {
  TRITONSERVER_Message* message = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &message));
  const char* base = nullptr;
  size_t size = 0;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(message, &base, &size);
  std::string text = err == nullptr ? std::string(base, size) : "";
  FASTPATH_LOG_IF_ERROR(TRITONSERVER_MessageDelete(message), "deleting the configuration message");
  FASTPATH_RETURN_IF_ERROR(err);
  Json config;
  std::string error;
  if (!ParseJson(text, &config, &error)) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG, "model configuration JSON: " + error);
  }
  error = ParseModelSettings(config, settings);
  return error.empty() ? nullptr : NewError(TRITONSERVER_ERROR_INVALID_ARG, error);
}

// The model's files and the process's onnxruntime, found and loaded.
TRITONSERVER_Error* PrepareModel(ModelState* state) {
  const ModelSettings& settings = state->settings;
  state->onnx_path = state->dir + "/" + std::to_string(state->version) + "/" + settings.onnx_file;
  if (!FileExists(state->onnx_path)) {
    return NewError(TRITONSERVER_ERROR_NOT_FOUND, "no ONNX graph at '" + state->onnx_path + "' (parameter onnx_file)");
  }
  const std::string own_dir = OwnDirectory();
  std::string ort_path = Join(state->dir, settings.onnxruntime_library);
  if (ort_path.empty()) ort_path = FindOrtIn(own_dir);
  if (ort_path.empty()) ort_path = FindOrtIn(state->dir);
  if (ort_path.empty()) ort_path = "libonnxruntime.so.1";  // the loader's search path, last
  FASTPATH_RETURN_IF_ERROR(WithPrefix("", AcquireRuntime(ort_path, &state->runtime)));
  if (settings.custom_op_library.empty()) return nullptr;
  // The model folder first, then the backend's own folder (where `fastpath serve` installs it).
  for (const std::string& dir : {state->dir, own_dir}) {
    const std::string path = Join(dir, settings.custom_op_library);
    if (!dir.empty() && FileExists(path)) {
      state->custom_op_path = path;
      return nullptr;
    }
  }
  return NewError(TRITONSERVER_ERROR_NOT_FOUND, "custom_op_library '" + settings.custom_op_library +
                                                    "' is neither in the model folder '" + state->dir +
                                                    "' nor next to the backend in '" + own_dir + "'");
}

}  // namespace
}  // namespace fastpath

using namespace fastpath;  // NOLINT: the entry points below are extern "C"

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* /*backend*/) {
  uint32_t major = 0, minor = 0;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != kApiMajor || minor < kApiMinor) {
    return NewError(TRITONSERVER_ERROR_UNSUPPORTED, "fastpath_ort needs Triton backend API " +
                                                        std::to_string(kApiMajor) + "." + std::to_string(kApiMinor) +
                                                        "+, the server has " + std::to_string(major) + "." +
                                                        std::to_string(minor));
  }
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  auto state = std::make_unique<ModelState>();
  const char* name = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  state->name = name;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(model, &state->version));
  TRITONBACKEND_ArtifactType artifact;
  const char* location = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelRepository(model, &artifact, &location));
  state->dir = location;
  const std::string where = "fastpath_ort model '" + state->name + "': ";
  FASTPATH_RETURN_IF_ERROR(WithPrefix(where, LoadModelSettings(model, &state->settings)));
  FASTPATH_RETURN_IF_ERROR(WithPrefix(where, PrepareModel(state.get())));
  if (!state->settings.admission_budgets_s.empty()) {
    state->dispatcher =
        std::make_unique<Dispatcher>(state->settings.admission_budgets_s, state->settings.admission_min_rows);
  }
  FASTPATH_LOG(INFO, where + "onnxruntime " + state->runtime->version + " from '" + state->runtime->path +
                         "', graph '" + state->onnx_path + "', intra_op_threads " +
                         std::to_string(state->settings.intra_op_threads) +
                         (state->custom_op_path.empty() ? "" : ", custom ops '" + state->custom_op_path + "'"));
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, state.release()));
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  delete static_cast<ModelState*>(state);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* model = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* model_state = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &model_state));
  auto state = std::make_unique<InstanceState>();
  state->model = static_cast<ModelState*>(model_state);
  state->warmup_left = state->model->settings.warmup_executes;
  state->triton = instance;
  state->ort = &state->model->runtime->ort;
  const char* name = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceName(instance, &name));
  state->name = name;
  FASTPATH_RETURN_IF_ERROR(WithPrefix("fastpath_ort model '" + state->model->name + "': ", CreateSession(state.get())));
  if (state->model->dispatcher) StartWorker(state.get());
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceSetState(instance, state.get());
  if (err != nullptr) {
    if (state->model->dispatcher) StopWorker(state.get());
    return err;
  }
  state.release();
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* state = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
  auto* s = static_cast<InstanceState*>(state);
  if (s != nullptr && s->model->dispatcher) {
    StopWorker(s);
    Dispatcher& d = *s->model->dispatcher;
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.workers == 0 && d.shed > 0) {
      FASTPATH_LOG(INFO, s->model->name + ": admission control shed " + std::to_string(d.shed) + " requests");
    }
  }
  delete s;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, const uint32_t request_count) {
  const uint64_t exec_start = NowNs();
  void* raw_state = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &raw_state));
  auto* s = static_cast<InstanceState*>(raw_state);
  const ModelSettings& settings = s->model->settings;

  // From here on every request is answered and released, whatever happens: here, or by a worker.
  std::vector<std::unique_ptr<Pending>> pending;
  pending.reserve(request_count);
  for (uint32_t r = 0; r < request_count; ++r) {
    pending.push_back(std::make_unique<Pending>());
    Pending& p = *pending.back();
    p.request = requests[r];
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&p.response, p.request);
    if (err != nullptr) {
      p.response = nullptr;
      p.Fail(WithPrefix("cannot create a response: ", err));
      continue;
    }
    try {
      ReadRequest(settings, &p);
    } catch (const std::exception& e) {  // e.g. bad_alloc gathering a huge input
      p.Fail(NewError(TRITONSERVER_ERROR_INTERNAL, std::string("fastpath_ort: reading the request: ") + e.what()));
    }
  }
  // Warmup runs inline, never shed: Triton hands a warmup sample's requests to one Execute
  // and fails the model's load if any is refused, and a load on a busy host learns a cold Run's
  // cost (seen: a batch_64 sample refused as overloaded past admission_min_rows).
  const bool warmup = s->warmup_left > 0;
  if (warmup) --s->warmup_left;
  if (s->model->dispatcher && !warmup) {
    Enqueue(s, std::move(pending), exec_start);
    return nullptr;
  }
  std::vector<Pending*> good;
  for (const auto& p : pending) {
    if (p->good()) good.push_back(p.get());
  }
  try {
    ExecuteGood(s, good, exec_start);
  } catch (const std::exception& e) {  // not expected: ExecuteGood catches per Run
    for (Pending* p : good) {
      p->Fail(NewError(TRITONSERVER_ERROR_INTERNAL, std::string("fastpath_ort: ") + e.what()));
    }
  }
  const uint64_t exec_end = NowNs();
  for (const auto& p : pending) Answer(s, p.get(), exec_start, exec_end);
  return nullptr;
}

}  // extern "C"
