"""fastpath_ort behind a response cache: the stored answer is the whole answer, and never a partial one.

Triton 2.51 keys a cached response by model, version, input names and input bytes, not by the outputs
a request asked for. So a `fastpath_ort` model with `response_cache { enable: true }` writes every
output into every response, and one without it writes only what was asked (no work nobody asked for).

One server (the kit's two-tier cache, L1 only, as `fastpath serve` picks it for these models) serves
two models with several outputs, each twice: cached, and the same graph uncached as the reference a
fresh, uncached model gives. `trio` is a tiny graph with three outputs (doubled, total, top: exact
in FP32); `digits` is the built CNN (probabilities, label). For each way of asking (every non-empty
subset of the outputs in every order, and none = all), a fresh input is asked that way first (a
miss: that request fills the cache), then in every way again (L1 hits); every answer must hold each
output it asked for, equal to the uncached model's. A request whose last output cannot be written (a
client shared-memory region too small for it) fails whole: its error response carries no outputs, so
the cache stores nothing and the next request for that input is a miss answered in full.
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import metric_value, start_server
from tests.integration.test_native_backend import config_text, digits_onnx, digits_rows
from triton_fastpath.reliability.cache_trust import ask_present as ask

pytestmark = pytest.mark.integration

TRIO = ["doubled", "total", "top"]  # in the configuration's order: `top` is written last
DIGITS = ["probabilities", "label"]
TRIO_TENSORS = (
    'input { name: "x" data_type: TYPE_FP32 dims: [4] }',
    'output { name: "doubled" data_type: TYPE_FP32 dims: [4] }\n'
    'output { name: "total" data_type: TYPE_FP32 dims: [1] }\n'
    'output { name: "top" data_type: TYPE_INT64 dims: [1] }',
)
DIGITS_TENSORS = (
    'input { name: "pixels" data_type: TYPE_FP32 dims: [8, 8] }',
    'output { name: "probabilities" data_type: TYPE_FP32 dims: [10] }\n'
    'output { name: "label" data_type: TYPE_INT64 dims: [1] }',
)
CACHED = "response_cache { enable: true }\n"
RNG = np.random.default_rng()


def write_trio_graph(path: Path) -> Path:
    """x float[N, 4] -> doubled = 2x [N, 4], total = sum(x) [N, 1], top = argmax(x) int64 [N, 1]."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["doubled"]),
            helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=1),
            helper.make_node("ArgMax", ["x"], ["top"], axis=1, keepdims=1),
        ],
        "trio",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [
            helper.make_tensor_value_info("doubled", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, ["n", 1]),
            helper.make_tensor_value_info("top", TensorProto.INT64, ["n", 1]),
        ],
        initializer=[
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    repository = tmp_path_factory.mktemp("cached-outputs") / "repository"
    trio = write_trio_graph(repository.parent / "trio.onnx")
    models = {}
    for name, (inputs, outputs), graph in (("trio", TRIO_TENSORS, trio), ("digits", DIGITS_TENSORS, digits_onnx())):
        for served, cache in ((name, CACHED), (f"{name}_uncached", "")):
            models[served] = (config_text(served, inputs=inputs, outputs=outputs) + cache, graph)
    for name, (config, graph) in models.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config)
        shutil.copy(graph, repository / name / "1" / "model.onnx")
    return repository


@pytest.fixture(scope="module")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory):
    server = start_server(repository, tmp_path_factory.mktemp("cached-outputs-logs"))
    try:
        yield server
    finally:
        server.stop()


def orders(names: list[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of `names` in every order, then () for 'none named' (= all)."""
    return [*(p for k in range(1, len(names) + 1) for p in itertools.permutations(names, k)), ()]


def cache_counts(server) -> tuple[float, float]:
    """(misses, L1 hits) of the kit's response cache so far."""
    misses = metric_value(server.metrics_url, "fastpath_response_cache_misses_total")
    return misses, metric_value(server.metrics_url, "fastpath_response_cache_hits_total", tier="l1")


def trio_input() -> dict[str, np.ndarray]:
    return {"x": RNG.integers(-1000, 1000, size=(1, 4)).astype(np.float32)}  # exact sums in FP32


def digits_input() -> dict[str, np.ndarray]:
    row = digits_rows(1, seed=int(RNG.integers(1 << 30)))
    return {"pixels": row + np.float32(RNG.integers(1, 1 << 16)) / np.float32(1 << 20)}  # an input of its own


def check(answer: dict, wanted: tuple[str, ...], reference: dict, names: list[str], where: str) -> None:
    for name in wanted or names:
        assert name in answer, f"{where}: asked {list(wanted)}, got only {sorted(answer)}"
    assert sorted(answer) == sorted(names), f"{where}: a cached model's response holds {sorted(answer)}"
    for name in names:
        np.testing.assert_array_equal(answer[name], reference[name], err_msg=f"{where}: output {name}")


def test_the_server_serves_these_models_behind_the_kits_cache(server) -> None:
    assert server.config.response_cache == "fastpath"
    log = server.log_path.read_text()
    for model in ("trio", "digits"):
        assert f"fastpath_ort model '{model}': onnxruntime" in log
    assert log.count("response cache on: every response carries every output") == 2, "only the cached models"


@pytest.mark.parametrize(("model", "names"), [("trio", TRIO), ("digits", DIGITS)])
def test_every_way_of_asking_gets_the_uncached_answer_from_a_miss_and_from_l1(server, model, names) -> None:
    make_input = trio_input if model == "trio" else digits_input
    for first in orders(names):
        inputs = make_input()
        reference = ask(server.grpc_url, f"{model}_uncached", inputs, ())
        assert sorted(reference) == sorted(names)
        misses, hits = cache_counts(server)
        check(ask(server.grpc_url, model, inputs, first), first, reference, names, f"miss asking {list(first)}")
        assert cache_counts(server) == (misses + 1, hits), f"asking {list(first)} first was not one miss"
        for wanted in orders(names):
            answer = ask(server.grpc_url, model, inputs, wanted)
            check(answer, wanted, reference, names, f"L1 hit asking {list(wanted)}, filled by {list(first)}")
        assert cache_counts(server) == (misses + 1, hits + len(orders(names))), "every later request an L1 hit"


@pytest.mark.parametrize(("model", "names"), [("trio_uncached", TRIO), ("digits_uncached", DIGITS)])
def test_without_the_cache_only_the_requested_outputs_are_written(server, model, names) -> None:
    inputs = trio_input() if model.startswith("trio") else digits_input()
    reference = ask(server.grpc_url, model, inputs, ())
    for wanted in orders(names)[:-1]:
        answer = ask(server.grpc_url, model, inputs, wanted)
        assert sorted(answer) == sorted(wanted), f"asked {list(wanted)}, the response holds {sorted(answer)}"
        for name in wanted:
            np.testing.assert_array_equal(answer[name], reference[name])


def test_a_request_whose_last_output_cannot_be_written_fails_whole_and_nothing_is_cached(server) -> None:
    """`top` (8 bytes) is asked into a client shared-memory region of 4: Triton's front end refuses its
    buffer after `doubled` and `total` went into the response. The request fails; its error response
    carries no outputs, so the cache refuses it (never stores an error or a partial answer), and the
    next request for the same input is a miss answered with every output."""
    import tritonclient.grpc as grpcclient
    import tritonclient.utils.shared_memory as shm
    from tritonclient.utils import InferenceServerException

    inputs = trio_input()
    reference = ask(server.grpc_url, "trio_uncached", inputs, ())
    region, key = f"fastpath_small_{uuid.uuid4().hex[:8]}", f"/fastpath_small_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region(region, key, 4)
    refused = metric_value(server.metrics_url, "fastpath_response_cache_refused_total", reason="error_response")
    misses, hits = cache_counts(server)
    try:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.register_system_shared_memory(region, key, 4)
            try:
                tensor = grpcclient.InferInput("x", [1, 4], "FP32")
                tensor.set_data_from_numpy(inputs["x"])
                top = grpcclient.InferRequestedOutput("top")
                top.set_shared_memory(region, 4)
                outputs = [grpcclient.InferRequestedOutput("doubled"), grpcclient.InferRequestedOutput("total"), top]
                with pytest.raises(InferenceServerException, match="should be at least 8 bytes"):
                    client.infer("trio", [tensor], outputs=outputs, client_timeout=30)
            finally:
                client.unregister_system_shared_memory(region)
    finally:
        shm.destroy_shared_memory_region(handle)
    assert cache_counts(server) == (misses + 1, hits)
    assert (
        metric_value(server.metrics_url, "fastpath_response_cache_refused_total", reason="error_response")
        == refused + 1
    ), "the failed request's response reached the cache with no outputs, and was refused"
    answer = ask(server.grpc_url, "trio", inputs, ("top",))
    check(answer, ("top",), reference, TRIO, "the request after the failed one")
    assert cache_counts(server) == (misses + 2, hits), "nothing was stored for the failed request: a miss again"
