"""Measure semantic-cache hit precision against the similarity threshold, for two embeddings.

The cache is filled with the training texts (their answers: the served INT8 model's labels).
Queries are the held-out texts and simple perturbations of training texts (upper case, added or
removed punctuation, one dropped word). A hit is wrong when the cached text's label differs from
the label the model gives the query itself. Queries whose embedding equals a cached one (the same
tokens: an exact-cache hit anyway) are left out, so only genuinely semantic hits are judged. Candidates:
  (a) `sentiment`: the sentiment model's own token-embedding table, mean-pooled (free, licence-clean);
  (b) `wordllama`: wordllama's static embeddings (l2_supercat_256, Llama 2 vocabulary), read
      straight from its wheel (`pip download --no-deps wordllama==0.4.0.post1`, never installed).
Writes docs/semantic-threshold.md, docs/semantic-threshold.png and build/bench/semantic.json.

    python scripts/semantic_threshold.py [--perturbed 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from triton_fastpath import data as datasets
from triton_fastpath.paths import BUILD_DIR, ROOT, backends_importable
from triton_fastpath.repository import PRECISIONS, RepoSettings

backends_importable()
from fastpath_backends.onnx_model import OnnxModel  # noqa: E402
from fastpath_backends.semantic import SemanticIndex, mean_pool  # noqa: E402
from fastpath_backends.text import TextEncoder  # noqa: E402

THRESHOLDS = [0.80, 0.85, 0.90, 0.93, 0.95, 0.96, 0.97, 0.98, 0.985, 0.99, 0.995, 0.998, 0.999, 0.9995, 0.9999]
MAX_WRONG = 0.01
EXACT = 0.99999


def perturbations(texts: list[str], rng: random.Random) -> list[tuple[str, str]]:
    """(kind, text) variants: upper case, punctuation added/removed, one word dropped."""
    out = []
    for text in texts:
        out.append(("case", text.upper()))
        out.append(("punct", text[:-1] if text[-1:] in ".!?" else text + "!"))
        words = text.split()
        if len(words) >= 4:
            drop = rng.randrange(len(words))
            out.append(("drop_word", " ".join(words[:drop] + words[drop + 1 :])))
    return out


def model_labels(texts: list[str], encoder: TextEncoder, model: OnnxModel) -> np.ndarray:
    labels = []
    for start in range(0, len(texts), 64):
        enc = encoder.encode(texts[start : start + 64])
        scores = model.run({"input_ids": enc.input_ids, "attention_mask": enc.attention_mask})["probabilities"]
        labels.append(scores.argmax(axis=1))
    return np.concatenate(labels)


class SentimentEmbedding:
    """Candidate (a): the served model's token embeddings on the served tokenizer's ids."""

    name = "sentiment"

    def __init__(self, encoder: TextEncoder, table: np.ndarray) -> None:
        self.encoder, self.table = encoder, table

    def __call__(self, texts: list[str]) -> np.ndarray:
        enc = self.encoder.encode(texts)
        skip = [self.encoder.token_id(t) for t in ("[CLS]", "[SEP]")]
        return mean_pool(self.table, enc.input_ids, enc.attention_mask, skip_ids=[i for i in skip if i is not None])


class WordLlamaEmbedding:
    """Candidate (b): wordllama's static embeddings with its own BPE tokenizer."""

    name = "wordllama"

    def __init__(self, wheel: Path) -> None:
        from tokenizers import Tokenizer

        tokenizer_json, self.table = datasets.read_wordllama(wheel)
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.tokenizer.enable_truncation(64)
        self.tokenizer.enable_padding(length=64, pad_id=0)

    def __call__(self, texts: list[str]) -> np.ndarray:
        encs = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encs])
        mask = np.array([e.attention_mask for e in encs])
        return mean_pool(self.table, ids, mask, skip_ids=(1,))


def curve(embed, cache_texts, cache_labels, queries, query_labels, *, kinds) -> tuple[list[dict], float]:
    """Hits and wrong hits per threshold, per query kind; also embedding cost in us/text."""
    started = time.perf_counter()
    cache_vectors = embed(cache_texts)
    query_vectors = embed(queries)
    us_per_text = (time.perf_counter() - started) / (len(cache_texts) + len(queries)) * 1e6
    index = SemanticIndex(cache_vectors.shape[1], len(cache_texts), threshold=1.0)
    index.add(cache_vectors, [np.array([label]) for label in cache_labels])
    best = np.zeros(len(queries), dtype=np.float32)
    nearest_label = np.zeros(len(queries), dtype=np.int64)
    for start in range(0, len(queries), 512):
        values, scores = index.search(query_vectors[start : start + 512], threshold=-1.0)
        best[start : start + 512] = scores
        nearest_label[start : start + 512] = [int(v[0]) if v is not None else -1 for v in values]
    # A query whose embedding equals a cached one (same tokens) is an exact-cache hit already;
    # the semantic layer is judged only on the hits the exact caches would miss.
    exact = best >= EXACT
    rows = []
    for threshold in THRESHOLDS:
        hit = (best >= threshold) & ~exact
        wrong = hit & (nearest_label != query_labels)
        row = {"threshold": threshold, "hits": int(hit.sum()), "wrong": int(wrong.sum()), "exact": int(exact.sum())}
        for kind in sorted(set(kinds)):
            sel = np.array([k == kind for k in kinds])
            row[f"{kind}_hit_rate"] = float(hit[sel].mean())
            row[f"{kind}_wrong"] = int(wrong[sel].sum())
        row["wrong_rate"] = row["wrong"] / row["hits"] if row["hits"] else 0.0
        rows.append(row)
    return rows, us_per_text


def choose(rows: list[dict], min_hits: int = 20) -> dict | None:
    """The lowest threshold (most hits) whose wrong-hit rate stays under MAX_WRONG."""
    safe = [r for r in rows if r["hits"] >= min_hits and r["wrong_rate"] < MAX_WRONG]
    return min(safe, key=lambda r: r["threshold"]) if safe else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--perturbed", type=int, default=1000, help="training texts to perturb (default %(default)s)")
    args = parser.parse_args(argv)
    settings = RepoSettings()
    data = datasets.load_sentiment(BUILD_DIR / "data")
    encoder = TextEncoder(BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json", settings.max_length)
    model = OnnxModel(BUILD_DIR / "sentiment" / "onnx" / PRECISIONS[settings.precision])
    table = np.load(BUILD_DIR / "sentiment" / "onnx" / "token_embeddings.npy")  # written by the build
    rng = random.Random(0)
    cache_texts = list(data.train.x)
    perturbed = perturbations(rng.sample(cache_texts, args.perturbed), rng)
    queries = list(data.test.x) + [t for _, t in perturbed]
    kinds = ["heldout"] * len(data.test.x) + [k for k, _ in perturbed]
    print(
        f"cache: {len(cache_texts)} training texts; queries: {len(data.test.x)} held-out + {len(perturbed)} perturbed"
    )
    cache_labels = model_labels(cache_texts, encoder, model)
    query_labels = model_labels(queries, encoder, model)
    results = {}
    for embed in (
        SentimentEmbedding(encoder, table),
        WordLlamaEmbedding(datasets.fetch_wordllama_wheel(BUILD_DIR / "data")),
    ):
        rows, cost = curve(embed, cache_texts, cache_labels, queries, query_labels, kinds=kinds)
        results[embed.name] = {"rows": rows, "us_per_text": cost, "chosen": choose(rows)}
        chosen = results[embed.name]["chosen"]
        print(f"{embed.name}: {cost:.0f} us/text to embed; chosen threshold: {chosen and chosen['threshold']}")
    write_outputs(
        results,
        len(data.test.x),
        len(perturbed),
        " ".join(["python scripts/semantic_threshold.py", *(argv or sys.argv[1:])]),
    )
    return 0


def write_outputs(results: dict, n_heldout: int, n_perturbed: int, command: str) -> None:
    kinds = ["heldout", "case", "punct", "drop_word"]
    lines = [
        "# Semantic cache: hit precision against the threshold",
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}). Cache: the training texts; queries: "
        f"{n_heldout} held-out texts and {n_perturbed} perturbed training texts. A hit is wrong when the "
        "nearest cached text's label differs from the label the served model gives the query. Queries "
        "whose embedding equals a cached one (same tokens, e.g. upper case under the uncased sentiment "
        "tokenizer) are exact-cache hits and are left out of hits and rates.",
        "",
    ]
    for name, result in results.items():
        chosen = result["chosen"]
        lines += [
            f"## {name} ({result['us_per_text']:.0f} us per text to embed; "
            f"{result['rows'][0]['exact']} exact-duplicate queries left out)",
            "",
            "| threshold | hits | wrong-hit rate | " + " | ".join(f"{k} hit rate" for k in kinds) + " |",
            "|---|---|---|" + "---|" * len(kinds),
        ]
        for r in result["rows"]:
            mark = " **(chosen)**" if chosen and r["threshold"] == chosen["threshold"] else ""
            cells = " | ".join(f"{r.get(k + '_hit_rate', 0):.1%}" for k in kinds)
            lines.append(f"| {r['threshold']}{mark} | {r['hits']} | {r['wrong_rate']:.2%} | {cells} |")
        lines.append("")
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "semantic-threshold.md").write_text("\n".join(lines))
    out = BUILD_DIR / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "semantic.json").write_text(json.dumps(results, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for (name, result), color in zip(results.items(), ("tab:blue", "tab:orange")):
        xs = [r["threshold"] for r in result["rows"]]
        left.plot(xs, [r["wrong_rate"] * 100 for r in result["rows"]], marker="o", color=color, label=name)
        right.plot(
            xs,
            [r["heldout_hit_rate"] * 100 for r in result["rows"]],
            marker="o",
            color=color,
            label=f"{name}: held-out",
        )
        right.plot(
            xs,
            [r["punct_hit_rate"] * 100 for r in result["rows"]],
            marker="^",
            ls=":",
            color=color,
            label=f"{name}: punctuation",
        )
        right.plot(
            xs,
            [r["drop_word_hit_rate"] * 100 for r in result["rows"]],
            marker="x",
            ls="--",
            color=color,
            label=f"{name}: dropped word",
        )
    left.axhline(MAX_WRONG * 100, color="red", lw=0.8, label="1% budget")
    left.set(xlabel="cosine threshold", ylabel="wrong hits (% of semantic hits)", title="Hit precision", ylim=(0, 9))
    right.set(xlabel="cosine threshold", ylabel="hit rate (%)", title="Hit rate by query kind")
    for axis in (left, right):
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "semantic-threshold.png", dpi=110)
    print(f"wrote docs/semantic-threshold.md, docs/semantic-threshold.png, {out / 'semantic.json'}")


if __name__ == "__main__":
    sys.exit(main())
