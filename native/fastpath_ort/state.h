// What the backend keeps per model (its settings, read once at load) and per instance (its
// onnxruntime session and admission control).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "admission.h"
#include "config.h"
#include "runtime.h"
#include "triton_api.h"

namespace fastpath {

struct ModelState {
  std::string name;
  uint64_t version = 0;
  std::string dir;
  ModelSettings settings;
  std::string onnx_path;
  std::string custom_op_path;
  const Runtime* runtime = nullptr;  // the process's; never released
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

// Creates `s`'s session from its model's graph and settings and checks the graph against the
// configuration (names, types, ranks and fixed dims).
TRITONSERVER_Error* CreateSession(InstanceState* s);

}  // namespace fastpath
