"""The bad-input matrix: every kind of bad request, for every model, through the server and the SDK.

A `Case` says what to send and what must come back: an answer, or an error of a given class
whose message matches a pattern that names the problem. `server` cases go through a plain
tritonclient channel, so the server's own checks answer; `sdk` cases go through the generated
clients (`clients/fastpath_models/`), whose checks may answer first, as an application would see it.
After each case the server must still be live and answer a good request (`healthy`), and
`run_batch_mates` sends the bad requests together with good ones inside one batching window:
every good one must be answered.

    results = run_matrix(grpc_url, metrics_url)     # one ScenarioResult per case, plus batch-mates
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fastpath_client.errors import ClientError, ServerError, map_exception
from fastpath_models import DigitsClient, EmbedClient, SentimentClient
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.load import parse_metric, scrape_metrics
from triton_fastpath.reliability.report import ScenarioResult, Tally

# An empty text's refusal, as the Python tokenizer words it ("text[0] is empty") and as the
# native backend's text checks do (the default build's text graph: "element 0 is empty").
EMPTY_TEXT = r"text\[{i}\] is empty|element {i} is empty"
__all__ = ["CASES", "Case", "cases_for", "run_batch_mates", "run_case", "run_matrix"]

TEXT_MODELS = ("sentiment", "embed")
MODELS = (*TEXT_MODELS, "digits")
OUTPUTS = {"sentiment": ["label", "probability", "truncated"], "embed": ["embedding"], "digits": ["label"]}
SDK_CLIENTS = {"sentiment": SentimentClient, "embed": EmbedClient, "digits": DigitsClient}
GRPC_LIMIT_BYTES = 1 << 20  # the send limit of the `grpc size` case's channel (a gateway's, say)
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Case:
    """One bad (or borderline) input.

    Attributes:
        name: what is wrong, e.g. "wrong dtype".
        models: the models it applies to.
        path: "server" (plain tritonclient) or "sdk" (generated client).
        build: `build(model)` returns the inputs: `{name: array}` for "server", rows for "sdk".
        expect: the error class name expected, or "ok" for an answer.
        pattern: a regular expression the error message must match (case-insensitive).
        version: the model version to ask for ("" = the server's policy).
        model_override: send to this model name instead (unknown model).
        repeat: send the same request twice and judge the second answer (response cache).
    """

    name: str
    models: tuple[str, ...]
    path: str
    build: Callable[[str], Any]
    expect: str
    pattern: str = ""
    version: str = ""
    model_override: str = ""
    repeat: bool = False


def _text(*rows: bytes) -> dict[str, np.ndarray]:
    return {"text": np.array([[r] for r in rows], dtype=object)}


def _good(model: str) -> dict[str, np.ndarray]:
    if model == "digits":
        return {"pixels": np.random.default_rng().uniform(0, 16, (1, 8, 8)).astype(np.float32)}
    return _text(f"a good film, request {time.perf_counter_ns()}".encode())


def _wrong_dtype(model: str) -> dict[str, np.ndarray]:
    if model == "digits":
        return {"pixels": np.zeros((1, 8, 8), np.float64)}
    return {"text": np.zeros((1, 1), np.int32)}


def _wrong_shape(model: str) -> dict[str, np.ndarray]:
    if model == "digits":
        return {"pixels": np.zeros((1, 9, 9), np.float32)}
    return {"text": np.array([[b"two", b"columns"]], dtype=object)}


def _extra(model: str) -> dict[str, np.ndarray]:
    return {**_good(model), "bogus": np.zeros((1, 1), np.float32)}


def _batch(model: str, n: int) -> dict[str, np.ndarray]:
    if model == "digits":
        return {"pixels": np.random.default_rng(n).uniform(0, 16, (n, 8, 8)).astype(np.float32)}
    return {"text": np.array([[f"text {i}".encode()] for i in range(n)], dtype=object).reshape(n, 1)}


def _pixels_with(value: float) -> Callable[[str], np.ndarray]:
    def build(_: str) -> np.ndarray:
        image = np.random.default_rng().uniform(0, 16, (2, 8, 8)).astype(np.float32)  # fresh: no cache hit
        image[1, 3, 3] = value
        return image

    return build


ALL, TEXT, DIGITS = MODELS, TEXT_MODELS, ("digits",)
BIG_TEXT = b"x" * 3_000_000
CASES: tuple[Case, ...] = (
    # through the server's own checks (plain tritonclient)
    Case("wrong dtype", ALL, "server", _wrong_dtype, "InvalidInput", r"data-?type|TYPE_|FP64|INT32"),
    Case("wrong shape", ALL, "server", _wrong_shape, "InvalidInput", r"shape"),
    Case("missing input", ALL, "server", lambda m: {}, "InvalidInput", r"expected 1 inputs? but got 0|missing"),
    Case("extra input", ALL, "server", _extra, "InvalidInput", r"bogus"),
    Case("empty batch", ALL, "server", lambda m: _batch(m, 0), "InvalidInput", r"batch|shape|size|empty|elements"),
    Case("batch over max_batch_size", ALL, "server", lambda m: _batch(m, 65), "InvalidInput", r"batch.?size.*64"),
    Case("empty text", TEXT, "server", lambda m: _text(b""), "InvalidInput", EMPTY_TEXT.format(i=0)),
    Case("whitespace-only text", TEXT, "server", lambda m: _text(b" \t\n "), "InvalidInput", EMPTY_TEXT.format(i=0)),
    Case("100k-character text", TEXT, "server", lambda m: _text(b"what a film " * 8400), "ok"),
    Case("non-UTF-8 bytes", TEXT, "server", lambda m: _text(b"caf\xe9 \xff"), "InvalidInput", r"not valid UTF-8"),
    Case("NUL bytes", TEXT, "server", lambda m: _text(b"nul\x00byte"), "InvalidInput", r"NUL (character|byte)"),
    Case("3 MB text (over the 1 MB cap)", TEXT, "server", lambda m: _text(BIG_TEXT), "InvalidInput", r"1,?000,?000"),
    Case("NaN pixels", DIGITS, "server", lambda m: {"pixels": _pixels_with(np.nan)(m)}, "InvalidInput", r"NaN or Inf"),
    Case("Inf pixels", DIGITS, "server", lambda m: {"pixels": _pixels_with(np.inf)(m)}, "InvalidInput", r"NaN or Inf"),
    Case(
        "same bad request twice",
        ALL,
        "server",
        lambda m: _text(b"") if m != "digits" else {"pixels": _pixels_with(np.nan)(m)},
        "InvalidInput",
        r"empty|NaN or Inf",
        repeat=True,
    ),
    Case(
        "unknown model",
        ("sentiment",),
        "server",
        _good,
        "ModelUnavailable",
        r"no_such_model",
        model_override="no_such_model",
    ),
    Case("unknown version", ALL, "server", _good, "ModelUnavailable", r"version", version="7"),
    Case(
        "message over the gRPC size limit",
        ALL,
        "server",
        lambda m: (
            _text(b"y" * (2 * GRPC_LIMIT_BYTES)) if m != "digits" else {"pixels": np.zeros((5000, 8, 8), np.float32)}
        ),
        "InvalidInput",
        r"larger than max",
    ),
    # through the generated SDK (its own checks answer first where it has them)
    Case("sdk: wrong type", TEXT, "sdk", lambda m: [42], "InvalidInput", r"row 0: expected"),
    Case(
        "sdk: wrong shape",
        DIGITS,
        "sdk",
        lambda m: np.zeros((2, 9, 9), np.float32),
        "InvalidInput",
        r"shape \[N, 8, 8\]",
    ),
    Case("sdk: empty list", ALL, "sdk", lambda m: [], "InvalidInput", r"empty|at least one|no rows"),
    Case(
        "sdk: 65 rows (split into 2 requests)",
        ALL,
        "sdk",
        lambda m: [f"t{i}" for i in range(65)] if m != "digits" else np.ones((65, 8, 8), np.float32),
        "ok",
    ),
    Case("sdk: empty text", TEXT, "sdk", lambda m: ["fine", ""], "InvalidInput", EMPTY_TEXT.format(i=1)),
    Case("sdk: non-UTF-8 bytes", TEXT, "sdk", lambda m: [b"caf\xe9"], "InvalidInput", r"UTF-8"),
    Case("sdk: NUL bytes", TEXT, "sdk", lambda m: ["a\x00b"], "InvalidInput", r"NUL"),
    Case("sdk: NaN pixels", DIGITS, "sdk", _pixels_with(np.nan), "InvalidInput", r"row 1 contains NaN or Inf"),
    Case(
        "sdk: unknown version",
        ALL,
        "sdk",
        lambda m: ["hello"] if m != "digits" else np.ones((1, 8, 8)),
        "ModelUnavailable",
        r"version",
        version="7",
    ),
)


def cases_for(model: str, cases: Sequence[Case] = CASES) -> list[Case]:
    """The cases that apply to `model`."""
    return [case for case in cases if model in case.models]


def _server_send(url: str, case: Case, model: str) -> object:
    options = [("grpc.max_send_message_length", GRPC_LIMIT_BYTES)] if "gRPC size" in case.name else None
    client = grpcclient.InferenceServerClient(url, channel_args=options)
    try:
        arrays = case.build(model)
        if case.repeat:  # the first answer is not judged; the same bytes go again
            with contextlib.suppress(ClientError):
                _infer(client, case, model, arrays)
        return _infer(client, case, model, arrays)
    finally:
        client.close()


def _infer(client: grpcclient.InferenceServerClient, case: Case, model: str, arrays: dict[str, np.ndarray]) -> object:
    """One request; a mapped ClientError on failure, and ServerError for an answer without outputs."""
    inputs = []
    for name, array in arrays.items():
        datatype = (
            "BYTES"
            if array.dtype == object
            else {"float32": "FP32", "float64": "FP64", "int32": "INT32"}[str(array.dtype)]
        )
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(o) for o in OUTPUTS[model]]
    target = case.model_override or model
    try:
        result = client.infer(target, inputs, model_version=case.version, outputs=outputs, client_timeout=TIMEOUT_S)
    except InferenceServerException as error:
        raise map_exception(error, target) from error
    missing = [o for o in OUTPUTS[model] if result.as_numpy(o) is None]
    if missing:
        raise ServerError(f"{target}: an answer without the outputs {missing} (a cached error?)", model=target)
    return result


def _sdk_send(url: str, case: Case, model: str) -> object:
    sdk = SDK_CLIENTS[model]
    with sdk(url, timeout_s=TIMEOUT_S, model_version=case.version, model_name=case.model_override or None) as client:
        call = client.predict if model == "embed" else client.classify
        return call(case.build(model))


def healthy(url: str, model: str) -> bool:
    """The server is live, `model` is ready, and a good request to it is answered."""
    client = grpcclient.InferenceServerClient(url)
    try:
        if not (client.is_server_live(client_timeout=10) and client.is_model_ready(model, client_timeout=10)):
            return False
        good = Case("good", (model,), "server", _good, "ok")
        _server_send(url, good, model)
        return True
    except (InferenceServerException, ClientError):
        return False
    finally:
        client.close()


def run_case(url: str, case: Case, model: str) -> ScenarioResult:
    """Send one case to `model`; PASS when the expected answer/error came and the server stays healthy."""
    tally = Tally()
    tally.sent()
    started = time.perf_counter()
    got: BaseException | None = None
    try:
        (_server_send if case.path == "server" else _sdk_send)(url, case, model)
    except ClientError as error:
        got = error
    except Exception as error:  # anything else is a defect of the client or the case: counted, shown
        got = error
    tally.done(time.perf_counter() - started, got)
    if case.expect == "ok":
        passed, note = got is None, "answered" if got is None else ""
    else:
        name = type(got).__name__ if got is not None else "an answer"
        matched = got is not None and name == case.expect and re.search(case.pattern, str(got), re.I | re.S)
        passed = bool(matched)
        note = "" if passed else f"expected {case.expect} matching /{case.pattern}/, got {name}"
    is_healthy = healthy(url, model)
    if not is_healthy:
        note = f"{note}; server NOT healthy afterwards".lstrip("; ")
    return tally.result(f"bad input [{case.path}] {model}: {case.name}", passed=passed and is_healthy, note=note)


def run_batch_mates(url: str, metrics_url: str, model: str, *, good_per_bad: int = 1) -> ScenarioResult:
    """Send every server-path bad case of `model` at once, interleaved with good requests.

    Run it against a server with a long batching window (e.g. 200 ms) so they share batches;
    PASS when every good request is answered, every bad one fails, and fewer executions than
    requests ran (they were batched).
    """
    bad = [c for c in cases_for(model) if c.path == "server" and c.expect != "ok" and not c.version]
    bad = [c for c in bad if not c.model_override and not c.repeat and "gRPC size" not in c.name]
    jobs: list[Case] = []
    for case in bad:
        jobs.append(case)
        jobs += [Case("good", (model,), "server", _good, "ok")] * good_per_bad
    tally = Tally()
    barrier = threading.Barrier(len(jobs))
    wrong: list[str] = []

    def one(case: Case) -> None:
        barrier.wait(timeout=30)
        tally.sent()
        started = time.perf_counter()
        try:
            _server_send(url, case, model)
        except Exception as error:  # counted; a good request that fails is the defect looked for
            tally.done(time.perf_counter() - started, error)
            if case.expect == "ok":
                wrong.append(f"a good request failed: {error}")
            return
        tally.done(time.perf_counter() - started)
        if case.expect != "ok":
            wrong.append(f"{case.name} was answered")

    metric = "nv_inference_exec_count"
    text = scrape_metrics(metrics_url)
    # The first step that executes the batch: the fused model, or the tokenizer of an ensemble.
    members = PipelineMembers(model)
    steps = [members.fused, members.tokenizer, model]
    step = next((s for s in steps if f'{metric}{{model="{s}",' in text), model)
    before = parse_metric(text, metric, model=step)
    threads = [threading.Thread(target=one, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    executions = parse_metric(scrape_metrics(metrics_url), metric, model=step) - before
    goods = sum(1 for j in jobs if j.expect == "ok")
    passed = not wrong and tally.ok == goods
    note = f"{len(bad)} bad + {goods} good requests at once; {step} ran {executions:.0f} executions"
    if wrong:
        note += "; " + "; ".join(wrong[:3])
    return tally.result(
        f"batch-mates {model}: good requests beside bad ones",
        passed=passed,
        note=note,
        figures={"executions": executions, "good": goods, "bad": len(bad)},
    )


def run_matrix(
    url: str,
    metrics_url: str | None = None,
    *,
    models: Sequence[str] = MODELS,
    progress: Callable[[str], None] = lambda _: None,
) -> list[ScenarioResult]:
    """Every case for every model (and the batch-mates check when `metrics_url` is given)."""
    results = []
    for model in models:
        for case in cases_for(model):
            result = run_case(url, case, model)
            progress(f"{result.verdict} {result.scenario}")
            results.append(result)
        if metrics_url:
            result = run_batch_mates(url, metrics_url, model)
            progress(f"{result.verdict} {result.scenario}")
            results.append(result)
    return results
