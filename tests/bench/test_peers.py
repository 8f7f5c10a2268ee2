"""The benchmark's peers, mosec and LitServe, started for real from their own venv for a second or
two each: they answer the same probabilities as onnxruntime in this process (same INT8 file, same
tokenization at natural length), refuse an empty text, and their whole process tree (front end and
both workers) is what the CPU per request counts. The venv is created on first use (pip, about
15 s); the tests are skipped, saying so, only when it cannot be (no network to the package registry).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.bench import peers
from triton_fastpath.bench.fastapi_ort_server import classify, load_session, load_tokenizer
from triton_fastpath.bench.harness import default_systems
from triton_fastpath.bench.launch import start_system
from triton_fastpath.bench.server_cpu import descendants, process_table, tree_cpu_seconds
from triton_fastpath.bench.systems import PEER_KINDS
from triton_fastpath.errors import ProcessError
from triton_fastpath.paths import BUILD_DIR

pytestmark = pytest.mark.integration
TEXTS = ["the plot drags and the jokes fall flat", "a small gem: warm, sharp and honest", "fine."]
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def peers_python() -> Path:
    try:
        return peers.install()
    except ProcessError as error:
        pytest.skip(f"the peers' venv cannot be created (no network to the package registry?): {error}")


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://{url}/v1/sentiment", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with _DIRECT.open(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, {}


@pytest.mark.parametrize("kind", PEER_KINDS)
def test_a_peer_answers_like_onnxruntime_in_process_and_its_tree_is_counted(
    kind: str, peers_python: Path, built_repository: Path, tmp_path: Path
) -> None:
    onnx = BUILD_DIR / "sentiment" / "onnx"
    session, tokenizer = load_session(onnx / "model.int8.onnx"), load_tokenizer(onnx / "tokenizer.json")
    system = next(s for s in default_systems() if s.key == kind)
    with start_system(system, tmp_path, timeout_s=120) as running:
        for text in TEXTS:  # one at a time: a batch of one, as the in-process call
            status, body = _post(running.url, {"text": text})
            expected = classify(session, tokenizer, [text])[0]
            assert status == 200, f"{kind}: HTTP {status}"
            np.testing.assert_allclose(body["probabilities"], expected, atol=1e-6)
            assert body["label"] in ("negative", "positive") and body["probability"] == pytest.approx(expected.max())
        assert 400 <= _post(running.url, {"text": "  "})[0] < 500
        tree = descendants(process_table(), running.pid)
        assert len(tree) >= 1 + system.workers, f"{kind}: the tree {sorted(tree)} lacks its workers"
        assert tree_cpu_seconds(running.pid) > 0
    assert not descendants(process_table(), running.pid), f"{kind}: processes left after the stop"
