"""Folder kinds and SetFit heads, read from files alone (no torch, no server): what `fastpath import
hf` finds, and every bad folder refused by name before anything is loaded or written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.errors import DataError, ExportError
from triton_fastpath.imports.folder_kind import FolderKind, detect_folder, module_class
from triton_fastpath.imports.setfit_head import load_head, save_head_npz

ST = "sentence_transformers.models."


def sentence_folder(
    root: Path,
    *,
    modules=("Transformer", "Pooling", "Normalize"),
    pooling=None,
    hidden=8,
    max_seq_length=32,
    do_lower_case=False,
) -> Path:
    """A sentence-transformers folder's JSON files (no weights: detection never reads them)."""
    root.mkdir(parents=True, exist_ok=True)
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize"}
    entries = [
        {"idx": i, "name": str(i), "path": paths.get(m, m), "type": m if "." in m else ST + m}
        for i, m in enumerate(modules)
    ]
    (root / "modules.json").write_text(json.dumps(entries))
    (root / "config.json").write_text(
        json.dumps({"architectures": ["BertModel"], "hidden_size": hidden, "max_position_embeddings": 64})
    )
    (root / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": do_lower_case})
    )
    (root / "1_Pooling").mkdir(exist_ok=True)
    config = pooling or {"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True}
    (root / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return root


def test_a_sentence_transformers_folder_is_an_encoder_with_its_pooling_and_truncation(tmp_path):
    folder = detect_folder(sentence_folder(tmp_path / "st", max_seq_length=32))
    assert folder.kind is FolderKind.SENTENCE_ENCODER
    assert folder.sentence.pooling == ("mean",) and folder.sentence.normalize
    assert folder.sentence.max_seq_length == 32 and folder.sentence.dimension == 8
    assert "sentence-transformers encoder" in folder.describe() and "truncation at 32" in folder.describe()


def test_cls_pooling_without_normalize_is_read_as_configured(tmp_path):
    pooling = {"word_embedding_dimension": 8, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    folder = detect_folder(sentence_folder(tmp_path / "st", modules=("Transformer", "Pooling"), pooling=pooling))
    assert folder.sentence.pooling == ("cls",) and not folder.sentence.normalize


def test_a_body_with_a_head_file_is_a_setfit_classifier(tmp_path):
    root = sentence_folder(tmp_path / "setfit")
    save_head_npz(root / "model_head.npz", np.ones((1, 8)), [0.5], [0, 1])
    folder = detect_folder(root)
    assert folder.kind is FolderKind.SETFIT_CLASSIFIER and folder.head_file.name == "model_head.npz"


def test_a_sequence_classifier_folder_is_the_transformers_kind(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}))
    assert detect_folder(tmp_path).kind is FolderKind.HF_CLASSIFIER


def test_a_bare_encoder_without_modules_json_is_refused_not_given_a_random_head(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(ExportError, match="no trained head"):
        detect_folder(tmp_path)


def test_an_unknown_module_in_modules_json_is_refused_by_name(tmp_path):
    root = sentence_folder(tmp_path / "st", modules=("Transformer", "Pooling", "sentence_transformers.models.Dense"))
    with pytest.raises(ExportError, match=r"module '2' has type 'sentence_transformers.models.Dense'"):
        detect_folder(root)


def test_modules_of_newer_sentence_transformers_are_known_by_class():
    assert module_class("sentence_transformers.base.modules.transformer.Transformer") == "Transformer"
    assert module_class("sentence_transformers.base.modules.normalize") == "Normalize"
    assert module_class("my_package.Pooling") is None


def test_weighted_mean_pooling_is_refused(tmp_path):
    pooling = {"word_embedding_dimension": 8, "pooling_mode_weightedmean_tokens": True}
    with pytest.raises(ExportError, match="weightedmean"):
        detect_folder(sentence_folder(tmp_path / "st", pooling=pooling))


def test_a_pooling_width_other_than_the_hidden_size_is_refused(tmp_path):
    pooling = {"word_embedding_dimension": 16, "pooling_mode_mean_tokens": True}
    with pytest.raises(ExportError, match="word_embedding_dimension 16 differs"):
        detect_folder(sentence_folder(tmp_path / "st", pooling=pooling))


def test_a_head_file_without_a_body_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    save_head_npz(tmp_path / "model_head.npz", np.ones((1, 8)), [0.5], [0, 1])
    with pytest.raises(ExportError, match=r"no modules\.json"):
        detect_folder(tmp_path)


# --- heads ------------------------------------------------------------------------------------


def test_a_pickled_head_is_refused_without_trust_pickle_and_says_why(tmp_path):
    (tmp_path / "model_head.pkl").write_bytes(b"not read")
    with pytest.raises(ExportError, match=r"pickle: loading it runs code.*--trust-pickle"):
        load_head(tmp_path / "model_head.pkl")


def test_a_joblib_logistic_regression_becomes_arrays_whose_softmax_is_its_predict_proba(tmp_path):
    joblib = pytest.importorskip("joblib")
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 8)), rng.integers(0, 2, 60)
    estimator = LogisticRegression().fit(x, y)
    joblib.dump(estimator, tmp_path / "model_head.pkl")
    (tmp_path / "config_setfit.json").write_text(json.dumps({"labels": ["negative", "positive"]}))
    head = load_head(tmp_path / "model_head.pkl", trust_pickle=True)
    assert head.labels == ("negative", "positive") and head.coef.shape == (2, 8)
    np.testing.assert_allclose(head.probabilities(x), estimator.predict_proba(x), atol=1e-6)
    assert (head.probabilities(x).argmax(1) == estimator.predict(x)).all()


def test_a_multiclass_head_with_string_classes_names_its_labels(tmp_path):
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.normal(size=(90, 4))
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, 90)]
    estimator = LogisticRegression().fit(x, y)
    path = save_head_npz(tmp_path / "model_head.npz", estimator.coef_, estimator.intercept_, estimator.classes_)
    head = load_head(path)
    assert head.labels == ("a", "b", "c")
    np.testing.assert_allclose(head.probabilities(x), estimator.predict_proba(x), atol=1e-5)


def test_a_head_width_other_than_the_encoders_is_refused(tmp_path):
    head = load_head(save_head_npz(tmp_path / "model_head.npz", np.ones((1, 8)), [0.0], [0, 1]))
    with pytest.raises(ExportError, match="takes 8-dim embeddings but the encoder gives 384"):
        head.check_width(384)


def test_labels_that_do_not_match_the_heads_classes_are_refused(tmp_path):
    head = load_head(save_head_npz(tmp_path / "model_head.npz", np.ones((1, 8)), [0.0], [0, 1]))
    with pytest.raises(DataError, match=r"--labels has 3 names; the head .* has 2 classes"):
        head.with_labels(["a", "b", "c"])
    (tmp_path / "config_setfit.json").write_text(json.dumps({"labels": ["only-one"]}))
    with pytest.raises(DataError, match="do not match the head's 2 classes"):
        load_head(tmp_path / "model_head.npz")


def test_a_json_head_is_read_without_pickle(tmp_path):
    path = tmp_path / "model_head.json"
    path.write_text(json.dumps({"coef": [[1.0, 0.0], [0.0, 1.0]], "intercept": [0.0, 0.0], "classes": ["x", "y"]}))
    head = load_head(path)
    assert head.labels == ("x", "y") and head.probabilities(np.array([[2.0, 0.0]])).argmax() == 0
