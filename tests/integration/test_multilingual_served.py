"""The served default `sentiment` answers as its own model in every language (issue 41).

The default build (the tuned rendering, as `fastpath build` writes it) is served by a real
tritonserver; the seeded multilingual corpus (`export.multilingual_corpus`: Faker texts in 30 locales,
Latin with diacritics, Cyrillic, Greek, CJK, Vietnamese, Hangul... some upper-cased, decomposed or with
emoji glued on) goes to `sentiment` and is compared, label for label, with the model's own pipeline in
process: `tokenizers` with the build's tokenizer.json, then the build's INT8 encoder in onnxruntime.

Each text alone (one request, one row: the same INT8 activation ranges as a lone run in process) and
in requests of 16 (the batch padded to its longest, as in process). The labels must be equal (at
least 99% per locale is the issue's bar, judged by the 95% Wilson lower bound over the locale's
texts; exact equality is what the C++ tokenizer gives), the probabilities within 1e-5, the truncated
flags equal. The per-locale table is printed (pytest -s).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import served_settings
from triton_fastpath.paths import BUILD_DIR, backends_importable

pytestmark = pytest.mark.integration

ONNX_DIR = BUILD_DIR / "sentiment" / "onnx"
OUTPUTS = ["label", "probability", "probabilities", "truncated"]
PER_LOCALE = 300  # the corpus the build proves the ids on (the issue measured 150)
BATCH = 16
REQUIRED_LOCALES = {"en_US", "fr_FR", "es_ES", "it_IT", "pt_BR", "de_DE", "pl_PL", "cs_CZ", "tr_TR", "vi_VN",
                    "ru_RU", "el_GR", "ja_JP", "zh_CN"}  # fmt: skip


def default_settings():
    from triton_fastpath.config.settings import RepoSettings

    return RepoSettings.tuned(service_levels=served_settings().service_levels)


@pytest.fixture(scope="module")
def server(built_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    from triton_fastpath.recipes.repository import variant_repository
    from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig

    if default_settings().rendering != "graph":
        pytest.skip(f"the tuned rendering is {default_settings().rendering!r}: the Python tokenizer serves it")
    work = tmp_path_factory.mktemp("multilingual")
    repository = variant_repository(default_settings(), work / "repository", only=("sentiment",))
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=work / "tritonserver.log",
        model_control_mode="explicit",
        load_models=("sentiment",),
    )
    started = EmbeddedTritonServer(config).start(180)
    try:
        yield started, repository
    finally:
        started.stop()


@pytest.fixture(scope="module")
def client(server):
    import tritonclient.grpc as grpcclient

    started, _ = server
    with grpcclient.InferenceServerClient(started.grpc_url.removeprefix("grpc://")) as connection:
        yield connection


def ask(client, texts: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    array = np.array([[t.encode()] for t in texts], dtype=object)
    tensor = grpcclient.InferInput("text", list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    result = client.infer(
        "sentiment", [tensor], outputs=[grpcclient.InferRequestedOutput(n) for n in OUTPUTS], client_timeout=30
    )
    return {name: result.as_numpy(name) for name in OUTPUTS}


class TwoStep:
    """The model's own pipeline in process: tokenizers (the build's tokenizer.json), then the INT8 encoder."""

    def __init__(self, max_length: int) -> None:
        import onnxruntime as ort

        backends_importable()
        from fastpath_backends.text import TextEncoder

        self.encoder = TextEncoder(ONNX_DIR / "tokenizer.json", max_length)  # each batch padded to its longest
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(ONNX_DIR / "model.int8.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        tokens = self.encoder.encode(texts)
        feed = {"input_ids": tokens.input_ids, "attention_mask": tokens.attention_mask}
        return self.session.run(["probabilities"], feed)[0], tokens.truncated


def test_every_locale_gets_the_model_s_own_labels_from_the_served_default_sentiment(server, client):
    from triton_fastpath.export import multilingual_corpus
    from triton_fastpath.recipes.gates import AgreementGate

    _, repository = server
    labels = (repository / "sentiment" / "labels.txt").read_text().split()
    reference = TwoStep(default_settings().max_length)
    corpus = multilingual_corpus.corpus(per_locale=PER_LOCALE)
    assert set(corpus) >= REQUIRED_LOCALES
    rows, failures = [], []
    for locale, texts in corpus.items():
        agree = agree_batched = 0
        worst = 0.0
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            expected, cut = reference(batch)
            served = ask(client, batch)  # a request of 16 rows: padded to its longest, as in process
            worst = max(worst, float(np.abs(served["probabilities"] - expected).max()))
            got = [x.decode() for x in served["label"].ravel()]
            agree_batched += sum(g == labels[i] for g, i in zip(got, expected.argmax(1)))
            assert (served["truncated"].ravel() == cut.ravel()).all(), (locale, batch)
            for text in batch:  # each text alone
                alone, alone_cut = reference([text])
                one = ask(client, [text])
                worst = max(worst, float(np.abs(one["probabilities"] - alone).max()))
                same = one["label"][0, 0].decode() == labels[int(alone.argmax())]
                agree += same
                if not same:
                    failures.append(f"{locale}: {text!r}")
                assert bool(one["truncated"][0, 0]) == bool(alone_cut[0, 0]), (locale, text)
        gate = AgreementGate(f"{locale} labels").judge(agree, len(texts))
        rows.append((locale, len(texts), agree, agree_batched, gate.lower, worst))
    print(f"\nserved default sentiment vs tokenizers + INT8 encoder in process, {PER_LOCALE} Faker texts per locale")
    print(f"{'locale':<8}{'texts':>6}{'labels equal':>14}{'in 16s':>8}{'Wilson 95% low':>16}{'max|diff| prob':>16}")
    for locale, n, agree, batched, lower, worst in rows:
        print(f"{locale:<8}{n:>6}{agree:>14}{batched:>8}{lower:>16.2%}{worst:>16.2e}")
    total, equal = sum(r[1] for r in rows), sum(r[2] for r in rows)
    pooled = AgreementGate("all locales").judge(equal, total)
    print(f"{'all':<8}{total:>6}{equal:>14}{sum(r[3] for r in rows):>8}{pooled.lower:>16.2%}")
    assert not failures, f"{len(failures)} labels differ: {failures[:5]}"
    assert all(agree == batched == n for _, n, agree, batched, _, _ in rows)
    assert all(worst <= 1e-5 for *_, worst in rows), rows


def test_hostile_texts_are_answered_as_in_process_or_fail_alone_naming_the_element(server, client):
    """Edge cases (control and zero-width characters, marks, long words, emoji, special tokens in the
    text, characters newer than a library's tables): each gets the model's own answer; then, sent at
    once beside good texts with byte strings that are not UTF-8, each bad one gets an INVALID_ARGUMENT
    naming its element and no batch-mate fails with it."""
    from concurrent.futures import ThreadPoolExecutor

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_fastpath.export import multilingual_corpus

    _, repository = server
    labels = (repository / "sentiment" / "labels.txt").read_text().split()
    reference = TwoStep(default_settings().max_length)
    good = ["a warm and funny film", "a dull, lifeless mess"]
    hostile = [t for t in multilingual_corpus.hostile_texts() if t.strip() and "\x00" not in t]
    invalid = multilingual_corpus.invalid_utf8()

    def send(item: str | bytes):
        raw = item if isinstance(item, bytes) else item.encode()
        array = np.array([[raw]], dtype=object)
        tensor = grpcclient.InferInput("text", [1, 1], "BYTES")
        tensor.set_data_from_numpy(array)
        try:
            result = client.infer("sentiment", [tensor], outputs=[grpcclient.InferRequestedOutput(n) for n in OUTPUTS])
        except InferenceServerException as error:
            return error
        return {name: result.as_numpy(name) for name in OUTPUTS}

    # First one at a time, compared with the model in process (batched with others, dynamic INT8
    # quantizes over the batch's rows; and the response cache then holds these lone answers).
    for item in hostile:
        result = send(item)
        expected, cut = reference([item])
        assert result["label"][0, 0].decode() == labels[int(expected.argmax())], item
        np.testing.assert_allclose(result["probabilities"], expected, atol=1e-5, err_msg=repr(item))
        assert bool(result["truncated"][0, 0]) == bool(cut[0, 0]), item
    items = [x for pair in zip(hostile, [good[i % 2] for i in range(len(hostile))]) for x in pair] + invalid
    # Then all at once beside good texts, so they share batches: the bad ones fail alone.
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, items))
    for item, result in zip(items, results, strict=True):
        if isinstance(item, bytes):
            assert isinstance(result, InferenceServerException), item
            assert "element 0 is not valid UTF-8" in str(result) or "NUL byte" in str(result), (item, str(result))
        else:
            assert not isinstance(result, Exception), (item, str(result))
    # one bad row fails its whole request, naming the row; the request beside it is answered
    mixed = np.array([[b"fine"], [b"caf\xe9"], [b"good"]], dtype=object)
    tensor = grpcclient.InferInput("text", [3, 1], "BYTES")
    tensor.set_data_from_numpy(mixed)
    with pytest.raises(InferenceServerException, match=r"input 'text' element 1 is not valid UTF-8"):
        client.infer("sentiment", [tensor])
    assert ask(client, ["fine"])["label"].shape == (1, 1)
