"""The native text path's build step (`recipes.text_path_step`) and its proof (`export.text_path`).

The tiny tokenizer and encoder of test_text_graph.py: the step writes the post graph, proves the C++
tokenizer's ids equal `tokenizers'` on the Unicode probe, the texts and the multilingual corpus,
reports the "text path kept" gate with n and its bound, is skipped when up to date, and refuses
(without failing the build) a tokenizer the C++ loader does not reproduce, one whose ids differ, or
a machine where the C++ tokenizer cannot be built. A refused text path renders the bundled pipeline
fused, as a refused text graph did.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")

from tests.export.test_text_graph import TEXTS, _encoder, _tokenizer_json  # noqa: E402
from triton_fastpath.engine.pipeline import Pipeline, StepState  # noqa: E402
from triton_fastpath.recipes.text_path_step import GATE_NAME, text_path_step  # noqa: E402
from triton_fastpath.recipes.text_step_inputs import TextStepInputs  # noqa: E402

pytestmark = [
    pytest.mark.export,
]
LABELS = ("negative", "positive")


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    tokenizer = _tokenizer_json()
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    onnx.save(_encoder(len(tokenizer["model"]["vocab"]), token_types=True), str(tmp_path / "model.int8.onnx"))
    return tmp_path


def step(pipeline: Pipeline, folder: Path, **overrides):
    args = dict(out_dir=folder, encoder_file="model.int8.onnx", precision="int8", max_length=12, texts=TEXTS)
    return text_path_step(pipeline, TextStepInputs(**{**args, "labels": LABELS, **overrides}))


def test_the_step_writes_the_post_graph_proves_it_reports_its_gate_and_is_reused(folder: Path) -> None:
    import onnxruntime as ort

    said: list[str] = []
    pipeline = Pipeline("tiny", said.append)
    built = step(pipeline, folder)
    assert built.files == [folder / "post.int8.onnx", folder / "tokenizer.json"] and not built.reason
    gate = built.gate
    assert gate is not None and gate.what == GATE_NAME and gate.passed
    assert gate.n == len(TEXTS) + 9_000 and gate.agree == gate.n  # held-out + the 30-locale corpus
    assert "Unicode probe, inside a word 11,205/11,205" in built.summary and "max|diff| 0" in built.summary
    post = ort.InferenceSession(str(built.files[0]), providers=["CPUExecutionProvider"])
    assert {i.name for i in post.get_inputs()} == {"input_ids", "attention_mask", "token_type_ids"}  # no text input
    assert [o.name for o in post.get_outputs()] == ["probabilities", "label_index", "label", "probability"]
    assert "ai.onnx.contrib" not in {o.domain for o in onnx.load(str(built.files[0])).opset_import}  # no op
    again = step(pipeline, folder)
    assert again.files == built.files and again.gate == gate and again.summary == built.summary
    assert [s.state for s in pipeline.statuses] == [StepState.DONE, StepState.SKIPPED]
    assert any("95% lower bound" in line and "kept" in line for line in said)


def test_a_tokenizer_the_cpp_loader_refuses_keeps_the_python_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models

    Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0)).save(str(folder / "tokenizer.json"))
    said: list[str] = []
    pipeline = Pipeline("xlmr-like", said.append)
    refused = step(pipeline, folder)
    assert refused.files == [] and 'model.type "Unigram"' in refused.reason
    assert not (folder / "post.int8.onnx").exists()
    assert pipeline.statuses[-1].state is StepState.REFUSED and "Unigram" in pipeline.statuses[-1].why
    assert any("C++ text path refused; the Python tokenizer serves this model" in line for line in said)


def test_one_differing_id_refuses_the_text_path_naming_the_text(folder: Path, monkeypatch) -> None:
    from triton_fastpath.native import tokenizer_driver

    real = tokenizer_driver.encode_texts
    odd = "Crème brûlée-level indulgence, résumé-padding cameo."

    def one_wrong(path, texts, max_length=0, driver=None):
        out = real(path, texts, max_length, driver)
        return [
            tokenizer_driver.Encoded((*e.ids[:-1], 1, e.ids[-1]), e.truncated) if t == odd else e
            for t, e in zip(texts, out, strict=True)
        ]

    monkeypatch.setattr(tokenizer_driver, "encode_texts", one_wrong)
    refused = step(Pipeline("tiny", lambda _: None), folder)
    assert refused.files == [] and "differ from tokenizers'" in refused.reason and odd in refused.reason
    assert "held-out texts 11/12" in refused.reason  # counted per set
    assert not (folder / "post.int8.onnx").exists()


def test_where_the_cpp_tokenizer_cannot_be_built_the_text_path_is_refused_saying_why(folder, monkeypatch) -> None:
    from triton_fastpath.errors import NativeBuildError
    from triton_fastpath.native import tokenizer_driver

    def missing(**_):
        raise NativeBuildError(
            "utf8proc is not installed (the tokenizer's Unicode data): apt-get install libutf8proc-dev"
        )

    monkeypatch.setattr(tokenizer_driver, "build_tokenizer_driver", missing)
    refused = step(Pipeline("tiny", lambda _: None), folder)
    assert refused.files == [] and "libutf8proc-dev" in refused.reason and refused.gate is None


def test_a_refused_text_path_renders_the_bundled_pipeline_fused() -> None:
    from triton_fastpath.config.settings import RepoSettings
    from triton_fastpath.recipes.bundled_recipes import served_settings
    from triton_fastpath.recipes.reports import ModelArtifact, ModelReport

    settings = RepoSettings(rendering="graph", cache=False)
    report = ModelReport("sentiment", "", 0, None)
    refused = ModelArtifact("sentiment", report, [], {"sentiment_encoder": []}, {}, precision="int8")
    kept = ModelArtifact("sentiment", report, [], {"sentiment_graph": [Path("post.int8.onnx")]}, {}, precision="int8")
    assert served_settings(settings, refused).rendering == "fused"
    assert served_settings(settings, kept).rendering == "graph"
