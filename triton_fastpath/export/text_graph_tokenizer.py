"""The text graph's tokenizer half: tokenizer.json -> `BertTokenizer` attributes, and text -> ids.

`bert_tokenizer_attributes` derives every attribute of onnxruntime-extensions' `BertTokenizer` op
from a Hugging Face `tokenizers` file and refuses, with an `ExportError`, what the op cannot
reproduce; `tokenizer_graph` wraps the op into the graph `text` -> padded ids, mask and `truncated`
that `text_graph.compose_text_graph` puts in front of the encoder.

How a batch of ragged texts is tokenized: the op takes one text, so a `Loop` tokenizes row i,
truncates it to `max_length` (keeping [CLS] ... [SEP], as `tokenizers`' `enable_truncation` does)
and pads it to `max_length`; the loop's scan outputs stack the rows, and the batch is then sliced to
its longest row. Measured against a Sequence-collecting loop (same or slower) and an `If` that skips
the loop at batch 1 (8-10 us faster there, a second path to verify): docs/text-graph.md.

Tokenizers the kit converts, and not (onnxruntime-extensions 0.15.2):
- BERT WordPiece (`BertNormalizer` + `BertPreTokenizer` + `[CLS] $A [SEP]`): converted here, e.g.
  the kit's `sentiment` tokenizer and all-MiniLM-L6-v2. Cased or uncased, with or without accent
  stripping (`strip_accents` follows `lowercase` when unset, as in `tokenizers`).
- BPE (GPT-2/RoBERTa/CLIP byte-level, Llama-style SentencePiece-BPE in tokenizer.json) and Unigram
  SentencePiece (T5, XLM-R): the extension has ops for them (`GPT2Tokenizer`, `RobertaTokenizer`,
  `CLIPTokenizer`, `SpmTokenizer`, `HfJsonTokenizer`, `SentencepieceTokenizer` for `.model` files),
  but this module does not convert them yet: they are refused by name and keep the Python tokenizer.
- Not convertible: WordPiece with a non-BERT normaliser or pre-tokenizer (e.g. NFKC sequences,
  Metaspace), `clean_text` off, vocabularies with added tokens beyond the vocab or tokens holding
  line breaks, pair inputs, and WordLevel/char-level models.

Exact on text like the held-out set, not on all Unicode: the op keeps a word's pieces before an
unknown character (tokenizers makes the whole word [UNK]) and lower-cases / strips accents with
Latin-1-sized tables. `text_graph_check.verify_text_graph(probe=True)` measures it; docs/text-graph.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from triton_fastpath.errors import ExportError

CONTRIB_DOMAIN = "ai.onnx.contrib"
"""The domain of onnxruntime-extensions' custom ops."""
TEXT_INPUT = "text"
TRUNCATED_OUTPUT = "truncated"
IDS = "text_graph/input_ids"
MASK = "text_graph/attention_mask"
"""Names of the padded ids and mask inside the merged graph (the verifier reads them back)."""
OP_MAX_INPUT_CHARS_PER_WORD = 100
"""Hard-coded in the op's WordpieceTokenizer; a tokenizer.json asking for another value is refused."""


@dataclass(frozen=True)
class TokenizerFacts:
    """What the graph needs from a tokenizer.json, beyond the op's attributes."""

    attributes: dict[str, object]  # BertTokenizer attributes, vocab_file included
    pad_id: int
    sep_id: int
    cls_id: int


def _unsupported(path: str, what: str) -> ExportError:
    return ExportError(
        f"{path}: {what}; the text graph converts BERT WordPiece tokenizers only "
        "(BertNormalizer + BertPreTokenizer + [CLS] $A [SEP]); this model keeps the Python tokenizer"
    )


def _special_ids(post: dict | None, where: str) -> tuple[str, str]:
    """(cls, sep) tokens of a single-sequence `[CLS] $A [SEP]` post-processor."""
    if post is None:
        raise _unsupported(where, "no post_processor (the op always adds [CLS] and [SEP])")
    kind = post.get("type")
    if kind == "BertProcessing":
        return post["cls"][0], post["sep"][0]
    if kind == "TemplateProcessing":
        single = post.get("single", [])
        shape = [next(iter(piece)) for piece in single]
        if shape == ["SpecialToken", "Sequence", "SpecialToken"] and single[1]["Sequence"]["id"] == "A":
            cls, sep = single[0]["SpecialToken"]["id"], single[2]["SpecialToken"]["id"]
            if all(piece[next(iter(piece))].get("type_id", 0) == 0 for piece in single):
                return cls, sep
        raise _unsupported(where, f"post_processor template {shape} is not [CLS] $A [SEP] with type id 0")
    raise _unsupported(where, f"post_processor {kind!r}")


def bert_tokenizer_attributes(tokenizer: dict, *, max_length: int, where: str = "tokenizer.json") -> TokenizerFacts:
    """The `BertTokenizer` op attributes equivalent to a `tokenizers` WordPiece tokenizer.json.

    Nothing is hard-coded: lower-casing, accent stripping, CJK splitting, the special tokens, the
    continuing-subword prefix and the vocabulary come from the file. `max_length` is the model's
    maximum (special tokens included); the op is told `max_length + 1` so that the graph can see
    whether a text was cut (see `build_text_graph`).

    Args:
        tokenizer: the parsed tokenizer.json.
        max_length: tokens per text at most, [CLS] and [SEP] included (>= 3).
        where: the file's name, for messages.

    Raises:
        ExportError: the tokenizer is not one the op reproduces; the message names the field.
    """
    if max_length < 3:
        raise ExportError(f"max_length={max_length}: the text graph needs at least 3 ([CLS], a token, [SEP])")
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece":
        raise _unsupported(where, f"model.type is {model.get('type')!r}")
    vocab: dict[str, int] = model.get("vocab") or {}
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise _unsupported(where, "model.vocab ids are not 0..N-1 without gaps (the op numbers vocab lines)")
    bad = next((t for t, _ in by_id if not t or "\n" in t or "\r" in t), None)
    if bad is not None:
        raise _unsupported(where, f"vocab token {bad!r} is empty or holds a line break (the op splits lines)")
    for added in tokenizer.get("added_tokens") or []:
        if vocab.get(added["content"]) != added["id"]:
            raise _unsupported(where, f"added token {added['content']!r} (id {added['id']}) is not in model.vocab")
    normalizer = tokenizer.get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer":
        raise _unsupported(where, f"normalizer {normalizer.get('type')!r} (needs BertNormalizer)")
    if not normalizer.get("clean_text", True):
        raise _unsupported(where, "normalizer.clean_text is false (the op always removes control characters)")
    lowercase = bool(normalizer.get("lowercase", True))
    strip_accents = normalizer.get("strip_accents")
    # tokenizers' BertNormalizer: strip_accents unset (None) follows lowercase.
    strip_accents = lowercase if strip_accents is None else bool(strip_accents)
    pre = (tokenizer.get("pre_tokenizer") or {}).get("type")
    if pre != "BertPreTokenizer":
        raise _unsupported(where, f"pre_tokenizer {pre!r} (needs BertPreTokenizer)")
    chars = model.get("max_input_chars_per_word", OP_MAX_INPUT_CHARS_PER_WORD)
    if chars != OP_MAX_INPUT_CHARS_PER_WORD:
        raise _unsupported(where, f"model.max_input_chars_per_word={chars} (the op uses {OP_MAX_INPUT_CHARS_PER_WORD})")
    unk = model.get("unk_token", "[UNK]")
    cls, sep = _special_ids(tokenizer.get("post_processor"), where)
    padding = tokenizer.get("padding") or {}
    pad_token = padding.get("pad_token", "[PAD]" if "[PAD]" in vocab else unk)
    mask_token = "[MASK]" if "[MASK]" in vocab else unk  # the op looks it up but never uses it
    for role, token in (("unk_token", unk), ("cls", cls), ("sep", sep), ("pad_token", pad_token)):
        if token not in vocab:
            raise _unsupported(where, f"{role} {token!r} is not in model.vocab")
    attributes: dict[str, object] = {
        "vocab_file": "\n".join(t for t, _ in by_id),
        "do_lower_case": int(lowercase),
        "strip_accents": int(strip_accents),
        "tokenize_chinese_chars": int(bool(normalizer.get("handle_chinese_chars", True))),
        "do_basic_tokenize": 1,
        "unk_token": unk,
        "sep_token": sep,
        "cls_token": cls,
        "pad_token": pad_token,
        "mask_token": mask_token,
        "suffix_indicator": model.get("continuing_subword_prefix", "##"),
        "max_length": max_length + 1,
    }
    return TokenizerFacts(attributes, pad_id=vocab[pad_token], sep_id=vocab[sep], cls_id=vocab[cls])


_SCOPE = "text_graph/"
"""Prefix of every name the tokenizer half adds to the merged graph."""


def _int64(name: str, value):
    """An int64 initializer."""
    import numpy as np
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value, dtype=np.int64), name)


def _tokenize_row_body(facts: TokenizerFacts, max_length: int):
    """The `Loop` body: row i -> the op -> cut to `max_length` with [SEP] kept -> padded to `max_length`."""
    from onnx import TensorProto, helper

    p = _SCOPE
    body_nodes = [
        helper.make_node("Unsqueeze", ["i", p + "zero_axis"], [p + "i1"]),
        helper.make_node("Gather", [p + "texts", p + "i1"], [p + "one_text"], axis=0),
        helper.make_node(
            "BertTokenizer",
            [p + "one_text"],
            [p + "row_ids", p + "row_types", p + "row_mask"],
            domain=CONTRIB_DOMAIN,
            name=p + "BertTokenizer",
            **facts.attributes,
        ),
        helper.make_node("Shape", [p + "row_ids"], [p + "n"]),
        helper.make_node("Greater", [p + "n", p + "max_length"], [p + "row_truncated"]),
        helper.make_node("Min", [p + "n", p + "max_length"], [p + "row_length"]),
        helper.make_node("Sub", [p + "row_length", p + "one"], [p + "keep"]),
        helper.make_node("Slice", [p + "row_ids", p + "zero", p + "keep"], [p + "head"]),
        helper.make_node("Concat", [p + "head", p + "sep"], [p + "row"], axis=0),
        helper.make_node("Sub", [p + "max_length", p + "row_length"], [p + "missing"]),
        helper.make_node("Concat", [p + "zero", p + "missing"], [p + "pads"], axis=0),
        helper.make_node("Pad", [p + "row", p + "pads", p + "pad_id"], [p + "padded_row"], mode="constant"),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    return helper.make_graph(
        body_nodes,
        p + "tokenize_row",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info(p + "padded_row", TensorProto.INT64, [max_length]),
            helper.make_tensor_value_info(p + "row_length", TensorProto.INT64, [1]),
            helper.make_tensor_value_info(p + "row_truncated", TensorProto.BOOL, [1]),
        ],
    )


def _batch_nodes(body) -> list:
    """Around the loop: the texts flattened, the rows tokenized by `body`, the batch sliced to its
    longest row, and its mask."""
    from onnx import TensorProto, helper

    p = _SCOPE
    return [
        helper.make_node("Reshape", [TEXT_INPUT, p + "minus_one"], [p + "texts"]),
        helper.make_node("Shape", [p + "texts"], [p + "batch1"]),
        helper.make_node("Squeeze", [p + "batch1", p + "zero_axis"], [p + "batch"]),
        helper.make_node(
            "Loop",
            [p + "batch", ""],
            [p + "rows", p + "lengths", TRUNCATED_OUTPUT],
            body=body,
            name=p + "tokenize_rows",
        ),
        helper.make_node("ReduceMax", [p + "lengths"], [p + "longest1"], keepdims=1),
        helper.make_node("Reshape", [p + "longest1", p + "minus_one"], [p + "longest"]),
        helper.make_node("Slice", [p + "rows", p + "zero", p + "longest", p + "one"], [IDS]),
        helper.make_node("Squeeze", [p + "longest", p + "zero_axis"], [p + "longest0"]),
        helper.make_node("Range", [p + "zero0", p + "longest0", p + "one0"], [p + "positions"]),
        helper.make_node("Unsqueeze", [p + "positions", p + "zero_axis"], [p + "positions2"]),
        helper.make_node("Less", [p + "positions2", p + "lengths"], [p + "mask_bool"]),
        helper.make_node("Cast", [p + "mask_bool"], [MASK], to=TensorProto.INT64),
    ]


def _constants(facts: TokenizerFacts, max_length: int) -> list:
    """The initializers (the loop body reads them from the outer scope): shapes, axes, `max_length`, [SEP], padding."""
    p = _SCOPE
    return [
        _int64(p + "minus_one", [-1]),
        _int64(p + "zero", [0]),
        _int64(p + "one", [1]),
        _int64(p + "zero0", 0),
        _int64(p + "one0", 1),
        _int64(p + "zero_axis", [0]),
        _int64(p + "max_length", [max_length]),
        _int64(p + "sep", [facts.sep_id]),
        _int64(p + "pad_id", facts.pad_id),
    ]


def tokenizer_graph(
    facts: TokenizerFacts,
    *,
    max_length: int,
    opset: int,
    ir_version: int,
    text_rank: int = 2,
    token_types: bool = False,
):
    """The tokenizer half: `text` -> padded ids, mask ([B, longest], int64) and `truncated` ([B, 1]).

    Row i goes through the op in a `Loop`; it is cut to `max_length` ([CLS] + the first
    max_length - 2 tokens + [SEP], as `tokenizers` truncates) and padded to `max_length`, and the
    stacked batch is sliced to its longest row. A row is `truncated` when the op (told
    max_length + 1) returned more than `max_length` tokens.
    """
    from onnx import TensorProto, helper

    p = _SCOPE
    text_shape = ["batch", 1] if text_rank == 2 else ["batch"]
    nodes = _batch_nodes(_tokenize_row_body(facts, max_length))
    outputs = [
        helper.make_tensor_value_info(IDS, TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info(MASK, TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info(TRUNCATED_OUTPUT, TensorProto.BOOL, ["batch", 1]),
    ]
    if token_types:
        nodes.append(helper.make_node("Mul", [IDS, p + "zero0"], [p + "token_type_ids"]))
        outputs.append(helper.make_tensor_value_info(p + "token_type_ids", TensorProto.INT64, ["batch", "sequence"]))
    graph = helper.make_graph(
        nodes,
        "text_graph_tokenizer",
        [helper.make_tensor_value_info(TEXT_INPUT, TensorProto.STRING, text_shape)],
        outputs,
        initializer=_constants(facts, max_length),
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(CONTRIB_DOMAIN, 1)],
        producer_name="triton_fastpath.export.text_graph",
    )
    model.ir_version = ir_version
    return model
