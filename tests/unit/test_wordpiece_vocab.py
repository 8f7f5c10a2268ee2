"""The sentiment tokenizer's vocabulary is learned the same way on every run (`models.wordpiece_vocab`):
`tokenizers`' WordPieceTrainer is not (hash-map order breaks ties between merges), so a rebuild gave
another vocabulary, another model and another `tokenizer_sha256`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from triton_fastpath.models.wordpiece_vocab import learn_vocab

SPECIALS = ["[PAD]", "[UNK]"]


def merged_tokens(vocab: dict[str, int]) -> list[str]:
    """The learned pieces (longer than one character), in id order."""
    return [t for t in sorted(vocab, key=vocab.get) if t not in SPECIALS and len(t.removeprefix("##")) > 1]


def test_merges_go_most_frequent_pair_first_ties_by_text_and_stop_at_min_frequency() -> None:
    words = Counter({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5})
    vocab = learn_vocab(words, vocab_size=100, min_frequency=5, special_tokens=SPECIALS)
    # (##u ##g) 20, then (##u ##n) 16, (h ##ug) 15, (p ##un) 12; (hug ##s) and (p ##ug) tie at 5:
    # "hug" sorts before "p"; (b ##un) at 4 is under min_frequency.
    assert merged_tokens(vocab) == ["##ug", "##un", "hug", "pun", "hugs", "pug"]
    alphabet = [t for t in sorted(vocab, key=vocab.get) if t not in SPECIALS][:7]
    assert alphabet == ["b", "h", "p", "##g", "##n", "##s", "##u"]
    assert [vocab[s] for s in SPECIALS] == [0, 1]


def test_vocab_size_bounds_the_vocabulary() -> None:
    words = Counter({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5})
    vocab = learn_vocab(words, vocab_size=10, min_frequency=1, special_tokens=SPECIALS)
    assert len(vocab) == 10 and merged_tokens(vocab) == ["##ug"]


SCRIPT = """
import random, hashlib
from triton_fastpath.models.train import train_wordpiece
rng = random.Random(3)
syllables = ["ka", "ki", "ru", "ra", "to", "ta", "mi", "mo", "ne", "na", "su", "se", "é", "ß", "中"]
texts = [" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(12))
         for _ in range(400)]
print(hashlib.sha256(train_wordpiece(texts, 600).to_str().encode()).hexdigest())
"""


def test_the_trained_tokenizer_is_the_same_in_processes_with_different_hash_seeds() -> None:
    """Many equal counts (400 texts of 15 syllables): ties everywhere. Two processes with different
    string-hash seeds (set iteration order differs) train byte-identical tokenizers."""
    digests = set()
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
        digests.add(run.stdout.strip().splitlines()[-1])
    assert len(digests) == 1, digests


def test_the_tokenizer_json_is_a_plain_wordpiece_model() -> None:
    """What the C++ WordPiece tokenizer and `tokenizers` read: a WordPiece model with `##`
    continuations and [UNK], BERT normalizer and pre-tokenizer (train_wordpiece builds it)."""
    from triton_fastpath.models.train import train_wordpiece

    texts = ["the film was good", "the film was bad", "a good film", "a bad plot", "good plot"] * 3
    config = json.loads(train_wordpiece(texts, 200).to_str())
    assert config["model"]["type"] == "WordPiece"
    assert config["model"]["continuing_subword_prefix"] == "##" and config["model"]["unk_token"] == "[UNK]"
    assert config["normalizer"]["type"] == "BertNormalizer" and config["pre_tokenizer"]["type"] == "BertPreTokenizer"
