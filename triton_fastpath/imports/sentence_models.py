"""sentence-transformers encoders and SetFit-style classifiers, as one served ONNX graph each.

    folder = detect_folder(path)                                   # imports.folder_kind
    body = load_body(folder.sentence)                              # refuses missing/new weights
    graph = SentenceGraph(body, folder.sentence, head=None)        # pooling (+ norm) (+ head) in torch
    write_served_tokenizer(folder.sentence, out_dir / "tokenizer.json")
    graph_freshness(folder, None, out_dir / "model.onnx").why_stale()  # None: its export is up to date

The pooling (mean/CLS/max as `1_Pooling/config.json` says), the L2 normalisation (`Normalize`)
and a SetFit head (`imports.setfit_head`) are all part of the exported graph: a client sends text
and gets the embedding or the label, nothing to re-implement. The tokenizer is the folder's own,
with its padding entry removed (some ship `Fixed 128`: natural length on the serving path) and
truncation at the model's `max_seq_length`, lower-casing first when sentence-transformers does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from triton_fastpath.engine.freshness import Freshness
from triton_fastpath.errors import ExportError
from triton_fastpath.imports.folder_kind import WEIGHT_FILES, Folder, SentenceConfig
from triton_fastpath.imports.setfit_head import LinearHead

TOKENIZER_FILES = ("vocab.txt", "vocab.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
# Weights the served graph never reads: a missing pooler is not a half-initialised model.
UNUSED_PREFIXES = ("pooler.",)


def load_body(sentence: SentenceConfig):
    """The Transformer module as a transformers `AutoModel` (eager attention), in eval mode.

    The loader's own report is read: any weight it says is missing (newly initialised) or of the
    wrong shape stops the import, as does a weights file that does not load.

    Raises:
        ExportError: no weights file, an unloadable file, or missing/mismatched weights (named).
    """
    from transformers import AutoModel

    folder = sentence.transformer_dir
    if not any((folder / name).exists() for name in WEIGHT_FILES):
        raise ExportError(f"{folder}: no weights ({' or '.join(WEIGHT_FILES)})")
    try:
        model, info = AutoModel.from_pretrained(
            folder, local_files_only=True, attn_implementation="eager", output_loading_info=True
        )
    except Exception as error:  # safetensors, torch and transformers raise many kinds
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        raise ExportError(f"{folder}: the weights do not load: {type(error).__name__}: {first}") from error
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(UNUSED_PREFIXES))
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", ()))
    if missing or mismatched:
        named = missing[:5] + mismatched[:5]
        raise ExportError(
            f"{folder}: the loader reports {len(missing)} missing (newly initialised) and {len(mismatched)} "
            f"mismatched weights, e.g. {named}; a model with untrained weights is never served"
        )
    if info.get("error_msgs"):
        raise ExportError(f"{folder}: the weights load with errors: {info['error_msgs'][:3]}")
    return model.eval()


def pooled(token_states, mask, modes: tuple[str, ...]):
    """sentence-transformers' Pooling in torch: the modes concatenated in its order (cls, max, mean, mean_sqrt_len)."""
    import torch

    weights = mask.unsqueeze(-1).to(token_states.dtype)
    parts = []
    if "cls" in modes:
        parts.append(token_states[:, 0])
    if "max" in modes:
        parts.append(torch.where(weights > 0, token_states, torch.full_like(token_states, -1e9)).max(dim=1).values)
    if "mean" in modes or "mean_sqrt_len" in modes:
        total = (token_states * weights).sum(dim=1)
        count = weights.sum(dim=1).clamp(min=1e-9)
        if "mean" in modes:
            parts.append(total / count)
        if "mean_sqrt_len" in modes:
            parts.append(total / torch.sqrt(count))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _module_class():
    import torch

    class SentenceGraph(torch.nn.Module):
        """ids + mask -> embedding [N, D] (encoder), or probabilities [N, C] + label_index [N, 1] (with a head)."""

        def __init__(self, body, sentence: SentenceConfig, head: LinearHead | None = None) -> None:
            super().__init__()
            self.body = body
            self.modes = tuple(sentence.pooling)
            self.normalize = sentence.normalize
            self.has_head = head is not None
            if head is not None:
                self.head_normalize = head.normalize_embeddings
                self.register_buffer("coef", torch.from_numpy(np.ascontiguousarray(head.coef.T)))
                self.register_buffer("intercept", torch.from_numpy(head.intercept))

        def embed(self, input_ids, attention_mask):
            states = self.body(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            vector = pooled(states, attention_mask, self.modes)
            if self.normalize:
                vector = torch.nn.functional.normalize(vector, p=2.0, dim=1)
            return vector

        def forward(self, input_ids, attention_mask):
            vector = self.embed(input_ids, attention_mask)
            if not self.has_head:
                return vector
            if self.head_normalize:
                vector = torch.nn.functional.normalize(vector, p=2.0, dim=1)
            probabilities = torch.softmax(vector @ self.coef + self.intercept, dim=-1)
            return probabilities, probabilities.argmax(dim=-1, keepdim=True)

    return SentenceGraph


def sentence_graph(body, sentence: SentenceConfig, head: LinearHead | None = None):
    """The torch module that is exported (see `SentenceGraph`), in eval mode."""
    return _module_class()(body, sentence, head).eval()


# The dynamo exporter names aten::embedding's value `embedding`: the graph output is exported
# under this name and renamed afterwards (`rename_value`), or the exporter falls back to TorchScript.
EXPORTED_EMBEDDING = "sentence_embedding"


def output_names(head: LinearHead | None) -> list[str]:
    """The exported graph's outputs (the embedding under `EXPORTED_EMBEDDING`, renamed later)."""
    return ["probabilities", "label_index"] if head is not None else [EXPORTED_EMBEDDING]


DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}


def graph_freshness(folder: Folder, head: LinearHead | None, fp32: Path) -> Freshness:
    """The FP32 export's freshness, its stamp beside `fp32`: the folder's files (weights, configs,
    tokenizer, head; those of its top level and of the Transformer module's folder), the code that
    shapes the graph, and the parameters it is built with (pooling, normalisation, lengths, outputs,
    the head's labels and normalisation)."""
    from triton_fastpath.export import torch2onnx
    from triton_fastpath.imports import setfit_head

    sentence = folder.sentence
    folders = dict.fromkeys([folder.path, sentence.transformer_dir])
    files = [p for d in folders for p in sorted(d.iterdir()) if p.is_file() and not p.name.startswith(".")]
    code = [__file__, torch2onnx.__file__, *([setfit_head.__file__] if head is not None else [])]
    params = {
        "pooling": list(sentence.pooling),
        "normalize": sentence.normalize,
        "max_seq_length": sentence.max_seq_length,
        "do_lower_case": sentence.do_lower_case,
        "dimension": sentence.dimension,
        "outputs": output_names(head),
        "dynamic_axes": DYNAMIC_AXES,
        "head": None if head is None else {"labels": list(head.labels), "normalize": head.normalize_embeddings},
    }
    stamp = fp32.with_name(f".{fp32.name}.sha256")
    return Freshness("export FP32 ONNX", stamp, outputs=[fp32], inputs=[*files, *map(Path, code)], params=params)


def rename_value(path: Path, old: str, new: str) -> None:
    """Rename graph value `old` to `new` in an ONNX file (a value already called `new` moves aside)."""
    import onnx

    model = onnx.load(str(path))
    graph = model.graph
    taken = f"{new}__internal"

    def swap(name: str) -> str:
        return taken if name == new else (new if name == old else name)

    for node in graph.node:
        node.input[:] = [swap(n) for n in node.input]
        node.output[:] = [swap(n) for n in node.output]
    for value in [*graph.output, *graph.value_info, *graph.input]:
        value.name = swap(value.name)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def write_served_tokenizer(sentence: SentenceConfig, dest: Path) -> Path:
    """The folder's tokenizer.json as served: no padding entry, truncation at max_seq_length,
    and a Lowercase normalizer first when sentence-transformers lower-cases (`do_lower_case`).

    Raises:
        ExportError: no tokenizer.json and no fast tokenizer to make one from.
    """
    source = sentence.transformer_dir / "tokenizer.json"
    if source.exists():
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
        except ValueError as error:
            raise ExportError(f"{source}: not a tokenizers JSON file: {error}") from error
    else:
        found = [name for name in TOKENIZER_FILES if (sentence.transformer_dir / name).exists()]
        if not found:  # transformers would build an empty tokenizer from config.json alone
            raise ExportError(
                f"{sentence.transformer_dir}: no tokenizer (tokenizer.json, or the files of a fast tokenizer: "
                f"{', '.join(TOKENIZER_FILES)})"
            )
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(sentence.transformer_dir, local_files_only=True)
        except Exception as error:
            raise ExportError(
                f"{sentence.transformer_dir}: no tokenizer (tokenizer.json, or the files of a fast tokenizer): "
                f"{type(error).__name__}: {str(error)[:200]}"
            ) from error
        if not getattr(tokenizer, "is_fast", False):
            raise ExportError(f"{sentence.transformer_dir}: the tokenizer has no fast version; add a tokenizer.json")
        data = json.loads(tokenizer.backend_tokenizer.to_str())
    data["padding"] = None  # natural length; the server pads a batch to its longest row
    data["truncation"] = {
        "direction": "Right",
        "max_length": sentence.max_seq_length,
        "strategy": "LongestFirst",
        "stride": 0,
    }
    if sentence.do_lower_case:
        normalizer = data.get("normalizer")
        steps = [{"type": "Lowercase"}] + ([normalizer] if normalizer else [])
        data["normalizer"] = {"type": "Sequence", "normalizers": steps}
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False)
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(text)
    except Exception as error:
        raise ExportError(f"{source}: the tokenizer does not load: {error}") from error
    dest.write_text(text, encoding="utf-8")
    return dest
