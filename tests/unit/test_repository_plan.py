"""A repository's plan (`triton_fastpath.config.repository_plan`): every model resolved before
anything is written (its served spec, its config text, its files and warmups), and assembly as
that plan written (`recipes.assemble.write_plan`). What the machine says is handed in: a fake
`NativeLibraries` here, so no backend is built."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.config.render import to_pbtxt
from triton_fastpath.config.repository_plan import TokenizerFacts, plan_repository, with_tokenizer_digest
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.recipes.assemble import assemble, write_plan


class FakeNative:
    """The native libraries as a machine might have them; counts how often the backend is asked."""

    def __init__(self, backend: Path | None = None, ops_missing: str | None = None) -> None:
        self.library, self.ops_missing, self.asked = backend, ops_missing, 0

    def backend(self) -> Path | None:
        self.asked += 1
        return self.library

    def custom_ops_missing(self) -> str | None:
        return self.ops_missing


def onnx_spec(name: str = "m", **overrides) -> ModelSpec:
    fields = {
        "name": name,
        "kind": ModelKind.ONNX,
        "max_batch_size": 8,
        "inputs": (TensorSpec("x", "TYPE_FP32", (4,)),),
        "outputs": (TensorSpec("y", "TYPE_FP32", (2,)),),
        "model_file": "model.onnx",
    }
    return ModelSpec(**{**fields, **overrides})


def ids_spec(native: bool = True) -> ModelSpec:
    """An encoder of token ids that names its tokenizer (an ids lane), native or not."""
    inputs = (TensorSpec("input_ids", "TYPE_INT64", (-1,)), TensorSpec("attention_mask", "TYPE_INT64", (-1,)))
    return onnx_spec(inputs=inputs, native=native, parameters={"tokenizer_file": "tokenizer.json"})


def test_the_plan_holds_each_config_as_rendered_and_assembly_writes_it_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triton_fastpath.native import ort_backend

    monkeypatch.setattr(ort_backend, "backend_or_none", lambda: None)  # as FakeNative(): nothing built here
    specs = default_specs(RepoSettings(rendering="fused"))
    wanted = [s for s in specs if s.name in {"sentiment", "sentiment_fused", "digits"}]
    text = {"sentiment_fused": {"text": np.array([b"a warm film"], dtype=object)}}
    plan = plan_repository(wanted, "embedded", native=FakeNative(), tokenizers={}, warmups=text)
    assert [m.name for m in plan.models] == [s.name for s in wanted]
    for model in plan.models:
        assert model.config == to_pbtxt(model.spec, "embedded")
    written = write_plan(plan, tmp_path / "planned")
    assert [p.read_text() for p in written] == [m.config for m in plan.models]
    again = assemble(wanted, tmp_path / "assembled", warmup_samples=text)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written]
    assert plan.spec("sentiment").labels == ("negative", "positive")
    assert next(m for m in plan.models if m.name == "sentiment").labels == {"labels.txt": "negative\npositive\n"}


def test_a_missing_file_is_named_before_anything_is_written(tmp_path: Path) -> None:
    files = {"b": [tmp_path / "absent.onnx"]}
    with pytest.raises(ConfigError, match=r"model 'b': file .*absent.onnx is missing"):
        plan_repository([onnx_spec("a"), onnx_spec("b")], "embedded", native=FakeNative(), tokenizers={}, files=files)
    assert not (tmp_path / "a").exists()


def test_a_warmup_file_without_its_sample_is_named_in_the_plan() -> None:
    from triton_fastpath.config.spec import Warmup, WarmupInput

    warmup = Warmup("w", batch_size=1, inputs=(WarmupInput("x", input_data_file="x.bin"),))
    with pytest.raises(ConfigError, match=r"warmup file 'x.bin' has no sample"):
        plan_repository([onnx_spec(warmups=(warmup,))], "embedded", native=FakeNative(), tokenizers={})


def test_native_models_keep_the_backend_or_fall_back_to_python_where_it_cannot_be_built(tmp_path: Path) -> None:
    built = FakeNative(tmp_path / "libtriton_fastpath_ort.so")
    plan = plan_repository([onnx_spec(native=True)], "embedded", native=built, tokenizers={})
    assert plan.library == built.library and plan.spec("m").native
    assert 'backend: "fastpath_ort"' in plan.models[0].config and plan.models[0].adapter is None
    plan = plan_repository([onnx_spec(native=True)], "embedded", native=FakeNative(), tokenizers={})
    assert plan.library is None and not plan.spec("m").native
    assert plan.models[0].adapter is not None and plan.models[0].adapter.name == "onnx_runner.py"
    # no model asks for it: the backend is not even asked for
    quiet = FakeNative()
    plan_repository([onnx_spec()], "embedded", native=quiet, tokenizers={})
    assert quiet.asked == 0


def test_an_ids_lane_gets_its_tokenizers_digest_and_token_bounds_from_the_facts_handed_in(tmp_path: Path) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    facts = {tokenizer: TokenizerFacts("ab" * 32, 30522)}
    spec = with_tokenizer_digest(ids_spec(), [tokenizer], facts)
    assert spec.parameters["tokenizer_sha256"] == "ab" * 32
    assert spec.parameters["value_bounds"] == "input_ids:0:30522,attention_mask:0:2"
    # a file the facts do not know (not there) adds nothing; nor does a Python backend's fallback
    assert with_tokenizer_digest(ids_spec(), [tmp_path / "other" / "tokenizer.json"], facts) == ids_spec()
    fallback = with_tokenizer_digest(ids_spec(native=False), [tokenizer], facts)
    assert "value_bounds" not in fallback.parameters and fallback.parameters["tokenizer_sha256"] == "ab" * 32
