"""The benchmark's load generator: which client each system gets in each view, what one request
puts on the wire, the generator's arguments (server trees metered, cores pinned) and the core split.
No server and no timing: the clients' costs are measured by `fastpath bench serving`, not here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.bench import loadgen
from triton_fastpath.bench.generation import (
    core_split,
    describe_cores,
    generator_for,
    load_args,
    view_label,
    views,
)
from triton_fastpath.bench.harness import BenchConfig, sweep_tag
from triton_fastpath.bench.launch import Running
from triton_fastpath.bench.senders import (
    PROTOCOLS,
    Generator,
    client_for,
    item_tensors,
    raw_contents,
    sdk_client_class,
    v2_json_inputs,
)
from triton_fastpath.bench.systems import default_systems
from triton_fastpath.cli import benchmark as cli
from triton_fastpath.errors import FastpathError

SYSTEMS = {s.key: s for s in default_systems()}
RUNNING = Running(url="127.0.0.1:8001", metrics_url="http://127.0.0.1:8002/metrics", pid=4242)


def _value(args: list[str], flag: str) -> list[str]:
    """The values that follow `flag` in a command line, up to the next flag."""
    start = args.index(flag) + 1
    end = next((i for i in range(start, len(args)) if args[i].startswith("--")), len(args))
    return args[start:end]


# --- which client -------------------------------------------------------------------------------


def test_the_lean_generator_is_the_default_and_writes_protobuf_for_grpc_and_one_aiohttp_post_for_http() -> None:
    assert BenchConfig().generators == (Generator.LEAN,)
    assert (
        loadgen.parser().parse_args(["--protocol", "grpc", "--url", "u", "--model", "m", "--inputs", "i"]).generator
        == "lean"
    )
    assert client_for("grpc", Generator.LEAN) == "raw protobuf on grpc.aio"
    assert client_for("http", Generator.LEAN) == "aiohttp KServe v2 JSON"
    assert client_for("grpc", Generator.TRITONCLIENT) == "tritonclient.grpc.aio"
    assert client_for("grpc", Generator.SDK) == "fastpath SDK (asyncio)"


def test_the_http_baselines_are_posted_to_the_same_way_by_every_generator_and_the_sdk_speaks_grpc_only() -> None:
    assert {client_for("naive", g) for g in Generator if g is not Generator.BLOCKING} == {"aiohttp JSON"}
    assert client_for("http", Generator.SDK) == "tritonclient.http.aio"
    with pytest.raises(ValueError, match="protocol 'smtp'"):
        client_for("smtp", Generator.LEAN)
    assert set(PROTOCOLS) == {"grpc", "http", "naive"}


def test_the_sdk_loads_ours_over_grpc_only_and_every_other_system_gets_the_lean_client() -> None:
    assert generator_for(SYSTEMS["ours-default"], Generator.SDK) is Generator.SDK
    for key in ("fastapi-ort", "fastapi-ort-2w", "mosec", "pytriton", "ours-http-int8"):
        assert generator_for(SYSTEMS[key], Generator.SDK) is Generator.LEAN, key
    for key in ("pytriton", "ours-default", "ours-http-int8"):  # tritonclient is a client of any Triton, kept
        assert generator_for(SYSTEMS[key], Generator.TRITONCLIENT) is Generator.TRITONCLIENT
    for key in ("naive", "fastapi-ort", "mosec"):  # their own endpoint: one aiohttp POST whatever the asyncio generator
        asyncio_generators = [g for g in Generator if g is not Generator.BLOCKING]
        assert {generator_for(SYSTEMS[key], g) for g in asyncio_generators} == {Generator.LEAN}, key


def test_a_further_generator_adds_a_view_only_where_it_changes_the_client() -> None:
    both = (Generator.LEAN, Generator.SDK)
    assert views(SYSTEMS["ours-default"], both) == [
        ("ours-default", Generator.LEAN),
        ("ours-default@sdk", Generator.SDK),
    ]
    assert views(SYSTEMS["fastapi-ort-2w"], both) == [("fastapi-ort-2w", Generator.LEAN)]  # no SDK: swept once
    every = tuple(g for g in Generator if g is not Generator.BLOCKING)
    assert [key for key, _ in views(SYSTEMS["mosec"], every)] == ["mosec"]  # the same aiohttp POST for all
    assert [key for key, _ in views(SYSTEMS["pytriton"], every)] == ["pytriton", "pytriton@tritonclient"]
    assert views(SYSTEMS["ours-default"], (Generator.LEAN,)) == [("ours-default", Generator.LEAN)]
    # the first view is the system's own key, whatever its client
    assert views(SYSTEMS["ours-default"], (Generator.SDK, Generator.LEAN)) == [
        ("ours-default", Generator.SDK),
        ("ours-default@lean", Generator.LEAN),
    ]
    assert view_label("ours", "grpc", Generator.SDK, first=True) == "ours"
    assert view_label("ours", "grpc", Generator.SDK, first=False) == "ours [load generator: fastpath SDK (asyncio)]"


def test_each_view_and_scenario_sends_texts_of_its_own() -> None:
    assert sweep_tag("unique") == "" and sweep_tag("mix") == "mix"
    tags = {sweep_tag(scenario, view) for scenario in ("unique", "mix") for view in ("", "sdk", "tritonclient")}
    assert tags == {"", "mix", "s", "smix", "t", "tmix"}
    assert sweep_tag("unique", "lean", "http") == "hl" and sweep_tag("mix", "", "http") == "hmix"


def test_a_system_sharing_a_server_with_another_sends_texts_of_its_own(monkeypatch) -> None:
    """ours-default-http shares ours-default's server (and its response cache): its texts are tagged."""
    from triton_fastpath.bench import harness

    sent: list[list[str]] = []
    monkeypatch.setattr(harness, "run_loadgen", lambda args, progress, timeout_s: sent.append(list(args)) or [])
    systems = {s.key: s for s in harness.default_systems()}
    config = BenchConfig(concurrency=(1,), repeat_ratio=0.0)

    def tag(key: str, shared: bool) -> str | None:
        sent.clear()
        system = systems[key.partition("@")[0]]
        list(harness._sweeps(system, key, [], "digits", config=config, number=0, progress=print, shared=shared))
        args = sent[0]
        return args[args.index("--tag") + 1] if "--tag" in args else None

    assert tag("ours-default", shared=False) is None
    assert tag("ours-default-http", shared=True) == "h"
    # every view of both systems on the one server: no two sweeps send the same texts (a run at
    # 09861b8 had ours-default@lean and ours-default-http@lean both tagged "l": the second half-cached)
    every = (Generator.LEAN, Generator.BLOCKING, Generator.SDK, Generator.TRITONCLIENT)
    seen: dict[str | None, str] = {}
    for key, shared in (("ours-default", False), ("ours-default-http", True)):
        for view, _ in views(systems[key], every):
            found = tag(view, shared)
            assert found not in seen, f"{view} and {seen.get(found)} send the same texts (tag {found!r})"
            seen[found] = view


def test_the_generated_sdk_client_is_found_by_model_and_a_model_without_one_is_named() -> None:
    from fastpath_models import AsyncDigitsClient, AsyncSentimentClient

    assert sdk_client_class("sentiment") is AsyncSentimentClient
    assert sdk_client_class("digits") is AsyncDigitsClient
    with pytest.raises(ValueError, match=r"no generated SDK for model 'minilm'.*fastpath clients generate"):
        sdk_client_class("minilm")


# --- what one request is ------------------------------------------------------------------------


def test_the_raw_grpc_sender_writes_the_bytes_tritonclient_writes() -> None:
    """The lean generator's gRPC requests carry what `tritonclient` would put on the wire."""
    from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

    assert triton_to_np_dtype("BYTES") == np.object_  # what the sender looks BYTES up as
    text = item_tensors("Ünïcode, a 4-byte prefix per element")
    assert list(text["text"].shape) == [1, 1]
    assert raw_contents(text["text"], np.object_) == serialize_byte_tensor(text["text"]).item()
    pixels = item_tensors(np.arange(64, dtype=np.float64).reshape(8, 8).tolist())["pixels"]
    assert raw_contents(pixels, np.float32) == np.arange(64, dtype=np.float32).reshape(1, 8, 8).tobytes()
    ids = item_tensors({"input_ids": [101, 7592, 102], "attention_mask": [1, 1, 1]})
    assert raw_contents(ids["input_ids"], np.int64) == np.array([[101, 7592, 102]], dtype=np.int64).tobytes()
    assert raw_contents(ids["attention_mask"], np.int32) == np.ones((1, 3), dtype=np.int32).tobytes()


def test_the_lean_http_sender_writes_kserve_v2_json_as_tritonclient_does_without_binary_data() -> None:
    from tritonclient.http import InferInput

    [text] = v2_json_inputs("Ünïcode", {"text": "BYTES"})
    tensor = InferInput("text", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([["Ünïcode".encode()]], dtype=object), binary_data=False)
    assert text == tensor._get_tensor()
    [pixels] = v2_json_inputs([[1.5] * 8] * 8, {"pixels": "FP32"})
    assert pixels["shape"] == [1, 8, 8] and pixels["datatype"] == "FP32" and len(pixels["data"]) == 64


# --- the generator's arguments, its cores --------------------------------------------------------


def test_load_args_name_the_client_the_server_trees_to_meter_and_the_cores() -> None:
    inputs = Path("inputs.json")
    args = load_args(SYSTEMS["ours-default"], RUNNING, "sentiment", inputs, generator=Generator.SDK, server_pids=(77,))
    assert _value(args, "--generator") == ["sdk"]
    assert _value(args, "--server-pid") == ["4242", "77"]  # the server, then its redis-server L2
    assert "--cores" not in args and _value(args, "--metrics-url") == [RUNNING.metrics_url]
    baseline = load_args(SYSTEMS["fastapi-ort"], RUNNING, "digits", inputs, generator=Generator.SDK, cores={3, 1})
    assert _value(baseline, "--generator") == ["lean"] and _value(baseline, "--cores") == ["1", "3"]
    unmetered = load_args(SYSTEMS["fastapi-ort"], dataclasses.replace(RUNNING, pid=0), "digits", inputs)
    assert "--server-pid" not in unmetered
    parsed = loadgen.parser().parse_args([*args[: args.index("--metrics-url")], "--cores", "1"])
    assert parsed.server_pid == [4242, 77] and parsed.cores == [1] and parsed.generator == "sdk"


def test_pinning_splits_the_usable_cores_in_halves_server_first_and_needs_two() -> None:
    assert core_split(False) is None
    two = core_split(True, [0, 1])
    assert (two.server, two.load) == ({0}, {1})
    four = core_split(True, [4, 5, 6, 7])
    assert (four.server, four.load) == ({4, 5}, {6, 7})
    with pytest.raises(FastpathError, match="--pin: needs at least 2 usable cores"):
        core_split(True, [0])
    assert describe_cores(two) == {
        "mode": "pinned: server on cores [0], load generator on cores [1]",
        "pinned": True,
        "server": [0],
        "generator": [1],
    }
    assert describe_cores(None, usable=2)["mode"] == "shared: every server and the load generator on the same 2 cores"


def test_the_load_generator_pins_itself_before_any_client_thread_starts(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(loadgen.os, "sched_setaffinity", lambda pid, cores: calls.append((pid, cores)))
    loadgen.pin_self([])
    assert calls == []
    loadgen.pin_self([1])
    assert calls == [(0, {1})]


def test_the_command_line_takes_several_generators_and_pin_and_a_pinned_run_publishes_apart(
    monkeypatch, tmp_path: Path
) -> None:
    seen = {}

    def run(config: BenchConfig, out: Path, progress) -> None:
        seen["config"] = config
        (out / "table.md").write_text("table")

    tmp_path.mkdir(exist_ok=True)
    monkeypatch.setattr(cli, "run_benchmark", run)
    monkeypatch.setattr(cli, "second_models", lambda *args: [])
    argv = ["--only", "ours-default", "--generator", "lean", "sdk", "lean", "--pin", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    config = seen["config"]
    assert config.generators == (Generator.LEAN, Generator.SDK) and config.pin
    assert cli.results_stem(False) == "benchmark" and cli.results_stem(True) == "benchmark-pinned"
    assert cli.results_stem(False, "benchmark-inline") == "benchmark-inline"
    with pytest.raises(FastpathError, match="plain name"):
        cli.results_stem(False, "../README")
    assert cli.main(["--publish-as", "benchmark-inline"]) == 2  # without --publish: refused at once
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--generator", "requests"])
