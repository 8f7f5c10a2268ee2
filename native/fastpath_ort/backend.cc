// fastpath_ort: a Triton backend that serves an ONNX graph with onnxruntime on the CPU, for the
// embedded tritonserver (whose build has no onnxruntime backend). Loaded from the model folder as
// libtriton_fastpath_ort.so (`backend: "fastpath_ort"`); onnxruntime is dlopen-ed (ort_api.h).
//
// Per batch: every request is checked on its own (types, shapes, row lengths, finite floats,
// UTF-8) and a bad one fails alone; the good ones are stacked into one tensor per input, rows
// along -1 axes padded with zeros ("" for strings) to the batch's longest; one Run; each
// request gets its own rows back (outputs along -1 axes trimmed to its own length) in exactly one
// FINAL response; timings go to Triton's statistics. If a batched Run fails, each request is run
// alone so that only the one that fails gets the error.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "admission.h"
#include "config.h"
#include "json.h"
#include "ort_api.h"
#include "tensor_ops.h"
#include "triton_api.h"

namespace fastpath {
namespace {

constexpr uint32_t kApiMajor = 1;
constexpr uint32_t kApiMinor = 19;

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Log(TRITONSERVER_LogLevel level, int line, const std::string& message) {
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, __FILE__, line, message.c_str());
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}

TRITONSERVER_Error* NewError(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, message.c_str());
}

// The message of an error returned by a Triton call (deleted here); "" for success.
std::string TakeError(TRITONSERVER_Error* err) {
  if (err == nullptr) return "";
  std::string message = TRITONSERVER_ErrorMessage(err);
  TRITONSERVER_ErrorDelete(err);
  return message.empty() ? "unknown Triton error" : message;
}

#define FASTPATH_RETURN_IF_ERROR(expr)      \
  do {                                      \
    TRITONSERVER_Error* err__ = (expr);     \
    if (err__ != nullptr) return err__;     \
  } while (false)

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string Resolve(const std::string& path, const std::string& dir) {
  return (path.empty() || path[0] == '/') ? path : dir + "/" + path;
}

// The folder this backend library was loaded from.
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
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
      if (name.rfind("libonnxruntime.so.1", 0) == 0 && FileExists(dir + "/" + name)) {
        found.push_back(dir + "/" + name);
      }
    }
    closedir(handle);
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? "" : found.back();
}

// onnxruntime and its environment, shared by every model this library copy serves.
struct Runtime {
  std::mutex mutex;
  OrtFunctions ort;
  std::string path;
  std::string version;
  OrtEnv* env = nullptr;
  int users = 0;
};

Runtime& TheRuntime() {
  static Runtime runtime;
  return runtime;
}

std::string AcquireRuntime(const std::string& path) {
  Runtime& rt = TheRuntime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.path.empty()) {
    std::string error = LoadOrt(path, &rt.ort, &rt.version);
    if (!error.empty()) return error;
    rt.path = path;
  } else if (rt.path != path) {
    return "this backend already uses onnxruntime from '" + rt.path + "', not '" + path + "'";
  }
  if (rt.env == nullptr) {
    std::string error = TakeOrtError(rt.ort, rt.ort.CreateEnv(ORT_LOGGING_LEVEL_WARNING, "fastpath_ort", &rt.env));
    if (!error.empty()) return "onnxruntime CreateEnv failed: " + error;
  }
  ++rt.users;
  return "";
}

void ReleaseRuntime() {
  Runtime& rt = TheRuntime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (--rt.users == 0 && rt.env != nullptr) {
    rt.ort.ReleaseEnv(rt.env);
    rt.env = nullptr;
  }
}

struct ModelState {
  std::string name;
  uint64_t version = 0;
  std::string dir;
  ModelSettings settings;
  std::string onnx_path;
  std::string custom_op_path;
  bool holds_runtime = false;

  ~ModelState() {
    if (holds_runtime) ReleaseRuntime();
  }
};

struct InstanceState {
  ModelState* model = nullptr;
  TRITONBACKEND_ModelInstance* triton = nullptr;
  std::string name;
  const OrtFunctions* ort = nullptr;
  OrtSession* session = nullptr;
  OrtMemoryInfo* cpu = nullptr;
  OrtAllocator* allocator = nullptr;
  std::vector<const char*> input_names;
  std::vector<const char*> output_names;
  std::unique_ptr<Admission> admission;  // sheds at dispatch what does not fit the service level
  uint64_t shed = 0;

  ~InstanceState() {
    if (session != nullptr) ort->ReleaseSession(session);
    if (cpu != nullptr) ort->ReleaseMemoryInfo(cpu);
  }
};

std::string LoadModelSettings(TRITONBACKEND_Model* model, ModelSettings* settings) {
  TRITONSERVER_Message* message = nullptr;
  std::string error = TakeError(TRITONBACKEND_ModelConfig(model, 1, &message));
  if (!error.empty()) return error;
  const char* base = nullptr;
  size_t size = 0;
  error = TakeError(TRITONSERVER_MessageSerializeToJson(message, &base, &size));
  std::string text = error.empty() ? std::string(base, size) : "";
  TakeError(TRITONSERVER_MessageDelete(message));
  if (!error.empty()) return error;
  Json config;
  if (!ParseJson(text, &config, &error)) return "model configuration JSON: " + error;
  return ParseModelSettings(config, settings);
}

// --- sessions ---

std::string CheckStatus(const OrtFunctions& ort, OrtStatus* status, const char* what) {
  std::string error = TakeOrtError(ort, status);
  return error.empty() ? "" : std::string(what) + ": " + error;
}

struct GraphTensor {
  std::string name;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
};

std::string ListGraphTensors(const InstanceState& s, bool inputs, std::vector<GraphTensor>* out) {
  const OrtFunctions& ort = *s.ort;
  size_t count = 0;
  std::string error = CheckStatus(
      ort, inputs ? ort.SessionGetInputCount(s.session, &count) : ort.SessionGetOutputCount(s.session, &count),
      "counting graph tensors");
  for (size_t i = 0; error.empty() && i < count; ++i) {
    GraphTensor tensor;
    char* name = nullptr;
    error = CheckStatus(ort,
                        inputs ? ort.SessionGetInputName(s.session, i, s.allocator, &name)
                               : ort.SessionGetOutputName(s.session, i, s.allocator, &name),
                        "reading a graph tensor's name");
    if (!error.empty()) break;
    tensor.name = name;
    TakeOrtError(ort, ort.AllocatorFree(s.allocator, name));
    OrtTypeInfo* type_info = nullptr;
    error = CheckStatus(ort,
                        inputs ? ort.SessionGetInputTypeInfo(s.session, i, &type_info)
                               : ort.SessionGetOutputTypeInfo(s.session, i, &type_info),
                        "reading a graph tensor's type");
    if (!error.empty()) break;
    const OrtTensorTypeAndShapeInfo* info = nullptr;
    error = CheckStatus(ort, ort.CastTypeInfoToTensorInfo(type_info, &info), "reading a tensor type");
    if (error.empty() && info == nullptr) error = "graph tensor '" + tensor.name + "' is not a tensor";
    if (error.empty()) error = CheckStatus(ort, ort.GetTensorElementType(info, &tensor.type), "element type");
    if (error.empty()) error = CheckStatus(ort, ort.GetDimensionsCount(info, &tensor.rank), "rank");
    ort.ReleaseTypeInfo(type_info);
    out->push_back(tensor);
  }
  return error;
}

// The configuration and the graph must agree on names, types and ranks.
std::string CheckGraphAgainstConfig(const InstanceState& s) {
  const ModelSettings& settings = s.model->settings;
  const size_t batch_axes = settings.batched() ? 1 : 0;
  for (bool inputs : {true, false}) {
    std::vector<GraphTensor> graph;
    std::string error = ListGraphTensors(s, inputs, &graph);
    if (!error.empty()) return error;
    const char* kind = inputs ? "input" : "output";
    const auto& specs = inputs ? settings.inputs : settings.outputs;
    for (const TensorSpec& spec : specs) {
      auto it = std::find_if(graph.begin(), graph.end(), [&](const GraphTensor& t) { return t.name == spec.name; });
      if (it == graph.end()) {
        std::string names;
        for (const auto& t : graph) names += (names.empty() ? "" : ", ") + t.name;
        return std::string("config ") + kind + " '" + spec.name + "' is not in the ONNX graph (its " + kind +
               "s: " + names + ")";
      }
      if (it->type != spec.onnx_type) {
        return std::string("config ") + kind + " '" + spec.name + "' is TYPE_" + TritonTypeName(spec.triton_type) +
               " but the graph's is " + OnnxTypeName(it->type);
      }
      if (it->rank != spec.dims.size() + batch_axes) {
        return std::string("config ") + kind + " '" + spec.name + "' has " + std::to_string(spec.dims.size()) +
               " dims" + (batch_axes ? " (+1 batch axis)" : "") + " but the graph's has rank " +
               std::to_string(it->rank);
      }
    }
    if (inputs) {
      for (const GraphTensor& t : graph) {
        auto it = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& spec) { return spec.name == t.name; });
        if (it == specs.end()) return "the ONNX graph's input '" + t.name + "' is not in the configuration";
      }
    }
  }
  return "";
}

// An exclusive flock on a folder for the life of the object ("" or a folder that cannot be
// opened: no lock, the caller goes on unserialised). flock conflicts between separate opens in
// one process, so it serialises the backend copies of every model folder of a repository.
class RepositoryLock {
 public:
  explicit RepositoryLock(const std::string& folder) {
    if (folder.empty()) return;
    fd_ = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RepositoryLock() {
    if (fd_ < 0) return;
    flock(fd_, LOCK_UN);
    close(fd_);
  }
  RepositoryLock(const RepositoryLock&) = delete;
  RepositoryLock& operator=(const RepositoryLock&) = delete;

 private:
  int fd_ = -1;
};

std::string CreateSession(InstanceState* s) {
  Runtime& rt = TheRuntime();
  const OrtFunctions& ort = rt.ort;
  const ModelSettings& settings = s->model->settings;
  OrtSessionOptions* options = nullptr;
  std::string error = CheckStatus(ort, ort.CreateSessionOptions(&options), "CreateSessionOptions");
  if (error.empty()) error = CheckStatus(ort, ort.SetIntraOpNumThreads(options, settings.intra_op_threads), "intra_op_threads");
  if (error.empty()) error = CheckStatus(ort, ort.SetInterOpNumThreads(options, settings.inter_op_threads), "inter_op_threads");
  if (error.empty()) error = CheckStatus(ort, ort.SetSessionExecutionMode(options, ORT_SEQUENTIAL), "execution mode");
  if (error.empty()) {
    error = CheckStatus(ort, ort.SetSessionGraphOptimizationLevel(options, settings.graph_optimization_level),
                        "graph_optimization_level");
  }
  // Registering a custom-op library adds its op domain to onnxruntime's process-wide schema
  // registry, which is not safe against a concurrent registration: two models with custom ops,
  // loaded at once by Triton, failed with "the domain is already exist" (seen with two text graphs
  // in one repository). Each model folder loads its own copy of this backend, so the lock must span
  // copies: an flock on the repository folder, which every model of the repository shares.
  RepositoryLock lock(s->model->custom_op_path.empty() ? "" : s->model->dir + "/..");
  if (error.empty() && !s->model->custom_op_path.empty()) {
    void* handle = nullptr;  // kept for the process's life: sessions use the ops it registered
    error = CheckStatus(ort, ort.RegisterCustomOpsLibrary(options, s->model->custom_op_path.c_str(), &handle),
                        ("registering custom_op_library '" + s->model->custom_op_path + "'").c_str());
  }
  if (error.empty()) {
    error = CheckStatus(ort, ort.CreateSession(rt.env, s->model->onnx_path.c_str(), options, &s->session),
                        ("loading '" + s->model->onnx_path + "'").c_str());
  }
  if (options != nullptr) ort.ReleaseSessionOptions(options);
  if (error.empty()) error = CheckStatus(ort, ort.CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &s->cpu), "CreateCpuMemoryInfo");
  if (error.empty()) error = CheckStatus(ort, ort.GetAllocatorWithDefaultOptions(&s->allocator), "default allocator");
  if (error.empty()) error = CheckGraphAgainstConfig(*s);
  for (const TensorSpec& spec : settings.inputs) s->input_names.push_back(spec.name.c_str());
  for (const TensorSpec& spec : settings.outputs) s->output_names.push_back(spec.name.c_str());
  return error;
}

// --- requests ---

struct RequestInput {
  std::vector<int64_t> shape;  // as sent, batch axis included when the model batches
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  std::vector<uint8_t> gathered;             // when the input came in several buffers
  std::vector<std::string> strings;          // BYTES elements, NUL-terminated copies
  std::vector<const char*> string_pointers;  // into `strings`
  std::vector<uint8_t> cut;                  // per BYTES element: 1 when cut_string_chars cut it
};

// The first `chars` characters of valid UTF-8 `text` (all of it when shorter).
std::string_view FirstChars(std::string_view text, int64_t chars) {
  size_t at = 0;
  for (int64_t n = 0; at < text.size(); ++n) {
    if (n == chars) return text.substr(0, at);
    const unsigned char lead = static_cast<unsigned char>(text[at]);
    at += lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  }
  return text;
}

struct Pending {
  TRITONBACKEND_Request* request = nullptr;
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_INVALID_ARG;
  std::string error;  // "" while the request is good
  int64_t rows = 1;   // along the batch axis (1 when the model does not batch)
  int64_t length = 0;  // its longest row: elements along a -1 axis, or bytes of a text (length buckets)
  std::vector<RequestInput> inputs;
  uint64_t compute_start_ns = 0;
  uint64_t compute_end_ns = 0;
};

std::string ReadInput(const ModelSettings& settings, const TensorSpec& spec, TRITONBACKEND_Request* request,
                      RequestInput* in) {
  TRITONBACKEND_Input* input = nullptr;
  if (!TakeError(TRITONBACKEND_RequestInput(request, spec.name.c_str(), &input)).empty() || input == nullptr) {
    return "missing input '" + spec.name + "'";
  }
  TRITONSERVER_DataType type;
  const int64_t* shape = nullptr;
  uint32_t rank = 0;
  uint64_t byte_size = 0;
  uint32_t buffers = 0;
  std::string error = TakeError(TRITONBACKEND_InputProperties(input, nullptr, &type, &shape, &rank, &byte_size, &buffers));
  if (!error.empty()) return error;
  in->shape.assign(shape, shape + rank);
  const std::string name = "input '" + spec.name + "'";
  if (type != spec.triton_type) {
    return name + " is " + TritonTypeName(type) + "; the model takes " + TritonTypeName(spec.triton_type);
  }
  const size_t batch_axes = settings.batched() ? 1 : 0;
  std::vector<int64_t> expected = spec.dims;
  if (batch_axes) expected.insert(expected.begin(), -1);
  bool shape_ok = in->shape.size() == expected.size();
  for (size_t i = 0; shape_ok && i < expected.size(); ++i) {
    shape_ok = expected[i] == -1 ? in->shape[i] >= 0 : in->shape[i] == expected[i];
  }
  if (!shape_ok) return name + " has shape " + ShapeText(in->shape) + "; the model takes " + ShapeText(expected);
  if (batch_axes && in->shape[0] == 0) return name + " has no rows (batch size 0)";
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    if (spec.dims[i] != -1) continue;
    const int64_t length = in->shape[i + batch_axes];
    if (length == 0) return name + " has an empty row (axis " + std::to_string(i + batch_axes) + " is 0)";
    if (settings.max_sequence_length > 0 && length > settings.max_sequence_length) {
      return name + " rows are " + std::to_string(length) + " long; the longest this model takes is " +
             std::to_string(settings.max_sequence_length) + " (max_sequence_length)";
    }
  }
  const int64_t elements = ElementCount(in->shape);
  if (!spec.is_string() && byte_size != static_cast<uint64_t>(elements) * spec.element_size) {
    return name + " holds " + std::to_string(byte_size) + " bytes; shape " + ShapeText(in->shape) + " needs " +
           std::to_string(elements * spec.element_size);
  }
  for (uint32_t b = 0; b < buffers; ++b) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    error = TakeError(TRITONBACKEND_InputBuffer(input, b, &buffer, &size, &memory_type, &memory_id));
    if (!error.empty()) return error;
    if (memory_type == TRITONSERVER_MEMORY_GPU) return name + " is in GPU memory; fastpath_ort serves CPU tensors";
    if (buffers == 1) {
      in->data = static_cast<const uint8_t*>(buffer);
    } else {
      in->gathered.insert(in->gathered.end(), static_cast<const uint8_t*>(buffer),
                          static_cast<const uint8_t*>(buffer) + size);
    }
  }
  if (buffers != 1) in->data = in->gathered.data();
  in->byte_size = buffers == 1 ? byte_size : in->gathered.size();
  if (spec.is_float() && settings.reject_non_finite) {
    const int64_t row = FirstNonFiniteRow(type, in->data, in->shape);
    if (row >= 0) return name + " row " + std::to_string(row) + " contains NaN or Inf; send finite values";
  }
  if (spec.is_string()) {
    std::vector<std::string_view> elements_view;
    error = ParseBytes(in->data, in->byte_size, elements, &elements_view);
    if (!error.empty()) return name + ": " + error;
    in->strings.reserve(elements_view.size());
    for (size_t i = 0; i < elements_view.size(); ++i) {
      const std::string_view text = elements_view[i];
      if (text.find('\0') != std::string_view::npos) {
        return name + " element " + std::to_string(i) + " contains a NUL byte";
      }
      if (settings.max_string_bytes > 0 && static_cast<int64_t>(text.size()) > settings.max_string_bytes) {
        return name + " element " + std::to_string(i) + " is " + std::to_string(text.size()) +
               " bytes; the limit is " + std::to_string(settings.max_string_bytes) + " bytes";
      }
      if (settings.validate_utf8 && !IsValidUtf8(text)) {
        return name + " element " + std::to_string(i) + " is not valid UTF-8";
      }
      if (settings.reject_blank_strings &&
          std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
        return name + " element " + std::to_string(i) + " is empty or whitespace only; send at least one word";
      }
      const std::string_view kept = settings.cut_string_chars > 0 ? FirstChars(text, settings.cut_string_chars) : text;
      in->cut.push_back(kept.size() < text.size() ? 1 : 0);
      in->strings.emplace_back(kept);
    }
    for (const std::string& text : in->strings) in->string_pointers.push_back(text.c_str());
  }
  return "";
}

void ReadRequest(const ModelSettings& settings, Pending* p) {
  p->inputs.resize(settings.inputs.size());
  for (size_t i = 0; i < settings.inputs.size() && p->error.empty(); ++i) {
    p->error = ReadInput(settings, settings.inputs[i], p->request, &p->inputs[i]);
  }
  if (!p->error.empty() || !settings.batched()) return;
  p->rows = p->inputs[0].shape[0];
  int first_ragged = -1;
  for (size_t i = 0; i < p->inputs.size(); ++i) {
    const TensorSpec& spec = settings.inputs[i];
    const RequestInput& in = p->inputs[i];
    const bool bucketed = settings.length_bucket_rows > 0;
    if (spec.is_string() && bucketed) {
      for (const std::string& text : in.strings) p->length = std::max<int64_t>(p->length, text.size());
    } else if (spec.ragged) {
      for (size_t a = 0; bucketed && a < spec.dims.size() && a + 1 < in.shape.size(); ++a) {
        if (spec.dims[a] == -1) p->length = std::max(p->length, in.shape[a + 1]);
      }
      if (!settings.ragged_lengths_agree) continue;
      if (first_ragged < 0) {
        first_ragged = static_cast<int>(i);
      } else if (in.shape != p->inputs[first_ragged].shape) {
        p->error = "inputs '" + settings.inputs[first_ragged].name + "' " + ShapeText(p->inputs[first_ragged].shape) +
                   " and '" + spec.name + "' " + ShapeText(in.shape) +
                   " disagree: send them with the same shape (one mask value per token id)";
        return;
      }
    }
  }
  for (size_t i = 1; i < p->inputs.size(); ++i) {
    if (p->inputs[i].shape[0] != p->rows) {
      p->error = "inputs disagree on the batch size: '" + settings.inputs[0].name + "' has " +
                 std::to_string(p->rows) + " rows, '" + settings.inputs[i].name + "' has " +
                 std::to_string(p->inputs[i].shape[0]);
      return;
    }
  }
}

// One Run over `batch` (all good so far). Returns "" or why the whole Run failed; per-request
// problems with the outputs go to the request.
class BatchRun {
 public:
  BatchRun(InstanceState* s, const std::vector<Pending*>& batch) : s_(*s), ort_(*s->ort), batch_(batch) {}

  ~BatchRun() {
    for (OrtValue* v : inputs_) if (v != nullptr) ort_.ReleaseValue(v);
    for (OrtValue* v : outputs_) if (v != nullptr) ort_.ReleaseValue(v);
  }

  std::string Run() {
    const ModelSettings& settings = s_.model->settings;
    for (size_t i = 0; i < settings.inputs.size(); ++i) {
      std::string error = BuildInput(i);
      if (!error.empty()) return error;
    }
    outputs_.assign(settings.outputs.size(), nullptr);
    const uint64_t start = NowNs();
    std::string error = TakeOrtError(
        ort_, ort_.Run(s_.session, nullptr, s_.input_names.data(), inputs_.data(), inputs_.size(),
                       s_.output_names.data(), s_.output_names.size(), outputs_.data()));
    const uint64_t end = NowNs();
    for (Pending* p : batch_) {
      p->compute_start_ns = start;
      p->compute_end_ns = end;
    }
    if (!error.empty()) return "onnxruntime: " + error;
    // Every output is checked before any response gets one, so a failed Run leaves the
    // responses untouched for the one-by-one retry.
    views_.resize(settings.outputs.size());
    for (size_t j = 0; j < settings.outputs.size(); ++j) {
      error = InspectOutput(j, &views_[j]);
      if (!error.empty()) return error;
    }
    for (size_t j = 0; j < settings.outputs.size(); ++j) SendOutput(j, views_[j]);
    return "";
  }

  int64_t rows() const { return total_rows_; }

 private:
  // Stacks input `i` of every request into one tensor, padding -1 axes to the longest row.
  std::string BuildInput(size_t i) {
    const TensorSpec& spec = s_.model->settings.inputs[i];
    const bool batched = s_.model->settings.batched();
    std::vector<int64_t> shape = batch_[0]->inputs[i].shape;
    total_rows_ = 0;
    bool padded = false;
    for (Pending* p : batch_) {
      const std::vector<int64_t>& own = p->inputs[i].shape;
      total_rows_ += batched ? own[0] : 1;
      for (size_t a = batched ? 1 : 0; a < own.size(); ++a) {
        padded = padded || own[a] != shape[a];
        shape[a] = std::max(shape[a], own[a]);
      }
    }
    if (batched) shape[0] = total_rows_;
    if (spec.ragged && first_ragged_input_ < 0) {
      first_ragged_input_ = static_cast<int>(i);
      ragged_axis_ = (batched ? 1 : 0) + (std::find(spec.dims.begin(), spec.dims.end(), -1) - spec.dims.begin());
      padded_length_ = shape[ragged_axis_];
    }
    OrtValue* value = nullptr;
    std::string error;
    if (spec.is_string()) {
      std::vector<const char*> pointers = StackStrings(i, shape);
      error = CheckStatus(ort_, ort_.CreateTensorAsOrtValue(s_.allocator, shape.data(), shape.size(), spec.onnx_type, &value),
                          "creating a string tensor");
      if (error.empty()) {
        inputs_.push_back(value);
        error = CheckStatus(ort_, ort_.FillStringTensor(value, pointers.data(), pointers.size()), "filling a string tensor");
      }
      return error;
    }
    void* data = nullptr;
    const size_t bytes = static_cast<size_t>(ElementCount(shape)) * spec.element_size;
    if (batch_.size() == 1 && !padded) {
      data = const_cast<uint8_t*>(batch_[0]->inputs[i].data);  // onnxruntime only reads inputs
    } else {
      owned_.emplace_back(bytes, 0);
      uint8_t* out = owned_.back().data();
      size_t row_bytes = bytes / std::max<int64_t>(total_rows_, 1);
      size_t offset = 0;
      for (Pending* p : batch_) {
        const RequestInput& in = p->inputs[i];
        std::vector<int64_t> target = shape;
        if (batched) target[0] = in.shape[0];
        CopyBlock(in.data, in.shape, out + offset, target, in.shape, spec.element_size);
        offset += (batched ? in.shape[0] : 1) * row_bytes;
      }
      data = out;
    }
    error = CheckStatus(ort_, ort_.CreateTensorWithDataAsOrtValue(s_.cpu, data, bytes, shape.data(), shape.size(),
                                                                  spec.onnx_type, &value),
                        "creating an input tensor");
    if (error.empty()) inputs_.push_back(value);
    return error;
  }

  // String input `i` stacked as element pointers, "" where padded.
  std::vector<const char*> StackStrings(size_t i, const std::vector<int64_t>& shape) {
    using T = const char*;
    const bool batched = s_.model->settings.batched();
    std::vector<T> out(static_cast<size_t>(ElementCount(shape)), "");
    const size_t per_row = out.size() / std::max<int64_t>(total_rows_, 1);
    size_t offset = 0;
    for (Pending* p : batch_) {
      const RequestInput& in = p->inputs[i];
      std::vector<int64_t> target = shape;
      if (batched) target[0] = in.shape[0];
      CopyBlock(reinterpret_cast<const uint8_t*>(in.string_pointers.data()), in.shape,
                reinterpret_cast<uint8_t*>(out.data() + offset), target, in.shape, sizeof(T));
      offset += (batched ? in.shape[0] : 1) * per_row;
    }
    return out;
  }

  struct OutputView {
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;     // elements; for strings, element numbers (int64)
    std::vector<std::string> strings;  // string outputs
    std::vector<int64_t> index;
    size_t element_size = 0;
  };

  // Reads output `j`'s type, shape and data; an output that disagrees with the configuration
  // fails the Run.
  std::string InspectOutput(size_t j, OutputView* view) {
    const TensorSpec& spec = s_.model->settings.outputs[j];
    const bool batched = s_.model->settings.batched();
    OrtTensorTypeAndShapeInfo* info = nullptr;
    std::string error = CheckStatus(ort_, ort_.GetTensorTypeAndShape(outputs_[j], &info), "output shape");
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    std::vector<int64_t>& shape = view->shape;
    if (error.empty()) error = CheckStatus(ort_, ort_.GetTensorElementType(info, &type), "output type");
    if (error.empty()) error = CheckStatus(ort_, ort_.GetDimensionsCount(info, &rank), "output rank");
    if (error.empty()) {
      shape.resize(rank);
      error = CheckStatus(ort_, ort_.GetDimensions(info, shape.data(), rank), "output dims");
    }
    if (info != nullptr) ort_.ReleaseTensorTypeAndShapeInfo(info);
    if (!error.empty()) return error;
    const std::string name = "output '" + spec.name + "'";
    if (type != spec.onnx_type) return name + " is " + OnnxTypeName(type) + ", the configuration says " + TritonTypeName(spec.triton_type);
    if (rank != spec.dims.size() + (batched ? 1 : 0)) return name + " has shape " + ShapeText(shape) + ", not the configured rank";
    if (batched && shape[0] != total_rows_) {
      return name + " has " + std::to_string(shape[0]) + " rows for a batch of " + std::to_string(total_rows_);
    }
    if (spec.is_string()) {
      error = ReadStrings(outputs_[j], static_cast<size_t>(ElementCount(shape)), &view->strings);
      view->index.resize(view->strings.size());
      for (size_t k = 0; k < view->index.size(); ++k) view->index[k] = static_cast<int64_t>(k);
      view->data = reinterpret_cast<const uint8_t*>(view->index.data());
      view->element_size = sizeof(int64_t);
      return error;
    }
    void* raw = nullptr;
    error = CheckStatus(ort_, ort_.GetTensorMutableData(outputs_[j], &raw), "output data");
    view->data = static_cast<const uint8_t*>(raw);
    view->element_size = spec.element_size;
    return error;
  }

  // Splits output `j` back into the responses of the requests that asked for it.
  void SendOutput(size_t j, const OutputView& view) {
    const TensorSpec& spec = s_.model->settings.outputs[j];
    const bool batched = s_.model->settings.batched();
    const std::string name = "output '" + spec.name + "'";
    const std::vector<int64_t>& shape = view.shape;
    const size_t element_size = view.element_size;
    const uint8_t* data = view.data;
    const std::vector<std::string>& strings = view.strings;
    const int64_t per_row = batched ? ElementCount(shape) / std::max<int64_t>(shape[0], 1) : 0;
    int64_t row = 0;
    for (Pending* p : batch_) {
      std::vector<int64_t> own = shape;
      if (batched) own[0] = p->rows;
      if (first_ragged_input_ >= 0) {
        const int64_t length = p->inputs[first_ragged_input_].shape[ragged_axis_];
        for (size_t a = batched ? 1 : 0; a < own.size(); ++a) {
          if (spec.dims[a - (batched ? 1 : 0)] == -1 && own[a] == padded_length_) own[a] = length;
        }
      }
      std::vector<int64_t> source = shape;
      if (batched) source[0] = p->rows;
      const uint8_t* src = data + row * per_row * element_size;
      row += p->rows;
      if (!p->error.empty() || !IsRequested(p, spec.name)) continue;
      std::vector<uint8_t> cut(static_cast<size_t>(ElementCount(own)) * element_size);
      if (!cut.empty()) CopyBlock(src, source, cut.data(), own, own, element_size);
      if (spec.name == s_.model->settings.cut_flag_output && spec.triton_type == TRITONSERVER_TYPE_BOOL) {
        FlagCutRows(*p, &cut);
      }
      std::string wire;
      if (spec.is_string()) {
        const int64_t* picked = reinterpret_cast<const int64_t*>(cut.data());
        for (size_t k = 0; k < cut.size() / sizeof(int64_t); ++k) AppendBytes(strings[picked[k]], &wire);
      }
      const uint8_t* payload = spec.is_string() ? reinterpret_cast<const uint8_t*>(wire.data()) : cut.data();
      const size_t payload_size = spec.is_string() ? wire.size() : cut.size();
      TRITONBACKEND_Output* output = nullptr;
      std::string out_error =
          TakeError(TRITONBACKEND_ResponseOutput(p->response, &output, spec.name.c_str(), spec.triton_type, own.data(),
                                                 static_cast<uint32_t>(own.size())));
      void* buffer = nullptr;
      TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
      int64_t memory_id = 0;
      if (out_error.empty()) {
        out_error = TakeError(TRITONBACKEND_OutputBuffer(output, &buffer, payload_size, &memory_type, &memory_id));
      }
      if (out_error.empty() && memory_type == TRITONSERVER_MEMORY_GPU) out_error = "Triton gave a GPU output buffer";
      if (out_error.empty()) {
        if (payload_size > 0) std::memcpy(buffer, payload, payload_size);
      } else {
        p->code = TRITONSERVER_ERROR_INTERNAL;
        p->error = name + ": " + out_error;
      }
    }
  }

  // Sets every element of a row whose text input was cut (cut_string_chars) in a BOOL output.
  static void FlagCutRows(const Pending& p, std::vector<uint8_t>* flags) {
    const int64_t rows = std::max<int64_t>(p.rows, 1);
    const size_t per_row = flags->size() / static_cast<size_t>(rows);
    for (const RequestInput& in : p.inputs) {
      if (in.cut.empty()) continue;
      const size_t elements_per_row = std::max<size_t>(in.cut.size() / static_cast<size_t>(rows), 1);
      for (size_t e = 0; e < in.cut.size(); ++e) {
        const size_t r = e / elements_per_row;
        if (in.cut[e] && r < static_cast<size_t>(rows)) std::fill_n(flags->begin() + r * per_row, per_row, 1);
      }
    }
  }

  std::string ReadStrings(OrtValue* value, size_t count, std::vector<std::string>* out) {
    size_t length = 0;
    std::string error = CheckStatus(ort_, ort_.GetStringTensorDataLength(value, &length), "string output length");
    if (!error.empty()) return error;
    std::string content(length, '\0');
    std::vector<size_t> offsets(count);
    error = CheckStatus(ort_, ort_.GetStringTensorContent(value, content.data(), length, offsets.data(), count),
                        "string output");
    for (size_t k = 0; error.empty() && k < count; ++k) {
      const size_t end = k + 1 < count ? offsets[k + 1] : length;
      out->push_back(content.substr(offsets[k], end - offsets[k]));
    }
    return error;
  }

  static bool IsRequested(Pending* p, const std::string& name) {
    uint32_t count = 0;
    if (!TakeError(TRITONBACKEND_RequestOutputCount(p->request, &count)).empty()) return true;
    for (uint32_t k = 0; k < count; ++k) {
      const char* requested = nullptr;
      if (TakeError(TRITONBACKEND_RequestOutputName(p->request, k, &requested)).empty() && requested != nullptr &&
          name == requested) {
        return true;
      }
    }
    return false;
  }

  InstanceState& s_;
  const OrtFunctions& ort_;
  const std::vector<Pending*>& batch_;
  std::vector<OrtValue*> inputs_;
  std::vector<OrtValue*> outputs_;
  std::vector<std::vector<uint8_t>> owned_;
  std::vector<OutputView> views_;
  int64_t total_rows_ = 0;
  int first_ragged_input_ = -1;
  size_t ragged_axis_ = 0;
  int64_t padded_length_ = 0;
};

void ReportBatch(InstanceState* s, int64_t rows, uint64_t exec_start, uint64_t compute_start, uint64_t compute_end,
                 uint64_t exec_end) {
  std::string error = TakeError(TRITONBACKEND_ModelInstanceReportBatchStatistics(
      s->triton, static_cast<uint64_t>(rows), exec_start, compute_start, compute_end, exec_end));
  if (!error.empty()) Log(TRITONSERVER_LOG_WARN, __LINE__, "batch statistics: " + error);
}

// The request's `fastpath_priority` parameter (INT, or a STRING holding an integer); 0 when absent.
int64_t RequestPriority(TRITONBACKEND_Request* request) {
  uint32_t count = 0;
  if (!TakeError(TRITONBACKEND_RequestParameterCount(request, &count)).empty()) return 0;
  for (uint32_t i = 0; i < count; ++i) {
    const char* key = nullptr;
    TRITONSERVER_ParameterType type;
    const void* value = nullptr;
    if (!TakeError(TRITONBACKEND_RequestParameter(request, i, &key, &type, &value)).empty() || key == nullptr ||
        value == nullptr || std::strcmp(key, kPriorityParameter) != 0) {
      continue;
    }
    if (type == TRITONSERVER_PARAMETER_INT) return std::max<int64_t>(0, *static_cast<const int64_t*>(value));
    if (type == TRITONSERVER_PARAMETER_STRING) return std::max<int64_t>(0, std::atoll(static_cast<const char*>(value)));
    return 0;
  }
  return 0;
}

// Admission control over the good requests of one batch: those shed leave `good` with an
// UNAVAILABLE "overloaded:" error (the SDK maps it to Overloaded and retries with backoff).
void Admit(InstanceState* s, std::vector<Pending*>* good) {
  if (!s->admission || good->empty()) return;
  std::vector<int64_t> rows, priorities;
  for (Pending* p : *good) {
    rows.push_back(p->rows);
    priorities.push_back(RequestPriority(p->request));
  }
  const std::vector<bool> keep = s->admission->Admit(rows, priorities);
  std::vector<Pending*> admitted;
  for (size_t i = 0; i < good->size(); ++i) {
    if (keep[i]) {
      admitted.push_back((*good)[i]);
    } else {
      (*good)[i]->code = TRITONSERVER_ERROR_UNAVAILABLE;
      (*good)[i]->error = kOverloaded;
      ++s->shed;
    }
  }
  good->swap(admitted);
}

// Folds a batch computed in one Run into the admission's cost per row.
void ObserveBatch(InstanceState* s, const std::vector<Pending*>& good) {
  if (!s->admission || good.empty()) return;
  int64_t rows = 0;
  for (Pending* p : good) {
    if (!p->error.empty() || p->compute_start_ns != good[0]->compute_start_ns) return;  // not one Run
    rows += p->rows;
  }
  const uint64_t start = good[0]->compute_start_ns, end = good[0]->compute_end_ns;
  if (end > start) s->admission->Observe(rows, static_cast<double>(end - start) / 1e9);
}

// Runs the good requests of `batch` together; if that Run fails and there is more than one, runs
// each alone so only the one that fails gets the error. `report`: one batch statistic per Run
// (false: the caller reports the execution as a whole).
void RunGood(InstanceState* s, const std::vector<Pending*>& good, uint64_t exec_start, bool report = true) {
  if (good.empty()) return;
  std::string error;
  int64_t rows = 0;
  {
    BatchRun run(s, good);
    error = run.Run();
    rows = run.rows();
  }
  if (error.empty()) {
    if (report) ReportBatch(s, rows, exec_start, good[0]->compute_start_ns, good[0]->compute_end_ns, NowNs());
    return;
  }
  if (good.size() == 1) {
    // Run alone and still failing: Triton already checked the shapes against the configuration,
    // so what onnxruntime refuses is this request's content (e.g. inputs whose lengths disagree).
    good[0]->code = TRITONSERVER_ERROR_INVALID_ARG;
    good[0]->error = "this request cannot run: " + error;
    return;
  }
  Log(TRITONSERVER_LOG_WARN, __LINE__, s->name + ": a batch of " + std::to_string(good.size()) +
                                          " requests failed (" + error + "); running them one by one");
  for (Pending* p : good) RunGood(s, {p}, exec_start, report);
}

// Runs the good requests of a batch in length buckets (`length_bucket_rows`): sorted by their
// longest row, then about that many rows per Run, each padded only to its own longest, so short
// texts never pay for a long one's padding. 0, or a batch that fits one bucket: one Run. Triton
// sees one execution either way (its statistics span the bucket Runs).
void RunInBuckets(InstanceState* s, std::vector<Pending*> good, uint64_t exec_start) {
  const int64_t bucket = s->model->settings.length_bucket_rows;
  int64_t rows = 0;
  for (const Pending* p : good) rows += p->rows;
  if (bucket <= 0 || rows <= bucket) {
    RunGood(s, good, exec_start);
    ObserveBatch(s, good);
    return;
  }
  std::stable_sort(good.begin(), good.end(), [](const Pending* a, const Pending* b) { return a->length < b->length; });
  std::vector<Pending*> part;
  int64_t part_rows = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    part.push_back(good[i]);
    part_rows += good[i]->rows;
    if (part_rows < bucket && i + 1 < good.size()) continue;
    RunGood(s, part, exec_start, /*report=*/false);
    ObserveBatch(s, part);
    part.clear();
    part_rows = 0;
  }
  uint64_t start = 0, end = 0;
  int64_t computed = 0;
  for (const Pending* p : good) {
    if (!p->error.empty() || p->compute_start_ns == 0) continue;
    start = start == 0 ? p->compute_start_ns : std::min(start, p->compute_start_ns);
    end = std::max(end, p->compute_end_ns);
    computed += p->rows;
  }
  if (computed > 0) ReportBatch(s, computed, exec_start, start, end, NowNs());
}

}  // namespace
}  // namespace fastpath

using namespace fastpath;  // NOLINT: the entry points below are extern "C"

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* /*backend*/) {
  uint32_t major = 0, minor = 0;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != kApiMajor || minor < kApiMinor) {
    return NewError(TRITONSERVER_ERROR_UNSUPPORTED,
                    "fastpath_ort needs Triton backend API " + std::to_string(kApiMajor) + "." +
                        std::to_string(kApiMinor) + "+, the server has " + std::to_string(major) + "." +
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
  std::string error = LoadModelSettings(model, &state->settings);
  if (!error.empty()) return NewError(TRITONSERVER_ERROR_INVALID_ARG, where + error);
  const ModelSettings& settings = state->settings;

  state->onnx_path = state->dir + "/" + std::to_string(state->version) + "/" + settings.onnx_file;
  if (!FileExists(state->onnx_path)) {
    return NewError(TRITONSERVER_ERROR_NOT_FOUND, where + "no ONNX graph at '" + state->onnx_path + "' (parameter onnx_file)");
  }
  std::string ort_path = Resolve(settings.onnxruntime_library, state->dir);
  if (ort_path.empty()) ort_path = FindOrtIn(OwnDirectory());
  if (ort_path.empty()) ort_path = FindOrtIn(state->dir);
  if (ort_path.empty()) ort_path = "libonnxruntime.so.1";  // the loader's search path, last
  error = AcquireRuntime(ort_path);
  if (!error.empty()) {
    return NewError(TRITONSERVER_ERROR_NOT_FOUND,
                    where + error + " (set parameter onnxruntime_library, or place libonnxruntime.so next to the backend)");
  }
  state->holds_runtime = true;

  if (!settings.custom_op_library.empty()) {
    state->custom_op_path = Resolve(settings.custom_op_library, state->dir);
    if (!FileExists(state->custom_op_path)) {
      return NewError(TRITONSERVER_ERROR_NOT_FOUND, where + "custom_op_library '" + state->custom_op_path + "' does not exist");
    }
    if (!settings.python_library.empty() && dlopen(settings.python_library.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* why = dlerror();
      return NewError(TRITONSERVER_ERROR_NOT_FOUND,
                      where + "custom_op_library needs python_library '" + settings.python_library +
                          "', which does not load: " + (why ? why : "?") +
                          " (install it, or set python_library to \"\" for an op library that needs no Python)");
    }
  }
  Log(TRITONSERVER_LOG_INFO, __LINE__,
      where + "onnxruntime " + TheRuntime().version + " from '" + TheRuntime().path + "', graph '" + state->onnx_path +
          "', intra_op_threads " + std::to_string(settings.intra_op_threads) +
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
  state->triton = instance;
  state->ort = &TheRuntime().ort;
  const char* name = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceName(instance, &name));
  state->name = name;
  const ModelSettings& settings = state->model->settings;
  if (!settings.admission_budgets_s.empty()) {
    state->admission = std::make_unique<Admission>(settings.admission_budgets_s, settings.admission_min_rows);
  }
  std::string error = CreateSession(state.get());
  if (!error.empty()) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG, "fastpath_ort model '" + state->model->name + "': " + error);
  }
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceSetState(instance, state.release()));
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* state = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
  auto* s = static_cast<InstanceState*>(state);
  if (s != nullptr && s->shed > 0) {
    Log(TRITONSERVER_LOG_INFO, __LINE__, s->name + ": admission control shed " + std::to_string(s->shed) + " requests");
  }
  delete static_cast<InstanceState*>(state);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, const uint32_t request_count) {
  const uint64_t exec_start = NowNs();
  void* raw_state = nullptr;
  FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &raw_state));
  auto* s = static_cast<InstanceState*>(raw_state);
  const ModelSettings& settings = s->model->settings;

  // From here on every request is answered and released by this function, whatever happens.
  std::vector<Pending> pending(request_count);
  std::vector<Pending*> good;
  for (uint32_t r = 0; r < request_count; ++r) {
    Pending& p = pending[r];
    p.request = requests[r];
    std::string error = TakeError(TRITONBACKEND_ResponseNew(&p.response, p.request));
    if (!error.empty()) {
      p.response = nullptr;
      p.code = TRITONSERVER_ERROR_INTERNAL;
      p.error = "cannot create a response: " + error;
      continue;
    }
    try {
      ReadRequest(settings, &p);
    } catch (const std::exception& e) {
      p.code = TRITONSERVER_ERROR_INTERNAL;
      p.error = std::string("fastpath_ort: reading the request: ") + e.what();
    }
    if (p.error.empty()) good.push_back(&p);
  }
  try {
    if (settings.batched()) {
      Admit(s, &good);
      RunInBuckets(s, good, exec_start);
    } else {
      for (Pending* p : good) RunGood(s, {p}, exec_start);
    }
  } catch (const std::exception& e) {  // e.g. bad_alloc: the requests still get their answer
    for (Pending* p : good) {
      p->code = TRITONSERVER_ERROR_INTERNAL;
      p->error = std::string("fastpath_ort: ") + e.what();
    }
  }
  const uint64_t exec_end = NowNs();
  for (Pending& p : pending) {
    const bool success = p.error.empty();
    if (p.response != nullptr) {
      TRITONSERVER_Error* err = success ? nullptr : NewError(p.code, p.error);
      std::string send_error = TakeError(TRITONBACKEND_ResponseSend(p.response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err));
      if (err != nullptr) TRITONSERVER_ErrorDelete(err);
      if (!send_error.empty()) Log(TRITONSERVER_LOG_ERROR, __LINE__, s->name + ": sending a response: " + send_error);
    } else {
      Log(TRITONSERVER_LOG_ERROR, __LINE__, s->name + ": " + p.error);
    }
    const uint64_t compute_start = p.compute_start_ns ? p.compute_start_ns : exec_end;
    const uint64_t compute_end = p.compute_end_ns ? p.compute_end_ns : exec_end;
    std::string stats_error = TakeError(TRITONBACKEND_ModelInstanceReportStatistics(
        instance, p.request, success, exec_start, compute_start, compute_end, exec_end));
    if (!stats_error.empty()) Log(TRITONSERVER_LOG_WARN, __LINE__, "request statistics: " + stats_error);
    std::string release_error = TakeError(TRITONBACKEND_RequestRelease(p.request, TRITONSERVER_REQUEST_RELEASE_ALL));
    if (!release_error.empty()) Log(TRITONSERVER_LOG_ERROR, __LINE__, "releasing a request: " + release_error);
  }
  return nullptr;
}

}  // extern "C"
