// What the backend keeps per model (its settings, read once at load, and its own request queue
// when it has admission budgets) and per instance (its onnxruntime session and queue worker).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "admission.h"
#include "config.h"
#include "request.h"
#include "request_queue.h"
#include "runtime.h"
#include "triton_api.h"
#include "wordpiece.h"

namespace fastpath {

// A model's queue and what its workers share (dispatcher.h), guarded by `mutex`.
struct Dispatcher {
  std::mutex mutex;
  std::condition_variable wake;  // a request was queued, or a worker is asked to stop
  RequestQueue<std::unique_ptr<Pending>> queue;
  Admission admission;
  int workers = 0;    // running
  uint64_t shed = 0;  // requests refused as overloaded
  uint64_t last_done_ns = 0;  // when a worker last finished a batch
  bool backlogged = false;    // whether requests were still queued then (every worker busy since)
  bool refusing = false;      // an arrival was refused since the queue was last emptied: it is over budget

  Dispatcher(std::map<int, double> budgets_s, int64_t min_rows) : admission(std::move(budgets_s), min_rows) {}
};

// Requests whose TRITONBACKEND_RequestRelease failed. tritonbackend.h: then "the request was not
// released and ownership remains with the backend", so none is dropped: each is kept here, counted
// and logged, and released again when an instance of the model or the model itself finalizes
// (ReleaseKept, dispatcher.h). Guarded by `mutex`: every instance's worker may add to it.
struct Unreleased {
  std::mutex mutex;
  std::vector<TRITONBACKEND_Request*> requests;
  uint64_t failures = 0;  // release calls that failed, retries included
  uint64_t lost = 0;      // never released: no memory to keep them, or refused again as the model unloaded
};

struct ModelState {
  std::string name;
  uint64_t version = 0;
  std::string dir;
  ModelSettings settings;
  std::string onnx_path;
  std::string custom_op_path;
  const Runtime* runtime = nullptr;  // the process's; never released
  // A text model's tokenizer (ModelSettings::text_tokenizer), loaded once; Encode is thread-safe.
  std::shared_ptr<const WordPieceTokenizer> tokenizer;
  std::string tokenizer_path;
  int64_t pad_id = 0;  // the tokenizer's [PAD] id (0 without one): a Run pads token ids with it
  std::unique_ptr<Dispatcher> dispatcher;  // with admission budgets only; else Execute runs inline
  Unreleased unreleased;
};

struct InstanceState {
  ModelState* model = nullptr;
  TRITONBACKEND_ModelInstance* triton = nullptr;
  std::string name;
  const OrtFunctions* ort = nullptr;
  OrtSession* session = nullptr;
  OrtMemoryInfo* cpu = nullptr;
  OrtAllocator* allocator = nullptr;
  std::vector<const char*> input_names;   // what a Run feeds: the run inputs, then token_type_ids if fed
  std::vector<const char*> output_names;  // what a Run fetches: the configured outputs the graph has
  bool feed_token_types = false;  // a text model whose graph takes token_type_ids (fed zeros)
  // Per configured output, its index in output_names, or -1 for a text model's cut_flag_output that
  // the graph does not compute (the backend writes it from Pending::flagged_rows).
  std::vector<int> output_slots;
  std::thread worker;  // takes batches from the model's queue (dispatcher.h), with a dispatcher
  int64_t warmup_left = 0;  // warmup Execute calls still to come (ModelSettings::warmup_executes)
  bool stop = false;   // guarded by the dispatcher's mutex

  ~InstanceState() {
    if (session != nullptr) ort->ReleaseSession(session);
    if (cpu != nullptr) ort->ReleaseMemoryInfo(cpu);
  }
};

// Creates `s`'s session from its model's graph and settings and checks the graph against the
// configuration (names, types, ranks and fixed dims).
TRITONSERVER_Error* CreateSession(InstanceState* s);

}  // namespace fastpath
