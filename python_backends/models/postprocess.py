"""Triton Python model: probabilities and label index (the encoder graph's folded head) -> label
name and the probability of that label.

Adapter only: the logic lives in `fastpath_backends.classify`.
"""

import triton_python_backend_utils as pb_utils

from fastpath_backends.batch import concat_rows, run_isolated, split_rows
from fastpath_backends.classify import label_rows, parse_labels
from fastpath_backends.errors import BadRequest
from fastpath_backends.parameters import PostprocessParameters
from fastpath_backends.triton_io import model_parameters, read_input, to_response


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        self.labels = parse_labels(PostprocessParameters.from_parameters(model_parameters(args)).labels)

    def execute(self, requests):
        payloads = []
        for request in requests:
            try:
                payloads.append(
                    (read_input(pb_utils, request, "probabilities"), read_input(pb_utils, request, "label_index"))
                )
            except BadRequest as error:
                payloads.append(error)
        return [to_response(pb_utils, r, self.name) for r in run_isolated(payloads, self._classify)]

    def _classify(self, batches):
        probabilities, counts = concat_rows([b[0] for b in batches])
        label_index, _ = concat_rows([b[1] for b in batches])
        result = label_rows(probabilities, self.labels, label_index)
        parts = zip(split_rows(result.label, counts), split_rows(result.probability, counts))
        return [{"label": label, "probability": probability} for label, probability in parts]
