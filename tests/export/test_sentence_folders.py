"""sentence-transformers folders on a tiny random BERT (seeded, built here): pooling and normalisation
as configured, equal to the sentence-transformers library itself; the served tokenizer; and every bad
folder refused with a clear error and nothing half-written (no repository, no imported/<name> folder).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
transformers = pytest.importorskip("transformers")

from triton_fastpath.errors import DataError, ExportError  # noqa: E402
from triton_fastpath.imports.folder_kind import detect_folder  # noqa: E402
from triton_fastpath.imports.sentence_models import load_body, sentence_graph, write_served_tokenizer  # noqa: E402
from triton_fastpath.imports.setfit_head import save_head_npz  # noqa: E402
from triton_fastpath.paths import backends_importable  # noqa: E402

backends_importable()

pytestmark = pytest.mark.export

WORDS = ["a", "warm", "funny", "film", "dull", "movie", "the", "plot", "is", "thin", "great", "acting", "worst"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
TEXTS = ["A warm funny film", "the plot is thin", "the worst movie", "great acting", "dull"]
HIDDEN = 8


def tiny_sentence_folder(root: Path, *, pooling=("mean",), normalize=True, max_seq_length=10, lower=False) -> Path:
    """A sentence-transformers folder: a 1-layer BERT (hidden 8), WordPiece tokenizer shipped with
    `Fixed 16` padding (like MiniLM's), modules.json, 1_Pooling."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=32,
    )
    root.mkdir(parents=True, exist_ok=True)
    transformers.BertModel(config).save_pretrained(root)
    tokenizer = Tokenizer(models.WordPiece({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=not lower)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.enable_padding(length=16, pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=16)
    tokenizer.save(str(root / "tokenizer.json"))
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (root / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": lower})
    )
    (root / "1_Pooling").mkdir(exist_ok=True)
    keys = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens"}
    flags = {key: mode in pooling for mode, key in keys.items()}
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": HIDDEN, **flags}))
    return root


def ours(folder: Path, texts) -> np.ndarray:
    from fastpath_backends.text import TextEncoder

    found = detect_folder(folder)
    tokenizer = write_served_tokenizer(found.sentence, folder.parent / f"{folder.name}-served.json")
    encoded = TextEncoder(tokenizer, found.sentence.max_seq_length, padding="longest").encode(list(texts))
    graph = sentence_graph(load_body(found.sentence), found.sentence)
    with torch.inference_mode():
        return graph(torch.from_numpy(encoded.input_ids), torch.from_numpy(encoded.attention_mask)).numpy()


@pytest.mark.parametrize(
    "pooling,normalize", [(("mean",), True), (("cls",), False), (("max",), True), (("cls", "mean"), False)]
)
def test_pooling_and_normalisation_equal_sentence_transformers(tmp_path, pooling, normalize):
    st = pytest.importorskip("sentence_transformers")
    folder = tiny_sentence_folder(tmp_path / "st", pooling=pooling, normalize=normalize)
    texts = [*TEXTS, "the plot is thin the acting is great a warm funny film"]  # truncated at 10 tokens
    expected = st.SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(ours(folder, texts), expected, atol=1e-5)


def test_the_served_tokenizer_drops_fixed_padding_and_truncates_at_max_seq_length(tmp_path):
    from tokenizers import Tokenizer

    folder = tiny_sentence_folder(tmp_path / "st", max_seq_length=10)
    shipped = json.loads((folder / "tokenizer.json").read_text())
    assert shipped["padding"]["strategy"] == {"Fixed": 16}
    served = write_served_tokenizer(detect_folder(folder).sentence, tmp_path / "served.json")
    data = json.loads(served.read_text())
    assert data["padding"] is None and data["truncation"]["max_length"] == 10
    tokenizer = Tokenizer.from_file(str(served))
    assert tokenizer.encode("dull").ids == [2, VOCAB.index("dull"), 3]  # natural length, not 16
    assert len(tokenizer.encode("the plot is thin the acting is great a warm funny film").ids) == 10


def test_lower_casing_follows_sentence_transformers_do_lower_case(tmp_path):
    from tokenizers import Tokenizer

    folder = tiny_sentence_folder(tmp_path / "st", lower=True)  # tokenizer itself keeps case
    served = write_served_tokenizer(detect_folder(folder).sentence, tmp_path / "served.json")
    assert Tokenizer.from_file(str(served)).encode("WARM Film").ids == [2, VOCAB.index("warm"), VOCAB.index("film"), 3]


def _import(folder: Path, name: str, tmp_path: Path, **options):
    from triton_fastpath.imports.importer import import_hf

    repository, out_dir = tmp_path / "repository", tmp_path / "imported" / name
    return import_hf(folder, name=name, repository=repository, out_dir=out_dir, progress=lambda _: None, **options)


def _nothing_written(name: str, tmp_path: Path) -> None:
    assert not (tmp_path / "repository").exists()
    assert not (tmp_path / "imported" / name).exists()
    assert not list((tmp_path / "imported").glob(f".{name}-*")) if (tmp_path / "imported").exists() else True


def test_weights_the_loader_reports_missing_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tiny_sentence_folder(tmp_path / "st")
    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "layer.0.output.dense" not in k}, folder / "model.safetensors")
    with pytest.raises(ExportError, match=r"missing \(newly initialised\).*layer.0.output.dense"):
        _import(folder, "test_missing_weights", tmp_path)
    _nothing_written("test_missing_weights", tmp_path)


def test_a_safetensors_file_that_does_not_load_is_refused(tmp_path):
    folder = tiny_sentence_folder(tmp_path / "st")
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ExportError, match="the weights do not load"):
        _import(folder, "test_bad_safetensors", tmp_path)
    _nothing_written("test_bad_safetensors", tmp_path)


def test_a_missing_tokenizer_is_refused(tmp_path):
    folder = tiny_sentence_folder(tmp_path / "st")
    for file in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        (folder / file).unlink()
    with pytest.raises(ExportError, match="no tokenizer"):
        _import(folder, "test_no_tokenizer", tmp_path)
    _nothing_written("test_no_tokenizer", tmp_path)


def test_a_head_of_the_wrong_width_is_refused(tmp_path):
    folder = tiny_sentence_folder(tmp_path / "st")
    save_head_npz(folder / "model_head.npz", np.ones((1, HIDDEN + 1)), [0.0], [0, 1])
    with pytest.raises(ExportError, match=f"takes {HIDDEN + 1}-dim embeddings but the encoder gives {HIDDEN}"):
        _import(folder, "test_head_width", tmp_path)
    _nothing_written("test_head_width", tmp_path)


def test_labels_that_do_not_match_the_classes_are_refused(tmp_path):
    folder = tiny_sentence_folder(tmp_path / "st")
    save_head_npz(folder / "model_head.npz", np.ones((1, HIDDEN)), [0.0], [0, 1])
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\nc\n")
    with pytest.raises(DataError, match="--labels has 3 names"):
        _import(folder, "test_head_labels", tmp_path, labels=labels)
    _nothing_written("test_head_labels", tmp_path)


def test_a_pickled_head_without_trust_pickle_is_refused_before_anything_runs(tmp_path):
    folder = tiny_sentence_folder(tmp_path / "st")
    (folder / "model_head.pkl").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(ExportError, match="--trust-pickle"):
        _import(folder, "test_pickle", tmp_path)
    _nothing_written("test_pickle", tmp_path)


def test_a_setfit_head_is_folded_into_one_onnx_graph_equal_to_the_head_on_torch_embeddings(tmp_path):
    """Export only (no server): body + mean pooling + norm + head, FP32, vs numpy on torch embeddings."""
    from fastpath_backends.text import TextEncoder
    from triton_fastpath.export import torch2onnx
    from triton_fastpath.export.onnx_run import run_onnx_batched
    from triton_fastpath.imports.setfit_head import load_head

    folder = tiny_sentence_folder(tmp_path / "st")
    rng = np.random.default_rng(0)
    save_head_npz(folder / "model_head.npz", rng.normal(size=(3, HIDDEN)), rng.normal(size=3), ["x", "y", "z"])
    found = detect_folder(folder)
    head = load_head(found.head_file)
    graph = sentence_graph(load_body(found.sentence), found.sentence, head)
    served = write_served_tokenizer(found.sentence, tmp_path / "served.json")
    encoded = TextEncoder(served, 10, padding="longest").encode(TEXTS)
    feeds = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    torch2onnx.export(
        model=graph,
        example_inputs={k: torch.from_numpy(v[:2]) for k, v in feeds.items()},
        output_path=tmp_path / "model.onnx",
        output_names=["probabilities", "label_index"],
        dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
    )
    out = run_onnx_batched(tmp_path / "model.onnx", feeds)
    with torch.inference_mode():
        embeddings = graph.embed(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
    np.testing.assert_allclose(out["probabilities"], head.probabilities(embeddings.numpy()), atol=1e-5)
    assert (out["label_index"][:, 0] == out["probabilities"].argmax(1)).all()


def test_an_unchanged_folder_reuses_its_export_and_a_changed_weight_exports_again(tmp_path):
    """Three imports (FP32, no server): the second skips the export, up to date by content, and
    still checks the graph against torch; `force`, then a changed weights file, export again."""
    from safetensors.torch import load_file, save_file

    from triton_fastpath.engine.pipeline import StepState, StepStatus
    from triton_fastpath.imports.sentence_import import import_sentence_model

    folder = tiny_sentence_folder(tmp_path / "st")
    out_dir = tmp_path / "imported" / "test_fresh"

    def exported(**options) -> StepStatus:
        report = import_sentence_model(
            detect_folder(folder), name="test_fresh", repository=tmp_path / "repository", out_dir=out_dir,
            precision="fp32", serve_check=False, progress=lambda _: None, **options,
        )  # fmt: skip
        verified = next(s for s in report.steps if s.step == "verify FP32 vs torch")
        assert verified.state is StepState.DONE, "the check runs on every import"
        return next(s for s in report.steps if s.step == "export FP32 ONNX")

    assert exported().state is StepState.DONE
    made = (out_dir / "model.onnx").read_bytes()
    assert exported() == StepStatus("export FP32 ONNX", StepState.SKIPPED, "up to date")
    assert (out_dir / "model.onnx").read_bytes() == made and (out_dir / ".model.onnx.sha256").exists()
    assert exported(force=True) == StepStatus("export FP32 ONNX", StepState.DONE, "forced")
    weights = load_file(folder / "model.safetensors")
    key = "embeddings.word_embeddings.weight"
    save_file({**weights, key: weights[key] * 2}, folder / "model.safetensors", metadata={"format": "pt"})
    assert exported() == StepStatus("export FP32 ONNX", StepState.DONE, "inputs or parameters changed")
    assert not list((tmp_path / "imported").glob(".test_fresh-*")), "no stage left behind"
