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
//   dispatcher.cc  an Execute call's requests run inline or, with admission budgets, through the
//                model's own queue and a worker per instance (request_queue.h says why); answering
//                each request (Answer) and releasing it
//   batch.cc     planning Runs, stacking, running, handing each request its rows
//   wordpiece*.cc  a text model's exact BERT WordPiece tokenizer (text_tokenizer), used by request.cc
//   native/common  shared with the response cache: Triton errors and logging (common.h wraps them),
//                fault points, the JSON reader; Triton's API is its vendored r24.10 headers
//                (triton_api.h, native/third_party/triton/core)
// Every request gets exactly one FINAL response and one release; a bad one fails alone.
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
#include "wordpiece.h"
#include "wordpiece_unicode.h"

namespace fastpath {
namespace {

// The backend API of the headers it is built with (r24.10: 1.19, Triton 2.51's).
constexpr uint32_t kApiMajor = TRITONBACKEND_API_VERSION_MAJOR;
constexpr uint32_t kApiMinor = TRITONBACKEND_API_VERSION_MINOR;

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

// A text model's tokenizer (text_tokenizer in the version folder), loaded once: one the C++
// WordPiece tokenizer cannot reproduce exactly is refused by name (wordpiece.h), as is a max_length
// below the special tokens it adds.
TRITONSERVER_Error* LoadTokenizer(ModelState* state) {
  const ModelSettings& settings = state->settings;
  if (!settings.tokenizes()) return nullptr;
  std::string error;
  if (!wordpiece::CheckUnicodeData(&error)) return NewError(TRITONSERVER_ERROR_INTERNAL, error);
  state->tokenizer_path = state->dir + "/" + std::to_string(state->version) + "/" + settings.text_tokenizer;
  std::unique_ptr<WordPieceTokenizer> tokenizer = WordPieceTokenizer::Load(state->tokenizer_path, &error);
  if (!tokenizer) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                    "parameter 'text_tokenizer': " + error + " (serve this model with the Python tokenizer)");
  }
  if (static_cast<size_t>(settings.max_length) < tokenizer->special_token_count()) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                    "parameter 'max_length' = " + std::to_string(settings.max_length) + " is below the " +
                        std::to_string(tokenizer->special_token_count()) + " special tokens '" +
                        state->tokenizer_path + "' adds around every text");
  }
  state->pad_id = std::max<int64_t>(0, tokenizer->TokenId("[PAD]"));
  state->tokenizer = std::move(tokenizer);
  return nullptr;
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
  FASTPATH_RETURN_IF_ERROR(LoadTokenizer(state));
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

// No exception crosses into Triton: each entry point catches everything (FASTPATH_CATCH_ALL_RETURN_ERROR:
// an INTERNAL error naming it), and ModelInstanceExecute hands the requests to Execute, which
// catches everything itself and answers and releases every request (dispatcher.h).

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* /*backend*/) {
  try {
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
  FASTPATH_CATCH_ALL_RETURN_ERROR("fastpath_ort: initializing the backend")
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  try {
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
                           (state->custom_op_path.empty() ? "" : ", custom ops '" + state->custom_op_path + "'") +
                           (state->tokenizer ? ", text tokenized by the C++ WordPiece tokenizer '" +
                                                   state->tokenizer_path + "' (vocabulary " +
                                                   std::to_string(state->tokenizer->vocab_size()) + ", max_length " +
                                                   std::to_string(state->settings.max_length) + ")"
                                             : "") +
                           (state->settings.response_cache ? ", response cache on: every response carries every output"
                                                           : ""));
    FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, state.get()));
    state.release();
    return nullptr;
  }
  FASTPATH_CATCH_ALL_RETURN_ERROR("fastpath_ort: loading a model")
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  try {
    void* state = nullptr;
    FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
    auto* m = static_cast<ModelState*>(state);
    if (m == nullptr) return nullptr;
    ReleaseKept(m, /*last=*/true);
    if (m->unreleased.failures > 0) {
      FASTPATH_LOG(WARN, m->name + ": " + std::to_string(m->unreleased.failures) + " request releases failed, " +
                             std::to_string(m->unreleased.lost) + " requests never released");
    }
    delete m;
    return nullptr;
  }
  FASTPATH_CATCH_ALL_RETURN_ERROR("fastpath_ort: unloading a model")
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  try {
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
    FASTPATH_RETURN_IF_ERROR(
        WithPrefix("fastpath_ort model '" + state->model->name + "': ", CreateSession(state.get())));
    // Nothing below throws: a started worker is never left running in a state that is deleted.
    if (state->model->dispatcher) FASTPATH_RETURN_IF_ERROR(StartWorker(state.get()));
    TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceSetState(instance, state.get());
    if (err != nullptr) {
      if (state->model->dispatcher) StopWorker(state.get());
      return err;
    }
    state.release();
    return nullptr;
  }
  FASTPATH_CATCH_ALL_RETURN_ERROR("fastpath_ort: loading a model instance")
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  InstanceState* s = nullptr;
  try {
    void* state = nullptr;
    FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
    s = static_cast<InstanceState*>(state);
    if (s == nullptr) return nullptr;
    if (s->model->dispatcher) {
      StopWorker(s);  // the last worker answers what is still queued
      Dispatcher& d = *s->model->dispatcher;
      std::lock_guard<std::mutex> lock(d.mutex);
      if (d.workers == 0 && d.shed > 0) {
        FASTPATH_LOG(INFO, s->model->name + ": admission control shed " + std::to_string(d.shed) + " requests");
      }
    }
    ReleaseKept(s->model, /*last=*/false);
    delete s;
    return nullptr;
  } catch (const std::exception& e) {
    // A worker that could not be joined may still use the state: it is left, not deleted.
    if (s != nullptr && !s->worker.joinable()) delete s;
    return ExceptionError("fastpath_ort: unloading a model instance", e.what());
  } catch (...) {
    if (s != nullptr && !s->worker.joinable()) delete s;
    return ExceptionError("fastpath_ort: unloading a model instance", nullptr);
  }
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, const uint32_t request_count) {
  const uint64_t exec_start = NowNs();
  void* state = nullptr;
  // No request is touched yet: an error returned here leaves them all with Triton, which answers them.
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
  if (state == nullptr) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "fastpath_ort: no instance state");
  // From here on every request is the backend's to answer and release, whatever happens: Execute
  // catches everything itself (it is noexcept). No error may be returned after this point: Triton
  // would answer and release the requests a second time.
  Execute(static_cast<InstanceState*>(state), requests, request_count, exec_start);
  return nullptr;
}

}  // extern "C"
