"""The client generator: which models get a client, names, types, rendered code that imports,
lints and formats clean, and drift (the committed `clients/fastpath_models/` equals a fresh run).
"""

from __future__ import annotations

import filecmp
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.config.render import parse_pbtxt, write_config
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.sdk.codegen import (
    class_prefix,
    field_name,
    load_labels,
    load_repository,
    module_name,
    plan_models,
    signature_of,
)
from triton_fastpath.sdk.render import render_package

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "clients" / "fastpath_models"
FASTPATH_GENERATE = [sys.executable, "-m", "triton_fastpath.cli", "clients", "generate"]

LONG = "EMBEDDING_VECTOR_OF_A_VERY_LONG_NAME_THAT_GOES_ON_AND_ON_AND_ON_AND_ON_AND_ON_AND_ON"
# A repository that exercises the generator's corners (configs only; nothing is served).
CONFIGS = {
    "ranker": """
        name: "ranker" backend: "python" max_batch_size: 16
        input [ { name: "query_ids" data_type: TYPE_INT64 dims: [ -1 ] },
                { name: "mask" data_type: TYPE_BOOL dims: [ -1 ] },
                { name: "class" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
        output [ { name: "scores" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" },
                 { name: "tags" data_type: TYPE_STRING dims: [ 2 ] } ]
        dynamic_batching { priority_levels: 3 default_priority_level: 3 }
    """,
    "Text-Embedder.v2": """
        name: "Text-Embedder.v2" platform: "ensemble" max_batch_size: 8
        input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "LONG"
                   data_type: TYPE_FP16 dims: [ 4 ] } ]
        ensemble_scheduling { step [ { model_name: "embed_step" model_version: -1
            input_map { key: "t" value: "TEXT" }
            output_map { key: "e" value: "LONG" } } ] }
    """.replace("LONG", LONG),
    "embed_step": """
        name: "embed_step" backend: "python" max_batch_size: 8
        input [ { name: "t" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "e" data_type: TYPE_FP16 dims: [ 4 ] } ]
        dynamic_batching { priority_levels: 2 }
        parameters { key: "helper_model" value: { string_value: "bls_target" } }
        parameters { key: "also_calls" value: { string_value: "scorer" } }
        parameters { key: "and_the_ensemble" value: { string_value: "Text-Embedder.v2" } }
    """,
    "bls_target": """
        name: "bls_target" backend: "python" max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """,
    "scorer": """
        name: "scorer" backend: "python" max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """,
    "unbatched": """
        name: "unbatched" backend: "python" max_batch_size: 0
        input [ { name: "x" data_type: TYPE_UINT8 dims: [ 2, 2 ] } ]
        output [ { name: "label" data_type: TYPE_INT32 dims: [ 1 ] } ]
    """,
    "streamer": """
        name: "streamer" backend: "python" max_batch_size: 0 model_transaction_policy { decoupled: true }
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """,
    "stateful": """
        name: "stateful" backend: "python" max_batch_size: 4 sequence_batching { }
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """,
    "brain": """
        name: "brain" backend: "python" max_batch_size: 4
        input [ { name: "x" data_type: TYPE_BF16 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """,
    "clash": """
        name: "clash" backend: "python" max_batch_size: 4
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "a" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """,
}


RANKER_LABELS = ("relevant", "partly relevant", "off-topic")


@pytest.fixture(scope="module")
def configs() -> dict:
    return {name: parse_pbtxt(text) for name, text in CONFIGS.items()}


@pytest.fixture(scope="module")
def rendered(configs: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic repository's package, written to a temporary folder."""
    out = tmp_path_factory.mktemp("sdk")
    labels = {"ranker": {"scores": RANKER_LABELS}}
    for name, text in render_package(plan_models(configs), configs, source="synthetic", labels=labels).items():
        (out / name).write_text(text)
    return out


def load_module(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"_generated_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# --- which models ------------------------------------------------------------------------------


def test_steps_of_ensembles_and_bls_targets_are_skipped_unless_all_is_asked(configs: dict) -> None:
    plan = plan_models(configs)
    assert plan.selected == ("Text-Embedder.v2", "ranker", "unbatched")
    assert plan.skipped["embed_step"] == "a step of ensemble Text-Embedder.v2 (use --all to include steps)"
    assert plan.skipped["bls_target"] == "a step of embed_step (parameter helper_model) (use --all to include steps)"
    assert "scorer" in plan.skipped, "a BLS target is a step"
    assert "Text-Embedder.v2" in plan.selected, "an ensemble named by a parameter is still meant to be called"
    with_steps = plan_models(configs, include_steps=True)
    assert set(with_steps.selected) == {"Text-Embedder.v2", "ranker", "unbatched", "embed_step", "bls_target", "scorer"}


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("streamer", "decoupled (streaming) model"),
        ("stateful", "stateful (sequence batching) model"),
        ("brain", "tensor 'x' has TYPE_BF16, which numpy cannot hold"),
        ("clash", "duplicate input fields"),
    ],
)
def test_models_a_client_cannot_serve_are_skipped_with_the_reason_even_with_all(
    configs: dict, model: str, reason: str
) -> None:
    assert reason in plan_models(configs, include_steps=True).skipped[model]


def test_the_real_repository_gets_clients_for_its_top_level_models_not_their_steps() -> None:
    plan = plan_models(load_repository(ROOT / "model_repository"))
    # the encoders are the ids lane (called directly, with ids), so they get clients too
    assert set(plan.selected) == {"digits", "embed", "sentiment", "embed_encoder", "sentiment_encoder"}
    # the default build: `sentiment` is the text graph itself (no wrapper); `embed` keeps its one-step ensemble
    assert plan.skipped == {"embed_fused": "a step of ensemble embed (use --all to include steps)"}
    assert "embed_fused" in plan_models(load_repository(ROOT / "model_repository"), include_steps=True).selected


@pytest.mark.parametrize(("rendering", "target"), [("ensemble", "embedded"), ("fused", "container")])
def test_other_renderings_get_clients_for_the_same_top_level_models(
    rendering: str, target: str, tmp_path: Path
) -> None:
    for spec in default_specs(RepoSettings(rendering=rendering), target):
        write_config(spec, target, tmp_path)
    plan = plan_models(load_repository(tmp_path))
    assert set(plan.selected) == {"digits", "embed", "sentiment"}
    if rendering == "ensemble":
        steps = {"sentiment_tokenizer", "sentiment_cache", "sentiment_encoder", "sentiment_postprocess"}
        steps |= {"embed_tokenizer", "embed_encoder"}
    else:  # the native encoders are BLS targets of the fused models
        steps = {"sentiment_fused", "sentiment_encoder", "embed_fused", "embed_encoder"}
    assert set(plan.skipped) == steps
    assert "parameter encoder_model" in plan.skipped["sentiment_encoder"]


# --- names and signatures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "module", "prefix"),
    [
        ("sentiment", "sentiment", "Sentiment"),
        ("Text-Embedder.v2", "text_embedder_v2", "TextEmbedderV2"),
        ("textRank", "text_rank", "TextRank"),
        ("3d_detector", "m_3d_detector", "M3dDetector"),
        ("class", "m_class", "Class"),
    ],
)
def test_module_and_class_names_are_valid_python(model: str, module: str, prefix: str) -> None:
    assert (module_name(model), class_prefix(model)) == (module, prefix)
    assert module.isidentifier() and prefix.isidentifier()


@pytest.mark.parametrize(
    ("tensor", "field"), [("INPUT__0", "input__0"), ("class", "class_"), ("0x", "t_0x"), ("a-b.c", "a_b_c")]
)
def test_field_names_are_valid_python(tensor: str, field: str) -> None:
    assert field_name(tensor) == field


def test_an_ensemble_takes_its_steps_priority_levels(configs: dict) -> None:
    assert signature_of("Text-Embedder.v2", configs).priority_levels == 2
    assert signature_of("ranker", configs).priority_levels == 3
    assert signature_of("unbatched", configs).priority_levels == 0


def test_string_tensors_become_bytes_and_optional_inputs_are_marked(configs: dict) -> None:
    signature = signature_of("ranker", configs)
    assert [(s.name, s.datatype, s.dims, s.field, s.optional) for s in signature.inputs] == [
        ("query_ids", "INT64", (-1,), "query_ids", False),
        ("mask", "BOOL", (-1,), "mask", False),
        ("class", "FP32", (1,), "class_", True),
    ]
    assert signature.outputs[1].datatype == "BYTES"


# --- rendered code -----------------------------------------------------------------------------


def test_rendered_modules_pass_ruff_check_and_format_unchanged(rendered: Path) -> None:
    config = ["--config", str(ROOT / "pyproject.toml")]
    for command in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, *config, str(rendered)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_modules_import_and_have_typed_dataclasses_and_methods(rendered: Path) -> None:
    ranker = load_module(rendered / "ranker.py")
    request = ranker.RankerRequest(query_ids=[1, 2], mask=[True, False])
    assert request.class_ is None
    assert ranker.RankerResponse.__dataclass_params__.frozen
    assert callable(ranker.RankerClient.predict) and callable(ranker.AsyncRankerClient.predict)
    assert ranker.RankerClient.SIGNATURE.model_name == "ranker"
    unbatched = load_module(rendered / "unbatched.py")
    assert callable(unbatched.UnbatchedClient.classify), "a model with a `label` output gets `classify`"
    embedder = load_module(rendered / "text_embedder_v2.py")
    assert embedder.TextEmbedderV2Client.SIGNATURE.max_batch_size == 8


def test_a_rendered_client_sends_through_an_injected_transport(rendered: Path) -> None:
    ranker = load_module(rendered / "ranker.py")
    sent = {}

    class Transport:
        def infer(self, **kwargs):
            sent.update({t.name(): (t.shape(), t.datatype()) for t in kwargs["inputs"]})
            return types.SimpleNamespace(
                as_numpy=lambda name: {
                    "scores": np.zeros((1, 3), np.float32),
                    "tags": np.array([[b"a", b"b"]], dtype=object),
                }[name]
            )

    [row] = ranker.RankerClient(client=Transport()).predict([ranker.RankerRequest([1, 2, 3], [True, True, False], 0.5)])
    assert sent == {"query_ids": ([1, 3], "INT64"), "mask": ([1, 3], "BOOL"), "class": ([1, 1], "FP32")}
    assert row.tags.tolist() == [b"a", b"b"]


def test_a_labelled_output_returns_label_names_best_first(rendered: Path) -> None:
    ranker = load_module(rendered / "ranker.py")
    assert ranker.SIGNATURE.outputs[0].labels == RANKER_LABELS
    row = ranker.RankerResponse(scores=np.array([0.2, 0.7, 0.1], np.float32), tags=np.array([b"a", b"b"]))
    assert row.top_labels() == [("partly relevant", pytest.approx(0.7))]
    assert [name for name, _ in row.top_labels(3)] == ["partly relevant", "relevant", "off-topic"]
    with pytest.raises(ValueError, match="k: got 0"):
        row.top_labels(0)
    unlabelled = load_module(rendered / "unbatched.py")
    assert not hasattr(unlabelled.UnbatchedResponse, "top_labels")


def test_label_names_are_read_from_the_models_label_file(tmp_path: Path, configs: dict) -> None:
    (tmp_path / "ranker").mkdir()
    (tmp_path / "ranker" / "labels.txt").write_text("relevant\npartly relevant\noff-topic\n")
    assert load_labels(tmp_path, {"ranker": configs["ranker"]}) == {"ranker": {"scores": RANKER_LABELS}}
    (tmp_path / "ranker" / "labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"ranker: output 'scores' names .*labels.txt, which is missing"):
        load_labels(tmp_path, {"ranker": configs["ranker"]})


def test_the_real_sentiment_client_names_its_classes() -> None:
    from fastpath_models.sentiment import SIGNATURE

    assert SIGNATURE.outputs[2].labels == ("negative", "positive")


def test_the_package_init_lists_the_models_and_the_skipped_ones(rendered: Path) -> None:
    init = (rendered / "__init__.py").read_text()
    assert "from .ranker import AsyncRankerClient, RankerClient, RankerRequest, RankerResponse" in init
    assert "streamer: decoupled (streaming) model" in init


# --- drift -------------------------------------------------------------------------------------


def test_committed_clients_equal_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run([*FASTPATH_GENERATE, "--output", str(tmp_path)], check=True, capture_output=True)
    fresh = sorted(p.name for p in tmp_path.glob("*.py"))
    committed = sorted(p.name for p in GENERATED.glob("*.py"))
    assert fresh == committed, "run `make generate-clients` and commit clients/fastpath_models/"
    _, mismatch, errors = filecmp.cmpfiles(tmp_path, GENERATED, fresh, shallow=False)
    assert not mismatch and not errors, f"{mismatch + errors} are stale: run `make generate-clients` and commit them"


def test_check_mode_fails_on_a_stale_package_and_names_the_file(tmp_path: Path) -> None:
    subprocess.run([*FASTPATH_GENERATE, "--output", str(tmp_path)], check=True, capture_output=True)
    assert subprocess.run([*FASTPATH_GENERATE, "--output", str(tmp_path), "--check"], check=False).returncode == 0
    (tmp_path / "digits.py").write_text("# edited by hand\n")
    (tmp_path / "old_model.py").write_text("")
    result = subprocess.run(
        [*FASTPATH_GENERATE, "--output", str(tmp_path), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "a/digits.py" in result.stdout
    assert "old_model.py: no longer generated" in result.stdout


def test_the_script_documents_itself() -> None:
    result = subprocess.run([*FASTPATH_GENERATE, "--help"], capture_output=True, text=True, check=True)
    assert "--all" in result.stdout and "--check" in result.stdout
