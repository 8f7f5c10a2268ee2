"""The 'graph' rendering served for real: `sentiment` as one native model, text in, label out
(fastpath_ort tokenizing each text with the exact C++ WordPiece tokenizer, then the post graph:
encoder + head, ids in; no onnxruntime-extensions op), behind the one-step ensemble when rendered
for Triton's own response cache
("wrapped") and answering as `sentiment` itself without a response cache ("direct"); every test runs
on both. (With the kit's two-tier cache, the default build, it answers as `sentiment` itself with
its cache on: tests/integration/test_default_build_served.py.) Compared with the
two-step path in process (`tokenizers` + the INT8 encoder, each batch padded to its longest text) on
the held-out set, with bad texts failing alone, truncation reported, and no Python process anywhere
in the server.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import infer, served_settings, start_server
from triton_fastpath.paths import BUILD_DIR, backends_importable

pytestmark = pytest.mark.integration

ONNX_DIR = BUILD_DIR / "sentiment" / "onnx"
OUTPUTS = ["label", "probability", "probabilities", "truncated"]
BATCH = 16


@pytest.fixture(scope="module", params=["wrapped", "direct"])
def graph_server(request, built_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    from triton_fastpath.recipes.repository import variant_repository

    if not (ONNX_DIR / "post.int8.onnx").exists():
        pytest.fail(f"{ONNX_DIR / 'post.int8.onnx'} was not built: the build makes the C++ text path (see its output)")
    work = tmp_path_factory.mktemp("graph")
    wrapped = request.param == "wrapped"  # rendered for Triton's local cache: the wrapper keeps errors out
    settings = served_settings(rendering="graph", cache=False, response_cache=wrapped, response_cache_kind="local")
    repository = variant_repository(settings, work / "repository", only=("sentiment",))
    server = start_server(repository, work)
    try:
        yield server, repository
    finally:
        server.stop()


def url(server) -> str:
    return server.grpc_url.removeprefix("grpc://")


def ask(server, texts: list[str | bytes]) -> dict:
    raw = [t.encode() if isinstance(t, str) else t for t in texts]
    return infer(url(server), "sentiment", {"text": np.array([[t] for t in raw], dtype=object)}, OUTPUTS)


def test_the_graph_rendering_is_one_native_model_and_no_python_process(graph_server):
    from triton_fastpath.config.render import parse_pbtxt

    server, repository = graph_server
    top = parse_pbtxt((repository / "sentiment" / "config.pbtxt").read_text())
    wrapped = top.platform == "ensemble"
    # rendered for Triton's local cache: the native model may not cache itself (local would keep its
    # errors) and a 4-output ensemble may not either (the cache key ignores the requested outputs),
    # so neither is cached (docs/known-issues.md)
    assert not top.response_cache.enable
    graph = "sentiment_graph" if wrapped else "sentiment"
    assert (repository / "sentiment_graph").exists() == wrapped
    config = parse_pbtxt((repository / graph / "config.pbtxt").read_text())
    assert config.backend == "fastpath_ort"
    # the C++ tokenizer reads the model's own tokenizer.json; no custom-op library, no op in the graph
    assert config.parameters["text_tokenizer"].string_value == "tokenizer.json"
    assert (repository / graph / "1" / "tokenizer.json").is_file()
    assert "custom_op_library" not in config.parameters
    assert not (repository / graph / "libortextensions.so").exists()
    assert (repository / "sentiment" / "labels.txt").read_text().split() == ["negative", "positive"]
    ask(server, ["warm"])
    children = subprocess.run(  # exits 1 when there is no child at all
        ["ps", "-o", "args=", "--ppid", str(server.pid)], check=False, capture_output=True, text=True
    )
    assert "python_backend_stub" not in children.stdout, children.stdout


def test_held_out_labels_and_probabilities_equal_the_two_step_path(graph_server):
    import onnxruntime as ort

    from triton_fastpath.models import data as datasets

    backends_importable()
    from fastpath_backends.text import TextEncoder

    server, repository = graph_server
    texts = list(datasets.load_sentiment(BUILD_DIR / "data").test.x)
    encoder = TextEncoder(ONNX_DIR / "tokenizer.json", served_settings().max_length)  # batch-longest
    session = ort.InferenceSession(str(ONNX_DIR / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    labels = (repository / "sentiment" / "labels.txt").read_text().split()
    worst, flips = 0.0, 0
    for start in range(0, len(texts), BATCH):  # one request at a time: each request is its own batch
        batch = texts[start : start + BATCH]
        served = ask(server, batch)
        tokens = encoder.encode(batch)
        expected = session.run(
            ["probabilities"], {"input_ids": tokens.input_ids, "attention_mask": tokens.attention_mask}
        )[0]
        worst = max(worst, float(np.abs(served["probabilities"] - expected).max()))
        flips += int((served["probabilities"].argmax(1) != expected.argmax(1)).sum())
        assert (served["truncated"].ravel() == tokens.truncated.ravel()).all()
        assert [x.decode() for x in served["label"].ravel()] == [labels[i] for i in expected.argmax(1)]
    print(f"graph vs two-step on {len(texts)} held-out texts: max|diff| {worst:.2e}, label flips {flips}")
    assert flips == 0
    assert worst <= 1e-5


def test_truncation_is_reported_as_the_python_tokenizer_reports_it(graph_server):
    server, _ = graph_server
    many_tokens = " ".join(["wonderful"] * 300)
    # one 3,000-character word: 3 tokens, but cut to 2,048 characters first, as the Python path does
    long_word = "a" * 3000
    out = ask(server, [many_tokens, "short and sweet", long_word])
    assert out["truncated"].ravel().tolist() == [True, False, True]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"", "empty or whitespace only"),
        (b"   \t ", "empty or whitespace only"),
        (b"\xff\xfe broken", "not valid UTF-8"),
        (b"nul \x00 inside", "NUL byte"),
        (b"x" * 1_000_001, "the limit is 1000000 bytes"),
    ],
    ids=["empty", "whitespace", "bad-utf8", "nul", "huge"],
)
def test_a_bad_text_gets_a_clear_error_and_fails_alone(graph_server, text: bytes, message: str):
    from fastpath_client.errors import InvalidInput

    server, _ = graph_server
    good = ["a warm and funny film", "a dull, lifeless mess", "fine"]

    def send(item):
        try:
            return ask(server, [item])
        except InvalidInput as error:
            return error

    with ThreadPoolExecutor(8) as pool:  # sent together, so they may share a batch
        results = list(pool.map(send, [*good, text, *good]))
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1 and message in str(errors[0]), [str(e) for e in errors]
    assert all(r["label"].shape == (1, 1) for r in results if not isinstance(r, Exception))
