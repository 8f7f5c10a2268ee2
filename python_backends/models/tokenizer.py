"""Triton Python model: text -> token ids at natural length, with a per-row truncation flag.

Each request's rows are padded to its own longest text only (one text: no padding at all); the
next step pads a batch of such requests to its longest (`allow_ragged_batch` inputs).

Adapter only: the logic lives in `fastpath_backends.text`. The tokenizer is loaded once per
instance; each request is validated alone, so one bad text fails only its own request.
"""

import triton_python_backend_utils as pb_utils

from fastpath_backends.batch import run_isolated, split_rows
from fastpath_backends.parameters import TokenizerParameters
from fastpath_backends.text import TextEncoder, trim_padding
from fastpath_backends.triton_io import model_parameters, read_texts, to_response, version_dir


class TritonPythonModel:
    def initialize(self, args):
        params = TokenizerParameters.from_parameters(model_parameters(args))
        self.name = args["model_name"]
        self.encoder = TextEncoder(version_dir(args) / params.tokenizer_file, params.max_length)
        self.max_text_bytes = params.max_text_bytes

    def execute(self, requests):
        results = run_isolated(read_texts(pb_utils, requests, self.max_text_bytes), self._encode)
        return [to_response(pb_utils, result, self.name) for result in results]

    def _encode(self, batches):
        flat = [text for texts in batches for text in texts]
        encoded = self.encoder.encode(flat)
        counts = [len(texts) for texts in batches]
        parts = zip(
            split_rows(encoded.input_ids, counts),
            split_rows(encoded.attention_mask, counts),
            split_rows(encoded.truncated, counts),
        )
        results = []
        for padded_ids, padded_mask, cut in parts:
            ids, mask = trim_padding(padded_ids, padded_mask)  # this request's own longest text, not the batch's
            results.append({"input_ids": ids, "attention_mask": mask, "truncated": cut})
        return results

    def finalize(self):
        self.encoder = None
