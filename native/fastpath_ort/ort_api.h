// The subset of onnxruntime's C API (OrtApi) this backend uses, declared by slot.
//
// onnxruntime exports one symbol, OrtGetApiBase(); every other function is a pointer in the OrtApi
// struct, which upstream only ever appends to. All slots used here sit in the first block (API
// version 1), so their indices are frozen; each was checked against onnxruntime_c_api.h (API 1 and
// upstream main) and is exercised by slot_check.cc (tests/unit/test_native_build.py runs it against
// the venv's libonnxruntime). The library is dlopen-ed at run time: nothing is linked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" {

struct OrtStatus;
struct OrtEnv;
struct OrtSession;
struct OrtSessionOptions;
struct OrtValue;
struct OrtMemoryInfo;
struct OrtRunOptions;
struct OrtTypeInfo;
struct OrtTensorTypeAndShapeInfo;
struct OrtAllocator;

// Positional enums, in upstream order.
enum ONNXTensorElementDataType {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13,
};

enum OrtLoggingLevel {
  ORT_LOGGING_LEVEL_VERBOSE = 0,
  ORT_LOGGING_LEVEL_INFO = 1,
  ORT_LOGGING_LEVEL_WARNING = 2,
  ORT_LOGGING_LEVEL_ERROR = 3,
  ORT_LOGGING_LEVEL_FATAL = 4,
};

enum OrtErrorCode { ORT_OK = 0, ORT_FAIL = 1, ORT_INVALID_ARGUMENT = 2 };

enum GraphOptimizationLevel {
  ORT_DISABLE_ALL = 0,
  ORT_ENABLE_BASIC = 1,
  ORT_ENABLE_EXTENDED = 2,
  ORT_ENABLE_ALL = 99,
};

enum ExecutionMode { ORT_SEQUENTIAL = 0, ORT_PARALLEL = 1 };
enum OrtAllocatorType { OrtInvalidAllocator = -1, OrtDeviceAllocator = 0, OrtArenaAllocator = 1 };
enum OrtMemType { OrtMemTypeCPUInput = -2, OrtMemTypeCPUOutput = -1, OrtMemTypeDefault = 0 };

struct OrtApiBase {
  const void* (*GetApi)(uint32_t version);  // const OrtApi*; NULL when the version is too new
  const char* (*GetVersionString)();
};

}  // extern "C"

namespace fastpath {

// X(slot, return type, name, parameters): one line per OrtApi function used.
#define FASTPATH_ORT_SLOTS(X)                                                                     \
  X(0, OrtStatus*, CreateStatus, (OrtErrorCode code, const char* msg))                            \
  X(1, OrtErrorCode, GetErrorCode, (const OrtStatus* status))                                     \
  X(2, const char*, GetErrorMessage, (const OrtStatus* status))                                   \
  X(3, OrtStatus*, CreateEnv, (OrtLoggingLevel level, const char* logid, OrtEnv** out))           \
  X(7, OrtStatus*, CreateSession,                                                                 \
    (const OrtEnv* env, const char* model_path, const OrtSessionOptions* options,                 \
     OrtSession** out))                                                                           \
  X(9, OrtStatus*, Run,                                                                           \
    (OrtSession* session, const OrtRunOptions* run_options, const char* const* input_names,      \
     const OrtValue* const* inputs, size_t input_len, const char* const* output_names,            \
     size_t output_names_len, OrtValue** outputs))                                                \
  X(10, OrtStatus*, CreateSessionOptions, (OrtSessionOptions** out))                             \
  X(11, OrtStatus*, SetOptimizedModelFilePath, (OrtSessionOptions* options, const char* path))   \
  X(13, OrtStatus*, SetSessionExecutionMode, (OrtSessionOptions* options, ExecutionMode mode))   \
  X(23, OrtStatus*, SetSessionGraphOptimizationLevel,                                             \
    (OrtSessionOptions* options, GraphOptimizationLevel level))                                  \
  X(24, OrtStatus*, SetIntraOpNumThreads, (OrtSessionOptions* options, int threads))             \
  X(25, OrtStatus*, SetInterOpNumThreads, (OrtSessionOptions* options, int threads))             \
  X(29, OrtStatus*, RegisterCustomOpsLibrary,                                                     \
    (OrtSessionOptions* options, const char* library_path, void** library_handle))               \
  X(30, OrtStatus*, SessionGetInputCount, (const OrtSession* session, size_t* out))               \
  X(31, OrtStatus*, SessionGetOutputCount, (const OrtSession* session, size_t* out))              \
  X(33, OrtStatus*, SessionGetInputTypeInfo,                                                      \
    (const OrtSession* session, size_t index, OrtTypeInfo** out))                                 \
  X(34, OrtStatus*, SessionGetOutputTypeInfo,                                                     \
    (const OrtSession* session, size_t index, OrtTypeInfo** out))                                 \
  X(36, OrtStatus*, SessionGetInputName,                                                          \
    (const OrtSession* session, size_t index, OrtAllocator* allocator, char** out))               \
  X(37, OrtStatus*, SessionGetOutputName,                                                         \
    (const OrtSession* session, size_t index, OrtAllocator* allocator, char** out))               \
  X(48, OrtStatus*, CreateTensorAsOrtValue,                                                       \
    (OrtAllocator* allocator, const int64_t* shape, size_t shape_len,                            \
     ONNXTensorElementDataType type, OrtValue** out))                                             \
  X(49, OrtStatus*, CreateTensorWithDataAsOrtValue,                                               \
    (const OrtMemoryInfo* info, void* data, size_t data_len, const int64_t* shape,                \
     size_t shape_len, ONNXTensorElementDataType type, OrtValue** out))                           \
  X(51, OrtStatus*, GetTensorMutableData, (OrtValue* value, void** out))                         \
  X(52, OrtStatus*, FillStringTensor, (OrtValue* value, const char* const* s, size_t s_len))     \
  X(53, OrtStatus*, GetStringTensorDataLength, (const OrtValue* value, size_t* len))              \
  X(54, OrtStatus*, GetStringTensorContent,                                                       \
    (const OrtValue* value, void* s, size_t s_len, size_t* offsets, size_t offsets_len))          \
  X(55, OrtStatus*, CastTypeInfoToTensorInfo,                                                     \
    (const OrtTypeInfo* type_info, const OrtTensorTypeAndShapeInfo** out))                        \
  X(60, OrtStatus*, GetTensorElementType,                                                         \
    (const OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType* out))                      \
  X(61, OrtStatus*, GetDimensionsCount, (const OrtTensorTypeAndShapeInfo* info, size_t* out))     \
  X(62, OrtStatus*, GetDimensions,                                                                \
    (const OrtTensorTypeAndShapeInfo* info, int64_t* dims, size_t dims_len))                      \
  X(64, OrtStatus*, GetTensorShapeElementCount,                                                   \
    (const OrtTensorTypeAndShapeInfo* info, size_t* out))                                         \
  X(65, OrtStatus*, GetTensorTypeAndShape, (const OrtValue* value, OrtTensorTypeAndShapeInfo** out)) \
  X(69, OrtStatus*, CreateCpuMemoryInfo,                                                          \
    (OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo** out))                            \
  X(76, OrtStatus*, AllocatorFree, (OrtAllocator* allocator, void* p))                           \
  X(78, OrtStatus*, GetAllocatorWithDefaultOptions, (OrtAllocator** out))                        \
  X(92, void, ReleaseEnv, (OrtEnv* p))                                                           \
  X(93, void, ReleaseStatus, (OrtStatus* p))                                                     \
  X(94, void, ReleaseMemoryInfo, (OrtMemoryInfo* p))                                             \
  X(95, void, ReleaseSession, (OrtSession* p))                                                   \
  X(96, void, ReleaseValue, (OrtValue* p))                                                       \
  X(98, void, ReleaseTypeInfo, (OrtTypeInfo* p))                                                 \
  X(99, void, ReleaseTensorTypeAndShapeInfo, (OrtTensorTypeAndShapeInfo* p))                     \
  X(100, void, ReleaseSessionOptions, (OrtSessionOptions* p))

// The API version asked of OrtGetApiBase()->GetApi: onnxruntime >= 1.16. The slots above are the
// same in every version; asking for a version the library does not know returns NULL.
constexpr uint32_t kOrtApiVersion = 16;

struct OrtFunctions {
#define FASTPATH_ORT_MEMBER(slot, ret, name, params) ret(*name) params = nullptr;
  FASTPATH_ORT_SLOTS(FASTPATH_ORT_MEMBER)
#undef FASTPATH_ORT_MEMBER
};

struct OrtSlot {
  size_t index;
  const char* name;
};

// Every slot used, in order (for slot_check.cc and logs).
extern const OrtSlot kOrtSlots[];
extern const size_t kOrtSlotCount;

// dlopens `path` (RTLD_NOW | RTLD_LOCAL) once per process and fills `fns` from its OrtApi.
// Returns "" on success, else a message naming the library and what failed.
std::string LoadOrt(const std::string& path, OrtFunctions* fns, std::string* version);

// Takes and releases `status`: "" when it is null (success), else its message.
std::string TakeOrtError(const OrtFunctions& ort, OrtStatus* status);

}  // namespace fastpath
