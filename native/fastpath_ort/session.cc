// An instance's onnxruntime session: options from the model's settings, custom ops, and the
// check that the graph and the configuration agree before any request arrives.
#include <algorithm>
#include <string>
#include <vector>

#include "common.h"
#include "state.h"

namespace fastpath {
namespace {

struct GraphTensor {
  std::string name;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> dims;  // -1 (or another negative value) where the graph leaves a dim free
};

TRITONSERVER_Error* ReadGraphTensor(const InstanceState& s, bool input, size_t index, GraphTensor* tensor) {
  const OrtFunctions& ort = *s.ort;
  char* name = nullptr;
  FASTPATH_RETURN_IF_ERROR(OrtError(ort,
                                    input ? ort.SessionGetInputName(s.session, index, s.allocator, &name)
                                          : ort.SessionGetOutputName(s.session, index, s.allocator, &name),
                                    "reading a graph tensor's name", TRITONSERVER_ERROR_INTERNAL));
  tensor->name = name;
  ort.ReleaseStatus(ort.AllocatorFree(s.allocator, name));
  OrtTypeInfo* type_info = nullptr;
  FASTPATH_RETURN_IF_ERROR(OrtError(ort,
                                    input ? ort.SessionGetInputTypeInfo(s.session, index, &type_info)
                                          : ort.SessionGetOutputTypeInfo(s.session, index, &type_info),
                                    "reading graph tensor '" + tensor->name + "'s type", TRITONSERVER_ERROR_INTERNAL));
  const OrtTensorTypeAndShapeInfo* info = nullptr;
  TRITONSERVER_Error* err = OrtError(ort, ort.CastTypeInfoToTensorInfo(type_info, &info), "reading a tensor type",
                                     TRITONSERVER_ERROR_INTERNAL);
  if (err == nullptr && info == nullptr) {
    err = NewError(TRITONSERVER_ERROR_INVALID_ARG, "graph tensor '" + tensor->name + "' is not a tensor");
  }
  size_t rank = 0;
  if (err == nullptr) err = OrtError(ort, ort.GetTensorElementType(info, &tensor->type), "element type");
  if (err == nullptr) err = OrtError(ort, ort.GetDimensionsCount(info, &rank), "rank");
  if (err == nullptr) {
    tensor->dims.assign(rank, -1);
    if (rank > 0) err = OrtError(ort, ort.GetDimensions(info, tensor->dims.data(), rank), "dims");
  }
  ort.ReleaseTypeInfo(type_info);
  return err;
}

TRITONSERVER_Error* ListGraphTensors(const InstanceState& s, bool inputs, std::vector<GraphTensor>* out) {
  const OrtFunctions& ort = *s.ort;
  size_t count = 0;
  FASTPATH_RETURN_IF_ERROR(OrtError(
      ort, inputs ? ort.SessionGetInputCount(s.session, &count) : ort.SessionGetOutputCount(s.session, &count),
      "counting graph tensors", TRITONSERVER_ERROR_INTERNAL));
  for (size_t i = 0; i < count; ++i) {
    GraphTensor tensor;
    FASTPATH_RETURN_IF_ERROR(ReadGraphTensor(s, inputs, i, &tensor));
    out->push_back(std::move(tensor));
  }
  return nullptr;
}

// Config tensor `spec` against graph tensor `graph`: type, rank, and every dim the graph fixes.
TRITONSERVER_Error* CheckTensor(const ModelSettings& settings, const TensorSpec& spec, const GraphTensor& graph,
                                const char* kind) {
  const std::string where = std::string("config ") + kind + " '" + spec.name + "'";
  if (graph.type != spec.onnx_type) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG, where + " is TYPE_" + TritonTypeName(spec.triton_type) +
                                                        " but the graph's is " + OnnxTypeName(graph.type));
  }
  const size_t batch_axes = settings.batched() ? 1 : 0;
  if (graph.dims.size() != spec.dims.size() + batch_axes) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                    where + " has " + std::to_string(spec.dims.size()) + " dims" + (batch_axes ? " (+1 batch axis)" : "") +
                        " but the graph's has rank " + std::to_string(graph.dims.size()) + " " + ShapeText(graph.dims));
  }
  if (batch_axes && graph.dims[0] >= 0 && graph.dims[0] < settings.max_batch_size) {
    return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                    where + ": the graph fixes the batch axis at " + std::to_string(graph.dims[0]) +
                        ", below max_batch_size " + std::to_string(settings.max_batch_size));
  }
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    const int64_t fixed = graph.dims[i + batch_axes];
    if (fixed < 0 || fixed == spec.dims[i]) continue;
    return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                    where + " has dims " + ShapeText(spec.dims) + " but the graph fixes axis " +
                        std::to_string(i + batch_axes) + " at " + std::to_string(fixed) + " (graph shape " +
                        ShapeText(graph.dims) + "); give the config the graph's dims");
  }
  return nullptr;
}

std::string Names(const std::vector<GraphTensor>& graph) {
  std::string names;
  for (const auto& t : graph) names += (names.empty() ? "" : ", ") + t.name;
  return names;
}

// A text model's graph inputs: input_ids and attention_mask, and token_type_ids if it wants them,
// each INT64 [batch, sequence]; nothing else (the backend feeds nothing else).
TRITONSERVER_Error* CheckTokenInputs(InstanceState* s, const std::vector<GraphTensor>& graph) {
  const ModelSettings& settings = s->model->settings;
  auto invalid = [](const std::string& message) { return NewError(TRITONSERVER_ERROR_INVALID_ARG, message); };
  for (const char* wanted : {kTokenIds, kTokenMask}) {
    if (std::none_of(graph.begin(), graph.end(), [&](const GraphTensor& t) { return t.name == wanted; })) {
      return invalid(std::string("parameter 'text_tokenizer': the ONNX graph has no input '") + wanted +
                     "' (its inputs: " + Names(graph) + "); a text model's graph takes the tokens: input_ids, "
                     "attention_mask and optionally token_type_ids");
    }
  }
  for (const GraphTensor& t : graph) {
    if (t.name == kTokenTypes) {
      s->feed_token_types = true;
    } else if (t.name != kTokenIds && t.name != kTokenMask) {
      return invalid("parameter 'text_tokenizer': the ONNX graph's input '" + t.name +
                     "' is not one the backend feeds (input_ids, attention_mask, token_type_ids)");
    }
    TensorSpec spec = settings.run_inputs[0];
    spec.name = t.name;
    FASTPATH_RETURN_IF_ERROR(CheckTensor(settings, spec, t, "token input"));
  }
  return nullptr;
}

TRITONSERVER_Error* CheckGraphAgainstConfig(InstanceState* s) {
  const ModelSettings& settings = s->model->settings;
  for (bool inputs : {true, false}) {
    std::vector<GraphTensor> graph;
    FASTPATH_RETURN_IF_ERROR(ListGraphTensors(*s, inputs, &graph));
    if (inputs && settings.tokenizes()) {
      FASTPATH_RETURN_IF_ERROR(CheckTokenInputs(s, graph));
      continue;
    }
    const char* kind = inputs ? "input" : "output";
    const auto& specs = inputs ? settings.inputs : settings.outputs;
    for (const TensorSpec& spec : specs) {
      auto it = std::find_if(graph.begin(), graph.end(), [&](const GraphTensor& t) { return t.name == spec.name; });
      if (it == graph.end() && !inputs && settings.tokenizes() && spec.name == settings.cut_flag_output) {
        // The tokenizer's flag, written by the backend: one value a row, so fixed dims.
        if (std::find(spec.dims.begin(), spec.dims.end(), -1) != spec.dims.end()) {
          return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                          "config output '" + spec.name + "' (cut_flag_output, written by the backend for a text "
                          "model) must have fixed dims, e.g. [1]");
        }
        s->output_slots.push_back(-1);
        continue;
      }
      if (it == graph.end()) {
        return NewError(TRITONSERVER_ERROR_INVALID_ARG, std::string("config ") + kind + " '" + spec.name +
                                                            "' is not in the ONNX graph (its " + kind +
                                                            "s: " + Names(graph) + ")");
      }
      FASTPATH_RETURN_IF_ERROR(CheckTensor(settings, spec, *it, kind));
      if (!inputs) s->output_slots.push_back(static_cast<int>(s->output_names.size()));
      if (!inputs) s->output_names.push_back(spec.name.c_str());
    }
    if (inputs) {
      for (const GraphTensor& t : graph) {
        auto it = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& spec) { return spec.name == t.name; });
        if (it == specs.end()) {
          return NewError(TRITONSERVER_ERROR_INVALID_ARG,
                          "the ONNX graph's input '" + t.name + "' is not in the configuration");
        }
      }
    }
  }
  return nullptr;
}

TRITONSERVER_Error* SetOptions(const OrtFunctions& ort, const ModelSettings& settings, OrtSessionOptions* options) {
  FASTPATH_RETURN_IF_ERROR(OrtError(ort, ort.SetIntraOpNumThreads(options, settings.intra_op_threads), "intra_op_threads"));
  FASTPATH_RETURN_IF_ERROR(OrtError(ort, ort.SetInterOpNumThreads(options, settings.inter_op_threads), "inter_op_threads"));
  FASTPATH_RETURN_IF_ERROR(OrtError(ort, ort.SetSessionExecutionMode(options, ORT_SEQUENTIAL), "execution mode"));
  return OrtError(ort, ort.SetSessionGraphOptimizationLevel(options, settings.graph_optimization_level),
                  "graph_optimization_level");
}

}  // namespace

TRITONSERVER_Error* CreateSession(InstanceState* s) {
  const Runtime& rt = *s->model->runtime;
  const OrtFunctions& ort = rt.ort;
  const ModelSettings& settings = s->model->settings;
  OrtSessionOptions* options = nullptr;
  FASTPATH_RETURN_IF_ERROR(OrtError(ort, ort.CreateSessionOptions(&options), "CreateSessionOptions",
                                    TRITONSERVER_ERROR_INTERNAL));
  TRITONSERVER_Error* err = SetOptions(ort, settings, options);
  if (err == nullptr && !s->model->custom_op_path.empty()) {
    err = AddCustomOps(rt, options, s->model->custom_op_path, settings.python_library);
  }
  if (err == nullptr) {
    err = OrtError(ort, ort.CreateSession(rt.env, s->model->onnx_path.c_str(), options, &s->session),
                   "loading '" + s->model->onnx_path + "'");
  }
  ort.ReleaseSessionOptions(options);
  FASTPATH_RETURN_IF_ERROR(err);
  FASTPATH_RETURN_IF_ERROR(OrtError(ort, ort.CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &s->cpu),
                                    "CreateCpuMemoryInfo", TRITONSERVER_ERROR_INTERNAL));
  FASTPATH_RETURN_IF_ERROR(OrtError(ort, ort.GetAllocatorWithDefaultOptions(&s->allocator), "default allocator",
                                    TRITONSERVER_ERROR_INTERNAL));
  s->output_names.clear();
  s->output_slots.clear();
  FASTPATH_RETURN_IF_ERROR(CheckGraphAgainstConfig(s));
  for (const TensorSpec& spec : settings.run_inputs) s->input_names.push_back(spec.name.c_str());
  if (s->feed_token_types) s->input_names.push_back(kTokenTypes);
  return nullptr;
}

}  // namespace fastpath
