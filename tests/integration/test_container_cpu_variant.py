"""The container target's CPU variant, served for real the way the image serves it.

`fastpath deploy build-container --encoder-backend fastpath_ort` renders the container repository
with the encoders on the kit's native backend instead of TensorRT: the same configs otherwise (the
tokenize and label steps are fastpath_ort on both). Here it is served by the embedded tritonserver
started through the image's own entrypoint (deploy/triton/serve.py: the kit's two-tier cache from the
build's tritonserver.json, a Redis L2 with a password read from a secret file, the watchdog), and:

- no Python model sits on `sentiment`'s or `digits`' request path;
- `sentiment` answers exactly like the default build served beside it (label, probability,
  probabilities, truncated) on held-out texts, the seeded multilingual corpus and hostile texts, and
  fails the same requests; `digits` too;
- the kit's cache is the response cache, with Redis as its L2 (the password read from the file);
- a model that stops answering (embed's Python stub killed: Triton 2.51 keeps it READY) makes the
  entrypoint stop tritonserver and exit 1, which is what makes compose's restart policy fire.

What this cannot run here: the image build, TensorRT and the GPU (docs/deployment.md says so).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from tests.conftest import start_server
from triton_fastpath.paths import ROOT

pytestmark = pytest.mark.integration

ENTRYPOINT = ROOT / "deploy" / "triton" / "serve.py"
OUTPUTS = ["label", "probability", "probabilities", "truncated"]
PASSWORD = "s3cret-for-the-test"
# The watchdog's first probe comes one interval after ready: the comparisons run with none. A probe
# is a real inference with a fresh text, and the INT8 encoder quantizes activations with one scale
# per batch (docs/model-repository.md): a probe that shares a text's batch moves its probabilities
# (by 1e-5 to 2e-3 in earlier runs, when the fixture probed every second). Alone in its batch a
# text's answer is exact, so the comparisons below are exact.
NO_PROBE_S = 3600


@pytest.fixture(scope="module")
def cpu_variant(tmp_path_factory: pytest.TempPathFactory, built_repository: Path) -> Path:
    from triton_fastpath.config.service_levels import ServiceLevels
    from triton_fastpath.config.settings import RepoSettings, container_rendering
    from triton_fastpath.recipes.assemble import ContainerBuild
    from triton_fastpath.recipes.repository import build_repository

    root = tmp_path_factory.mktemp("container-cpu")
    settings = RepoSettings.tuned(service_levels=ServiceLevels.profile("default"), rendering=container_rendering())
    build_repository(
        repository=root / "model_repository",
        settings=settings,
        target="container",
        container=ContainerBuild(encoder_backend="fastpath_ort"),
        progress=print,
    )
    return root


def python_models_on_path(repository: Path, model: str) -> list[str]:
    from triton_fastpath.config.render import parse_pbtxt

    config = parse_pbtxt((repository / model / "config.pbtxt").read_text())
    if config.platform == "ensemble":
        return [
            m for step in config.ensemble_scheduling.step for m in python_models_on_path(repository, step.model_name)
        ]
    return [model] if config.backend == "python" else []


def test_no_python_model_on_sentiment_s_or_digits_request_path(cpu_variant: Path) -> None:
    from triton_fastpath.config.render import parse_pbtxt

    repository = cpu_variant / "model_repository"
    assert python_models_on_path(repository, "sentiment") == []
    assert python_models_on_path(repository, "digits") == []
    backends = {
        p.parent.name: (c.platform or c.backend)
        for p in repository.glob("*/config.pbtxt")
        for c in [parse_pbtxt(p.read_text())]
    }
    steps = ("sentiment_tokenizer", "sentiment_encoder", "sentiment_postprocess", "digits")
    assert {name: backends[name] for name in steps} == dict.fromkeys(steps, "fastpath_ort")
    settings = json.loads((cpu_variant / "tritonserver.json").read_text())
    assert settings["models"] == ["embed", "sentiment", "digits"]
    assert any(arg.startswith("fastpath,namespace=repo-") for arg in settings["cache_args"])


class Served:
    """tritonserver started by the image's entrypoint (serve.py) on free ports."""

    def __init__(
        self, repository: Path, settings: Path, work: Path, redis_url: str, password_file: Path, *, interval_s: float
    ) -> None:
        from triton_fastpath.serve.server import prepare_layout
        from triton_fastpath.serve.server_config import (
            ServerConfig,
            build_env,
            native_models,
            resolve_ports,
            to_args_list,
        )

        config = resolve_ports(
            ServerConfig(model_repository=repository, cache_size_bytes=0, http_port=0, grpc_port=0, metrics_port=0)
        )
        layout = prepare_layout(required_by=native_models(config), two_tier_cache=True)
        self.http_url = f"http://127.0.0.1:{config.http_port}"
        self.grpc = f"127.0.0.1:{config.grpc_port}"
        env = build_env(layout, os.environ, {})
        env.update(FASTPATH_REDIS_URL=redis_url, FASTPATH_REDIS_PASSWORD_FILE=str(password_file))
        env.pop("FASTPATH_REDIS_PASSWORD", None)
        self.log = (work / "serve.log").open("ab")
        command = [
            sys.executable,
            str(ENTRYPOINT),
            "--settings",
            str(settings),
            "--http-url",
            self.http_url,
            "--interval-s",
            str(interval_s),
            "--failures",
            "2",
            "--stop-timeout-s",
            "20",
            "--",
            *to_args_list(config, layout),
        ]
        self.process = subprocess.Popen(
            command, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.wait_ready(180)

    def wait_ready(self, timeout_s: float) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"serve.py exited {self.process.returncode}: {self.log_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"not ready in {timeout_s}s: {self.log_text()[-3000:]}")

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def redis_with_password(tmp_path_factory: pytest.TempPathFactory):
    from triton_fastpath.serve.redis_server import RedisServer

    folder = tmp_path_factory.mktemp("redis-auth")
    password_file = folder / "redis_password"
    password_file.write_text(PASSWORD + "\n")
    with RedisServer(password=PASSWORD) as redis:
        yield redis, password_file


@pytest.fixture(scope="module")
def both(cpu_variant: Path, built_repository: Path, redis_with_password, tmp_path_factory: pytest.TempPathFactory):
    redis, password_file = redis_with_password
    work = tmp_path_factory.mktemp("served")
    default = start_server(built_repository, work)
    try:
        container = Served(  # no watchdog probe during the comparisons: a probe would share a text's batch
            cpu_variant / "model_repository",
            cpu_variant / "tritonserver.json",
            work,
            redis.url,
            password_file,
            interval_s=NO_PROBE_S,
        )
        try:
            yield default, container, redis
        finally:
            container.stop()
    finally:
        default.stop()


def answer(client, model: str, inputs: dict[str, np.ndarray], outputs: list[str]):
    """(outputs, None) or (None, the error's status) for one request."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    try:
        result = client.infer(model, tensors, outputs=[grpcclient.InferRequestedOutput(n) for n in outputs])
    except InferenceServerException as error:
        return None, error.status()
    return {n: result.as_numpy(n) for n in outputs}, None


def texts_to_compare() -> list[bytes]:
    from triton_fastpath.export import multilingual_corpus
    from triton_fastpath.models import data as datasets
    from triton_fastpath.paths import BUILD_DIR

    held_out = list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:200])
    corpus = multilingual_corpus.corpus_texts(per_locale=10)  # 30 locales
    hostile = [*multilingual_corpus.hostile_texts(), "", "   \t", "word " * 5000]
    return [t.encode() for t in (*held_out, *corpus, *hostile)] + list(multilingual_corpus.invalid_utf8())


def test_sentiment_answers_exactly_like_the_default_build(both) -> None:
    import tritonclient.grpc as grpcclient

    default, container, _ = both
    texts = texts_to_compare()
    compared = failed = 0
    with (
        grpcclient.InferenceServerClient(default.grpc_url.removeprefix("grpc://")) as ours,
        grpcclient.InferenceServerClient(container.grpc) as theirs,
    ):
        for text in texts:
            inputs = {"text": np.array([[text]], dtype=object)}
            expected, expected_error = answer(ours, "sentiment", inputs, OUTPUTS)
            got, error = answer(theirs, "sentiment", inputs, OUTPUTS)
            assert error == expected_error, f"{text[:60]!r}: {error} vs the default build's {expected_error}"
            if expected is None:
                failed += 1
                continue
            compared += 1
            assert got["label"].tolist() == expected["label"].tolist(), text[:60]
            assert got["truncated"].tolist() == expected["truncated"].tolist(), text[:60]
            for name in ("probabilities", "probability"):
                np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-6, err_msg=repr(text[:60]))
    assert compared >= 500 and failed >= 5, (compared, failed)  # answers and refusals both compared


def test_digits_answers_exactly_like_the_default_build(both) -> None:
    import tritonclient.grpc as grpcclient

    from triton_fastpath.config.render import parse_pbtxt

    default, container, _ = both
    config = parse_pbtxt((ROOT / "model_repository" / "digits" / "config.pbtxt").read_text())
    name, dims = config.input[0].name, list(config.input[0].dims)
    outputs = [o.name for o in config.output]
    rng = np.random.default_rng(7)
    with (
        grpcclient.InferenceServerClient(default.grpc_url.removeprefix("grpc://")) as ours,
        grpcclient.InferenceServerClient(container.grpc) as theirs,
    ):
        for rows in (1, 5, 32):
            inputs = {name: rng.uniform(0, 16, size=(rows, *dims)).astype(np.float32)}
            expected, _ = answer(ours, "digits", inputs, outputs)
            got, error = answer(theirs, "digits", inputs, outputs)
            assert error is None
            for output in outputs:
                np.testing.assert_allclose(got[output], expected[output], rtol=0, atol=1e-6)


def test_the_kit_s_cache_answers_with_redis_as_its_l2_reached_with_the_password(both, cpu_variant: Path) -> None:
    """digits (fastpath_ort, response-cached) asked twice: the answer is in Redis under the
    repository's namespace, which the server reached with the password from the secret file."""
    import redis as redis_client
    import tritonclient.grpc as grpcclient

    _, container, redis = both
    settings = json.loads((cpu_variant / "tritonserver.json").read_text())
    namespace = next(a.split("=", 1)[1] for a in settings["cache_args"] if a.startswith("fastpath,namespace="))
    from triton_fastpath.config.render import parse_pbtxt

    config = parse_pbtxt((cpu_variant / "model_repository" / "digits" / "config.pbtxt").read_text())
    assert config.response_cache.enable
    inputs = {config.input[0].name: np.full((1, *config.input[0].dims), 3.0, np.float32)}
    with grpcclient.InferenceServerClient(container.grpc) as client:
        first, _ = answer(client, "digits", inputs, [o.name for o in config.output])
        second, _ = answer(client, "digits", inputs, [o.name for o in config.output])
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    store = redis_client.Redis(host="127.0.0.1", port=redis.port, password=PASSWORD)
    deadline = time.monotonic() + 10
    while not (keys := [k for k in store.keys("*") if namespace.encode() in k]) and time.monotonic() < deadline:
        time.sleep(0.2)  # the L2 write is queued off the request path
    assert keys, f"no Redis key under {namespace}: {store.keys('*')[:5]}"
    assert "--cache-config" not in " ".join(container.process.args[: container.process.args.index("--")])


def test_the_entrypoint_restarts_when_a_model_stops_answering(
    cpu_variant: Path, redis_with_password, tmp_path: Path
) -> None:
    """Its own entrypoint, probing every second (the comparisons' one never probes)."""
    redis, password_file = redis_with_password
    container = Served(
        cpu_variant / "model_repository",
        cpu_variant / "tritonserver.json",
        tmp_path,
        redis.url,
        password_file,
        interval_s=1,
    )
    try:
        _kill_embed_and_see_the_restart(container)
    finally:
        container.stop()


def _kill_embed_and_see_the_restart(container: Served) -> None:
    # only this container's stub: the session's own servers run embed_fused stubs too
    pids = [
        child.pid
        for child in psutil.Process(container.process.pid).children(recursive=True)
        if "triton_python_backend_stub" in " ".join(child.cmdline()) and "embed_fused" in " ".join(child.cmdline())
    ]
    assert pids, "embed_fused's Python stub is not running under the container's entrypoint"
    started = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    status = container.process.wait(timeout=90)
    log = container.log_text()
    assert status == 1, log[-2000:]
    assert "embed stopped answering: stopping tritonserver for a restart" in log
    assert time.monotonic() - started < 90
