"""deploy/trt/build_engines.py (what the trt-builder service runs), driven by a fake trtexec.

The real trtexec only exists in the TensorRT image on a GPU host; the fake records its argv,
writes a plan file, and exports the outputs the test chooses, in trtexec's --exportOutput format.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.config.settings import Batching, RepoSettings
from triton_fastpath.config.tensorrt import ParityCase, as_tensorrt, write_engine_plan
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.paths import ROOT

SCRIPT = ROOT / "deploy" / "trt" / "build_engines.py"
FAKE_TRTEXEC = """#!{python}
import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
with open(os.environ["FAKE_TRT_CALLS"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
print("&&&& RUNNING TensorRT.trtexec (fake)")
if os.environ.get("FAKE_TRT_EXIT"):
    print("[E] Error[4]: fake failure")
    sys.exit(int(os.environ["FAKE_TRT_EXIT"]))
if "--saveEngine" in args:
    open(args["--saveEngine"], "wb").write(b"plan")
if "--exportOutput" in args:
    open(args["--exportOutput"], "w").write(open(os.environ["FAKE_TRT_OUTPUT"]).read())
"""


def container_encoder():
    """`sentiment_encoder` as the container target serves it (the fused model's BLS target)."""
    settings = RepoSettings(max_length=16, batching=Batching(max_batch_size=8))
    specs = {s.name: s for s in default_specs(settings, "container")}
    return specs["sentiment_encoder"]


def load_script():
    spec = importlib.util.spec_from_file_location("build_engines", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_engines = load_script()
# What the encoder graph returns (softmax and argmax folded in): probabilities and label_index.
PROBABILITIES = np.array([[0.75, 0.25], [0.375, 0.625], [0.5625, 0.4375]], np.float32)
LABEL_INDEX = np.array([[0], [1], [0]], np.int64)


def reference() -> dict[str, np.ndarray]:
    return {"probabilities": PROBABILITIES, "label_index": LABEL_INDEX}


def export_output(path: Path, outputs: dict[str, np.ndarray]) -> None:
    """Write outputs the way trtexec --exportOutput does (a list of name/dimensions/values)."""
    items = []
    for name, array in outputs.items():
        values = ", ".join(f"{v:g}" for v in array.ravel())
        dims = "x".join(str(d) for d in array.shape)
        items.append(f'  {{ "name" : "{name}"\n  , "dimensions" : "{dims}"\n  , "values" : [ {values} ]\n  }}')
    path.write_text("[\n" + "\n, ".join(items) + "\n]\n")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A build/container-like folder: one encoder's ONNX, its engines.json and parity data; fake trtexec."""
    spec = as_tensorrt(container_encoder(), opt_batches=[4], variable_dims=(1, 8, 16))
    (tmp_path / "model_repository" / spec.name / "1").mkdir(parents=True)
    (tmp_path / "model_repository" / spec.name / "1" / "model.onnx").write_bytes(b"onnx")
    ids = np.arange(3 * 16, dtype=np.int64).reshape(3, 16)
    case = ParityCase({"input_ids": ids, "attention_mask": np.ones_like(ids)}, reference())
    write_engine_plan([spec], tmp_path, parity={spec.name: case})
    fake = tmp_path / "bin" / "trtexec"
    fake.parent.mkdir()
    fake.write_text(FAKE_TRTEXEC.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_TRT_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_TRT_OUTPUT", str(tmp_path / "trt_output.json"))
    monkeypatch.delenv("FAKE_TRT_EXIT", raising=False)
    monkeypatch.chdir(tmp_path)
    export_output(tmp_path / "trt_output.json", {"probabilities": PROBABILITIES + 0.01, "label_index": LABEL_INDEX})
    return tmp_path


def calls(workspace: Path) -> list[list[str]]:
    path = workspace / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main(workspace: Path, *extra: str) -> int:
    return build_engines.main(["--trtexec", str(workspace / "bin" / "trtexec"), *extra])


def test_builds_the_plan_with_the_generated_command_then_checks_parity(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(workspace) == 0
    engines = json.loads((workspace / "trt/engines.json").read_text())["engines"]
    build, infer = calls(workspace)
    assert build == engines[0]["trtexec"][1:]
    assert (workspace / "model_repository/sentiment_encoder/1/model.plan").read_bytes() == b"plan"
    assert infer[:4] == [
        "--loadEngine=model_repository/sentiment_encoder/1/model.plan",
        "--shapes=input_ids:3x16,attention_mask:3x16",
        "--loadInputs=input_ids:trt/parity/sentiment_encoder/input_ids.bin,"
        "attention_mask:trt/parity/sentiment_encoder/attention_mask.bin",
        "--exportOutput=trt/logs/sentiment_encoder.outputs.json",
    ]
    out = capsys.readouterr().out
    assert "sentiment_encoder: parity PASS on 3 rows vs onnxruntime: probabilities: max|diff| 0.01" in out
    assert "probabilities: argmax agreement 1.000" in out
    assert "label_index: values agreement 1.000" in out


def test_several_profiles_build_in_groups_and_parity_runs_on_the_last_with_use_profile(workspace: Path) -> None:
    """TensorRT 10's trtexec: `--profile=N` groups build, `--useProfile=N` selects at inference (a
    `--profile=N` alone at inference would be read as an empty build group and rejected)."""
    spec = as_tensorrt(container_encoder(), opt_batches=[1, 8], variable_dims=(1, 8, 16))
    ids = np.arange(3 * 16, dtype=np.int64).reshape(3, 16)
    case = ParityCase({"input_ids": ids, "attention_mask": np.ones_like(ids)}, reference())
    write_engine_plan([spec], workspace, parity={spec.name: case})
    assert main(workspace) == 0
    build, infer = calls(workspace)
    assert [a for a in build if a.startswith("--profile")] == ["--profile=0", "--profile=1"]
    assert "--useProfile=1" in infer and not [a for a in infer if a.startswith("--profile")]


def test_a_fresh_plan_is_kept_but_parity_runs_again(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(workspace) == 0
    assert main(workspace) == 0
    assert [c[0].split("=")[0] for c in calls(workspace)] == ["--onnx", "--loadEngine", "--loadEngine"]
    assert "is newer than" in capsys.readouterr().out
    assert main(workspace, "--force") == 0
    assert calls(workspace)[-2][0].startswith("--onnx=")


def test_parity_failure_exits_non_zero_naming_the_output_and_the_difference(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export_output(workspace / "trt_output.json", {"probabilities": PROBABILITIES + 0.3, "label_index": LABEL_INDEX})
    assert main(workspace) == 1
    err = capsys.readouterr().err
    assert "sentiment_encoder: FAILED: output 'probabilities': max|diff| 0.3 vs onnxruntime exceeds 0.05" in err


def test_a_flipped_label_index_fails_its_agreement_check(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flipped = LABEL_INDEX.copy()
    flipped[2] = 1
    export_output(workspace / "trt_output.json", {"probabilities": PROBABILITIES, "label_index": flipped})
    assert main(workspace) == 1
    assert "output 'label_index': values agreement 0.667 below 0.98" in capsys.readouterr().err


def test_a_plan_missing_an_output_fails_naming_it(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export_output(workspace / "trt_output.json", {"probabilities": PROBABILITIES})
    assert main(workspace) == 1
    assert "output 'label_index' is missing from the plan's outputs ['probabilities']" in capsys.readouterr().err


def test_flipped_labels_fail_the_argmax_check_even_within_the_difference_bound(workspace: Path) -> None:
    flipped = PROBABILITIES.copy()
    flipped[2] = [0.49, 0.51]  # the third row's argmax flips
    checks = {"probabilities": {"max_abs_diff": 1.0, "min_argmax_agreement": 0.98}}
    reference = {"probabilities": {"shape": [3, 2], "values": PROBABILITIES.ravel().tolist()}}
    with pytest.raises(build_engines.BuildFailed, match=r"output 'probabilities': argmax agreement 0.667 below 0.98"):
        build_engines.compare(reference, {"probabilities": flipped.ravel().tolist()}, checks)


def test_a_failing_trtexec_exits_non_zero_with_the_command_and_the_log_tail(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_TRT_EXIT", "3")
    assert main(workspace) == 1
    err = capsys.readouterr().err
    assert "FAILED: exit 3:" in err and "--saveEngine=model_repository/sentiment_encoder/1/model.plan" in err
    assert "[E] Error[4]: fake failure" in err
    assert (workspace / "trt/logs/sentiment_encoder.build.log").exists()


def test_missing_inputs_are_named(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workspace / "model_repository/sentiment_encoder/1/model.onnx").unlink()
    assert main(workspace) == 1
    assert "ONNX source model_repository/sentiment_encoder/1/model.onnx is missing" in capsys.readouterr().err
    os.remove(workspace / "trt/engines.json")
    assert main(workspace) == 2
    assert "trt/engines.json not found: run `make build-container`" in capsys.readouterr().err


def test_trtexec_output_with_nan_is_read_and_fails_the_check() -> None:
    text = '[\n  { "name" : "probabilities"\n  , "dimensions" : "1x2"\n  , "values" : [ nan, -inf ]\n  }\n]\n'
    outputs = build_engines.read_trtexec_outputs(text)
    assert np.isnan(outputs["probabilities"][0]) and outputs["probabilities"][1] == -np.inf
    reference = {"probabilities": {"shape": [1, 2], "values": [0.5, 0.5]}}
    with pytest.raises(build_engines.BuildFailed, match=r"max\|diff\| inf"):
        build_engines.compare(reference, outputs, {"probabilities": {"max_abs_diff": 0.05}})


def test_without_trtexec_anywhere_the_error_says_where_it_looked(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(workspace / "empty"))
    monkeypatch.setattr(build_engines, "TRTEXEC_PLACES", (str(workspace / "nowhere" / "trtexec"),))
    assert build_engines.main([]) == 1
    assert "trtexec is neither on PATH nor in" in capsys.readouterr().err
    monkeypatch.setattr(build_engines, "TRTEXEC_PLACES", (str(workspace / "bin" / "trtexec"),))
    assert build_engines.main([]) == 0
