"""Text in, label out: one ONNX graph with the tokenizer inside (onnxruntime-extensions ops).

`build_text_graph` reads a Hugging Face `tokenizers` file (BERT WordPiece) and an encoder ONNX file
(ids + mask in) and writes ONE graph: `text` (string, one per batch row, [-1, 1] or [-1]) ->
`BertTokenizer` (one text per call, inside a `Loop` over the batch) -> ids at natural length, the
batch padded to its longest row -> the encoder (one run per batch) -> its outputs, plus
`truncated` (bool, [-1, 1]) per row. Every tokenizer attribute is derived from tokenizer.json
(`text_graph_tokenizer.bert_tokenizer_attributes`); what the op cannot reproduce is refused with an
`ExportError`, so the build falls back to the Python tokenizer. `verify_text_graph` (in
`text_graph_check`) proves ids and outputs equal the two-step path.

The tokenizer half (the op's attributes from tokenizer.json, what is converted and what refused,
how a batch of ragged texts is tokenized, where the op differs from `tokenizers`) is
`text_graph_tokenizer`; this module puts it in front of the encoder and its head.

Run alone::

    python -m triton_fastpath.export.text_graph --tokenizer build/sentiment/onnx/tokenizer.json \
        --encoder build/sentiment/onnx/model.int8.onnx --max-length 64 --output text_graph.onnx

The resulting file needs the custom-op library to load: in Python
`SessionOptions.register_custom_ops_library(onnxruntime_extensions.get_library_path())`; in Triton's
onnxruntime backend `model_operations { op_library_filename: "..." }`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from triton_fastpath import ort_extensions
from triton_fastpath.errors import ExportError
from triton_fastpath.export.text_graph_tokenizer import (
    CONTRIB_DOMAIN,
    IDS,
    MASK,
    TRUNCATED_OUTPUT,
    bert_tokenizer_attributes,
    tokenizer_graph,
)

LOGGER = logging.getLogger(__name__)


def with_head(encoder, *, logits_output: str | None = None, labels: Sequence[str] | None = None):
    """`encoder` (an `onnx.ModelProto`, changed in place) with the classifier head the graph serves.

    Args:
        encoder: the encoder model.
        logits_output: an output holding logits: replaced by `probabilities` (softmax) and
            `label_index` ([B, 1], argmax). None when the encoder already returns them.
        labels: class names, index order: adds `label` ([B, 1] string, the name at `label_index`)
            and `probability` ([B, 1], the largest probability), the pipeline's client outputs,
            so no postprocess step is needed. None to leave them out.

    Raises:
        ExportError: the named outputs are missing, or `labels` does not match the class count.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    names = [o.name for o in encoder.graph.output]
    if logits_output is not None:
        if logits_output not in names:
            raise ExportError(f"encoder has no output {logits_output!r} (it has {names}); check --logits-output")
        keep = [o for o in encoder.graph.output if o.name != logits_output]
        encoder.graph.node.extend(
            [
                helper.make_node("Softmax", [logits_output], ["probabilities"], axis=-1),
                helper.make_node("ArgMax", ["probabilities"], ["label_index"], axis=-1, keepdims=1),
            ]
        )
        del encoder.graph.output[:]
        encoder.graph.output.extend(
            [
                *keep,
                helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", None]),
                helper.make_tensor_value_info("label_index", TensorProto.INT64, ["batch", 1]),
            ]
        )
    if labels is None:
        return encoder
    outputs = {o.name: o for o in encoder.graph.output}
    if not {"probabilities", "label_index"} <= set(outputs):
        raise ExportError(f"labels need encoder outputs probabilities and label_index; it has {sorted(outputs)}")
    dims = outputs["probabilities"].type.tensor_type.shape.dim
    if len(dims) == 2 and dims[1].HasField("dim_value") and dims[1].dim_value != len(labels):
        raise ExportError(f"labels={list(labels)} name {len(labels)} classes; probabilities has {dims[1].dim_value}")
    head = "text_graph_head/"
    encoder.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(list(labels), dtype=object), head + "labels"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), head + "last_axis"),
        ]
    )
    encoder.graph.node.extend(
        [
            helper.make_node("Gather", [head + "labels", "label_index"], ["label"], axis=0),
            helper.make_node("ReduceMax", ["probabilities", head + "last_axis"], ["probability"], keepdims=1),
        ]
    )
    encoder.graph.output.extend(
        [
            helper.make_tensor_value_info("label", TensorProto.STRING, ["batch", 1]),
            helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch", 1]),
        ]
    )
    return encoder


def compose_text_graph(
    tokenizer: dict,
    encoder,
    *,
    max_length: int,
    text_rank: int = 2,
    logits_output: str | None = None,
    labels: Sequence[str] | None = None,
    where: str = "tokenizer.json",
):
    """The merged `onnx.ModelProto` (pure: nothing read or written). See `build_text_graph`."""
    from onnx import compose

    inputs = {i.name for i in encoder.graph.input} - {init.name for init in encoder.graph.initializer}
    if not {"input_ids", "attention_mask"} <= inputs or inputs - {"input_ids", "attention_mask", "token_type_ids"}:
        raise ExportError(
            f"encoder inputs are {sorted(inputs)}; the text graph feeds input_ids, attention_mask "
            "and optionally token_type_ids"
        )
    opsets = {o.domain: o.version for o in encoder.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None or opset < 18:
        raise ExportError(
            f"encoder default-domain opset is {opset}; the text graph needs >= 18 (Pad, ReduceMax inputs)"
        )
    if CONTRIB_DOMAIN in opsets:
        raise ExportError(f"encoder already uses the {CONTRIB_DOMAIN} domain; refusing to merge a second tokenizer")
    facts = bert_tokenizer_attributes(tokenizer, max_length=max_length, where=where)
    token_types = "token_type_ids" in inputs
    front = tokenizer_graph(
        facts,
        max_length=max_length,
        opset=opset,
        ir_version=encoder.ir_version,
        text_rank=text_rank,
        token_types=token_types,
    )
    encoder = with_head(encoder, logits_output=logits_output, labels=labels)
    io_map = [(IDS, "input_ids"), (MASK, "attention_mask")]
    if token_types:
        io_map.append(("text_graph/token_type_ids", "token_type_ids"))
    outputs = [o.name for o in encoder.graph.output] + [TRUNCATED_OUTPUT]
    try:
        merged = compose.merge_models(front, encoder, io_map=io_map, outputs=outputs, name="text_graph")
    except Exception as error:  # onnx raises ValueError on name clashes or opset conflicts
        raise ExportError(f"cannot merge the tokenizer graph with the encoder: {error}") from error
    merged.ir_version = encoder.ir_version
    return merged


def build_text_graph(
    *,
    tokenizer_path: Path,
    encoder_path: Path,
    output_path: Path,
    max_length: int,
    text_rank: int = 2,
    logits_output: str | None = None,
    labels: Sequence[str] | None = None,
) -> Path:
    """Write one ONNX graph mapping text to the encoder's outputs plus `truncated`.

    Args:
        tokenizer_path: a `tokenizers` tokenizer.json (BERT WordPiece).
        encoder_path: an ONNX encoder with inputs `input_ids`, `attention_mask` (int64, [batch,
            sequence], dynamic sequence) and optionally `token_type_ids` (fed zeros).
        output_path: where to write the graph (one file; written atomically).
        max_length: the model's maximum tokens per text, [CLS] and [SEP] included; longer texts are
            cut to it and flagged `truncated`.
        text_rank: 2 for `text` of shape [batch, 1] (Triton dims (1,) with batching), 1 for [batch].
        logits_output: the encoder output holding logits, to append softmax (`probabilities`) and
            argmax (`label_index`, [batch, 1]); None when the head is already in the encoder.
        labels: class names in index order, to add `label` and `probability` outputs (see
            `with_head`); None to serve only the encoder's outputs.

    Returns:
        `output_path`.

    Raises:
        ExportError: unsupported tokenizer, unsuitable encoder, or a graph that fails the checker.
    """
    import onnx

    tokenizer_path, encoder_path, output_path = Path(tokenizer_path), Path(encoder_path), Path(output_path)
    try:
        tokenizer = json.loads(tokenizer_path.read_text(encoding="utf-8"))
        encoder = onnx.load(str(encoder_path))
    except (OSError, ValueError) as error:
        raise ExportError(f"cannot read {tokenizer_path} or {encoder_path}: {error}") from error
    merged = compose_text_graph(
        tokenizer,
        encoder,
        max_length=max_length,
        text_rank=text_rank,
        logits_output=logits_output,
        labels=labels,
        where=str(tokenizer_path),
    )
    try:
        onnx.checker.check_model(merged)
    except onnx.checker.ValidationError as error:
        raise ExportError(f"the text graph for {encoder_path} fails the ONNX checker: {error}") from error
    output_path.parent.mkdir(parents=True, exist_ok=True)
    partial = output_path.with_name(output_path.name + ".partial")
    try:
        onnx.save(merged, str(partial))
        os.replace(partial, output_path)
    finally:
        partial.unlink(missing_ok=True)
    LOGGER.info("text graph %s: %s + %s, max_length %d", output_path, tokenizer_path, encoder_path, max_length)
    return output_path


def custom_ops_library() -> str:
    """Path of onnxruntime-extensions' op library (a Python extension module; see the docs)."""
    try:
        return ort_extensions.library_path()
    except ImportError as error:
        raise ExportError("the text graph needs onnxruntime-extensions==0.15.2 (pip install it)") from error


def session(path: Path | bytes, *, threads: int = 1):
    """An onnxruntime session for a text graph, with the extension ops registered."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.register_custom_ops_library(custom_ops_library())
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    source = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    """`python -m triton_fastpath.export.text_graph`: build one text graph (`text_graph_check` verifies it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json (BERT WordPiece)")
    parser.add_argument("--encoder", type=Path, required=True, help="encoder ONNX (input_ids, attention_mask in)")
    parser.add_argument("--output", type=Path, required=True, help="where to write the text graph")
    parser.add_argument("--max-length", type=int, required=True, help="tokens per text, special tokens included")
    parser.add_argument("--text-rank", type=int, choices=(1, 2), default=2, help="text shape [B] or [B, 1]")
    parser.add_argument("--logits-output", help="encoder output to turn into probabilities + label_index")
    parser.add_argument("--labels", help="class names, comma-separated: adds label and probability outputs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    labels = args.labels.split(",") if args.labels else None
    try:
        build_text_graph(
            tokenizer_path=args.tokenizer,
            encoder_path=args.encoder,
            output_path=args.output,
            max_length=args.max_length,
            text_rank=args.text_rank,
            logits_output=args.logits_output,
            labels=labels,
        )
    except ExportError as error:
        print(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
