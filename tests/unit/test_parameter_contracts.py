"""One parameter contract per backend (`fastpath_backends.parameters`): the keys the C++ backend
reads are the Python contract's, with the same defaults (printed by the compiled C++), every key the
build renders is one its backend reads, and the contracts read back what they write, with their
defaults."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from enum import Enum
from pathlib import Path

import pytest

from fastpath_backends.parameters import (
    CONTRACTS,
    REQUIRED,
    CacheLookupParameters,
    Encoder,
    FastpathOrtParameters,
    OnnxRunnerParameters,
    SemanticParameters,
    Task,
    TextPipelineParameters,
    TokenizerParameters,
)
from triton_fastpath.config.render import Target, native_backend, python_adapter, queues_itself, render
from triton_fastpath.config.settings import NativeBackend, RepoSettings
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.backend_parameters import calls_encoder_by_bls
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.native import ort_backend as native
from triton_fastpath.paths import ROOT

CONFIG_CC = ROOT / "native" / "fastpath_ort" / "config.cc"
RENDERINGS = ("fused", "ensemble", "graph")


def _cc_array(name: str) -> list[str]:
    match = re.search(rf"{name}\[\]\s*=\s*\{{(.*?)\}};", CONFIG_CC.read_text(), re.S)
    assert match, f"{name} not found in {CONFIG_CC}"
    return re.findall(r'"([^"]*)"', match.group(1))


def test_config_cc_reads_exactly_the_python_contract_keys():
    assert sorted(_cc_array("kBackendParameters")) == sorted(FastpathOrtParameters.backend_keys())
    assert sorted(_cc_array("kInformationalParameters")) == sorted(FastpathOrtParameters.INFORMATIONAL)


@pytest.fixture(scope="module")
def driver() -> Path:
    """The C++ test driver of the backend's pure parts (config.cc among them)."""
    return native.build_test_driver(sanitize=False)


def test_the_compiled_backend_lists_the_python_contract_keys(driver):
    result = subprocess.run([str(driver), "--parameters"], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split() for line in result.stdout.splitlines()]
    assert sorted(k for kind, k in rows if kind == "backend") == sorted(FastpathOrtParameters.backend_keys())
    assert sorted(k for kind, k in rows if kind == "informational") == sorted(FastpathOrtParameters.INFORMATIONAL)


@pytest.fixture(scope="module")
def cpp_defaults(driver) -> dict[str, str]:
    """Each key config.cc reads with its default, as `test_fastpath_ort --defaults` prints it."""
    result = subprocess.run([str(driver), "--defaults"], capture_output=True, text=True, timeout=60, check=True)
    return dict(line.split("\t", 1) for line in result.stdout.splitlines())


def test_the_compiled_backend_prints_a_default_for_every_key(cpp_defaults):
    assert sorted(cpp_defaults) == sorted(FastpathOrtParameters.backend_keys())


def _as_parameters(key: str, text: str) -> dict[str, str]:
    """The C++ value of `key` as config parameters: a family's "<level>:<value>,..." one key a level."""
    if key not in FastpathOrtParameters.prefixes():
        return {key: text}
    return {f"{key}{level}": value for level, value in (item.split(":") for item in text.split(",") if item)}


@pytest.mark.parametrize("key", FastpathOrtParameters.backend_keys())
def test_the_cpp_default_of_every_key_is_the_python_contracts(cpp_defaults, key):
    read = FastpathOrtParameters.from_parameters(_as_parameters(key, cpp_defaults[key]))
    assert getattr(read, key) == FastpathOrtParameters.default(key), (
        f"{key}: config.cc defaults it to {cpp_defaults[key]!r}, FastpathOrtParameters to "
        f"{FastpathOrtParameters.default(key)!r}"
    )


def _rendered():
    """Every (backend, parameters) the build renders: each rendering, native on and off, both targets."""
    for rendering in RENDERINGS:
        for use_native in (True, False):
            try:
                settings = RepoSettings.tuned(rendering=rendering, native=NativeBackend(enabled=use_native))
                specs = default_specs(settings)
            except ConfigError:  # a rendering these settings cannot build (said by the rendering)
                continue
            for spec in specs:
                for target in (Target.EMBEDDED, Target.CONTAINER):
                    params = {k: v["string_value"] for k, v in render(spec, target).get("parameters", {}).items()}
                    if native_backend(spec, target):
                        yield f"{rendering}/{spec.name}", FastpathOrtParameters, params
                    elif (adapter := python_adapter(spec, target)) is not None:
                        yield f"{rendering}/{spec.name}/{target}", CONTRACTS[adapter], params


RENDERED = list(_rendered())


def test_the_build_renders_models_of_every_backend():
    backends = {contract.BACKEND for _, contract, _ in RENDERED}
    assert {"fastpath_ort", "tokenizer", "onnx_runner", "text_pipeline", "postprocess"} <= backends, backends


@pytest.mark.parametrize(("where", "contract", "params"), RENDERED, ids=[r[0] for r in RENDERED])
def test_every_rendered_key_is_one_its_backend_reads(where, contract, params):
    unknown = sorted(k for k in params if not contract.reads(k))
    assert not unknown, f"{where}: {contract.BACKEND} does not read {unknown}"
    contract.from_parameters(params)  # every required key is there, every value parses


@pytest.mark.parametrize("contract", list(CONTRACTS.values()), ids=list(CONTRACTS))
def test_a_contract_reads_back_what_it_writes(contract):
    def value(name: str) -> str:  # an enum's first value, a number, or a name
        kind = next(f.metadata["kind"] for f in dataclasses.fields(contract) if f.name == name)
        return next(iter(kind)).value if issubclass(kind, Enum) else "1" if name == "max_length" else "x"

    required = {name: value(name) for name in contract.parameter_keys() if contract.default(name) is REQUIRED}
    read = contract.from_parameters(required)
    assert contract.from_parameters(read.to_parameters()) == read


def test_absent_keys_take_the_declared_defaults_and_required_keys_are_named():
    runner = OnnxRunnerParameters.from_parameters({})
    assert (runner.onnx_file, runner.intra_op_threads, runner.length_bucket_rows) == ("model.onnx", 1, 0)
    assert runner.reject_non_finite is False and runner.admission_budget_ms_ is None
    lookup = CacheLookupParameters.from_parameters({"encoder_model": "e"})
    assert (lookup.encoder_max_batch_size, lookup.redis_key_prefix, lookup.max_length) == (64, "fastpath:", None)
    with pytest.raises(KeyError, match="tokenizer needs the parameter 'max_length'"):
        TokenizerParameters.from_parameters({"tokenizer_file": "tokenizer.json"})


def test_writing_leaves_unset_keys_to_the_backend_and_families_by_level():
    written = TextPipelineParameters(task=Task.EMBED, cache=False, admission_budget_ms_={1: 12.5, 2: 40})
    assert written.to_parameters() == {
        "task": "embed",
        "cache": "false",
        "admission_budget_ms_1": "12.5",
        "admission_budget_ms_2": "40",
    }
    assert TextPipelineParameters.reads("admission_budget_ms_3")
    assert not TextPipelineParameters.reads("admission_budget_ms_x")


@pytest.mark.parametrize(("target", "by_bls"), [(Target.EMBEDDED, False), (Target.CONTAINER, True)])
def test_a_fused_model_calls_its_encoder_by_bls_on_the_container_target_only(target, by_bls):
    specs = default_specs(RepoSettings.tuned(rendering="fused"), target)
    fused = [spec for spec in specs if spec.python_model == TextPipelineParameters.BACKEND]
    assert fused and all(calls_encoder_by_bls(spec) is by_bls for spec in fused)
    assert not any(calls_encoder_by_bls(spec) for spec in specs if spec not in fused)


def test_task_and_encoder_are_written_as_their_values_and_read_back_as_enums():
    written = TextPipelineParameters(task=Task.CLASSIFY, encoder=Encoder.BLS).to_parameters()
    assert written == {"task": "classify", "encoder": "bls"}
    read = TextPipelineParameters.from_parameters({**written, "tokenizer_file": "t.json", "max_length": "8"})
    assert (read.task, read.encoder) == (Task.CLASSIFY, Encoder.BLS)
    with pytest.raises(ValueError, match="'gpu' is not a valid Encoder"):
        TextPipelineParameters.from_parameters({**written, "encoder": "gpu", "tokenizer_file": "t", "max_length": "8"})


def test_a_float_is_written_without_losing_digits():
    written = SemanticParameters(semantic_threshold=0.9234567, semantic_min_margin=0.0).to_parameters()
    assert written == {"semantic_threshold": "0.9234567", "semantic_min_margin": "0.0"}
    assert SemanticParameters.from_parameters(written).semantic_threshold == 0.9234567


def test_the_measured_family_is_keyed_by_name():
    written = SemanticParameters(semantic_measured_={"wrong_rate": "0.0100"}).to_parameters()
    assert written == {"semantic_measured_wrong_rate": "0.0100"}
    assert CacheLookupParameters.reads("semantic_measured_wrong_rate")
    read = CacheLookupParameters.from_parameters({**written, "encoder_model": "e"})
    assert read.semantic_measured_ == {"wrong_rate": "0.0100"}


@pytest.mark.parametrize("options", [{}, {"rendering": "fused"}], ids=["shipped", "fused"])
def test_inline_when_idle_is_written_only_when_off_and_only_for_native_models_with_a_queue(options):
    shipped = RepoSettings.tuned(**options)
    queued = dataclasses.replace(shipped, native=dataclasses.replace(shipped.native, inline_when_idle=False))

    def written(settings: RepoSettings, target: Target) -> dict[str, str]:
        found = {}
        for spec in default_specs(settings, target):
            params = {k: v["string_value"] for k, v in render(spec, target).get("parameters", {}).items()}
            if "inline_when_idle" in params:
                assert native_backend(spec, target), f"{spec.name}: a key only fastpath_ort reads"
                assert any(k.startswith("admission_budget_ms_") for k in params), f"{spec.name}: it has no queue"
                found[spec.name] = params["inline_when_idle"]
        return found

    assert written(shipped, Target.EMBEDDED) == {}  # the default (on) is the backend's: configs unchanged
    off = written(queued, Target.EMBEDDED)
    assert off and set(off.values()) == {"false"}
    assert "digits" in off
    assert written(queued, Target.CONTAINER) == {}


@pytest.mark.parametrize("options", [{}, {"rendering": "fused"}], ids=["shipped", "fused"])
def test_triton_batcher_off_drops_dynamic_batching_only_where_the_backend_queues_the_model_itself(options):
    direct = RepoSettings.tuned(**options)
    assert direct.native.triton_batcher is False  # the default since benchmark-direct and the overload rows
    shipped = dataclasses.replace(direct, native=dataclasses.replace(direct.native, triton_batcher=True))

    def batched(settings: RepoSettings, target: Target) -> dict[str, bool]:
        return {
            spec.name: "dynamic_batching" in render(spec, target)
            for spec in default_specs(settings, target)
            if spec.dynamic_batching is not None
        }

    for target in Target:
        before, after = batched(shipped, target), batched(direct, target)
        assert before.keys() == after.keys() and all(before.values())
        dropped = {name for name, kept in after.items() if not kept}
        specs = {spec.name: spec for spec in default_specs(direct, target)}
        assert dropped == {name for name in after if queues_itself(specs[name], target)}
        if target is Target.EMBEDDED:
            assert "digits" in dropped  # fastpath_ort's own queue (admission budgets)
            # what the backend does not queue itself keeps Triton's batcher (Python models, encoders)
            assert any(after.values())
        else:
            assert dropped == set()  # the container serves with Triton's batcher in front


def test_a_batching_delay_or_preferred_sizes_keep_triton_batcher_in_front_of_fastpath_ort():
    """Only Triton's batcher waits for batch-mates or dispatches preferred sizes: asked for, it stays."""
    shipped = RepoSettings.tuned()
    assert shipped.native.triton_batcher is False

    def digits_batching(settings: RepoSettings) -> dict | None:
        [spec] = [s for s in default_specs(settings, Target.EMBEDDED) if s.name == "digits"]
        assert queues_itself(spec, Target.EMBEDDED)
        return render(spec, Target.EMBEDDED).get("dynamic_batching")

    assert digits_batching(shipped) is None
    delayed = dataclasses.replace(shipped, batching=dataclasses.replace(shipped.batching, max_queue_delay_us=3000))
    assert digits_batching(delayed)["max_queue_delay_microseconds"] == 3000
    preferred = dataclasses.replace(shipped, batching=dataclasses.replace(shipped.batching, preferred_batch_sizes=(8,)))
    assert digits_batching(preferred)["preferred_batch_size"] == [8]
