"""The most batching can gain on a text encoder: its compute per text run one text at a time against
run in batches, in this process, on one ORT thread, over the same texts.

A server that batches can beat one that runs each request alone (FastAPI + onnxruntime, one text a
Run) by at most what the encoder itself gains from batching, plus the per-request overhead the
other server pays. For a small encoder the gain is large (fixed costs per Run dominate); for a
MiniLM-sized one the matrix products already keep a core busy at one text, and padding a batch to
its longest text adds work. This measures the gain with no server at all, so a throughput target
can be checked against what the model allows before a server is blamed:

    gain = batching_gain(onnx_file, tokenizer_file, max_length, texts, bucket_rows=4)
    gain["ratio"]   # ms per text alone / ms per text batched: no batching server can beat it on compute

Plans, timed in turn `repeats` times (the best of each kept): one text per Run; batches of `batch`
texts in arrival order padded to the batch's longest; the same batches sorted by length and cut
into Runs of `bucket_rows` texts (what fastpath_ort's length buckets do).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 32  # about what 32 clients' requests make at once on 2 instances


def _feeds(session: Any, ids: list[list[int]]) -> dict[str, np.ndarray]:
    """One Run's inputs: ids padded with 0 to the longest row, its attention mask, zero type ids."""
    width = max(len(row) for row in ids)
    tokens = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.zeros_like(tokens)
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = row
        mask[i, : len(row)] = 1
    made = {"input_ids": tokens, "attention_mask": mask, "token_type_ids": np.zeros_like(tokens)}
    return {i.name: made[i.name] for i in session.get_inputs()}


def plans(lengths: Sequence[int], *, batch: int, bucket_rows: int) -> dict[str, list[list[int]]]:
    """The Runs of each plan, as lists of text indexes (pure)."""
    order = list(range(len(lengths)))
    batches = [order[i : i + batch] for i in range(0, len(order), batch)]
    bucketed = []
    for rows in batches:
        by_length = sorted(rows, key=lambda r: lengths[r])
        step = bucket_rows or len(by_length)
        bucketed += [by_length[i : i + step] for i in range(0, len(by_length), step)]
    return {
        "one text per Run": [[i] for i in order],
        f"batches of {batch}, padded to the longest": batches,
        f"batches of {batch}, Runs of {bucket_rows} by length": bucketed,
    }


def batching_gain(
    onnx_file: Path,
    tokenizer_file: Path,
    max_length: int,
    texts: Sequence[str],
    *,
    bucket_rows: int = 4,
    batch: int = BATCH,
    repeats: int = 3,
) -> dict[str, Any]:
    """ms per text of each plan (`plans`) and `ratio`: one text per Run over the best batched plan."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.enable_truncation(max_length)
    ids = [tokenizer.encode(text).ids for text in texts]
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    found = plans([len(row) for row in ids], batch=batch, bucket_rows=bucket_rows)
    feeds = {name: [_feeds(session, [ids[r] for r in rows]) for rows in runs] for name, runs in found.items()}
    best: dict[str, float] = {}
    for round_ in range(repeats + 1):  # the first round warms the session up
        for name, runs in feeds.items():
            started = time.perf_counter()
            for feed in runs:
                session.run(None, feed)
            per_text_ms = (time.perf_counter() - started) / len(texts) * 1e3
            if round_:
                best[name] = min(best.get(name, per_text_ms), per_text_ms)
    alone = best["one text per Run"]
    return {
        "texts": len(texts),
        "mean_tokens": float(np.mean([len(row) for row in ids])),
        "ms_per_text": best,
        "ratio": alone / min(v for k, v in best.items() if k != "one text per Run"),
    }


def describe(gain: dict[str, Any]) -> str:
    """One paragraph for the imported model's table (pure)."""
    shown = "; ".join(f"{name} {ms:.2f} ms" for name, ms in gain["ms_per_text"].items())
    return (
        f"Batching's most (in-process, 1 ORT thread, no server, the same {gain['texts']} texts of "
        f"{gain['mean_tokens']:.1f} tokens on average), ms per text: {shown}. Batched, this encoder computes a "
        f"text **{gain['ratio']:.2f}x** as fast as alone: what batching adds on compute over a server that runs "
        "each request alone, besides that server's own cost per request."
    )
