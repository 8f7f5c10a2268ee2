"""Triton Python model: logits -> label, probability of that label, all probabilities.

Adapter only: the logic lives in `fastpath_backends.classify`.
"""

import triton_python_backend_utils as pb_utils

from fastpath_backends.batch import concat_rows, run_isolated, split_rows
from fastpath_backends.classify import classify, parse_labels
from fastpath_backends.errors import BadRequest
from fastpath_backends.triton_io import model_parameters, read_input, to_response


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        self.labels = parse_labels(model_parameters(args)["labels"])

    def execute(self, requests):
        payloads = []
        for request in requests:
            try:
                payloads.append(read_input(pb_utils, request, "logits"))
            except BadRequest as error:
                payloads.append(error)
        return [to_response(pb_utils, r, self.name) for r in run_isolated(payloads, self._classify)]

    def _classify(self, batches):
        logits, counts = concat_rows(batches)
        result = classify(logits, self.labels)
        parts = zip(*(split_rows(a, counts) for a in (result.label, result.probability, result.probabilities)))
        return [{"label": a, "probability": b, "probabilities": c} for a, b, c in parts]
