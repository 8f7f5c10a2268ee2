// slot_check: proves each OrtApi slot in ort_api.h is the function its name says, by behaviour,
// against a real libonnxruntime (only OrtGetApiBase is exported, so slots cannot be compared
// with dlsym). Usage: slot_check <libonnxruntime.so> <probe.onnx>
//
// probe.onnx (written by tests/unit/test_native_build.py): inputs x float[N,M], s string[N];
// outputs y = x * (one + one) (float; the Add is on constants, so constant folding removes it),
// s_out = s (string), x_shape = Shape(x) (int64).
//
// The session-setting slots are proved by what they change, not by a null status: intra-op
// threads and the parallel execution mode with inter-op threads add threads to the process
// (/proc/self/task) while the session lives; the optimization level decides whether the saved
// optimized graph (SetOptimizedModelFilePath) still holds the constant Add.
// Prints "ok <slot> <name>" for every slot it verified, "FAIL ..." and exit 1 otherwise.
#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ort_api.h"

using namespace fastpath;  // NOLINT

namespace {

OrtFunctions ort;
std::set<std::string> verified;

[[noreturn]] void Fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  std::exit(1);
}

void Ok(const char* name) { verified.insert(name); }

void Check(OrtStatus* status, const char* name) {
  if (status != nullptr) Fail(std::string(name) + ": " + ort.GetErrorMessage(status));
  Ok(name);
}

void Expect(bool condition, const std::string& what) {
  if (!condition) Fail(what);
}

size_t ThreadCount() {
  size_t count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count;
}

struct SessionSetup {
  int intra = 1;
  int inter = 1;
  ExecutionMode mode = ORT_SEQUENTIAL;
  GraphOptimizationLevel level = ORT_ENABLE_ALL;
  const char* optimized_path = nullptr;
};

// Threads the process has while a session made with `setup` lives.
size_t ThreadsWith(OrtEnv* env, const char* model, const SessionSetup& setup) {
  OrtSessionOptions* options = nullptr;
  Check(ort.CreateSessionOptions(&options), "CreateSessionOptions");
  Check(ort.SetIntraOpNumThreads(options, setup.intra), "SetIntraOpNumThreads (status)");
  Check(ort.SetInterOpNumThreads(options, setup.inter), "SetInterOpNumThreads (status)");
  Check(ort.SetSessionExecutionMode(options, setup.mode), "SetSessionExecutionMode (status)");
  Check(ort.SetSessionGraphOptimizationLevel(options, setup.level), "SetSessionGraphOptimizationLevel (status)");
  if (setup.optimized_path != nullptr) {
    Check(ort.SetOptimizedModelFilePath(options, setup.optimized_path), "SetOptimizedModelFilePath (status)");
  }
  OrtSession* session = nullptr;
  Check(ort.CreateSession(env, model, options, &session), "CreateSession");
  const size_t threads = ThreadCount();
  ort.ReleaseSession(session);
  ort.ReleaseSessionOptions(options);
  return threads;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// The session-setting slots, each by an effect a wrong slot would not have.
void ProveSessionSettings(OrtEnv* env, const char* model) {
  SessionSetup base;
  const size_t one = ThreadsWith(env, model, base);
  SessionSetup intra = base;
  intra.intra = 3;
  const size_t three = ThreadsWith(env, model, intra);
  Expect(three >= one + 2, "intra_op 3 did not add 2 threads (" + std::to_string(one) + " -> " + std::to_string(three) + ")");
  Ok("SetIntraOpNumThreads");
  SessionSetup sequential = base;
  sequential.inter = 3;
  SessionSetup parallel = sequential;
  parallel.mode = ORT_PARALLEL;
  SessionSetup parallel_one = parallel;
  parallel_one.inter = 1;
  const size_t seq = ThreadsWith(env, model, sequential);
  const size_t par = ThreadsWith(env, model, parallel);
  const size_t par_one = ThreadsWith(env, model, parallel_one);
  Expect(par > seq, "ORT_PARALLEL with inter_op 3 added no threads over ORT_SEQUENTIAL (" + std::to_string(seq) +
                        " vs " + std::to_string(par) + ")");
  Ok("SetSessionExecutionMode");
  Expect(par > par_one, "inter_op 3 added no threads over inter_op 1 in ORT_PARALLEL (" + std::to_string(par_one) +
                            " vs " + std::to_string(par) + ")");
  Ok("SetInterOpNumThreads");
  const std::string disabled_path = std::string(model) + ".disabled.onnx";
  const std::string basic_path = std::string(model) + ".basic.onnx";
  SessionSetup disabled = base;
  disabled.level = ORT_DISABLE_ALL;
  disabled.optimized_path = disabled_path.c_str();
  SessionSetup basic = base;
  basic.level = ORT_ENABLE_BASIC;
  basic.optimized_path = basic_path.c_str();
  ThreadsWith(env, model, disabled);
  ThreadsWith(env, model, basic);
  const std::string kept = ReadFile(disabled_path), folded = ReadFile(basic_path);
  Expect(!kept.empty() && !folded.empty(), "SetOptimizedModelFilePath wrote no optimized graph");
  Ok("SetOptimizedModelFilePath");
  Expect(kept.find("Add") != std::string::npos && folded.find("Add") == std::string::npos,
         "ORT_DISABLE_ALL should keep the constant Add and ORT_ENABLE_BASIC fold it away");
  Ok("SetSessionGraphOptimizationLevel");
  std::remove(disabled_path.c_str());
  std::remove(basic_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: slot_check <libonnxruntime.so> <probe.onnx>\n");
    return 2;
  }
  std::string version;
  std::string error = LoadOrt(argv[1], &ort, &version);
  if (!error.empty()) Fail(error);
  std::printf("onnxruntime %s\n", version.c_str());

  // 0, 1, 2, 93: a status made with a code and message reads back the same, then is released.
  OrtStatus* status = ort.CreateStatus(ORT_INVALID_ARGUMENT, "probe message");
  Expect(status != nullptr, "CreateStatus returned null");
  Expect(ort.GetErrorCode(status) == ORT_INVALID_ARGUMENT, "GetErrorCode does not read back the code");
  Expect(std::strcmp(ort.GetErrorMessage(status), "probe message") == 0, "GetErrorMessage does not read back");
  ort.ReleaseStatus(status);
  for (const char* n : {"CreateStatus", "GetErrorCode", "GetErrorMessage", "ReleaseStatus"}) Ok(n);

  OrtEnv* env = nullptr;
  Check(ort.CreateEnv(ORT_LOGGING_LEVEL_WARNING, "slot_check", &env), "CreateEnv");
  OrtSessionOptions* options = nullptr;
  Check(ort.CreateSessionOptions(&options), "CreateSessionOptions");
  ProveSessionSettings(env, argv[2]);

  // 29: a library that is not there fails with a status (a wrong slot would not take 3 args so).
  void* handle = nullptr;
  status = ort.RegisterCustomOpsLibrary(options, "/nonexistent/libfastpath_probe.so", &handle);
  Expect(status != nullptr, "RegisterCustomOpsLibrary accepted a missing library");
  ort.ReleaseStatus(status);
  Ok("RegisterCustomOpsLibrary");

  // 7: a missing file fails; the probe loads.
  OrtSession* session = nullptr;
  status = ort.CreateSession(env, "/nonexistent/probe.onnx", options, &session);
  Expect(status != nullptr, "CreateSession accepted a missing file");
  ort.ReleaseStatus(status);
  Check(ort.CreateSession(env, argv[2], options, &session), "CreateSession");

  // 30, 31 differ on the probe (2 inputs, 3 outputs); names and types read back.
  size_t inputs = 0, outputs = 0;
  Check(ort.SessionGetInputCount(session, &inputs), "SessionGetInputCount");
  Check(ort.SessionGetOutputCount(session, &outputs), "SessionGetOutputCount");
  Expect(inputs == 2 && outputs == 3, "input/output counts are not 2/3");
  OrtAllocator* allocator = nullptr;
  Check(ort.GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions");
  char* name = nullptr;
  Check(ort.SessionGetInputName(session, 1, allocator, &name), "SessionGetInputName");
  Expect(std::strcmp(name, "s") == 0, "input 1 is not named 's'");
  Check(ort.AllocatorFree(allocator, name), "AllocatorFree");
  Check(ort.SessionGetOutputName(session, 2, allocator, &name), "SessionGetOutputName");
  Expect(std::strcmp(name, "x_shape") == 0, "output 2 is not named 'x_shape'");
  ort.AllocatorFree(allocator, name);

  OrtTypeInfo* type_info = nullptr;
  const OrtTensorTypeAndShapeInfo* tensor_info = nullptr;
  ONNXTensorElementDataType type;
  size_t rank = 0;
  Check(ort.SessionGetInputTypeInfo(session, 1, &type_info), "SessionGetInputTypeInfo");
  Check(ort.CastTypeInfoToTensorInfo(type_info, &tensor_info), "CastTypeInfoToTensorInfo");
  Check(ort.GetTensorElementType(tensor_info, &type), "GetTensorElementType");
  Expect(type == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, "input 's' is not a string tensor");
  ort.ReleaseTypeInfo(type_info);
  Ok("ReleaseTypeInfo");
  Check(ort.SessionGetOutputTypeInfo(session, 2, &type_info), "SessionGetOutputTypeInfo");
  ort.CastTypeInfoToTensorInfo(type_info, &tensor_info);
  ort.GetTensorElementType(tensor_info, &type);
  Check(ort.GetDimensionsCount(tensor_info, &rank), "GetDimensionsCount");
  Expect(type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 && rank == 1, "output 'x_shape' is not int64[2]");
  int64_t dim = 0;
  Check(ort.GetDimensions(tensor_info, &dim, 1), "GetDimensions");
  Expect(dim == 2, "output 'x_shape' does not have 2 elements");
  ort.ReleaseTypeInfo(type_info);

  // 69, 49, 51, 65, 64: a tensor over our own memory reports our pointer and shape.
  OrtMemoryInfo* cpu = nullptr;
  Check(ort.CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu), "CreateCpuMemoryInfo");
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const int64_t x_shape[] = {2, 3};
  OrtValue* x_value = nullptr;
  Check(ort.CreateTensorWithDataAsOrtValue(cpu, x.data(), x.size() * sizeof(float), x_shape, 2,
                                           ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &x_value),
        "CreateTensorWithDataAsOrtValue");
  void* data = nullptr;
  Check(ort.GetTensorMutableData(x_value, &data), "GetTensorMutableData");
  Expect(data == x.data(), "GetTensorMutableData does not return the caller's buffer");
  OrtTensorTypeAndShapeInfo* shape_info = nullptr;
  Check(ort.GetTensorTypeAndShape(x_value, &shape_info), "GetTensorTypeAndShape");
  size_t count = 0;
  Check(ort.GetTensorShapeElementCount(shape_info, &count), "GetTensorShapeElementCount");
  Expect(count == 6, "GetTensorShapeElementCount is not 6");
  ort.ReleaseTensorTypeAndShapeInfo(shape_info);
  Ok("ReleaseTensorTypeAndShapeInfo");

  // 48, 52: a string tensor filled from C strings.
  const char* texts[] = {"héllo", "world"};
  const int64_t s_shape[] = {2};
  OrtValue* s_value = nullptr;
  Check(ort.CreateTensorAsOrtValue(allocator, s_shape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, &s_value),
        "CreateTensorAsOrtValue");
  Check(ort.FillStringTensor(s_value, texts, 2), "FillStringTensor");

  // 9: Run, then the outputs hold what the graph computes; 53, 54 read the strings back.
  const char* in_names[] = {"x", "s"};
  const char* out_names[] = {"y", "s_out", "x_shape"};
  const OrtValue* in_values[] = {x_value, s_value};
  OrtValue* out_values[3] = {nullptr, nullptr, nullptr};
  Check(ort.Run(session, nullptr, in_names, in_values, 2, out_names, 3, out_values), "Run");
  float* y = nullptr;
  ort.GetTensorMutableData(out_values[0], reinterpret_cast<void**>(&y));
  for (size_t i = 0; i < x.size(); ++i) Expect(y[i] == 2 * x[i], "y is not 2x");
  int64_t* shape_out = nullptr;
  ort.GetTensorMutableData(out_values[2], reinterpret_cast<void**>(&shape_out));
  Expect(shape_out[0] == 2 && shape_out[1] == 3, "x_shape is not [2, 3]");
  size_t length = 0;
  Check(ort.GetStringTensorDataLength(out_values[1], &length), "GetStringTensorDataLength");
  Expect(length == std::strlen(texts[0]) + std::strlen(texts[1]), "string data length is wrong");
  std::string content(length, '\0');
  size_t offsets[2];
  Check(ort.GetStringTensorContent(out_values[1], content.data(), length, offsets, 2), "GetStringTensorContent");
  Expect(content == std::string(texts[0]) + texts[1] && offsets[1] == std::strlen(texts[0]),
         "string content does not read back");

  for (OrtValue* v : out_values) ort.ReleaseValue(v);
  ort.ReleaseValue(x_value);
  ort.ReleaseValue(s_value);
  Ok("ReleaseValue");
  ort.ReleaseMemoryInfo(cpu);
  Ok("ReleaseMemoryInfo");
  ort.ReleaseSession(session);
  Ok("ReleaseSession");
  ort.ReleaseSessionOptions(options);
  Ok("ReleaseSessionOptions");
  ort.ReleaseEnv(env);
  Ok("ReleaseEnv");

  int missing = 0;
  for (size_t i = 0; i < kOrtSlotCount; ++i) {
    if (verified.count(kOrtSlots[i].name)) {
      std::printf("ok %zu %s\n", kOrtSlots[i].index, kOrtSlots[i].name);
    } else {
      std::printf("FAIL %zu %s was not exercised\n", kOrtSlots[i].index, kOrtSlots[i].name);
      ++missing;
    }
  }
  return missing == 0 ? 0 : 1;
}
