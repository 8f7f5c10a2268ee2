"""After assembly, the imported model through a real tritonserver, checked against onnxruntime.

The model (with its steps, for a text pipeline) is assembled alone into a temporary
repository (so the check costs one model's load, not the whole repository's), served by the
embedded tritonserver on 127.0.0.1 free ports, sent the sample rows in batches of at most
`max_batch_size`, and stopped. With label names, Triton's
classification extension is asked for the top class of every row: the names must come back.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from triton_fastpath.build.pipeline import Pipeline
from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.errors import VerificationError
from triton_fastpath.imports.checks import Check, ImportThresholds, Samples, agreement, diff_check

SERVED_ROWS = 64


def served_step(
    pipeline: Pipeline, enabled: bool, run: Callable[[], Sequence[Check]], verdict: Callable[[Check], Check]
) -> None:
    """The served check as a step of an import's `pipeline`, before the user's repository is
    touched: skipped when not `enabled` (--no-serve-check); else `run()`, each check through
    `verdict` (printed, kept in the report), the first failure stops the import."""
    with pipeline.step("served check") as step:
        if not enabled:
            step.skip("--no-serve-check")
            return
        checks = run()
        for check in checks:
            if not verdict(check).passed:
                raise VerificationError(
                    f"{pipeline.model}: the served model disagrees with onnxruntime: {check.describe()}"
                )
        step.done(f"{len(checks)} checks through a real tritonserver")


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
    specs: Sequence[ModelSpec],
    model: str,
    *,
    files: Mapping[str, Sequence[Path]],
    warmups: Mapping[str, Mapping[str, np.ndarray]],
    samples: Samples,
    expected: Mapping[str, np.ndarray],
    label_output: str | None,
    label_names: Sequence[str],
    thresholds: ImportThresholds,
    target: Target | str,
    progress: Callable[[str], None] = print,
) -> list[Check]:
    """Serve `specs` alone and compare `model`'s answers on up to 64 sample rows with `expected` (onnxruntime).

    Returns the checks (max|diff|, label agreement, the label names Triton returns); none for the
    container target, whose server (the NGC image) is not here: that is said, not skipped silently.
    """
    from triton_fastpath.build.assemble import assemble
    from triton_fastpath.serve.server import triton_on_free_ports

    spec = next(s for s in specs if s.name == model)
    if as_target(target) is not Target.EMBEDDED:
        progress(f"{spec.name}: served check not run: the container target needs the NGC tritonserver (not here)")
        return []
    rows = samples.head(SERVED_ROWS)
    progress(f"{spec.name}: checking the served model through tritonserver on {rows.n} rows")
    with tempfile.TemporaryDirectory(prefix=f"served-{spec.name}-") as tmp:
        repository = Path(tmp) / "repository"
        assemble(list(specs), repository, target=target, files=files, warmup_samples=warmups)
        with triton_on_free_ports(repository, Path(tmp) / "logs") as server:
            served, top = _infer(server.grpc_url, spec, rows, label_output)
    reference = {k: np.asarray(v)[: rows.n] for k, v in expected.items()}
    checks = [diff_check("served vs onnxruntime max|diff|", reference, served, thresholds.served_rel_diff, rows.n)]
    if label_output:
        checks.append(
            Check(
                "served label agreement",
                agreement(reference[label_output], served[label_output]),
                thresholds.served_min_label_agreement,
                at_least=True,
            )
        )
    if top:
        wanted = [label_names[i] for i in np.argmax(reference[label_output], axis=-1)]
        same = float(np.mean([a == b for a, b in zip(top, wanted, strict=True)]))
        checks.append(
            Check("label names from Triton (class_count=1)", same, 1.0, at_least=True, detail=f"e.g. {top[:3]}")
        )
    return checks
