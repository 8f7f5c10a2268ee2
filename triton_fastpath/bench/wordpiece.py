"""Tokenizer throughput: the exact C++ WordPiece tokenizer against onnxruntime-extensions and `tokenizers`.

On the same texts, texts per second of:
- the C++ tokenizer (native/fastpath_ort/wordpiece.cc), in-process loop in its driver, one thread;
- onnxruntime-extensions' `BertTokenizer` op alone, one session run per text (batch 1);
- the text graph's tokenizer half (`export.text_graph_tokenizer.tokenizer_graph`: the op in a `Loop`, rows
  cut and padded), one run per 32 texts, one onnxruntime thread;
- `tokenizers` (`encode_batch` of 32, truncating at max_length), as the Python path calls it.
Each figure is the best of three windows of `min_seconds / 3`; nothing is asserted (a
measurement to read; on a shared machine compare only figures from one run).

    python -m triton_fastpath.bench.wordpiece                         # sentiment, multilingual corpus
    python -m triton_fastpath.bench.wordpiece --tokenizer tokenizer.json --texts texts.txt --max-length 128
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.paths import BUILD_DIR

DEFAULT_TOKENIZER = BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json"


@dataclass(frozen=True)
class Throughput:
    """One tokenizer's speed on a text set."""

    system: str
    texts_per_s: float

    @property
    def us_per_text(self) -> float:
        return 1e6 / self.texts_per_s


def _timed(run: Callable[[], int], min_seconds: float) -> float:
    """Texts per second of `run` (which returns how many texts it did): best of three windows."""
    best = 0.0
    for _ in range(3):
        done, started = 0, time.perf_counter()
        while True:
            done += run()
            elapsed = time.perf_counter() - started
            if elapsed >= min_seconds / 3:
                break
        best = max(best, done / elapsed)
    return best


def throughput(
    tokenizer_json: Path, texts: Sequence[str], *, max_length: int = 64, min_seconds: float = 3.0
) -> list[Throughput]:
    """texts/s of each tokenizer on `texts` (see the module docstring); the C++ tokenizer first.

    Raises:
        NativeBuildError: the C++ driver cannot be built or run.
        ExportError: the op cannot reproduce `tokenizer_json` (see `text_graph_tokenizer.bert_tokenizer_attributes`).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer

    from triton_fastpath.export.text_graph import session
    from triton_fastpath.export.text_graph_tokenizer import CONTRIB_DOMAIN, bert_tokenizer_attributes, tokenizer_graph
    from triton_fastpath.native.tokenizer_driver import bench_driver

    texts = list(texts)
    measured = bench_driver(tokenizer_json, texts, max_length=max_length, min_seconds=min_seconds)
    results = [Throughput("C++ WordPiece (exact), in-process loop", measured["texts_per_s"])]

    facts = bert_tokenizer_attributes(
        json.loads(Path(tokenizer_json).read_text(encoding="utf-8")), max_length=max_length, where=str(tokenizer_json)
    )
    op_alone = helper.make_model(
        helper.make_graph(
            [
                helper.make_node(
                    "BertTokenizer", ["text"], ["ids", "types", "mask"], domain=CONTRIB_DOMAIN, **facts.attributes
                )
            ],
            "bert_tokenizer_alone",
            [helper.make_tensor_value_info("text", TensorProto.STRING, [1])],
            [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in ("ids", "types", "mask")],
        ),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(CONTRIB_DOMAIN, 1)],
    )
    op_alone.ir_version = 9
    alone = session(op_alone.SerializeToString())
    singles = [np.array([t], dtype=object) for t in texts]

    def run_alone() -> int:
        for feed in singles:
            alone.run(None, {"text": feed})
        return len(singles)

    results.append(Throughput("BertTokenizer op alone, 1 text per run", _timed(run_alone, min_seconds)))

    half = tokenizer_graph(facts, max_length=max_length, opset=18, ir_version=9)
    onnx.checker.check_model(half)
    graph = session(half.SerializeToString())
    batches = [np.array(texts[i : i + 32], dtype=object).reshape(-1, 1) for i in range(0, len(texts), 32)]

    def run_graph() -> int:
        for feed in batches:
            graph.run(None, {"text": feed})
        return len(texts)

    results.append(Throughput("text graph tokenizer half (op in a Loop), 32 per run", _timed(run_graph, min_seconds)))

    reference = Tokenizer.from_file(str(tokenizer_json))
    reference.no_padding()
    reference.enable_truncation(max_length=max_length)
    chunks = [texts[i : i + 32] for i in range(0, len(texts), 32)]

    def run_tokenizers() -> int:
        for chunk in chunks:
            reference.encode_batch(chunk)
        return len(texts)

    results.append(Throughput("tokenizers encode_batch, 32 per call", _timed(run_tokenizers, min_seconds)))
    return results


def throughput_table(results: Sequence[Throughput], *, title: str = "") -> str:
    """A Markdown table of `throughput` results; the last column compares each with the C++ tokenizer."""
    base = results[0].texts_per_s
    lines = [title, ""] if title else []
    lines += ["| tokenizer | texts/s | us/text | C++ is |", "| --- | ---: | ---: | ---: |"]
    for r in results:
        versus = "-" if r is results[0] else f"{base / r.texts_per_s:.1f}x as fast"
        lines.append(f"| {r.system} | {r.texts_per_s:,.0f} | {r.us_per_text:.1f} | {versus} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER, help="a BERT WordPiece tokenizer.json")
    parser.add_argument("--texts", type=Path, help="texts, one per line (default: the multilingual Faker corpus)")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per tokenizer")
    args = parser.parse_args(argv)
    if args.texts is not None:
        texts = [line for line in args.texts.read_text(encoding="utf-8").splitlines() if line]
        what = str(args.texts)
    else:
        from triton_fastpath.export.multilingual_corpus import corpus_texts

        texts, what = corpus_texts(), "the multilingual Faker corpus"
    results = throughput(args.tokenizer, texts, max_length=args.max_length, min_seconds=args.seconds)
    title = f"{args.tokenizer}: {len(texts):,} texts ({what}), max_length {args.max_length}"
    print(throughput_table(results, title=title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
