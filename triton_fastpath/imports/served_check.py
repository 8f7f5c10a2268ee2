"""The imported model through a real tritonserver, checked against onnxruntime, before assembly.

The model's plan (with its steps, for a text pipeline: `config.repository_plan`) is written
alone into a temporary repository (so the check costs one model's load, not the whole
repository's), served by the embedded tritonserver on 127.0.0.1 free ports, sent the sample rows
in batches of at most `max_batch_size`, and stopped. Two kinds of check: the served answers equal
onnxruntime's on the served file (max|diff|: the wiring), and they agree with the source's
(labels, or an encoder's embeddings within a cosine) by a gate with power: the 95% Wilson lower
bound of agreement at least 99% (`recipes.gates`), so the rows sent are at least
`SERVED_MIN_ROWS` (callers top a small sample up: `imports.eval_corpus.topped_up` for texts,
generated rows for an ONNX file). With label names, Triton's classification extension is asked
for the top class of every row: the names must come back.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.repository_plan import RepositoryPlan
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.engine.pipeline import Step
from triton_fastpath.errors import VerificationError
from triton_fastpath.imports.checks import Check, GateCheck, ImportThresholds, Samples, agreeing, diff_check
from triton_fastpath.imports.int8_gate import cosines
from triton_fastpath.recipes.gates import AgreementGate

SERVED_ROWS = 2048  # the most rows the served check sends
SERVED_MIN_ROWS = 512  # a sample smaller than a 99% bound needs (381) is topped up to this many


@dataclass(frozen=True)
class ServedCheck:
    """The served check as a step of an import's recipe (its `run` in `engine.pipeline.Declared`),
    before the user's repository is touched: skipped when not `enabled` (--no-serve-check); else
    `checks()`, each through `verdict` (printed, kept in the report); the first failure stops the
    import of `model`."""

    model: str
    enabled: bool
    checks: Callable[[], Sequence[Check]]
    verdict: Callable[[Check], Check]

    def __call__(self, step: Step) -> None:
        if not self.enabled:
            step.skip("--no-serve-check")
            return
        checks = self.checks()
        for check in checks:
            if not self.verdict(check).passed:
                raise VerificationError(f"{self.model}: the served model failed its check: {check.describe()}")
        step.done(f"{len(checks)} checks through a real tritonserver")


def in_served_batches(
    specs: Sequence[ModelSpec],
    model: str,
    *,
    target: Target | str,
    texts: Sequence[str],
    encoder,
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """`run(ids, mask)` over `texts` in the batches the served check sends (`max_batch_size` rows
    in order, each padded to its longest; a Python model running the encoder in process splits a
    batch into its length buckets): dynamic INT8 quantises activations per batch tensor, so a row's
    INT8 output depends on the batch it travels in (up to 0.02 in probability, measured)."""
    from fastpath_backends.batch import run_by_length
    from triton_fastpath.config.render import LENGTH_BUCKET_PARAMETER, python_adapter

    step = max(1, next(s for s in specs if s.name == model).max_batch_size)
    buckets = max(
        (
            int(s.parameters[LENGTH_BUCKET_PARAMETER])
            for s in specs
            if python_adapter(s, as_target(target)) and LENGTH_BUCKET_PARAMETER in s.parameters
        ),
        default=0,
    )
    parts = []
    for start in range(0, len(texts), step):
        encoded = encoder.encode(list(texts[start : start + step]))
        parts.append(np.asarray(run_by_length(run, encoded.input_ids, encoded.attention_mask, buckets)))
    return np.concatenate(parts)


def _label_of(entry: bytes | str) -> str:
    """The label of a classification entry `score:index:label` (Triton's classification extension)."""
    text = entry.decode() if isinstance(entry, bytes) else str(entry)
    return text.split(":", 2)[-1]


def _infer(url: str, spec: ModelSpec, rows: Samples, label_output: str | None) -> tuple[dict, list[str]]:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    outputs: dict[str, list[np.ndarray]] = {t.name: [] for t in spec.outputs}
    top: list[str] = []
    step = max(1, spec.max_batch_size)
    with grpcclient.InferenceServerClient(url) as client:
        for start in range(0, rows.n, step):
            request = []
            for name, array in rows.inputs.items():
                chunk = np.ascontiguousarray(array[start : start + step])
                tensor = grpcclient.InferInput(name, list(chunk.shape), np_to_triton_dtype(chunk.dtype))
                tensor.set_data_from_numpy(chunk)
                request.append(tensor)
            wanted = [grpcclient.InferRequestedOutput(t.name) for t in spec.outputs]
            result = client.infer(spec.name, request, outputs=wanted, client_timeout=60)
            for t in spec.outputs:
                outputs[t.name].append(result.as_numpy(t.name))
            if label_output and spec.labels:
                classes = [grpcclient.InferRequestedOutput(label_output, class_count=1)]
                answer = client.infer(spec.name, request, outputs=classes, client_timeout=60).as_numpy(label_output)
                top += [_label_of(row[0]) for row in answer.reshape(len(answer), -1)]
    return {k: np.concatenate(v) for k, v in outputs.items()}, top


def check_served(
    plan: RepositoryPlan,
    model: str,
    *,
    samples: Samples,
    expected: Mapping[str, np.ndarray],
    label_output: str | None,
    label_names: Sequence[str],
    thresholds: ImportThresholds,
    progress: Callable[[str], None] = print,
    source: Mapping[str, np.ndarray] | None = None,
) -> list[Check | GateCheck]:
    """Serve `plan` alone (written as it is, `recipes.assemble.write_plan`) and compare `model`'s
    answers on up to `SERVED_ROWS` sample rows with `expected` (onnxruntime on the served file) and
    with `source` (the source's outputs on the same rows: FP32; default `expected`).

    Returns the checks: max|diff| against `expected`; a gate on agreement with `source` (labels of
    `label_output`, or, without one, per-row cosine >= `thresholds.served_min_cosine` of each
    output `source` holds); the label names Triton returns. None for the container target, whose
    server (the NGC image) is not here: that is said, not skipped silently.
    """
    from triton_fastpath.recipes.assemble import write_plan
    from triton_fastpath.serve.server import triton_on_free_ports

    spec = plan.spec(model)
    if plan.target is not Target.EMBEDDED:
        progress(f"{spec.name}: served check not run: the container target needs the NGC tritonserver (not here)")
        return []
    rows = samples.head(SERVED_ROWS)
    progress(f"{spec.name}: checking the served model through tritonserver on {rows.n} rows")
    with tempfile.TemporaryDirectory(prefix=f"served-{spec.name}-") as tmp:
        repository = Path(tmp) / "repository"
        write_plan(plan, repository)
        with triton_on_free_ports(repository, Path(tmp) / "logs") as server:
            served, top = _infer(server.grpc_url, spec, rows, label_output)
    reference = {k: np.asarray(v)[: rows.n] for k, v in expected.items()}
    checks: list[Check | GateCheck] = [
        diff_check("served vs onnxruntime max|diff|", reference, served, thresholds.served_rel_diff, rows.n)
    ]
    origin = reference if source is None else {k: np.asarray(v)[: rows.n] for k, v in source.items()}
    if label_output:
        agree, n = agreeing(origin[label_output], served[label_output])
        gate = AgreementGate("served labels vs the source", thresholds.served_min_lower_bound)
        checks.append(GateCheck(gate.judge(agree, n)))
    elif source is not None:  # an encoder: its embeddings, within a cosine of the source's
        for name, values in origin.items():
            same = cosines(values, served[name]) >= thresholds.served_min_cosine
            what = f"served {name} vs the source (cosine >= {thresholds.served_min_cosine:g})"
            gate = AgreementGate(what, thresholds.served_min_lower_bound)
            checks.append(GateCheck(gate.judge(int(same.sum()), len(same))))
    if top:
        wanted = [label_names[i] for i in np.argmax(reference[label_output], axis=-1)]
        same = float(np.mean([a == b for a, b in zip(top, wanted, strict=True)]))
        checks.append(
            Check("label names from Triton (class_count=1)", same, 1.0, at_least=True, detail=f"e.g. {top[:3]}")
        )
    return checks
