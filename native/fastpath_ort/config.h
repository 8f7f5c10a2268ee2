// What the backend takes from a model's configuration: typed inputs and outputs, batching, and
// its own parameters. Pure: no Triton or onnxruntime calls, so it is easy to reason about.
//
// Parameters (config.pbtxt `parameters { key: ... value { string_value: ... } }`, all optional):
//   onnx_file                 the graph in the version folder (default "model.onnx")
//   intra_op_threads          onnxruntime threads inside one operator (default 1)
//   inter_op_threads          threads across operators (default 1)
//   graph_optimization_level  disable | basic | extended | all, or 0/1/2/99 (default all)
//   reject_non_finite         true: a float input holding NaN or Inf fails its request (default)
//   max_sequence_length       longest row along a variable (-1) axis; longer fails (default 0: none)
//   onnxruntime_library       path of libonnxruntime.so.1.x (default: found next to this backend)
//   custom_op_library         a custom-op library to register on the session (default none)
//   python_library            loaded RTLD_GLOBAL before custom_op_library, for op libraries that
//                             are Python extension modules (default "libpython3.11.so.1.0";
//                             "" loads nothing)
//   validate_utf8             true: a BYTES input element that is not UTF-8 fails its request
//                             (default)
//   reject_blank_strings      true: a BYTES element that is empty or whitespace only fails its
//                             request (default false; text models set it)
//   max_string_bytes          longest BYTES element accepted (default 0: no limit)
//   cut_string_chars          BYTES elements are cut to this many characters (at a UTF-8
//                             boundary) before Run, so a huge text costs no more than a long one
//                             (default 0: never cut)
//   cut_flag_output           a BOOL output set true on every row whose text was cut (e.g.
//                             "truncated"; default none)
//   admission_budget_ms_<N>   admission control (admission.h): the compute a request of priority
//                             level N may wait behind in one batch; none given: nothing is shed
//   admission_min_rows        rows of a batch always computed, whatever the estimate (default 1)
//   inline_when_idle          with admission budgets: an Execute call that finds the model idle
//                             (nothing queued, nothing computing) computes its batch on Triton's
//                             thread instead of handing it to a worker, saving the worker's wake-up
//                             (dispatcher.h); false: every batch goes through the queue (default true)
//   ragged_lengths_agree      true: every ragged input of a request must have the same length
//                             along its -1 axes (token ids and their mask), or the request fails
//                             alone; padding in a batch would otherwise hide the mismatch (default false)
//   length_bucket_rows        a batch's requests sorted by their longest row (elements along a -1
//                             axis, or bytes of text) and run about this many rows at a time, each
//                             Run padded only to its own longest (default 0: one Run per batch)
//   max_padded_bytes          the most bytes the padded input tensors of one Run may take: a batch
//                             that would pass it is split into Runs (sorted by length), and a request
//                             that passes it alone fails with INVALID_ARGUMENT (default 64 MiB)
//   ragged_outputs            comma-separated outputs whose -1 axes follow the ragged inputs' length:
//                             each request gets them trimmed to its own length. A batching model with
//                             a ragged input must list every output that has a -1 dim (default none)
//   value_bounds              integer inputs whose values must lie in [lo, hi): "name:lo:hi,..."
//                             (e.g. token ids within the tokenizer's vocabulary); a value outside
//                             fails its request naming the input, the value and the bounds (default none)
//   text_tokenizer            a BERT WordPiece tokenizer.json in the version folder (default none). With
//                             it the model is text in: its one input is TYPE_STRING with dims [1] (a
//                             text per row); each text is checked as above, then tokenized by the exact
//                             C++ WordPiece tokenizer (wordpiece.h) at its natural length, and the graph
//                             is fed input_ids and attention_mask (int64 [rows, longest], the batch
//                             padded to its longest row with the tokenizer's [PAD] id) and, when the
//                             graph has that input, token_type_ids (zeros). A text the tokenizer cuts
//                             at max_length sets its row in cut_flag_output, which the backend then
//                             writes itself when the graph has no such output.
//   max_length                with text_tokenizer: the most tokens a text becomes, special tokens
//                             included (required there); longer texts are cut, as `tokenizers`'
//                             enable_truncation(max_length) cuts them. Informational otherwise.
//
// Read from the configuration beside the parameters: max_batch_size, input, output, model_warmup
// (warmup_executes) and response_cache.enable (response_cache: with Triton's response cache on,
// every response carries every output, so that the cached answer is the whole answer).
//
// Keys the kit writes for other readers (the SDK generator, the tokenizer) are accepted and
// ignored: kInformationalParameters. Any other key fails the load, naming it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "json.h"
#include "ort_api.h"
#include "triton_api.h"

namespace fastpath {

struct TensorSpec {
  std::string name;
  TRITONSERVER_DataType triton_type = TRITONSERVER_TYPE_INVALID;
  ONNXTensorElementDataType onnx_type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t element_size = 0;     // 0 for BYTES (TYPE_STRING)
  std::vector<int64_t> dims;   // without the batch dimension; -1 = variable
  bool ragged = false;         // any -1 in dims: such axes are padded per batch

  bool is_string() const { return triton_type == TRITONSERVER_TYPE_BYTES; }
  bool is_float() const;
};

struct ModelSettings {
  int64_t max_batch_size = 0;  // 0: requests carry no batch dimension and run one by one
  // Execute calls each instance gets for its warmup before it serves (model_warmup: one per sample
  // with batch_size > 0, `count` times, at least once), run inline and never shed.
  int64_t warmup_executes = 0;
  // `response_cache { enable: true }`: Triton 2.51 keys a cached response by the model, its version
  // and the request's inputs, not by the outputs the request asked for, so every response carries
  // every output (batch.cc), and whichever client fills the cache stores the whole answer. Without
  // it only the requested outputs are written.
  bool response_cache = false;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::string onnx_file = "model.onnx";
  int intra_op_threads = 1;
  int inter_op_threads = 1;
  GraphOptimizationLevel graph_optimization_level = ORT_ENABLE_ALL;
  bool reject_non_finite = true;
  int64_t max_sequence_length = 0;
  std::string onnxruntime_library;
  std::string custom_op_library;
  std::string python_library = "libpython3.11.so.1.0";
  bool validate_utf8 = true;
  bool reject_blank_strings = false;
  int64_t max_string_bytes = 0;
  int64_t cut_string_chars = 0;
  std::string cut_flag_output;
  std::map<int, double> admission_budgets_s;  // priority level (1 = highest) -> seconds
  int64_t admission_min_rows = 1;
  bool inline_when_idle = true;
  int64_t length_bucket_rows = 0;
  bool ragged_lengths_agree = false;
  int64_t max_padded_bytes = int64_t{64} << 20;
  std::vector<std::string> ragged_outputs;
  std::map<std::string, std::pair<int64_t, int64_t>> value_bounds;  // input -> [lo, hi)
  std::string text_tokenizer;
  int64_t max_length = 0;
  // What a Run feeds the graph, request by request: the configuration's inputs, or with a
  // text_tokenizer the text's token ids and mask (kTokenIds, kTokenMask: INT64, dims [-1], ragged).
  // A graph input token_type_ids is added per instance (zeros), not here.
  std::vector<TensorSpec> run_inputs;

  bool batched() const { return max_batch_size > 0; }
  // The backend tokenizes the text input itself (text_tokenizer).
  bool tokenizes() const { return !text_tokenizer.empty(); }
  // Batched with a ragged run input: requests are padded to each other in a Run.
  bool pads() const;
  bool is_ragged_output(const std::string& name) const;
};

// The graph inputs a text model's tokens feed (text_tokenizer).
extern const char kTokenIds[];
extern const char kTokenMask[];
extern const char kTokenTypes[];

// Parameter keys the kit renders for readers other than this backend.
extern const char* const kInformationalParameters[];
extern const size_t kInformationalParameterCount;
// Every key this backend reads ("admission_budget_ms_" is a prefix), for tests and error messages.
extern const char* const kBackendParameters[];
extern const size_t kBackendParameterCount;

// Fills `out` from the model configuration JSON. Returns "" or an error naming the field.
std::string ParseModelSettings(const Json& config, ModelSettings* out);

// Each key of kBackendParameters, in that order, with the value `s` holds for it written as a
// config's string_value would give it (a family "admission_budget_ms_" as "<level>:<ms>,...", a
// list comma-separated, none ""). Of `ModelSettings()`: the defaults, which
// `test_fastpath_ort --defaults` prints for the Python contract's test (FastpathOrtParameters).
std::vector<std::pair<std::string, std::string>> ParameterValues(const ModelSettings& s);

// "TYPE_FP32" -> FP32 etc.; false for types this backend does not serve (BF16, unknown).
bool ConfigTypeToTriton(const std::string& config_type, TRITONSERVER_DataType* triton,
                        ONNXTensorElementDataType* onnx, size_t* element_size);
const char* OnnxTypeName(ONNXTensorElementDataType type);
const char* TritonTypeName(TRITONSERVER_DataType type);

}  // namespace fastpath
