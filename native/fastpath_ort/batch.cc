// See batch.h.
#include "batch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "checks.h"
#include "common.h"
#include "tensor_ops.h"

namespace fastpath {
namespace {

struct OutputView {
  std::vector<int64_t> shape;
  int64_t elements = 0;
  const uint8_t* data = nullptr;     // elements; for strings, element numbers (int64)
  std::vector<std::string> strings;  // string outputs
  std::vector<int64_t> index;
  size_t element_size = 0;
};

// One Run over `batch` (all good so far). Run() returns nullptr, or why the whole Run failed (the
// responses are then untouched, for the one-by-one retry); per-request problems with writing the
// outputs go to that request.
class BatchRun {
 public:
  BatchRun(InstanceState* s, const std::vector<Pending*>& batch) : s_(*s), ort_(*s->ort), batch_(batch) {}

  ~BatchRun() {
    for (OrtValue* v : inputs_) {
      if (v != nullptr) ort_.ReleaseValue(v);
    }
    for (OrtValue* v : outputs_) {
      if (v != nullptr) ort_.ReleaseValue(v);
    }
  }

  BatchRun(const BatchRun&) = delete;
  BatchRun& operator=(const BatchRun&) = delete;

  TRITONSERVER_Error* Run() {
    const ModelSettings& settings = s_.model->settings;
    for (size_t i = 0; i < settings.run_inputs.size(); ++i) FASTPATH_RETURN_IF_ERROR(BuildInput(i));
    if (s_.feed_token_types) FASTPATH_RETURN_IF_ERROR(BuildTokenTypes());
    outputs_.assign(s_.output_names.size(), nullptr);
    const uint64_t start = NowNs();
    TRITONSERVER_Error* err =
        OrtError(ort_,
                 ort_.Run(s_.session, nullptr, s_.input_names.data(), inputs_.data(), inputs_.size(),
                          s_.output_names.data(), s_.output_names.size(), outputs_.data()),
                 "onnxruntime");
    const uint64_t end = NowNs();
    for (Pending* p : batch_) {
      p->compute_start_ns = start;
      p->compute_end_ns = end;
    }
    FASTPATH_RETURN_IF_ERROR(err);
    // Every output is checked before any response gets one.
    views_.resize(settings.outputs.size());
    for (size_t j = 0; j < settings.outputs.size(); ++j) {
      if (s_.output_slots[j] >= 0) FASTPATH_RETURN_IF_ERROR(InspectOutput(j, s_.output_slots[j], &views_[j]));
    }
    for (size_t j = 0; j < settings.outputs.size(); ++j) {
      if (s_.output_slots[j] >= 0) {
        SendOutput(j, views_[j]);
      } else {
        SendFlags(j);
      }
    }
    return nullptr;
  }

  int64_t rows() const { return total_rows_; }

 private:
  // Stacks input `i` of every request into one tensor, padding -1 axes to the longest row. The
  // padded size was checked against overflow and max_padded_bytes when the Run was planned.
  TRITONSERVER_Error* BuildInput(size_t i) {
    const TensorSpec& spec = s_.model->settings.run_inputs[i];
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
    if (i == 0) token_shape_ = shape;
    if (spec.ragged && first_ragged_input_ < 0) {
      first_ragged_input_ = static_cast<int>(i);
      ragged_axis_ = (batched ? 1 : 0) + (std::find(spec.dims.begin(), spec.dims.end(), -1) - spec.dims.begin());
      padded_length_ = shape[ragged_axis_];
    }
    int64_t elements = 0;
    const size_t element_size = spec.is_string() ? sizeof(const char*) : spec.element_size;
    int64_t bytes = 0;
    if (!CheckedElementCount(shape, &elements) || !CheckedByteSize(shape, element_size, &bytes)) {
      return NewError(TRITONSERVER_ERROR_INVALID_ARG, "the padded input '" + spec.name + "' " + ShapeText(shape) +
                                                          " overflows 64 bits");
    }
    const int64_t per_row = elements / std::max<int64_t>(total_rows_, 1);
    OrtValue* value = nullptr;
    if (spec.is_string()) {
      std::vector<const char*> pointers(static_cast<size_t>(elements), "");
      StackRows(i, shape, per_row, sizeof(const char*), reinterpret_cast<uint8_t*>(pointers.data()), true);
      FASTPATH_RETURN_IF_ERROR(OrtError(
          ort_, ort_.CreateTensorAsOrtValue(s_.allocator, shape.data(), shape.size(), spec.onnx_type, &value),
          "creating a string tensor", TRITONSERVER_ERROR_INTERNAL));
      inputs_.push_back(value);
      return OrtError(ort_, ort_.FillStringTensor(value, pointers.data(), pointers.size()), "filling a string tensor",
                      TRITONSERVER_ERROR_INTERNAL);
    }
    void* data = nullptr;
    if (batch_.size() == 1 && !padded) {
      data = const_cast<uint8_t*>(batch_[0]->inputs[i].data);  // onnxruntime only reads inputs
    } else {
      owned_.emplace_back(static_cast<size_t>(bytes), 0);
      if (s_.model->settings.tokenizes() && spec.name == kTokenIds && s_.model->pad_id != 0) {
        int64_t* ids = reinterpret_cast<int64_t*>(owned_.back().data());
        std::fill(ids, ids + elements, s_.model->pad_id);  // padded as the tokenizer pads
      }
      StackRows(i, shape, per_row, spec.element_size, owned_.back().data(), false);
      data = owned_.back().data();
    }
    FASTPATH_RETURN_IF_ERROR(OrtError(ort_,
                                      ort_.CreateTensorWithDataAsOrtValue(s_.cpu, data, static_cast<size_t>(bytes),
                                                                          shape.data(), shape.size(), spec.onnx_type,
                                                                          &value),
                                      "creating input tensor '" + spec.name + "'"));
    inputs_.push_back(value);
    return nullptr;
  }

  // A text model's token_type_ids: zeros of the padded ids' shape (the first run input, built).
  TRITONSERVER_Error* BuildTokenTypes() {
    const std::vector<int64_t> shape = token_shape_;
    int64_t bytes = 0;
    if (!CheckedByteSize(shape, sizeof(int64_t), &bytes)) {
      return NewError(TRITONSERVER_ERROR_INVALID_ARG, "the padded token_type_ids " + ShapeText(shape) + " overflow 64 bits");
    }
    owned_.emplace_back(static_cast<size_t>(bytes), 0);
    OrtValue* value = nullptr;
    FASTPATH_RETURN_IF_ERROR(OrtError(ort_,
                                      ort_.CreateTensorWithDataAsOrtValue(s_.cpu, owned_.back().data(),
                                                                          static_cast<size_t>(bytes), shape.data(),
                                                                          shape.size(), ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                                                          &value),
                                      "creating input tensor 'token_type_ids'"));
    inputs_.push_back(value);
    return nullptr;
  }

  // Copies every request's block of input `i` into `out` (a dense tensor of `shape`, `per_row`
  // elements a row); strings are copied as their element pointers.
  void StackRows(size_t i, const std::vector<int64_t>& shape, int64_t per_row, size_t element_size, uint8_t* out,
                 bool strings) {
    const bool batched = s_.model->settings.batched();
    size_t offset = 0;
    for (Pending* p : batch_) {
      const RequestInput& in = p->inputs[i];
      std::vector<int64_t> target = shape;
      if (batched) target[0] = in.shape[0];
      const uint8_t* src = strings ? reinterpret_cast<const uint8_t*>(in.string_pointers.data()) : in.data;
      CopyBlock(src, in.shape, out + offset, target, in.shape, element_size);
      offset += static_cast<size_t>((batched ? in.shape[0] : 1) * per_row) * element_size;
    }
  }

  // Reads output `j`'s type, shape and data; an output that disagrees with the configuration
  // fails the Run.
  TRITONSERVER_Error* InspectOutput(size_t j, int slot, OutputView* view) {
    const TensorSpec& spec = s_.model->settings.outputs[j];
    const bool batched = s_.model->settings.batched();
    OrtValue* output = outputs_[static_cast<size_t>(slot)];
    OrtTensorTypeAndShapeInfo* info = nullptr;
    FASTPATH_RETURN_IF_ERROR(OrtError(ort_, ort_.GetTensorTypeAndShape(output, &info), "output shape",
                                      TRITONSERVER_ERROR_INTERNAL));
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    std::vector<int64_t>& shape = view->shape;
    TRITONSERVER_Error* err = OrtError(ort_, ort_.GetTensorElementType(info, &type), "output type");
    if (err == nullptr) err = OrtError(ort_, ort_.GetDimensionsCount(info, &rank), "output rank");
    if (err == nullptr) {
      shape.resize(rank);
      if (rank > 0) err = OrtError(ort_, ort_.GetDimensions(info, shape.data(), rank), "output dims");
    }
    ort_.ReleaseTensorTypeAndShapeInfo(info);
    FASTPATH_RETURN_IF_ERROR(err);
    const std::string name = "output '" + spec.name + "'";
    auto internal = [](const std::string& message) { return NewError(TRITONSERVER_ERROR_INTERNAL, message); };
    if (type != spec.onnx_type) {
      return internal(name + " is " + OnnxTypeName(type) + ", the configuration says " +
                      TritonTypeName(spec.triton_type));
    }
    if (rank != spec.dims.size() + (batched ? 1 : 0)) {
      return internal(name + " has shape " + ShapeText(shape) + ", not the configured rank");
    }
    if (batched && shape[0] != total_rows_) {
      return internal(name + " has " + std::to_string(shape[0]) + " rows for a batch of " + std::to_string(total_rows_));
    }
    if (!CheckedElementCount(shape, &view->elements)) return internal(name + " has an invalid shape " + ShapeText(shape));
    if (spec.is_string()) {
      FASTPATH_RETURN_IF_ERROR(ReadStrings(output, static_cast<size_t>(view->elements), &view->strings));
      view->index.resize(view->strings.size());
      for (size_t k = 0; k < view->index.size(); ++k) view->index[k] = static_cast<int64_t>(k);
      view->data = reinterpret_cast<const uint8_t*>(view->index.data());
      view->element_size = sizeof(int64_t);
      return nullptr;
    }
    void* raw = nullptr;
    FASTPATH_RETURN_IF_ERROR(
        OrtError(ort_, ort_.GetTensorMutableData(output, &raw), "output data", TRITONSERVER_ERROR_INTERNAL));
    view->data = static_cast<const uint8_t*>(raw);
    view->element_size = spec.element_size;
    return nullptr;
  }

  // The shape of output `spec` for request `p`: its own rows and, for an output declared in
  // ragged_outputs, its own length on the axes padded to the Run's longest.
  std::vector<int64_t> OwnShape(const TensorSpec& spec, const std::vector<int64_t>& shape, const Pending& p) const {
    const bool batched = s_.model->settings.batched();
    std::vector<int64_t> own = shape;
    if (batched) own[0] = p.rows;
    if (first_ragged_input_ < 0 || !s_.model->settings.is_ragged_output(spec.name)) return own;
    const int64_t length = p.inputs[first_ragged_input_].shape[ragged_axis_];
    for (size_t a = batched ? 1 : 0; a < own.size(); ++a) {
      if (spec.dims[a - (batched ? 1 : 0)] == -1 && own[a] == padded_length_) own[a] = length;
    }
    return own;
  }

  // Splits output `j` back into the responses of the requests that asked for it; with the response
  // cache on, into every response (ModelSettings::response_cache): the graph computed every output
  // anyway, so an output nobody asked for costs its copy and nothing more.
  void SendOutput(size_t j, const OutputView& view) {
    const ModelSettings& settings = s_.model->settings;
    const TensorSpec& spec = settings.outputs[j];
    const bool batched = settings.batched();
    const std::vector<int64_t>& shape = view.shape;
    const size_t element_size = view.element_size;
    const int64_t per_row = batched ? view.elements / std::max<int64_t>(shape[0], 1) : 0;
    int64_t row = 0;
    for (Pending* p : batch_) {
      const std::vector<int64_t> own = OwnShape(spec, shape, *p);
      std::vector<int64_t> source = shape;
      if (batched) source[0] = p->rows;
      const uint8_t* src = view.data + static_cast<size_t>(row * per_row) * element_size;
      row += p->rows;
      if (!p->good() || (!settings.response_cache && !IsRequested(p, spec.name))) continue;
      // A failure here fails this request alone: other responses may hold outputs already, so the
      // Run must not fail (its one-by-one retry would write them twice).
      try {
        int64_t own_elements = 0;
        CheckedElementCount(own, &own_elements);  // <= the output's, which was counted
        std::vector<uint8_t> block(static_cast<size_t>(own_elements) * element_size);
        if (!block.empty()) CopyBlock(src, source, block.data(), own, own, element_size);
        if (spec.name == settings.cut_flag_output) FlagCutRows(*p, &block);
        std::string wire;
        if (spec.is_string()) {
          const int64_t* picked = reinterpret_cast<const int64_t*>(block.data());
          for (size_t k = 0; k < block.size() / sizeof(int64_t); ++k) AppendBytes(view.strings[picked[k]], &wire);
        }
        const uint8_t* payload = spec.is_string() ? reinterpret_cast<const uint8_t*>(wire.data()) : block.data();
        const size_t payload_size = spec.is_string() ? wire.size() : block.size();
        TRITONSERVER_Error* err = WriteOutput(p, spec, own, payload, payload_size);
        if (err != nullptr) p->Fail(WithPrefix("output '" + spec.name + "': ", err));
      } catch (const std::exception& e) {  // e.g. bad_alloc for the block
        p->Fail(ExceptionError("fastpath_ort: writing an output", e.what()));
      }
    }
  }

  // A text model's cut_flag_output that the graph does not compute: [rows, dims...] BOOL, every
  // element of a row set when its text or its tokens were cut (Pending::flagged_rows).
  void SendFlags(size_t j) {
    const ModelSettings& settings = s_.model->settings;
    const TensorSpec& spec = settings.outputs[j];
    for (Pending* p : batch_) {
      if (!p->good() || (!settings.response_cache && !IsRequested(p, spec.name))) continue;
      try {
        std::vector<int64_t> shape = spec.dims;
        shape.insert(shape.begin(), p->rows);
        int64_t elements = 0;
        if (!CheckedElementCount(shape, &elements)) {
          p->Fail(NewError(TRITONSERVER_ERROR_INTERNAL, "output '" + spec.name + "' " + ShapeText(shape) + " overflows"));
          continue;
        }
        std::vector<uint8_t> block(static_cast<size_t>(elements), 0);
        FlagCutRows(*p, &block);
        TRITONSERVER_Error* err = WriteOutput(p, spec, shape, block.data(), block.size());
        if (err != nullptr) p->Fail(WithPrefix("output '" + spec.name + "': ", err));
      } catch (const std::exception& e) {
        p->Fail(ExceptionError("fastpath_ort: writing an output", e.what()));
      }
    }
  }

  static TRITONSERVER_Error* WriteOutput(Pending* p, const TensorSpec& spec, const std::vector<int64_t>& shape,
                                         const uint8_t* payload, size_t size) {
    TRITONBACKEND_Output* output = nullptr;
    FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(p->response, &output, spec.name.c_str(), spec.triton_type,
                                                          shape.data(), static_cast<uint32_t>(shape.size())));
    p->has_outputs = true;  // the response holds this output now, whether its buffer comes or not
    void* buffer = nullptr;
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    FASTPATH_RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, size, &memory_type, &memory_id));
    if (memory_type == TRITONSERVER_MEMORY_GPU) return NewError(TRITONSERVER_ERROR_INTERNAL, "Triton gave a GPU buffer");
    if (size > 0) std::memcpy(buffer, payload, size);
    return nullptr;
  }

  // Sets every element of a row whose text input was cut (cut_string_chars) in a BOOL output.
  static void FlagCutRows(const Pending& p, std::vector<uint8_t>* flags) {
    const int64_t rows = std::max<int64_t>(p.rows, 1);
    const size_t per_row = flags->size() / static_cast<size_t>(rows);
    if (!p.flagged_rows.empty()) {  // a text model: its texts were read, then tokenized
      for (size_t r = 0; r < p.flagged_rows.size() && r < static_cast<size_t>(rows); ++r) {
        if (p.flagged_rows[r]) std::fill_n(flags->begin() + r * per_row, per_row, 1);
      }
      return;
    }
    for (const RequestInput& in : p.inputs) {
      if (in.cut.empty()) continue;
      const size_t elements_per_row = std::max<size_t>(in.cut.size() / static_cast<size_t>(rows), 1);
      for (size_t e = 0; e < in.cut.size(); ++e) {
        const size_t r = e / elements_per_row;
        if (in.cut[e] && r < static_cast<size_t>(rows)) std::fill_n(flags->begin() + r * per_row, per_row, 1);
      }
    }
  }

  TRITONSERVER_Error* ReadStrings(OrtValue* value, size_t count, std::vector<std::string>* out) {
    size_t length = 0;
    FASTPATH_RETURN_IF_ERROR(OrtError(ort_, ort_.GetStringTensorDataLength(value, &length), "string output length",
                                      TRITONSERVER_ERROR_INTERNAL));
    std::string content(length, '\0');
    std::vector<size_t> offsets(count);
    FASTPATH_RETURN_IF_ERROR(
        OrtError(ort_, ort_.GetStringTensorContent(value, content.data(), length, offsets.data(), count),
                 "string output", TRITONSERVER_ERROR_INTERNAL));
    for (size_t k = 0; k < count; ++k) {
      const size_t end = k + 1 < count ? offsets[k + 1] : length;
      out->push_back(content.substr(offsets[k], end - offsets[k]));
    }
    return nullptr;
  }

  static bool IsRequested(Pending* p, const std::string& name) {
    uint32_t count = 0;
    TRITONSERVER_Error* err = TRITONBACKEND_RequestOutputCount(p->request, &count);
    if (err != nullptr) {
      TRITONSERVER_ErrorDelete(err);
      return true;
    }
    for (uint32_t k = 0; k < count; ++k) {
      const char* requested = nullptr;
      err = TRITONBACKEND_RequestOutputName(p->request, k, &requested);
      if (err != nullptr) {
        TRITONSERVER_ErrorDelete(err);
      } else if (requested != nullptr && name == requested) {
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
  std::vector<int64_t> token_shape_;  // the first run input's padded shape (a text model's ids)
  int first_ragged_input_ = -1;
  size_t ragged_axis_ = 0;
  int64_t padded_length_ = 0;
};

// The cost of a Run over `run` (rows, seconds), when it ran as one Run and every request got its rows.
void CostOf(const std::vector<Pending*>& run, std::vector<RunCost>* costs) {
  if (costs == nullptr || run.empty()) return;
  int64_t rows = 0;
  for (Pending* p : run) {
    if (!p->good() || p->compute_start_ns != run[0]->compute_start_ns) return;  // not one Run
    rows += p->rows;
  }
  const uint64_t start = run[0]->compute_start_ns, end = run[0]->compute_end_ns;
  if (end > start) costs->push_back({rows, static_cast<double>(end - start) / 1e9});
}

// One Run over `run`; if it fails, each request alone, so that only the one that fails gets the
// error. Alone, onnxruntime's INVALID_ARGUMENT is the request's fault (INVALID_ARGUMENT, e.g. an
// out-of-vocabulary id); any other failure, an allocation's too, is INTERNAL.
void RunGroup(InstanceState* s, const std::vector<Pending*>& run) {
  TRITONSERVER_Error* err = nullptr;
  try {
    BatchRun batch(s, run);
    err = batch.Run();
  } catch (const std::bad_alloc&) {
    err = NewError(TRITONSERVER_ERROR_INTERNAL, "out of memory running a batch");
  } catch (const std::exception& e) {
    err = NewError(TRITONSERVER_ERROR_INTERNAL, std::string("running a batch: ") + e.what());
  }
  if (err == nullptr) return;
  if (run.size() == 1) {
    run[0]->Fail(WithPrefix("this request cannot run: ", err));
    return;
  }
  FASTPATH_LOG(WARN, s->name + ": a Run of " + std::to_string(run.size()) + " requests failed (" + ErrorMessage(err) +
                         "); running them one by one");
  TRITONSERVER_ErrorDelete(err);
  for (Pending* p : run) RunGroup(s, {p});
}

// `token_types`: the instance feeds a text model's graph token_type_ids too (a third tensor of the
// ids' shape), counted against max_padded_bytes like the rest.
PlanItem ToPlanItem(const ModelSettings& settings, const Pending& p, bool token_types) {
  PlanItem item;
  item.rows = p.rows;
  item.length = p.length;
  const size_t batch_axes = settings.batched() ? 1 : 0;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const std::vector<int64_t>& shape = p.inputs[i].shape;
    item.shapes.emplace_back(shape.begin() + std::min(batch_axes, shape.size()), shape.end());
    const TensorSpec& spec = settings.run_inputs[i];
    item.element_sizes.push_back(spec.is_string() ? sizeof(const char*) : spec.element_size);
  }
  if (token_types && !item.shapes.empty()) {
    item.shapes.push_back(item.shapes[0]);
    item.element_sizes.push_back(sizeof(int64_t));
  }
  return item;
}

}  // namespace

void ExecuteGood(InstanceState* s, std::vector<Pending*> good, uint64_t exec_start_ns, std::vector<RunCost>* costs,
                 const RunDone& run_done) {
  const ModelSettings& settings = s->model->settings;
  std::vector<std::vector<Pending*>> runs;
  if (!settings.batched()) {
    for (Pending* p : good) runs.push_back({p});
  } else {
    std::vector<PlanItem> items;
    for (const Pending* p : good) items.push_back(ToPlanItem(settings, *p, s->feed_token_types));
    const RunPlan plan = PlanRuns(items, settings.length_bucket_rows, settings.max_padded_bytes);
    for (size_t i : plan.too_big) {
      good[i]->Fail(NewError(TRITONSERVER_ERROR_INVALID_ARG,
                             "the request's inputs, padded, pass the " + std::to_string(settings.max_padded_bytes) +
                                 " bytes one Run may take (max_padded_bytes); send fewer or shorter rows"));
    }
    for (const std::vector<size_t>& indexes : plan.runs) {
      runs.emplace_back();
      for (size_t i : indexes) runs.back().push_back(good[i]);
    }
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    RunGroup(s, runs[r]);
    CostOf(runs[r], costs);
    // the last Run's requests are answered with the batch's (a one-Run batch as before)
    if (run_done && r + 1 < runs.size()) run_done(runs[r]);
  }
  uint64_t start = 0, end = 0;
  int64_t computed = 0;
  for (const std::vector<Pending*>& run : runs) {
    for (const Pending* p : run) {
      if (!p->good() || p->compute_start_ns == 0) continue;
      start = start == 0 ? p->compute_start_ns : std::min(start, p->compute_start_ns);
      end = std::max(end, p->compute_end_ns);
      computed += p->rows;
    }
  }
  if (computed > 0) {
    FASTPATH_LOG_IF_ERROR(TRITONBACKEND_ModelInstanceReportBatchStatistics(
                              s->triton, static_cast<uint64_t>(computed), exec_start_ns, start, end, NowNs()),
                          "batch statistics");
  }
}

}  // namespace fastpath
