"""The blocking load generator (`--generator blocking`): a thread per request in flight, each with a
blocking client of its own, for every system (the HTTP baselines included). Against real servers: the
session's tritonserver (gRPC and KServe v2 JSON) and the FastAPI + onnxruntime baseline, started as a
process; each blocking client answers what the asyncio generator's client answers, and the load
generator measures a level with it. No timing is asserted."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.bench import loadgen
from triton_fastpath.bench.blocking import blocking_client
from triton_fastpath.bench.generation import generator_for, view_label, views
from triton_fastpath.bench.launch import python_process
from triton_fastpath.bench.senders import Generator, client_for, make_sender
from triton_fastpath.bench.systems import default_systems
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.processes import free_port

SYSTEMS = {s.key: s for s in default_systems()}
TEXTS = ["a moving, beautifully acted and funny film", "dull, and far too long", "Ein wunderbarer Film, éclatant"]
IMAGE = [[float((row * 8 + column) % 16) for column in range(8)] for row in range(8)]


def test_the_blocking_generator_loads_every_system_the_baselines_own_endpoint_too() -> None:
    for key in ("fastapi-ort", "fastapi-ort-2w", "mosec", "naive", "ours-default", "ours-default-http", "pytriton"):
        assert generator_for(SYSTEMS[key], Generator.BLOCKING) is Generator.BLOCKING, key
    assert client_for("naive", Generator.BLOCKING) == "http.client JSON, a thread each"
    assert client_for("http", Generator.BLOCKING) == "http.client KServe v2 JSON, a thread each"
    assert client_for("grpc", Generator.BLOCKING) == "raw protobuf on a blocking grpc stub, a thread each"
    # a second view for every system: the baselines' aiohttp POST and the blocking client differ
    both = (Generator.LEAN, Generator.BLOCKING)
    assert views(SYSTEMS["fastapi-ort-2w"], both) == [
        ("fastapi-ort-2w", Generator.LEAN),
        ("fastapi-ort-2w@blocking", Generator.BLOCKING),
    ]
    assert view_label("FastAPI", "naive", Generator.BLOCKING, first=False) == (
        "FastAPI [load generator: http.client JSON, a thread each]"
    )


def test_the_blocking_generator_has_no_asyncio_sender_and_runs_closed_loops_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="blocking generator has no asyncio sender"):
        asyncio.run(make_sender("grpc", Generator.BLOCKING, "127.0.0.1:1", "sentiment", 1))
    with pytest.raises(ValueError, match="protocol 'smtp'"):
        blocking_client("smtp", "127.0.0.1:1", "sentiment")
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"sentiment": TEXTS}))
    argv = ["--protocol", "grpc", "--url", "127.0.0.1:1", "--model", "sentiment", "--inputs", str(inputs)]
    with pytest.raises(SystemExit, match="closed loops only"):
        loadgen.main([*argv, "--generator", "blocking", "--rate", "100"])


def _asyncio_scores(protocol: str, url: str, model: str, items: list) -> list:
    async def ask() -> list:
        send, close = await make_sender(protocol, Generator.LEAN, url, model, 1)
        try:
            return [await send(item) for item in items]
        finally:
            await close()

    return asyncio.run(ask())


def _blocking_scores(protocol: str, url: str, model: str, items: list) -> list:
    client = blocking_client(protocol, url, model)()
    try:
        return [client.send(item) for item in items]
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_each_blocking_triton_client_answers_what_the_asyncio_client_answers(triton, protocol: str) -> None:
    url = triton.grpc_url if protocol == "grpc" else triton.http_url
    for model, items in (("sentiment", TEXTS), ("digits", [IMAGE])):
        found = _blocking_scores(protocol, url, model, items)
        expected = _asyncio_scores(protocol, url, model, items)
        assert len(found) == len(items) and all(len(row) == len(expected[0]) for row in found)
        np.testing.assert_allclose(found, expected, rtol=0, atol=1e-6)  # JSON carries floats as text
    with pytest.raises(Exception, match="empty or whitespace only") as refused:  # the server's refusal, named
        _blocking_scores(protocol, url, "sentiment", ["   "])
    assert "HTTP 400" in str(refused.value) if protocol == "http" else "INVALID_ARGUMENT" in str(refused.value)


def test_the_load_generator_measures_a_level_with_blocking_threads(triton, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"sentiment": [f"{text} {n}" for n in range(400) for text in TEXTS]}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        loadgen.main(
            [
                *("--protocol", "grpc", "--url", triton.grpc_url, "--model", "sentiment", "--inputs", str(inputs)),
                *("--generator", "blocking", "--concurrency", "2", "--predict", "2", "--tag", "blocking-test"),
                *("--warmup-s", "0.2", "--window-s", "0.3", "--max-windows", "4", "--server-pid", str(triton.pid)),
            ]
        )
    predictions, row = (json.loads(line) for line in out.getvalue().splitlines())
    assert len(predictions["predictions"]) == 2 and all(len(p) == 2 for p in predictions["predictions"])
    assert row["generator"] == "blocking" and row["client"] == client_for("grpc", Generator.BLOCKING)
    assert row["concurrency"] == 2 and row["errors"] == 0 and row["requests"] > 0
    assert row["server_cpu_s"] > 0 and row["generator_cpu_s"] > 0  # both trees metered over the windows


BASELINE_BUILT = (BUILD_DIR / "sentiment" / "onnx" / "model.int8.onnx").is_file()


@pytest.mark.skipif(not BASELINE_BUILT, reason="build/ has no built sentiment model; run `fastpath build`")
def test_the_blocking_client_posts_the_fastapi_baseline_as_the_asyncio_client_does(tmp_path: Path) -> None:
    port = free_port()
    args = ["triton_fastpath.bench.fastapi_ort_server", "--port", str(port), "--workers", "1", "--ort-threads", "1"]
    with python_process(args, tmp_path / "fastapi.log", f"http://127.0.0.1:{port}/health", 120):
        url = f"127.0.0.1:{port}"
        found = _blocking_scores("naive", url, "sentiment", TEXTS)
        np.testing.assert_allclose(found, _asyncio_scores("naive", url, "sentiment", TEXTS), rtol=0, atol=0)
        with pytest.raises(RuntimeError, match="HTTP 400"):
            _blocking_scores("naive", url, "sentiment", ["  "])
