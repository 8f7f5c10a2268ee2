"""Triton Python model: an ONNX graph on onnxruntime (CPU), for the embedded target.

The embedded tritonserver has no onnxruntime backend, so this adapter stands in for it; the
container target uses the native `onnxruntime_onnx` platform with the same config otherwise.
Requests of one dynamic batch run as one onnxruntime call; a poisoned request fails alone.
"""

import json
import time

import triton_python_backend_utils as pb_utils

from fastpath_backends.admission import admission_from_parameters
from fastpath_backends.batch import concat_rows, pad_rows, run_by_length, run_isolated, split_rows
from fastpath_backends.errors import BadRequest
from fastpath_backends.onnx_model import OnnxModel, check_finite
from fastpath_backends.parameters import OnnxRunnerParameters
from fastpath_backends.triton_io import admit, model_parameters, read_input, to_response, version_dir


class TritonPythonModel:
    def initialize(self, args):
        raw = model_parameters(args)
        params = OnnxRunnerParameters.from_parameters(raw)
        config = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.input_names = [i["name"] for i in config["input"]]
        # token rows at natural length: a batch's requests differ in length and are padded here
        self.ragged = {i["name"] for i in config["input"] if i.get("allow_ragged_batch")}
        # a text encoder's batch runs in length buckets (only the two token inputs, both ragged)
        tokens = self.ragged == set(self.input_names) == {"input_ids", "attention_mask"}
        self.bucket_rows = params.length_bucket_rows if tokens else 0
        self.output_names = [o["name"] for o in config["output"]]
        self.admission = admission_from_parameters(raw)  # overload: shed at dispatch, not in the queue
        self.reject_non_finite = params.reject_non_finite
        path = version_dir(args) / params.onnx_file
        self.model = OnnxModel(path, intra_op_threads=params.intra_op_threads)

    def execute(self, requests):
        payloads = []
        for request in requests:
            try:
                inputs = {name: read_input(pb_utils, request, name) for name in self.input_names}
                if self.reject_non_finite:
                    check_finite(inputs)
                payloads.append(inputs)
            except BadRequest as error:
                payloads.append(error)
        payloads = admit(pb_utils, requests, payloads, self.admission, _rows)
        started = time.perf_counter()
        results = run_isolated(payloads, self._run)
        if self.admission is not None:
            computed = sum(_rows(p) for p in payloads if not isinstance(p, Exception))
            self.admission.observe(computed, time.perf_counter() - started)
        return [to_response(pb_utils, r, self.name) for r in results]

    def _run(self, batches):
        stacked, counts = {}, []
        for name in self.input_names:
            join = pad_rows if name in self.ragged else concat_rows
            stacked[name], counts = join([b[name] for b in batches])
        if self.bucket_rows:
            outputs = run_by_length(
                lambda ids, mask: self.model.run({"input_ids": ids, "attention_mask": mask}, self.output_names),
                stacked["input_ids"],
                stacked["attention_mask"],
                self.bucket_rows,
            )
        else:
            outputs = self.model.run(stacked, self.output_names)
        split = {name: split_rows(value, counts) for name, value in outputs.items()}
        return [{name: split[name][i] for name in self.output_names} for i in range(len(batches))]


def _rows(payload):
    return len(next(iter(payload.values())))
