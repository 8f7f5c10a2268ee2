"""Bring your own model: a local HF folder and an ONNX file, imported, verified and served."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import infer, start_server
from triton_fastpath.config.render import parse_pbtxt
from triton_fastpath.errors import ExportError, VerificationError

pytestmark = [pytest.mark.integration, pytest.mark.export]
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["a joyful film", "a dull film", "joyful and bright", "dull, grey and slow", "what a joy", "so dull"] * 4


def save_tiny_hf_classifier(folder: Path) -> Path:
    """A 1-layer BERT with a WordPiece tokenizer, saved as an ordinary HF model folder."""
    from triton_fastpath.models.train import train_wordpiece

    torch.manual_seed(0)
    tokenizer = train_wordpiece(TEXTS * 5, vocab_size=120)
    config = transformers.BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=3,
        id2label={0: "sad", 1: "neutral", 2: "happy"},
        label2id={"sad": 0, "neutral": 1, "happy": 2},
    )
    transformers.BertForSequenceClassification(config).eval().save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    ).save_pretrained(folder)
    return folder


def test_hf_folder_is_exported_verified_and_served(tmp_path):
    """24 texts of the user's own: used as given, too few to show 99%, so INT8 is refused by name and
    FP32 served; the served check tops them up from the built-in corpus and gates on the source."""
    from triton_fastpath.config.settings import Batching, RepoSettings
    from triton_fastpath.imports.hf_classifier import import_hf_classifier

    hf_dir = save_tiny_hf_classifier(tmp_path / "my-model")
    eval_csv = tmp_path / "eval.csv"
    eval_csv.write_text("text,label\n" + "\n".join(f'"{t}",{"happy" if "jo" in t else "sad"}' for t in TEXTS))
    repository = tmp_path / "repository"
    said: list[str] = []
    report = import_hf_classifier(
        hf_dir,
        name="tiny_mood",
        repository=repository,
        out_dir=tmp_path / "imported",
        settings=RepoSettings(max_length=16, batching=Batching(max_batch_size=8)),
        eval_csv=eval_csv,
        progress=said.append,
    )
    assert {v.precision for v in report.variants} == {"fp32", "int8"}  # both measured
    assert report.variants[0].max_abs_diff < 1e-3 and report.variants[0].label_agreement == 1.0
    assert report.int8_kept is False and report.served_precision == "fp32"
    int8_gate = next(g for g in report.gates if g["what"] == "INT8 vs source labels")
    assert int8_gate["n"] == 24 and not int8_gate["passed"] and "at least 381 are needed" in int8_gate["note"]
    assert any("INT8 refused" in line for line in said) and report.data == f"24 texts from {eval_csv}"
    served = [c for c in report.checks if "served" in c or "label names from Triton" in c]
    assert len(served) == 3 and all(c.startswith("PASS") for c in served), report.checks  # through tritonserver
    served_gate = next(g for g in report.gates if g["what"] == "served labels vs the source")
    assert served_gate["n"] == 512 and served_gate["passed"]  # 24 of yours + 488 built-in texts
    for model in ("tiny_mood", "tiny_mood_fused"):  # RepoSettings() renders fused: a Python model + its wrapper
        config = parse_pbtxt((repository / model / "config.pbtxt").read_text())
        assert config.name == model
    assert (repository / "tiny_mood_fused" / "1" / "model.onnx").exists()
    assert not (repository / "tiny_mood_fused" / "1" / "model.int8.onnx").exists()  # refused: not shipped
    assert (repository / "tiny_mood" / "labels.txt").read_text().split() == ["sad", "neutral", "happy"]

    server = start_server(repository, tmp_path)
    try:
        texts = np.array([[b"a joyful film"], [b"x " * 100]], dtype=object)
        out = infer(server.grpc_url, "tiny_mood", {"text": texts}, ["label", "probabilities", "truncated"])
    finally:
        server.stop()
    assert all(label.decode() in ("sad", "neutral", "happy") for label in out["label"][:, 0])
    assert out["probabilities"].shape == (2, 3)
    assert out["truncated"][1, 0] and not out["truncated"][0, 0]


def test_onnx_file_is_imported_and_served(tmp_path):
    from triton_fastpath.imports.onnx_import import import_onnx

    onnx_file, model = export_scorer(tmp_path)
    repository = tmp_path / "repository"
    report = import_onnx(onnx_file, name="tiny_scorer", repository=repository)
    assert report.variants[0].precision == "fp32"
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    server = start_server(repository, tmp_path)
    try:
        served = infer(server.grpc_url, "tiny_scorer", {"input": x}, ["scores"])["scores"]
    finally:
        server.stop()
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(served, expected, atol=1e-5)


def export_scorer(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    from triton_fastpath.export.torch2onnx import export

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    path = export(
        model=model,
        example_inputs={"input": torch.randn(2, 4)},
        output_path=tmp_path / "scorer.onnx",
        output_names=["scores"],
        dynamic_axes={"input": {0: "batch"}},
    )
    return path, model


def test_without_samples_the_checks_say_they_ran_on_generated_data(tmp_path):
    from triton_fastpath.imports.onnx_import import import_onnx

    onnx_file, _ = export_scorer(tmp_path)
    said: list[str] = []
    report = import_onnx(
        onnx_file, name="gen", repository=tmp_path / "repository", input_range=(-2, 2), progress=said.append
    )
    assert "GENERATED data" in report.data and "[-2, 2)" in report.data
    assert any("NOTE: the checks below use generated data" in line for line in said)
    assert all(check.startswith("PASS") for check in report.checks)
    assert all("(required" in check or "95% lower bound" in check for check in report.checks), "each names its bound"
    served = next(g for g in report.gates if g["what"] == "served labels vs the source")
    assert served["n"] == 1024 and served["passed"]  # generated rows enough for a 99% bound
    assert not any("nan" in check.lower() for check in report.checks)


def test_int8_is_refused_with_its_figures_and_the_repository_is_left_as_it_was(tmp_path):
    from triton_fastpath.imports.checks import ImportThresholds
    from triton_fastpath.imports.onnx_import import import_onnx

    onnx_file, _ = export_scorer(tmp_path)
    samples = tmp_path / "samples.npz"
    np.savez(samples, input=np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32))
    repository = tmp_path / "repository"
    with pytest.raises(
        VerificationError, match=r"INT8 refused: FAIL: INT8 vs FP32 max\|diff\| [0-9.e-]+ \(required <= 0\)"
    ):
        import_onnx(
            onnx_file,
            name="strict",
            repository=repository,
            precision="int8",
            samples=samples,
            thresholds=ImportThresholds(int8_rel_diff=0.0),
        )
    assert not repository.exists()


def test_bad_samples_are_refused_by_name_before_anything_is_written(tmp_path):
    from triton_fastpath.errors import DataError
    from triton_fastpath.imports.onnx_import import import_onnx

    onnx_file, _ = export_scorer(tmp_path)
    samples = tmp_path / "samples.npz"
    np.savez(samples, inputs=np.zeros((3, 4), np.float32))
    with pytest.raises(DataError, match=r"the model's inputs are \['input'\] \(missing: input\) \(unknown: inputs\)"):
        import_onnx(onnx_file, name="bad", repository=tmp_path / "repository", samples=samples)
    assert not (tmp_path / "repository").exists()


def test_onnx_without_a_dynamic_batch_axis_is_refused_with_a_clear_error(tmp_path):
    from triton_fastpath.export.torch2onnx import export
    from triton_fastpath.imports.onnx_import import import_onnx

    fixed = export(
        model=torch.nn.Linear(4, 2),
        example_inputs={"input": torch.randn(2, 4)},
        output_path=tmp_path / "fixed.onnx",
        output_names=["out"],
        dynamic_axes={},
    )
    with pytest.raises(ExportError, match=r"first dimension .* must be dynamic"):
        import_onnx(fixed, name="fixed", repository=tmp_path / "repository")


def test_a_folder_without_config_json_is_refused(tmp_path):
    from triton_fastpath.imports.hf_classifier import import_hf_classifier

    with pytest.raises(ExportError, match="not a Hugging Face model folder"):
        import_hf_classifier(
            tmp_path, name="nothing", repository=tmp_path / "repository", out_dir=tmp_path / "imported"
        )


def test_int8_beyond_its_bounds_is_refused_with_the_reproduce_command_and_fp32_served(tmp_path):
    """Without --eval-csv: the built-in corpus (1,120 texts) is enough for the gate's power; INT8
    missing a bound is refused with why and the command that reproduces it, and FP32 is served."""
    from triton_fastpath.imports.hf_classifier import import_hf_classifier
    from triton_fastpath.recipes.steps import Thresholds

    hf_dir = save_tiny_hf_classifier(tmp_path / "my-model")
    impossible = Thresholds(int8_max_abs_diff=0.0)
    said: list[str] = []
    report = import_hf_classifier(
        hf_dir,
        name="strict",
        repository=tmp_path / "repository",
        out_dir=tmp_path / "imported",
        thresholds=impossible,
        progress=said.append,
    )
    assert report.n_eval >= 1000 and "built-in texts" in report.data and "not yours" in report.data
    assert not any("probe texts" in line for line in said)
    refusal = next(line for line in said if "INT8 refused" in line)
    assert "max|diff|" in refusal and "fastpath import hf" in refusal
    assert report.int8_kept is False and report.served_precision == "fp32"
    gate = next(g for g in report.gates if g["what"] == "INT8 vs source labels")
    assert gate["n"] == report.n_eval  # judged on the whole corpus
    assert any(str(s).startswith("INT8 gate: refused") for s in report.steps)


def test_an_imported_model_gets_a_load_test_scenario_from_its_samples(tmp_path):
    from tests.loadtest.conftest import run_fastpath
    from triton_fastpath.imports.onnx_import import import_onnx

    onnx_file, _ = export_scorer(tmp_path)
    samples = tmp_path / "samples.npz"
    np.savez(samples, input=np.random.default_rng(2).standard_normal((16, 4)).astype(np.float32))
    repository = tmp_path / "repository"
    import_onnx(onnx_file, name="lt_scorer", repository=repository, samples=samples, serve_check=False)
    sla_file = tmp_path / "sla.toml"  # the wiring, not timing: some requests, no errors
    sla_file.write_text("[imported]\nmax_error_ratio = 0.0\n")
    server = start_server(repository, tmp_path)
    try:
        result = run_fastpath(
            "loadtest",
            "run",
            "--scenario=imported",
            "--model=lt_scorer",
            f"--model-repository={repository}",
            f"--host={server.grpc_url}",
            "--no-prometheus",
            "--duration=4s",
            "--users=2",
            "--spawn-rate=2",
            f"--sla-file={sla_file}",
            f"--out-dir={tmp_path / 'run'}",
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout[-4000:]
    assert "SLA gate 'imported' passed" in result.stdout
    gate = json.loads((tmp_path / "run" / "gate.json").read_text())
    assert gate["figures"]["lt_scorer"]["requests"] > 0


def test_the_imported_scenario_needs_its_model(tmp_path):
    from tests.loadtest.conftest import run_fastpath

    result = run_fastpath("loadtest", "run", "--scenario=imported", f"--out-dir={tmp_path}")
    assert result.returncode == 2 and "--model NAME goes with --scenario imported" in result.stdout


def test_an_imported_model_gets_a_benchmark_row_against_fastapi_onnxruntime(tmp_path):
    from triton_fastpath.bench.harness import BenchConfig
    from triton_fastpath.bench.imported import run_imported_benchmark
    from triton_fastpath.imports.onnx_import import import_onnx

    onnx_file, _ = export_scorer(tmp_path)
    samples = tmp_path / "samples.npz"
    np.savez(samples, input=np.random.default_rng(3).standard_normal((16, 4)).astype(np.float32))
    repository = tmp_path / "repository"
    import_onnx(onnx_file, name="bench_scorer", repository=repository, samples=samples, serve_check=False)
    results = run_imported_benchmark(
        "bench_scorer", repository, tmp_path / "bench", config=BenchConfig.smoke_config(), progress=lambda _: None
    )
    assert results["parity_max_abs_diff"] < 1e-5, "both systems must serve the same model"
    for system in ("fastapi-ort", "fastapi-ort-2w", "ours"):
        assert results[system] and all(row["errors"] == 0 for row in results[system]), results[system]
        assert results[system][0]["level"] == 1 and results[system][0]["requests"] > 0
    table = (tmp_path / "bench" / "table.md").read_text()
    assert "| ours / fastapi-ort |" in table and "| ours / fastapi-ort-2w |" in table and "Smoke run" in table
