"""The export steps, each on its own: torch -> ONNX, ONNX -> INT8, and parity verification.

Models are tiny and randomly initialised (seeded), so the whole file runs in well under a minute
on two CPU cores. Exports use example batch 2 and sequence 8: ``torch.export`` specialises
dynamic dimensions whose example size is 1.
"""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
transformers = pytest.importorskip("transformers")

from triton_fastpath.cli import export_onnx, output  # noqa: E402
from triton_fastpath.errors import ExportError, VerificationError  # noqa: E402
from triton_fastpath.export import inputs as export_inputs  # noqa: E402
from triton_fastpath.export import onnx2int8, onnx_run, torch2onnx, verify  # noqa: E402

pytestmark = pytest.mark.export

REPO_ROOT = Path(__file__).resolve().parents[2]
BERT_AXES = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
VOCAB = 200


class TinyCNN(torch.nn.Module):
    """[B, 1, 8, 8] -> [B, 10] logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(torch.flatten(y, 1))


class BranchyModel(torch.nn.Module):
    """Data-dependent control flow: torch.export refuses it, the TorchScript tracer does not."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.fc(x)
        return -self.fc(x)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`fastpath export ARGS` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "triton_fastpath.cli", "export", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO_ROOT,
        check=False,
    )


def _bert_inputs(batch: int, seq: int, *, seed: int, pad: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    if pad and seq > 2:
        lengths = rng.integers(1, seq + 1, size=batch)
        mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask}


def _input_dims(path: Path) -> dict[str, list[int | str]]:
    graph = onnx.load(str(path)).graph
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.input}


def _exporter(path: Path) -> str:
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    return props[torch2onnx.EXPORTER_METADATA_KEY]


# --------------------------------------------------------------------------------------------
# Fixtures: export each model once per module
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cnn() -> TinyCNN:
    torch.manual_seed(0)
    return TinyCNN().eval()


@pytest.fixture(scope="module")
def cnn_onnx(cnn: TinyCNN, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return torch2onnx.export(
        model=cnn,
        example_inputs={"x": torch.randn(2, 1, 8, 8)},
        output_path=tmp_path_factory.mktemp("cnn") / "cnn.onnx",
        output_names=["logits"],
        dynamic_axes={"x": {0: "batch"}},
    )


@pytest.fixture(scope="module")
def bert() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=2,
        attn_implementation="eager",
    )
    model = transformers.BertForSequenceClassification(config).eval()
    assert model.config._attn_implementation == "eager"
    return torch2onnx.OutputSelector(model, ["logits"]).eval()


@pytest.fixture(scope="module")
def bert_onnx(bert: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    example = {name: torch.from_numpy(a) for name, a in _bert_inputs(2, 8, seed=0).items()}
    return torch2onnx.export(
        model=bert,
        example_inputs=example,
        output_path=tmp_path_factory.mktemp("bert") / "model.onnx",
        output_names=["logits"],
        dynamic_axes=BERT_AXES,
    )


@pytest.fixture(scope="module")
def bert_int8(bert_onnx: Path) -> Path:
    return onnx2int8.quantize(source_path=bert_onnx, output_path=bert_onnx.with_name("model.int8.onnx"))


# --------------------------------------------------------------------------------------------
# torch -> ONNX
# --------------------------------------------------------------------------------------------


def test_cnn_runs_at_any_batch_size_and_matches_torch(cnn: TinyCNN, cnn_onnx: Path) -> None:
    assert _input_dims(cnn_onnx) == {"x": ["batch", 1, 8, 8]}
    assert [o.name for o in onnx.load(str(cnn_onnx)).graph.output] == ["logits"]
    assert _exporter(cnn_onnx) == "dynamo"
    assert not list(cnn_onnx.parent.glob("*.data")), "weights must be embedded"
    for batch in (1, 3, 17):
        x = np.random.default_rng(batch).standard_normal((batch, 1, 8, 8)).astype(np.float32)
        with torch.no_grad():
            expected = cnn(torch.from_numpy(x)).numpy()
        got = onnx_run.run_onnx(cnn_onnx, {"x": x})
        assert got["logits"].shape == (batch, 10)
        np.testing.assert_allclose(got["logits"], expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("batch", "seq", "pad"),
    [(1, 8, False), (1, 5, False), (2, 8, True), (3, 33, True), (5, 64, False), (70, 12, True)],
)
def test_bert_matches_torch_at_unseen_shapes(
    bert: torch.nn.Module, bert_onnx: Path, batch: int, seq: int, pad: bool
) -> None:
    inputs = _bert_inputs(batch, seq, seed=batch * 100 + seq, pad=pad)
    expected, got = onnx_run.run_torch_and_onnx(
        model=bert, onnx_path=bert_onnx, inputs=inputs, output_names=["logits"], batch_size=64
    )
    assert got["logits"].shape == (batch, 2)
    result = verify.compare(
        reference=expected, candidate=got, label_output="logits", max_abs_diff=1e-4, min_label_agreement=1.0
    )
    verify.check(result, what=f"tiny bert fp32 at batch {batch} seq {seq}", reproduce="pytest " + __file__)
    assert result.n_samples == batch


def test_bert_graph_has_named_dynamic_inputs(bert_onnx: Path) -> None:
    assert _input_dims(bert_onnx) == {
        "input_ids": ["batch", "sequence"],
        "attention_mask": ["batch", "sequence"],
    }
    assert [o.name for o in onnx.load(str(bert_onnx)).graph.output] == ["logits"]
    assert _exporter(bert_onnx) == "dynamo"
    onnx.checker.check_model(str(bert_onnx))


@pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning")
def test_dynamo_failure_falls_back_to_torchscript_exporter(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = BranchyModel().eval()
    example = {"x": torch.rand(2, 4) + 0.1}  # positive sum: the traced branch
    with pytest.raises(ExportError) as excinfo:
        torch2onnx.export(
            model=model,
            example_inputs=example,
            output_path=tmp_path / "strict.onnx",
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}},
            allow_legacy_fallback=False,
        )
    message = str(excinfo.value)
    assert "BranchyModel" in message
    assert str(tmp_path / "strict.onnx") in message
    assert "dynamo exporter" in message
    assert not (tmp_path / "strict.onnx").exists()

    path = torch2onnx.export(
        model=model,
        example_inputs=example,
        output_path=tmp_path / "fallback.onnx",
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}},
    )
    assert _exporter(path) == "torchscript"
    x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(onnx_run.run_onnx(path, {"x": x})["y"], expected, atol=1e-5)


def test_export_rejects_dynamic_axis_of_example_size_one(cnn: TinyCNN, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"TinyCNN.*example size 1.*at least 2"):
        torch2onnx.export(
            model=cnn,
            example_inputs={"x": torch.randn(1, 1, 8, 8)},
            output_path=tmp_path / "cnn.onnx",
            output_names=["logits"],
            dynamic_axes={"x": {0: "batch"}},
        )
    with pytest.raises(ExportError, match="not an input"):
        torch2onnx.export(
            model=cnn,
            example_inputs={"x": torch.randn(2, 1, 8, 8)},
            output_path=tmp_path / "cnn.onnx",
            output_names=["logits"],
            dynamic_axes={"images": {0: "batch"}},
        )


# --------------------------------------------------------------------------------------------
# ONNX -> INT8
# --------------------------------------------------------------------------------------------


def test_bert_int8_is_smaller_runs_and_agrees(bert_onnx: Path, bert_int8: Path) -> None:
    fp32_size, int8_size = bert_onnx.stat().st_size, bert_int8.stat().st_size
    assert int8_size <= fp32_size
    ops = {node.op_type for node in onnx.load(str(bert_int8)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops

    inputs = _bert_inputs(200, 16, seed=7, pad=True)
    reference = onnx_run.run_onnx_batched(bert_onnx, inputs)
    candidate = onnx_run.run_onnx_batched(bert_int8, inputs, batch_size=64)
    result = verify.compare(
        reference=reference, candidate=candidate, label_output="logits", max_abs_diff=0.05, min_label_agreement=0.9
    )
    print(f"tiny bert: fp32 {fp32_size} bytes, int8 {int8_size} bytes; int8 vs fp32 {result.describe()}")
    verify.check(result, what="tiny bert int8 vs fp32", reproduce="pytest " + __file__)
    assert result.label_agreement is not None


def test_quantize_handles_dynamo_value_info_and_leaves_no_temp_files(bert_onnx: Path, tmp_path: Path) -> None:
    source_before = onnx.load(str(bert_onnx))
    assert len(source_before.graph.value_info) > 0, "dynamo graphs carry value_info: the gotcha's premise"
    digest = hashlib.sha256(bert_onnx.read_bytes()).hexdigest()
    temp_root = Path(tempfile.gettempdir())
    temp_before = set(temp_root.glob("fastpath-int8-*"))

    out = onnx2int8.quantize(
        source_path=bert_onnx, output_path=tmp_path / "nested" / "q.onnx", per_channel=True, op_types=["MatMul"]
    )

    assert out == tmp_path / "nested" / "q.onnx"
    assert sorted(p.name for p in out.parent.iterdir()) == ["q.onnx"]
    assert set(temp_root.glob("fastpath-int8-*")) == temp_before
    assert hashlib.sha256(bert_onnx.read_bytes()).hexdigest() == digest, "source must not change"
    onnx.checker.check_model(str(out))
    outputs = onnx_run.run_onnx(out, _bert_inputs(3, 11, seed=1))
    assert outputs["logits"].shape == (3, 2)


def test_quantize_reports_unreadable_source(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(ExportError, match=r"bad\.onnx"):
        onnx2int8.quantize(source_path=bad, output_path=tmp_path / "q.onnx")
    with pytest.raises(ExportError, match="no such file"):
        onnx2int8.quantize(source_path=tmp_path / "missing.onnx", output_path=tmp_path / "q.onnx")
    assert not (tmp_path / "q.onnx").exists()


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def test_check_names_thresholds_and_reproduce_command_when_parity_fails(cnn: TinyCNN, cnn_onnx: Path) -> None:
    perturbed = copy.deepcopy(cnn)
    with torch.no_grad():
        perturbed.fc.weight.add_(0.2 * torch.randn_like(perturbed.fc.weight))
    inputs = {"x": np.random.default_rng(3).standard_normal((100, 1, 8, 8)).astype(np.float32)}
    torch_out, onnx_out = onnx_run.run_torch_and_onnx(
        model=cnn, onnx_path=cnn_onnx, inputs=inputs, output_names=["logits"], batch_size=32
    )
    perturbed_out, _ = onnx_run.run_torch_and_onnx(
        model=perturbed, onnx_path=cnn_onnx, inputs=inputs, output_names=["logits"], batch_size=32
    )
    ok = verify.compare(
        reference=torch_out, candidate=onnx_out, label_output="logits", max_abs_diff=1e-4, min_label_agreement=1.0
    )
    verify.check(ok, what="cnn onnx vs torch", reproduce="unused")
    assert ok.passed and ok.n_samples == 100

    bad = verify.compare(
        reference=onnx_out,
        candidate=perturbed_out,
        label_output="logits",
        max_abs_diff=1e-5,
        min_label_agreement=0.999,
    )
    assert not bad.passed
    assert bad.describe().startswith("FAIL")
    reproduce = "python -m triton_fastpath.export.verify --reference a.onnx --candidate b.onnx --samples 100"
    with pytest.raises(VerificationError) as excinfo:
        verify.check(bad, what="perturbed cnn vs cnn", reproduce=reproduce)
    message = str(excinfo.value)
    assert "perturbed cnn vs cnn" in message
    assert "max_abs_diff=1e-05" in message
    assert "min_label_agreement=0.999" in message
    assert f"{bad.max_abs_diff:.6g}" in message
    assert message.endswith(reproduce)


def test_compare_is_plain_numpy() -> None:
    reference = {"logits": np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]), "aux": np.zeros((4, 3))}
    candidate = {"logits": np.array([[1.0, 0.5], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]), "aux": np.zeros((4, 3))}
    result = verify.compare(
        reference=reference, candidate=candidate, label_output="logits", max_abs_diff=2.0, min_label_agreement=0.7
    )
    assert result.label_agreement == pytest.approx(0.75)
    assert result.max_abs_diff == pytest.approx(1.0)
    assert result.mean_abs_diff == pytest.approx(2.5 / 20)
    assert result.n_samples == 4
    assert result.passed
    assert "PASS" in result.describe() and "0.75" in result.describe()

    strict = verify.compare(
        reference=reference, candidate=candidate, label_output="logits", max_abs_diff=2.0, min_label_agreement=0.8
    )
    assert not strict.passed

    no_labels = verify.compare(
        reference=reference, candidate=candidate, label_output=None, max_abs_diff=1.0, min_label_agreement=1.0
    )
    assert no_labels.label_agreement is None and no_labels.passed

    nan = {"logits": np.array([[np.nan, 0.0]]), "aux": np.zeros((1, 3))}
    ref1 = {"logits": np.array([[1.0, 0.0]]), "aux": np.zeros((1, 3))}
    assert not verify.compare(
        reference=ref1, candidate=nan, label_output=None, max_abs_diff=1e9, min_label_agreement=0
    ).passed

    with pytest.raises(VerificationError, match="lacks outputs"):
        verify.compare(
            reference=reference, candidate={"logits": candidate["logits"]}, label_output=None,
            max_abs_diff=1.0, min_label_agreement=0.0,
        )  # fmt: skip
    with pytest.raises(VerificationError, match="shape"):
        verify.compare(
            reference=ref1, candidate={"logits": np.zeros((2, 2)), "aux": np.zeros((1, 3))}, label_output=None,
            max_abs_diff=1.0, min_label_agreement=0.0,
        )  # fmt: skip


def test_verify_module_does_not_import_torch() -> None:
    code = (
        "import sys, triton_fastpath.export.verify, triton_fastpath.export.onnx_run; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    completed = subprocess.run([sys.executable, "-c", code], env=_env(), cwd=REPO_ROOT, check=False)
    assert completed.returncode == 0, "importing verify or onnx_run must not import torch"


def test_generate_inputs_reads_the_graph(bert_onnx: Path) -> None:
    assert export_inputs.infer_vocab_size(bert_onnx, "input_ids") == VOCAB
    inputs = export_inputs.generate_inputs(bert_onnx, samples=5, sequence_length=9, seed=1)
    assert inputs["input_ids"].shape == (5, 9) and inputs["input_ids"].dtype == np.int64
    assert inputs["input_ids"].min() >= 0 and inputs["input_ids"].max() < VOCAB
    assert (inputs["attention_mask"] == 1).all()


# --------------------------------------------------------------------------------------------
# Each step runs alone
# --------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_cli_steps_run_alone(cnn: TinyCNN, bert_onnx: Path, tmp_path: Path) -> None:
    for step in ("onnx", "int8", "verify"):
        completed = _run_cli(step, "--help")
        assert completed.returncode == 0, completed.stderr
        assert "usage:" in completed.stdout

    scripted = tmp_path / "cnn.pt"
    torch.jit.script(cnn).save(str(scripted))
    exported = tmp_path / "cnn.onnx"
    completed = _run_cli(
        "onnx",
        *("--model", str(scripted), "--output", str(exported)),
        *("--input-shape", "x=2x1x8x8", "--dtype", "float32", "--output-names", "logits"),
    )
    assert completed.returncode == 0, completed.stderr
    assert _exporter(exported) == "torchscript"
    assert _input_dims(exported) == {"x": ["batch", 1, 8, 8]}
    x = np.random.default_rng(5).standard_normal((5, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = cnn(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(onnx_run.run_onnx(exported, {"x": x})["logits"], expected, atol=1e-4)

    quantized = tmp_path / "bert.int8.onnx"
    completed = _run_cli("int8", "--source", str(bert_onnx), "--output", str(quantized))
    assert completed.returncode == 0, completed.stderr
    assert quantized.is_file()

    same = _run_cli(
        "verify",
        *("--reference", str(bert_onnx), "--candidate", str(bert_onnx), "--samples", "64"),
    )
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("PASS")

    strict = ["--reference", str(bert_onnx), "--candidate", str(quantized), "--samples", "64"]
    failed = _run_cli("verify", *strict, "--max-abs-diff", "1e-7")
    assert failed.returncode == 1
    assert "max_abs_diff=1e-07" in failed.stderr
    assert "Reproduce with:" in failed.stderr and "--max-abs-diff 1e-7" in failed.stderr


def test_cli_loads_a_pickled_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "configure_cli_logging", lambda verbose: None)  # keep pytest's logging
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).eval()
    pickled = tmp_path / "seq.pt"
    torch.save(model, str(pickled))
    out = tmp_path / "seq.onnx"
    rc = export_onnx.main(
        ["--model", str(pickled), "--output", str(out), "--input-shape", "input=2x6", "--output-names", "scores"]
    )
    assert rc == 0
    assert _exporter(out) == "dynamo"
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(onnx_run.run_onnx(out, {"input": x})["scores"], expected, atol=1e-5)
