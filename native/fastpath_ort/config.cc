// Model configuration -> ModelSettings (see config.h for the parameters).
#include "config.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace fastpath {
namespace {

constexpr char kAdmissionBudget[] = "admission_budget_ms_";

struct TypeRow {
  const char* config;
  TRITONSERVER_DataType triton;
  ONNXTensorElementDataType onnx;
  size_t size;
};

constexpr TypeRow kTypes[] = {
    {"TYPE_BOOL", TRITONSERVER_TYPE_BOOL, ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL, 1},
    {"TYPE_UINT8", TRITONSERVER_TYPE_UINT8, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, 1},
    {"TYPE_UINT16", TRITONSERVER_TYPE_UINT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, 2},
    {"TYPE_UINT32", TRITONSERVER_TYPE_UINT32, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, 4},
    {"TYPE_UINT64", TRITONSERVER_TYPE_UINT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64, 8},
    {"TYPE_INT8", TRITONSERVER_TYPE_INT8, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, 1},
    {"TYPE_INT16", TRITONSERVER_TYPE_INT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16, 2},
    {"TYPE_INT32", TRITONSERVER_TYPE_INT32, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, 4},
    {"TYPE_INT64", TRITONSERVER_TYPE_INT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, 8},
    {"TYPE_FP16", TRITONSERVER_TYPE_FP16, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, 2},
    {"TYPE_FP32", TRITONSERVER_TYPE_FP32, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, 4},
    {"TYPE_FP64", TRITONSERVER_TYPE_FP64, ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, 8},
    {"TYPE_STRING", TRITONSERVER_TYPE_BYTES, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, 0},
};

std::string ParseTensors(const Json& config, const char* field, std::vector<TensorSpec>* out) {
  const Json* list = config.Find(field);
  if (list == nullptr) return "";
  if (list->kind != Json::Kind::kArray) return std::string("'") + field + "' is not a list";
  for (const Json& item : list->items) {
    TensorSpec spec;
    const Json* name = item.Find("name");
    if (name == nullptr || name->AsString().empty()) return std::string(field) + " without a name";
    spec.name = name->AsString();
    const std::string where = std::string(field) + " '" + spec.name + "'";
    const Json* type = item.Find("data_type");
    std::string type_name = type ? type->AsString() : "";
    if (!ConfigTypeToTriton(type_name, &spec.triton_type, &spec.onnx_type, &spec.element_size)) {
      return where + ": data_type '" + type_name +
             "' is not served by fastpath_ort (BOOL, U/INT8-64, FP16, FP32, FP64, STRING are)";
    }
    const Json* dims = item.Find("dims");
    if (dims == nullptr || dims->kind != Json::Kind::kArray) return where + ": no dims";
    for (const Json& dim : dims->items) {
      int64_t value = 0;
      if (!dim.AsInt64(&value) || value == 0 || value < -1) {
        return where + ": dims must be positive or -1, got '" + dim.AsString() + "'";
      }
      spec.dims.push_back(value);
      spec.ragged = spec.ragged || value == -1;
    }
    // Any reshape, an empty one too (Triton reads `reshape: { shape: [] }` as "a scalar"): the
    // backend hands the graph the tensor as sent.
    if (item.Find("reshape") != nullptr) {
      return where + ": reshape is not supported by fastpath_ort (remove it and give the graph's own dims)";
    }
    const Json* shape_tensor = item.Find("is_shape_tensor");
    if (shape_tensor != nullptr && shape_tensor->boolean) {
      return where + ": shape tensors are not supported";
    }
    const Json* optional = item.Find("optional");
    if (optional != nullptr && optional->boolean) {
      return where + ": optional inputs are not supported (the graph needs every input)";
    }
    out->push_back(std::move(spec));
  }
  return "";
}

bool ParseBool(const std::string& text, bool* out) {
  if (text == "true" || text == "1" || text == "True" || text == "yes") *out = true;
  else if (text == "false" || text == "0" || text == "False" || text == "no") *out = false;
  else return false;
  return true;
}

bool ParseInt(const std::string& text, int64_t lo, int64_t hi, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::string ApplyParameter(const std::string& key, const std::string& value, ModelSettings* s) {
  const std::string bad = "parameter '" + key + "' = '" + value + "': ";
  int64_t number = 0;
  if (key == "onnx_file") {
    if (value.empty()) return bad + "give a file name";
    s->onnx_file = value;
  } else if (key == "intra_op_threads" || key == "inter_op_threads") {
    if (!ParseInt(value, 0, 256, &number)) return bad + "expected an integer 0..256 (0: onnxruntime's default)";
    (key == "intra_op_threads" ? s->intra_op_threads : s->inter_op_threads) = static_cast<int>(number);
  } else if (key == "graph_optimization_level") {
    if (value == "disable" || value == "0") s->graph_optimization_level = ORT_DISABLE_ALL;
    else if (value == "basic" || value == "1") s->graph_optimization_level = ORT_ENABLE_BASIC;
    else if (value == "extended" || value == "2") s->graph_optimization_level = ORT_ENABLE_EXTENDED;
    else if (value == "all" || value == "99") s->graph_optimization_level = ORT_ENABLE_ALL;
    else return bad + "expected disable, basic, extended or all";
  } else if (key == "reject_non_finite" || key == "validate_utf8" || key == "reject_blank_strings" ||
             key == "ragged_lengths_agree" || key == "inline_when_idle") {
    bool flag = false;
    if (!ParseBool(value, &flag)) return bad + "expected true or false";
    (key == "reject_non_finite"      ? s->reject_non_finite
     : key == "validate_utf8"        ? s->validate_utf8
     : key == "reject_blank_strings" ? s->reject_blank_strings
     : key == "inline_when_idle"     ? s->inline_when_idle
                                     : s->ragged_lengths_agree) = flag;
  } else if (key == "max_string_bytes" || key == "cut_string_chars") {
    if (!ParseInt(value, 0, INT32_MAX, &number)) return bad + "expected an integer >= 0 (0: no limit)";
    (key == "max_string_bytes" ? s->max_string_bytes : s->cut_string_chars) = number;
  } else if (key == "cut_flag_output") {
    s->cut_flag_output = value;
  } else if (key == "length_bucket_rows") {
    if (!ParseInt(value, 0, INT32_MAX, &number)) return bad + "expected an integer >= 0 (0: one Run per batch)";
    s->length_bucket_rows = number;
  } else if (key == "max_sequence_length") {
    if (!ParseInt(value, 0, INT32_MAX, &number)) return bad + "expected an integer >= 0 (0: no limit)";
    s->max_sequence_length = number;
  } else if (key == "max_length") {
    if (!ParseInt(value, 0, INT32_MAX, &number)) return bad + "expected an integer >= 0 (tokens per text)";
    s->max_length = number;
  } else if (key == "text_tokenizer") {
    if (value.empty() || value.find('/') != std::string::npos) {
      return bad + "give a file name in the version folder (a tokenizer.json)";
    }
    s->text_tokenizer = value;
  } else if (key == "onnxruntime_library") {
    s->onnxruntime_library = value;
  } else if (key == "custom_op_library") {
    s->custom_op_library = value;
  } else if (key == "python_library") {
    s->python_library = value;
  } else if (key.rfind(kAdmissionBudget, 0) == 0) {
    int64_t level = 0;
    char* end = nullptr;
    const double ms = std::strtod(value.c_str(), &end);
    if (!ParseInt(key.substr(sizeof(kAdmissionBudget) - 1), 1, 1000, &level)) {
      return bad + "the level after " + kAdmissionBudget + " must be an integer 1..1000";
    }
    if (value.empty() || end == nullptr || *end != '\0' || !(ms > 0)) return bad + "expected milliseconds > 0";
    s->admission_budgets_s[static_cast<int>(level)] = ms / 1000.0;
  } else if (key == "admission_min_rows") {
    if (!ParseInt(value, 1, INT32_MAX, &number)) return bad + "expected an integer >= 1";
    s->admission_min_rows = number;
  } else if (key == "max_padded_bytes") {
    if (!ParseInt(value, 0, INT64_MAX, &number)) return bad + "expected an integer >= 0 (0: no cap)";
    s->max_padded_bytes = number;
  } else if (key == "ragged_outputs") {
    s->ragged_outputs.clear();
    size_t start = 0;
    while (start <= value.size() && !value.empty()) {
      const size_t comma = std::min(value.find(',', start), value.size());
      const std::string name = value.substr(start, comma - start);
      if (name.empty()) return bad + "expected output names separated by commas";
      s->ragged_outputs.push_back(name);
      start = comma + 1;
    }
  } else if (key == "value_bounds") {
    s->value_bounds.clear();
    size_t start = 0;
    while (!value.empty() && start <= value.size()) {
      const size_t comma = std::min(value.find(',', start), value.size());
      const std::string item = value.substr(start, comma - start);
      const size_t first = item.find(':'), second = item.find(':', first == std::string::npos ? 0 : first + 1);
      int64_t lo = 0, hi = 0;
      if (first == std::string::npos || second == std::string::npos || first == 0 ||
          !ParseInt(item.substr(first + 1, second - first - 1), INT64_MIN, INT64_MAX, &lo) ||
          !ParseInt(item.substr(second + 1), INT64_MIN, INT64_MAX, &hi) || lo >= hi) {
        return bad + "expected name:lo:hi items (lo < hi) separated by commas";
      }
      s->value_bounds[item.substr(0, first)] = {lo, hi};
      start = comma + 1;
    }
  } else if (std::find_if(kInformationalParameters, kInformationalParameters + kInformationalParameterCount,
                          [&](const char* k) { return key == k; }) ==
             kInformationalParameters + kInformationalParameterCount) {
    std::string known;
    for (size_t i = 0; i < kBackendParameterCount; ++i) known += (i ? ", " : "") + std::string(kBackendParameters[i]);
    return "unknown parameter '" + key + "' (fastpath_ort reads " + known +
           "; check the spelling, or remove it)";
  }
  return "";
}

std::string CheckValueBounds(const ModelSettings& s) {
  for (const auto& bound : s.value_bounds) {
    auto it = std::find_if(s.inputs.begin(), s.inputs.end(), [&](const TensorSpec& t) { return t.name == bound.first; });
    if (it == s.inputs.end()) return "parameter 'value_bounds' names '" + bound.first + "', which is not an input";
    if (it->triton_type != TRITONSERVER_TYPE_INT64 && it->triton_type != TRITONSERVER_TYPE_INT32) {
      return "parameter 'value_bounds' names input '" + bound.first + "', which is not TYPE_INT32 or TYPE_INT64";
    }
  }
  return "";
}

TensorSpec TokenSpec(const char* name) {
  TensorSpec spec;
  spec.name = name;
  spec.triton_type = TRITONSERVER_TYPE_INT64;
  spec.onnx_type = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  spec.element_size = 8;
  spec.dims = {-1};
  spec.ragged = true;
  return spec;
}

// A text model (text_tokenizer): one TYPE_STRING input of dims [1], batched, a max_length; the
// graph is fed the tokens instead (run_inputs).
std::string CheckTextModel(ModelSettings* s) {
  if (!s->tokenizes()) {
    s->run_inputs = s->inputs;
    return "";
  }
  const std::string bad = "parameter 'text_tokenizer' = '" + s->text_tokenizer + "': ";
  if (s->inputs.size() != 1 || !s->inputs[0].is_string() || s->inputs[0].dims != std::vector<int64_t>{1}) {
    return bad + "the model must have exactly one input, TYPE_STRING with dims [1] (one text a row)";
  }
  if (!s->batched()) return bad + "the model must batch (max_batch_size >= 1): the graph takes [rows, tokens]";
  if (s->max_length <= 0) {
    return bad + "give parameter 'max_length' (tokens per text, special tokens included), e.g. 512";
  }
  if (!s->value_bounds.empty()) return bad + "value_bounds applies to inputs a client sends; the ids are the tokenizer's";
  s->run_inputs = {TokenSpec(kTokenIds), TokenSpec(kTokenMask)};
  return "";
}

std::string CheckRaggedOutputs(const ModelSettings& s) {
  for (const std::string& name : s.ragged_outputs) {
    auto it = std::find_if(s.outputs.begin(), s.outputs.end(), [&](const TensorSpec& t) { return t.name == name; });
    if (it == s.outputs.end()) return "parameter 'ragged_outputs' names '" + name + "', which is not an output";
    if (!it->ragged) return "parameter 'ragged_outputs' names output '" + name + "', which has no -1 dim";
  }
  if (!s.cut_flag_output.empty()) {
    auto it = std::find_if(s.outputs.begin(), s.outputs.end(),
                           [&](const TensorSpec& t) { return t.name == s.cut_flag_output; });
    if (it == s.outputs.end() || it->triton_type != TRITONSERVER_TYPE_BOOL) {
      return "parameter 'cut_flag_output' names '" + s.cut_flag_output + "', which is not a TYPE_BOOL output";
    }
  }
  if (!s.pads()) return "";
  for (const TensorSpec& out : s.outputs) {
    if (out.ragged && !s.is_ragged_output(out.name)) {
      return "output '" + out.name +
             "' has a -1 dim in a model whose requests are padded to each other: list it in parameter "
             "'ragged_outputs' (trimmed to each request's length) or give it fixed dims";
    }
  }
  return "";
}

}  // namespace

const char kTokenIds[] = "input_ids";
const char kTokenMask[] = "attention_mask";
const char kTokenTypes[] = "token_type_ids";

const char* const kInformationalParameters[] = {"tokenizer_file", "tokenizer_sha256", "priority_levels"};
const size_t kInformationalParameterCount = sizeof(kInformationalParameters) / sizeof(kInformationalParameters[0]);
const char* const kBackendParameters[] = {
    "onnx_file",          "intra_op_threads",   "inter_op_threads",     "graph_optimization_level",
    "reject_non_finite",  "max_sequence_length", "onnxruntime_library", "custom_op_library",
    "python_library",     "validate_utf8",      "reject_blank_strings", "max_string_bytes",
    "cut_string_chars",   "cut_flag_output",    "admission_budget_ms_", "admission_min_rows",
    "ragged_lengths_agree", "length_bucket_rows", "max_padded_bytes",   "ragged_outputs",
    "value_bounds",       "text_tokenizer",     "max_length",           "inline_when_idle"};
const size_t kBackendParameterCount = sizeof(kBackendParameters) / sizeof(kBackendParameters[0]);

namespace {

std::string GraphLevelName(GraphOptimizationLevel level) {
  switch (level) {
    case ORT_DISABLE_ALL: return "disable";
    case ORT_ENABLE_BASIC: return "basic";
    case ORT_ENABLE_EXTENDED: return "extended";
    default: return "all";
  }
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ParameterValues(const ModelSettings& s) {
  auto flag = [](bool value) { return std::string(value ? "true" : "false"); };
  auto number = [](int64_t value) { return std::to_string(value); };
  std::vector<std::string> budgets, bounds;
  for (const auto& budget : s.admission_budgets_s) {
    char ms[64];
    std::snprintf(ms, sizeof(ms), "%.15g", budget.second * 1000.0);  // 15 digits: the ms as written
    budgets.push_back(std::to_string(budget.first) + ":" + ms);
  }
  for (const auto& bound : s.value_bounds) {
    bounds.push_back(bound.first + ":" + number(bound.second.first) + ":" + number(bound.second.second));
  }
  const std::map<std::string, std::string> values = {
      {"onnx_file", s.onnx_file},
      {"intra_op_threads", number(s.intra_op_threads)},
      {"inter_op_threads", number(s.inter_op_threads)},
      {"graph_optimization_level", GraphLevelName(s.graph_optimization_level)},
      {"reject_non_finite", flag(s.reject_non_finite)},
      {"max_sequence_length", number(s.max_sequence_length)},
      {"onnxruntime_library", s.onnxruntime_library},
      {"custom_op_library", s.custom_op_library},
      {"python_library", s.python_library},
      {"validate_utf8", flag(s.validate_utf8)},
      {"reject_blank_strings", flag(s.reject_blank_strings)},
      {"max_string_bytes", number(s.max_string_bytes)},
      {"cut_string_chars", number(s.cut_string_chars)},
      {"cut_flag_output", s.cut_flag_output},
      {kAdmissionBudget, Joined(budgets)},
      {"admission_min_rows", number(s.admission_min_rows)},
      {"ragged_lengths_agree", flag(s.ragged_lengths_agree)},
      {"length_bucket_rows", number(s.length_bucket_rows)},
      {"max_padded_bytes", number(s.max_padded_bytes)},
      {"ragged_outputs", Joined(s.ragged_outputs)},
      {"value_bounds", Joined(bounds)},
      {"text_tokenizer", s.text_tokenizer},
      {"max_length", number(s.max_length)},
      {"inline_when_idle", flag(s.inline_when_idle)},
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < kBackendParameterCount; ++i) {
    const auto found = values.find(kBackendParameters[i]);  // a key without a value here: none printed
    if (found != values.end()) out.emplace_back(found->first, found->second);
  }
  return out;
}

bool ModelSettings::pads() const {
  return batched() && std::any_of(run_inputs.begin(), run_inputs.end(), [](const TensorSpec& t) { return t.ragged; });
}

bool ModelSettings::is_ragged_output(const std::string& name) const {
  return std::find(ragged_outputs.begin(), ragged_outputs.end(), name) != ragged_outputs.end();
}

bool TensorSpec::is_float() const {
  return triton_type == TRITONSERVER_TYPE_FP16 || triton_type == TRITONSERVER_TYPE_FP32 ||
         triton_type == TRITONSERVER_TYPE_FP64;
}

bool ConfigTypeToTriton(const std::string& config_type, TRITONSERVER_DataType* triton,
                        ONNXTensorElementDataType* onnx, size_t* element_size) {
  for (const TypeRow& row : kTypes) {
    if (config_type == row.config) {
      *triton = row.triton;
      *onnx = row.onnx;
      *element_size = row.size;
      return true;
    }
  }
  return false;
}

const char* OnnxTypeName(ONNXTensorElementDataType type) {
  for (const TypeRow& row : kTypes) {
    if (row.onnx == type) return row.config + 5;  // without "TYPE_"
  }
  return "an unsupported ONNX type";
}

const char* TritonTypeName(TRITONSERVER_DataType type) {
  if (type == TRITONSERVER_TYPE_BYTES) return "BYTES";
  if (type == TRITONSERVER_TYPE_BF16) return "BF16";
  for (const TypeRow& row : kTypes) {
    if (row.triton == type) return row.config + 5;
  }
  return "INVALID";
}

std::string ParseModelSettings(const Json& config, ModelSettings* out) {
  *out = ModelSettings();
  if (config.kind != Json::Kind::kObject) return "model configuration is not a JSON object";
  const Json* max_batch = config.Find("max_batch_size");
  if (max_batch != nullptr && !max_batch->AsInt64(&out->max_batch_size)) {
    return "max_batch_size is not an integer";
  }
  if (out->max_batch_size < 0) return "max_batch_size must be >= 0";
  std::string error = ParseTensors(config, "input", &out->inputs);
  if (error.empty()) error = ParseTensors(config, "output", &out->outputs);
  if (!error.empty()) return error;
  if (out->inputs.empty()) return "the configuration declares no input";
  if (out->outputs.empty()) return "the configuration declares no output";
  const Json* warmups = config.Find("model_warmup");
  if (warmups != nullptr && warmups->kind == Json::Kind::kArray) {
    for (const Json& warmup : warmups->items) {  // Triton skips batch_size 0; count 0 runs once
      int64_t batch_size = 0, count = 0;
      const Json* field = warmup.Find("batch_size");
      if (field == nullptr || !field->AsInt64(&batch_size) || batch_size <= 0) continue;
      field = warmup.Find("count");
      if (field != nullptr && !field->AsInt64(&count)) return "model_warmup count is not an integer";
      out->warmup_executes += std::max<int64_t>(1, count);
    }
  }
  const Json* cache = config.Find("response_cache");
  if (cache != nullptr && cache->kind != Json::Kind::kNull) {
    const Json* enable = cache->kind == Json::Kind::kObject ? cache->Find("enable") : nullptr;
    if (cache->kind != Json::Kind::kObject || (enable != nullptr && enable->kind != Json::Kind::kBool)) {
      return "response_cache is not { enable: true|false }";
    }
    out->response_cache = enable != nullptr && enable->boolean;
  }
  const Json* parameters = config.Find("parameters");
  if (parameters != nullptr && parameters->kind == Json::Kind::kObject) {
    for (const auto& member : parameters->members) {
      const Json* value = member.second.Find("string_value");
      error = ApplyParameter(member.first, value ? value->AsString() : "", out);
      if (!error.empty()) return error;
    }
  }
  error = CheckValueBounds(*out);
  if (error.empty()) error = CheckTextModel(out);
  return error.empty() ? CheckRaggedOutputs(*out) : error;
}

}  // namespace fastpath
