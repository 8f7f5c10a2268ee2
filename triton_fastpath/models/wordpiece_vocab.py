"""A WordPiece vocabulary learned the same way on every run: the bundled sentiment model's tokenizer.

`tokenizers`' `WordPieceTrainer` (0.23) is not deterministic: it gives continuing-subword pieces
(`##x`) their ids in the iteration order of a hash map, and those ids break ties between merges of
equal count (huggingface/tokenizers#1794; measured here: three trainings on the same 10,832 texts
gave three different vocabularies). A different vocabulary is a different model, and a
`tokenizer_sha256` in a committed config that no rebuild reproduces. This trainer makes the same
merges in the same way (byte-pair merges over words split into a first character and `##`
continuations, most frequent pair first, at least `min_frequency`), with ties broken by the pair's
text, so the vocabulary is a function of the texts alone.

    vocab = learn_vocab(word_counts(texts, normalizer, pre_tokenizer), vocab_size=8000, min_frequency=2,
                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise

PREFIX = "##"


def word_counts(texts: Iterable[str], normalizer, pre_tokenizer) -> Counter[str]:
    """How often each word occurs in `texts`, after the tokenizer's own normalizer and pre-tokenizer."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def _pieces(word: str) -> tuple[str, ...]:
    return (word[0], *(PREFIX + c for c in word[1:]))


def _merged(a: str, b: str) -> str:
    return a + b.removeprefix(PREFIX)


def learn_vocab(
    words: Counter[str], *, vocab_size: int, min_frequency: int, special_tokens: Sequence[str]
) -> dict[str, int]:
    """Token -> id: `special_tokens` first, then every character and `##` continuation character
    (sorted), then the merged pieces in the order they were learned, up to `vocab_size` tokens.

    Each step merges the adjacent pair of pieces seen most often over all words (counted with the
    words' frequencies); among pairs of equal count the one whose (first, second) text sorts first.
    Learning stops at `vocab_size` or when no pair occurs `min_frequency` times."""
    vocab: dict[str, int] = {}
    for token in special_tokens:
        vocab.setdefault(token, len(vocab))
    merges = _Merges(words)
    for token in sorted({p for pieces in merges.splits.values() for p in pieces}, key=lambda t: (t[:2] == PREFIX, t)):
        vocab.setdefault(token, len(vocab))
    heap = [(-count, pair) for pair, count in merges.pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if merges.pair_counts.get(pair, 0) != -negative:
            continue  # a stale entry: the pair's count changed since it was pushed
        if -negative < min_frequency:
            break
        token = _merged(*pair)
        vocab.setdefault(token, len(vocab))
        for changed in merges.merge(pair, token):
            if merges.pair_counts.get(changed, 0) > 0:
                heapq.heappush(heap, (-merges.pair_counts[changed], changed))
    return vocab


class _Merges:
    """Every word's pieces, how often each adjacent pair occurs (with the words' counts), and which
    words hold it."""

    def __init__(self, words: Counter[str]) -> None:
        self.words = words
        self.splits = {word: _pieces(word) for word in sorted(words) if word}
        self.pair_counts: Counter[tuple[str, str]] = Counter()
        self.holders: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        for word, pieces in self.splits.items():
            for pair in pairwise(pieces):
                self.pair_counts[pair] += words[word]
                self.holders[pair].add(word)

    def merge(self, pair: tuple[str, str], token: str) -> set[tuple[str, str]]:
        """Merges every occurrence of `pair` into `token`; the pairs whose counts changed."""
        changed: set[tuple[str, str]] = set()
        for word in sorted(self.holders.pop(pair)):
            changed |= self._merge_in(word, pair, token)
        self.pair_counts.pop(pair, None)
        changed.discard(pair)
        return changed

    def _merge_in(self, word: str, pair: tuple[str, str], token: str) -> set[tuple[str, str]]:
        old, new, i = self.splits[word], [], 0
        while i < len(old):
            if i + 1 < len(old) and (old[i], old[i + 1]) == pair:
                new.append(token)
                i += 2
            else:
                new.append(old[i])
                i += 1
        count = self.words[word]
        old_pairs, new_pairs = list(pairwise(old)), list(pairwise(new))
        for gone in old_pairs:
            self.pair_counts[gone] -= count
        for now in new_pairs:
            self.pair_counts[now] += count
        for gone in set(old_pairs) - set(new_pairs):
            if gone != pair:
                self.holders[gone].discard(word)
        for now in set(new_pairs):
            self.holders[now].add(word)
        self.splits[word] = tuple(new)
        return set(old_pairs) | set(new_pairs)
