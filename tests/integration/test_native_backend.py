"""The native onnxruntime backend (native/fastpath_ort) in the embedded tritonserver.

One server serves: `digits` (the built CNN) on the native backend; `ragged`, a tiny graph whose
ids/mask rows have their own lengths (padded per batch, outputs trimmed back); `tokens`, a text
model (`text_tokenizer`: the backend tokenizes each text with the C++ WordPiece tokenizer and feeds
the graph ids, mask and token types; it writes `truncated` itself); and, where
onnxruntime-extensions is installed, `strings`, a graph of custom string ops (BYTES in and out,
the op library registered with libpython preloaded). Outputs are compared with onnxruntime in
process (exact for FP32); faults fail only their own request; a fuzz run of a few thousand
malformed requests leaves the server up with every request answered.
"""

from __future__ import annotations

import concurrent.futures
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from fastpath_client.errors import ClientError, InvalidInput
from tests.conftest import infer, metric, metric_value, start_server

pytestmark = pytest.mark.integration

MAX_SEQUENCE_LENGTH = 16
BATCHING_DELAY_US = 20000  # long enough that concurrent requests share a batch


def config_text(
    name: str,
    *,
    inputs: str,
    outputs: str,
    max_batch_size: int = 64,
    parameters: dict | None = None,
    delay_us: int = 0,
    instances: int = 1,
) -> str:
    params = {"intra_op_threads": "1", **(parameters or {})}
    rendered = "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    return (
        f'name: "{name}"\nbackend: "fastpath_ort"\nmax_batch_size: {max_batch_size}\n{inputs}\n{outputs}\n'
        f"instance_group {{ count: {instances} kind: KIND_CPU }}\n"
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n{rendered}"
    )


def write_ragged_graph(path: Path) -> Path:
    """ids, mask int64[N, L] -> masked = ids * mask [N, L]; total = sum(masked) [N, 1]; scaled float."""
    import onnx
    from onnx import TensorProto, helper

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["ids", "mask"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "axes"], ["total"], keepdims=1),
            helper.make_node("Cast", ["masked"], ["masked_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["masked_f", "half"], ["scaled"]),
        ],
        "ragged",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", "l"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["n", "l"]),
        ],
        [
            helper.make_tensor_value_info("masked", TensorProto.INT64, ["n", "l"]),
            helper.make_tensor_value_info("total", TensorProto.INT64, ["n", 1]),
            helper.make_tensor_value_info("scaled", TensorProto.FLOAT, ["n", "l"]),
        ],
        initializer=[axes, half],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def write_strings_graph(path: Path) -> Path:
    """text string[N, 1] -> upper (StringUpper), length (StringLength), custom ops of onnxruntime-extensions."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("StringUpper", ["text"], ["upper"], domain="ai.onnx.contrib"),
            helper.make_node("StringLength", ["text"], ["length"], domain="ai.onnx.contrib"),
        ],
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["n", 1])],
        [
            helper.make_tensor_value_info("upper", TensorProto.STRING, ["n", 1]),
            helper.make_tensor_value_info("length", TensorProto.INT64, ["n", 1]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


TOKENS_MAX_LENGTH = 8
TOKENS_CUT_CHARS = 64
TOKENS_CORPUS = [
    "A clichés-ridden movie, but the cast is naïve and charming.",
    "Über-stylish and hollow; the director's best work since 1999!",
    "电影很好 and the soundtrack is great.",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň. Tiếng Việt có dấu.",
    "Ελληνικά και русский текст, 日本語のテキスト.",
]


def write_tokenizer(path: Path) -> Path:
    """A tiny BERT WordPiece tokenizer.json (BertNormalizer, BertPreTokenizer, [CLS] $A [SEP]); its
    [PAD] is not id 0, so padding with the wrong id would show."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer()
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    tokenizer.train_from_iterator(TOKENS_CORPUS * 3, trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials))
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    tokenizer.save(str(path))
    return path


def write_tokens_graph(path: Path) -> Path:
    """input_ids, attention_mask, token_type_ids int64[N, L] -> ids (the ids as fed) [N, L], length
    (sum of the mask) [N, 1], types (sum of the token types) [N, 1]."""
    import onnx
    from onnx import TensorProto, helper

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["input_ids"], ["ids"]),
            helper.make_node("ReduceSum", ["attention_mask", "axes"], ["length"], keepdims=1),
            helper.make_node("ReduceSum", ["token_type_ids", "axes"], ["types"], keepdims=1),
        ],
        "tokens",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["n", "l"])
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", "l"]),
            helper.make_tensor_value_info("length", TensorProto.INT64, ["n", 1]),
            helper.make_tensor_value_info("types", TensorProto.INT64, ["n", 1]),
        ],
        initializer=[axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def digits_onnx() -> Path:
    """The built digits FP32 graph (built now if the repository was never built here)."""
    from triton_fastpath.paths import BUILD_DIR

    path = BUILD_DIR / "digits" / "onnx" / "model.onnx"
    if not path.exists():
        from triton_fastpath.recipes.repository import build_repository

        build_repository(only=("digits",), progress=print)
    return path


@pytest.fixture(scope="module")
def native_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("native") / "repository"
    models = {}
    models["digits"] = (
        config_text(
            "digits",
            inputs='input { name: "pixels" data_type: TYPE_FP32 dims: [8, 8] }',
            outputs='output { name: "probabilities" data_type: TYPE_FP32 dims: [10] }\n'
            'output { name: "label" data_type: TYPE_INT64 dims: [1] }',
            instances=2,
        ),
        digits_onnx(),
    )
    models["ragged"] = (
        config_text(
            "ragged",
            inputs='input { name: "ids" data_type: TYPE_INT64 dims: [-1] allow_ragged_batch: true }\n'
            'input { name: "mask" data_type: TYPE_INT64 dims: [-1] allow_ragged_batch: true }',
            outputs='output { name: "masked" data_type: TYPE_INT64 dims: [-1] }\n'
            'output { name: "total" data_type: TYPE_INT64 dims: [1] }\n'
            'output { name: "scaled" data_type: TYPE_FP32 dims: [-1] }',
            parameters={"max_sequence_length": MAX_SEQUENCE_LENGTH, "ragged_outputs": "masked,scaled"},
            delay_us=BATCHING_DELAY_US,
        ),
        write_ragged_graph(repository.parent / "ragged.onnx"),
    )
    # the same graph as the kit renders its native encoders: batches run in length buckets of 2 rows
    # (sorted by length, each Run padded only to its own longest), ids and mask required equally long
    models["ragged_bucketed"] = (
        config_text(
            "ragged_bucketed",
            inputs='input { name: "ids" data_type: TYPE_INT64 dims: [-1] allow_ragged_batch: true }\n'
            'input { name: "mask" data_type: TYPE_INT64 dims: [-1] allow_ragged_batch: true }',
            outputs='output { name: "masked" data_type: TYPE_INT64 dims: [-1] }\n'
            'output { name: "total" data_type: TYPE_INT64 dims: [1] }\n'
            'output { name: "scaled" data_type: TYPE_FP32 dims: [-1] }',
            parameters={
                "max_sequence_length": MAX_SEQUENCE_LENGTH,
                "ragged_outputs": "masked,scaled",
                "length_bucket_rows": 2,
                "ragged_lengths_agree": "true",
            },
            delay_us=BATCHING_DELAY_US,
        ),
        models["ragged"][1],
    )
    models["tokens"] = (
        config_text(
            "tokens",
            inputs='input { name: "text" data_type: TYPE_STRING dims: [1] }',
            outputs='output { name: "ids" data_type: TYPE_INT64 dims: [-1] }\n'
            'output { name: "length" data_type: TYPE_INT64 dims: [1] }\n'
            'output { name: "types" data_type: TYPE_INT64 dims: [1] }\n'
            'output { name: "truncated" data_type: TYPE_BOOL dims: [1] }',
            parameters={
                "text_tokenizer": "tokenizer.json",
                "max_length": TOKENS_MAX_LENGTH,
                "cut_string_chars": TOKENS_CUT_CHARS,
                "cut_flag_output": "truncated",
                "reject_blank_strings": "true",
                "max_string_bytes": 100_000,
                "ragged_outputs": "ids",
                "length_bucket_rows": 2,
            },
            delay_us=BATCHING_DELAY_US,
        ),
        write_tokens_graph(repository.parent / "tokens.onnx"),
    )
    if _has_extensions():
        import onnxruntime_extensions as extensions

        models["strings"] = (
            config_text(
                "strings",
                inputs='input { name: "text" data_type: TYPE_STRING dims: [1] }',
                outputs='output { name: "upper" data_type: TYPE_STRING dims: [1] }\n'
                'output { name: "length" data_type: TYPE_INT64 dims: [1] }',
                parameters={"custom_op_library": extensions.get_library_path()},
                delay_us=BATCHING_DELAY_US,
            ),
            write_strings_graph(repository.parent / "strings.onnx"),
        )
        # a second custom-op model, loaded by Triton at the same time: registering the op library
        # concurrently once failed one of them ("the domain is already exist"); the backend now
        # serialises it across models (an flock on the repository folder)
        models["strings_twin"] = (
            models["strings"][0].replace('name: "strings"', 'name: "strings_twin"'),
            models["strings"][1],
        )
    for name, (config, graph) in models.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config)
        shutil.copy(graph, repository / name / "1" / "model.onnx")
    write_tokenizer(repository / "tokens" / "1" / "tokenizer.json")
    return repository  # no backend in a model folder: the server installs it in its backend directory


def _has_extensions() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime_extensions") is not None


@pytest.fixture(scope="module")
def server(native_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    server = start_server(native_repository, tmp_path_factory.mktemp("native-logs"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def digits_session():
    import onnxruntime as ort

    return ort.InferenceSession(str(digits_onnx()), providers=["CPUExecutionProvider"])


def digits_rows(n: int, seed: int = 0) -> np.ndarray:
    from triton_fastpath.models.data import load_digits_dataset

    x = np.asarray(load_digits_dataset().test.x, dtype=np.float32)
    return x[np.random.default_rng(seed).choice(len(x), n, replace=n > len(x))]


DIGITS_OUTPUTS = ["probabilities", "label"]


def test_the_backend_is_installed_once_in_the_servers_backend_directory(server, native_repository):
    library = server.layout.native_library
    assert library is not None and library.parent.parent == server.layout.backends_dir
    assert library.name == "libtriton_fastpath_ort.so" and library.parent.name == "fastpath_ort"
    assert (library.parent / "libonnxruntime.so").resolve().is_file()
    assert not list(native_repository.glob("*/libtriton_fastpath_ort.so")), "model folders hold no backend"
    log = server.log_path.read_text()
    assert "fastpath_ort model 'digits': onnxruntime" in log


def test_digits_single_rows_equal_onnxruntime_in_process_exactly(server, digits_session):
    rows = digits_rows(200)
    for row in rows:
        got = infer(server.grpc_url, "digits", {"pixels": row[None]}, DIGITS_OUTPUTS)
        want = digits_session.run(DIGITS_OUTPUTS, {"pixels": row[None]})
        assert np.array_equal(got["probabilities"], want[0])
        assert np.array_equal(got["label"], want[1])


def test_digits_batch_of_64_equals_onnxruntime_exactly(server, digits_session):
    rows = digits_rows(64, seed=1)
    got = infer(server.grpc_url, "digits", {"pixels": rows}, DIGITS_OUTPUTS)
    want = digits_session.run(DIGITS_OUTPUTS, {"pixels": rows})
    assert np.array_equal(got["probabilities"], want[0]) and np.array_equal(got["label"], want[1])


def test_concurrent_digits_requests_each_get_their_own_rows(server, digits_session):
    rows = digits_rows(96, seed=2)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda r: infer(server.grpc_url, "digits", {"pixels": r[None]}, ["label"]), rows))
    want = digits_session.run(["label"], {"pixels": rows})[0]
    assert np.array_equal(np.concatenate([r["label"] for r in results]), want)


def ragged_request(length: int, rows: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 1000, size=(rows, length), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[:, length - 1 :] = rng.integers(0, 2, size=(rows, 1))
    return {"ids": ids, "mask": mask}


@pytest.mark.parametrize("model", ["ragged", "ragged_bucketed"])
def test_ragged_rows_in_one_batch_are_padded_and_trimmed_back(server, model):
    before = server_batches(server, model)
    lengths = [1, 3, 7, 16, 2, 9, 5, 11]
    requests = [ragged_request(n, rows=1 + i % 2, seed=i) for i, n in enumerate(lengths)]
    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        results = list(pool.map(lambda r: infer(server.grpc_url, model, r, ["masked", "total", "scaled"]), requests))
    for request, result in zip(requests, results):
        masked = request["ids"] * request["mask"]
        assert result["masked"].shape == masked.shape and np.array_equal(result["masked"], masked)
        assert np.array_equal(result["total"], masked.sum(axis=1, keepdims=True))
        assert np.array_equal(result["scaled"], masked.astype(np.float32) * 0.5)
    executions, inferences = server_batches(server, model)
    assert inferences - before[1] == sum(len(r["ids"]) for r in requests)  # rows
    assert executions - before[0] < len(requests), "the concurrent ragged requests were never batched together"


def server_batches(server, model: str) -> tuple[int, int]:
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://")) as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("execution_count", 0)), int(stats.get("inference_count", 0))


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"pixels": np.zeros((1, 8, 7), np.float32)}, "shape"),
        ({"pixels": np.zeros((1, 8, 8), np.float64)}, "FP64"),
        ({"pixels": np.zeros((65, 8, 8), np.float32)}, "batch"),
        ({"pixels": np.full((2, 8, 8), np.nan, np.float32)}, "row 0 contains NaN or Inf"),
    ],
    ids=["shape", "dtype", "oversize-batch", "nan"],
)
def test_bad_digits_requests_get_a_clear_error(server, inputs, message):
    with pytest.raises(InvalidInput, match=message):
        infer(server.grpc_url, "digits", inputs, ["label"])


@pytest.mark.parametrize(
    ("length", "message"),
    [(MAX_SEQUENCE_LENGTH + 1, "rows are 17 long; the longest this model takes is 16"), (0, "empty row")],
    ids=["over-long", "empty"],
)
def test_bad_ragged_rows_get_a_clear_error(server, length, message):
    with pytest.raises(InvalidInput, match=message):
        infer(server.grpc_url, "ragged", ragged_request(length), ["total"])


@pytest.mark.parametrize("model", ["ragged", "ragged_bucketed"])
def test_a_bad_request_fails_alone_in_its_batch(server, model):
    good = [ragged_request(n, seed=n) for n in (2, 4, 6, 3, 5)]
    too_long = ragged_request(MAX_SEQUENCE_LENGTH + 3)

    def send(request):
        try:
            return infer(server.grpc_url, model, request, ["total"])
        except ClientError as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, [*good, too_long]))
    assert isinstance(results[-1], InvalidInput), results[-1]
    for request, result in zip(good, results):
        assert np.array_equal(result["total"], (request["ids"] * request["mask"]).sum(axis=1, keepdims=True))


def test_what_onnxruntime_refuses_for_a_lone_request_is_an_internal_error_not_invalid_input(server):
    """Without `ragged_lengths_agree` the backend cannot know ids and mask must agree; onnxruntime
    refuses the Run (a broadcast failure, not its INVALID_ARGUMENT), so the request gets INTERNAL
    (ServerError, which clients may retry), not INVALID_ARGUMENT: the backend cannot prove the cause."""
    mismatched = {"ids": ragged_request(4)["ids"], "mask": ragged_request(5)["mask"]}
    with pytest.raises(ClientError, match="this request cannot run") as caught:
        infer(server.grpc_url, "ragged", mismatched, ["total"])
    assert not isinstance(caught.value, InvalidInput), caught.value


def test_ids_and_a_mask_of_another_length_fail_alone_where_padding_would_hide_them(server):
    """`ragged_lengths_agree`: alone, onnxruntime would refuse the mismatch; batched, padding would
    make the two inputs agree and the request would get an answer. The backend refuses it by name."""
    good = [ragged_request(n, seed=n) for n in (6, 7, 8)]
    mismatched = {"ids": ragged_request(4)["ids"], "mask": ragged_request(5)["mask"]}

    def send(request):
        try:
            return infer(server.grpc_url, "ragged_bucketed", request, ["total"])
        except ClientError as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(send, [*good, mismatched]))
    assert isinstance(results[-1], InvalidInput) and "disagree" in str(results[-1]), results[-1]
    for request, result in zip(good, results):
        assert np.array_equal(result["total"], (request["ids"] * request["mask"]).sum(axis=1, keepdims=True))


def test_statistics_reach_the_metrics_endpoint(server):
    infer(server.grpc_url, "digits", {"pixels": digits_rows(4)}, ["label"])
    with pytest.raises(InvalidInput):
        infer(server.grpc_url, "digits", {"pixels": np.full((1, 8, 8), np.inf, np.float32)}, ["label"])
    metrics_url = server.metrics_url
    assert metric(metrics_url, "nv_inference_request_success", "digits") > 0
    assert metric(metrics_url, "nv_inference_compute_infer_duration_us", "digits") > 0
    assert metric(metrics_url, "nv_inference_queue_duration_us", "digits") > 0
    assert metric(metrics_url, "nv_inference_exec_count", "digits") > 0
    assert metric_value(metrics_url, "nv_inference_request_failure", model="digits", reason="BACKEND") > 0


strings_only = pytest.mark.skipif(not _has_extensions(), reason="onnxruntime-extensions is not installed")


@strings_only
@pytest.mark.parametrize("model", ["strings", "strings_twin"])
def test_string_graph_with_custom_ops_matches_onnxruntime_in_process(server, native_repository, model):
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(str(native_repository / "strings" / "1" / "model.onnx"), options)
    texts = ["héllo wörld", "a", "Triton 2.51", "naïve café " * 20]
    batch = np.array([[t.encode()] for t in texts], dtype=object)
    got = infer(server.grpc_url, model, {"text": batch}, ["upper", "length"])
    want_upper, want_length = session.run(None, {"text": np.array([[t] for t in texts], dtype=object)})
    assert [v.decode() for v in got["upper"].reshape(-1)] == list(want_upper.reshape(-1))
    assert np.array_equal(got["length"], want_length)


@strings_only
@pytest.mark.parametrize(
    ("text", "message"), [(b"\xff\xfe broken", "not valid UTF-8"), (b"nul\x00inside", "NUL byte")], ids=["utf8", "nul"]
)
def test_bad_strings_fail_alone(server, text, message):
    def send(value):
        try:
            return infer(server.grpc_url, "strings", {"text": np.array([[value]], dtype=object)}, ["length"])
        except ClientError as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        good_1, bad, good_2 = pool.map(send, [b"fine", text, b"also fine"])
    assert isinstance(bad, InvalidInput) and message in str(bad)
    assert good_1["length"].tolist() == [[4]] and good_2["length"].tolist() == [[9]]


def reference_tokens(native_repository: Path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(native_repository / "tokens" / "1" / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=TOKENS_MAX_LENGTH)
    return tokenizer


TOKENS_TEXTS = [
    *TOKENS_CORPUS,
    "ok",
    "İstanbul ΟΔΥΣΣΕΥΣ Straße a¢b x[MASK]y",
    "good😀movie e\u0301 \u200bzero width",
    "word " * 40,  # cut at max_length tokens
    "x" * 100,  # cut at cut_string_chars characters first
]


def test_a_text_model_is_fed_tokenizers_ids_padded_as_the_tokenizer_pads(server, native_repository):
    """Requests of one and several rows, sent together (batched, run in buckets, padded to each other
    with [PAD] = 3): every row's ids equal tokenizers' (cut at max_length), the graph gets a mask of
    their length and zero token types, and `truncated` (written by the backend) says which were cut."""
    reference = reference_tokens(native_repository)
    requests = [[t] for t in TOKENS_TEXTS] + [TOKENS_TEXTS[:4], TOKENS_TEXTS[4:]]

    def send(texts):
        batch = np.array([[t.encode()] for t in texts], dtype=object)
        return infer(server.grpc_url, "tokens", {"text": batch}, ["ids", "length", "types", "truncated"])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, requests))
    for texts, got in zip(requests, answers, strict=True):
        assert got["types"].ravel().tolist() == [0] * len(texts)
        for row, text in enumerate(texts):
            expected = reference.encode(text[:TOKENS_CUT_CHARS])
            length = int(got["length"][row, 0])
            assert got["ids"][row, :length].tolist() == expected.ids, text
            assert got["ids"][row, length:].tolist() == [3] * (got["ids"].shape[1] - length), "padded with [PAD]"
            cut = bool(expected.overflowing) or len(text) > TOKENS_CUT_CHARS
            assert bool(got["truncated"][row, 0]) == cut, text
        # the ragged output is trimmed to the request's own longest row
        assert got["ids"].shape[1] == max(len(reference.encode(t[:TOKENS_CUT_CHARS]).ids) for t in texts)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([b"fine", b"caf\xe9"], "input 'text' element 1 is not valid UTF-8"),
        ([b"nul\x00inside"], "input 'text' element 0 contains a NUL byte"),
        ([b" \t "], "input 'text' element 0 is empty or whitespace only"),
        ([b"x" * 100_001], "the limit is 100000 bytes"),
    ],
    ids=["utf8", "nul", "blank", "huge"],
)
def test_a_bad_text_fails_its_request_alone_naming_the_element(server, native_repository, rows, message):
    def send(texts):
        try:
            return infer(server.grpc_url, "tokens", {"text": np.array([[t] for t in texts], dtype=object)}, ["length"])
        except ClientError as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        good_1, bad, good_2 = pool.map(send, [[b"fine"], rows, [b"also fine", b"ok"]])
    assert isinstance(bad, InvalidInput) and message in str(bad), str(bad)
    reference = reference_tokens(native_repository)
    assert good_1["length"].tolist() == [[len(reference.encode("fine").ids)]] and good_2["length"].shape == (2, 1)


def test_random_bytes_to_a_text_model_are_tokenized_as_tokenizers_does_or_refused(server, native_repository):
    reference = reference_tokens(native_repository)
    rng = random.Random(11)
    pool_chars = ["a", " ", "[SEP]", "\u0301", "\u4e00", "\u0130", "##", "\ufffd", "\u3000", "ß", "😀"]
    blobs = []
    for _ in range(600):
        text = "".join(rng.choice(pool_chars) if rng.random() < 0.5 else chr(rng.randrange(0x20, 0x3000))
                       for _ in range(rng.randrange(1, 30)))  # fmt: skip
        data = bytearray(text.encode("utf-8", "surrogatepass"))
        if rng.random() < 0.3:
            data[rng.randrange(len(data))] = rng.randrange(256)
        blobs.append(bytes(data))

    def send(blob):
        try:
            return infer(server.grpc_url, "tokens", {"text": np.array([[blob]], dtype=object)}, ["ids", "length"])
        except InvalidInput as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, blobs))
    answered = 0
    for blob, got in zip(blobs, answers, strict=True):
        try:
            text = blob.decode("utf-8")
        except UnicodeDecodeError:
            assert isinstance(got, InvalidInput) and ("not valid UTF-8" in str(got) or "NUL byte" in str(got)), blob
            continue
        if "\x00" in text or not text.strip(" \t\n\r\x0b\x0c"):
            assert isinstance(got, InvalidInput), blob
            continue
        assert not isinstance(got, Exception), (blob, str(got))
        length = int(got["length"][0, 0])
        assert got["ids"][0, :length].tolist() == reference.encode(text[:TOKENS_CUT_CHARS]).ids, blob
        answered += 1
    assert answered > 300
    after = infer(server.grpc_url, "tokens", {"text": np.array([[b"ok"]], dtype=object)}, ["length"])
    assert after["length"][0, 0] == len(reference.encode("ok").ids)  # the server is up and answering


def malformed_requests(count: int, seed: int = 7) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Requests that are wrong in many ways (and some right ones), for the fuzz test."""
    rng = random.Random(seed)
    requests = []
    for _ in range(count):
        kind = rng.randrange(8)
        if kind == 0:
            shape = (rng.randrange(0, 70), rng.choice([8, 7, 9]), rng.choice([8, 1]))
            requests.append(("digits", {"pixels": np.zeros(shape, np.float32)}))
        elif kind == 1:
            x = np.random.default_rng(rng.randrange(1 << 30)).random((rng.randrange(1, 4), 8, 8)).astype(np.float32)
            x.reshape(-1)[rng.randrange(x.size)] = rng.choice([np.nan, np.inf, -np.inf])
            requests.append(("digits", {"pixels": x}))
        elif kind == 2:
            dtype = rng.choice([np.float64, np.int32, np.int64, np.float16, np.uint8])
            requests.append(("digits", {"pixels": np.ones((1, 8, 8), dtype)}))
        elif kind == 3:
            length = rng.choice([0, 1, MAX_SEQUENCE_LENGTH, MAX_SEQUENCE_LENGTH + 1, 200])
            requests.append(("ragged", ragged_request(length, rows=rng.randrange(1, 3), seed=rng.randrange(99))))
        elif kind == 4:  # ids and mask of different lengths or batch sizes (refused by name: lengths must agree)
            a, b = ragged_request(rng.randrange(1, 8)), ragged_request(rng.randrange(1, 8), rows=rng.randrange(1, 3))
            requests.append(("ragged_bucketed", {"ids": a["ids"], "mask": b["mask"]}))
        elif kind == 5:
            requests.append(("ragged", {"ids": ragged_request(3)["ids"]}))  # missing input
        elif kind == 6 and _has_extensions():
            blob = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
            requests.append(("strings", {"text": np.array([[blob]], dtype=object)}))
        else:
            requests.append(("digits", {"pixels": digits_rows(1, seed=rng.randrange(99))}))
    return requests


def test_fuzz_thousands_of_malformed_requests_leave_the_server_up(server, digits_session):
    requests = malformed_requests(3000)
    outputs = {"digits": ["label"], "ragged": ["total"], "ragged_bucketed": ["total"], "strings": ["length"]}

    def send(item):
        model, inputs = item
        try:
            infer(server.grpc_url, model, inputs, outputs[model], timeout_s=60)
            return "ok"
        except InvalidInput:
            return "invalid"
        except ClientError as error:
            return f"other: {type(error).__name__}: {error}"

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, requests))
    assert len(answers) == len(requests)
    others = [a for a in answers if a.startswith("other")]
    assert not others, others[:5]
    assert answers.count("ok") > 100 and answers.count("invalid") > 1000
    assert server.is_running()
    row = digits_rows(1, seed=3)
    got = infer(server.grpc_url, "digits", {"pixels": row}, DIGITS_OUTPUTS)
    assert np.array_equal(got["probabilities"], digits_session.run(["probabilities"], {"pixels": row})[0])


# --- through the kit's own rendering ------------------------------------------------------------


def write_scorer_graph(path: Path) -> Path:
    """x float[N, 4] -> scores = softmax(x @ W + b) [N, 3]: a small model a user might import."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.normal(size=(3,)).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["scores"], axis=1),
        ],
        "scorer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3])],
        initializer=[weights, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def kit_server(tmp_path_factory: pytest.TempPathFactory):
    """digits as the kit renders it (variant of the build) plus an imported ONNX model."""
    from tests.conftest import served_settings
    from triton_fastpath.imports.onnx_import import import_onnx
    from triton_fastpath.recipes.repository import variant_repository

    digits_onnx()  # built if needed
    work = tmp_path_factory.mktemp("kit-native")
    repository = variant_repository(served_settings(), work / "repository", only=("digits",))
    scorer = write_scorer_graph(work / "scorer.onnx")
    import_onnx(scorer, name="scorer", repository=repository, settings=served_settings(), input_range=(-2, 2))
    server = start_server(repository, work)
    try:
        yield server, repository, scorer
    finally:
        server.stop()


def test_the_kit_renders_onnx_models_to_the_native_backend(kit_server):
    from triton_fastpath.config.render import parse_pbtxt

    _, repository, _ = kit_server
    for name in ("digits", "scorer"):
        config = parse_pbtxt((repository / name / "config.pbtxt").read_text())
        assert config.backend == "fastpath_ort", name
        assert not (repository / name / "libtriton_fastpath_ort.so").exists(), "the server's backend directory has it"
        assert not (repository / name / "libonnxruntime.so").is_symlink()


def test_kit_digits_and_an_imported_model_equal_onnxruntime_exactly(kit_server, digits_session):
    import onnxruntime as ort

    server, _, scorer = kit_server
    rows = digits_rows(32, seed=5)
    got = infer(server.grpc_url, "digits", {"pixels": rows}, DIGITS_OUTPUTS)
    want = digits_session.run(DIGITS_OUTPUTS, {"pixels": rows})
    assert np.array_equal(got["probabilities"], want[0]) and np.array_equal(got["label"], want[1])
    x = np.random.default_rng(1).normal(size=(17, 4)).astype(np.float32)
    reference = ort.InferenceSession(str(scorer), providers=["CPUExecutionProvider"]).run(["scores"], {"x": x})[0]
    assert np.array_equal(infer(server.grpc_url, "scorer", {"x": x}, ["scores"])["scores"], reference)
    for row in x[:5]:
        single = infer(server.grpc_url, "scorer", {"x": row[None]}, ["scores"])["scores"]
        assert np.array_equal(single, reference[: len(x)][x.tolist().index(row.tolist())][None])


def test_the_response_cache_never_replays_an_error_as_a_success(kit_server):
    server, _, _ = kit_server
    bad = {"pixels": np.full((1, 8, 8), np.nan, np.float32)}
    for _ in range(3):  # Triton 2.51 caches a Python model's error as an empty success (known-issues.md)
        with pytest.raises(InvalidInput, match="NaN or Inf"):
            infer(server.grpc_url, "digits", bad, ["label"])
