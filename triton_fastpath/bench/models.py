"""The trained torch models and tokenizer, loaded the same way by the naive server and PyTriton.

Both baselines serve exactly the weights and tokenizer the ONNX export was made from
(`build/sentiment/hf`, `build/sentiment/onnx/tokenizer.json`, `build/digits/model.pt`), in eager
FP32, so the benchmark compares serving stacks, not models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.errors import ConfigError
from triton_fastpath.paths import BUILD_DIR, backends_importable

MAX_LENGTH = 64


@dataclass
class TorchModels:
    """Eager FP32 models and the tokenizer; `classify_texts` and `classify_digits` are batch calls."""

    sentiment: Any
    encoder: Any
    labels: list[str]
    digits: Any

    def classify_texts(self, texts: list[str]) -> np.ndarray:
        """Probabilities [N, labels]; pads only to the batch's longest text (the mask hides the rest)."""
        import torch

        encoded = self.encoder.encode(texts)
        longest = max(1, int(encoded.attention_mask.sum(axis=1).max()))
        ids = torch.from_numpy(encoded.input_ids[:, :longest])
        mask = torch.from_numpy(encoded.attention_mask[:, :longest])
        with torch.inference_mode():
            logits = self.sentiment(input_ids=ids, attention_mask=mask).logits
            return torch.softmax(logits, dim=-1).numpy()

    def classify_digits(self, pixels: np.ndarray) -> np.ndarray:
        """Probabilities [N, 10] of float32 images [N, 8, 8] (values 0..16)."""
        import torch

        with torch.inference_mode():
            probabilities, _ = self.digits(torch.from_numpy(np.asarray(pixels, dtype=np.float32)))
            return probabilities.numpy()


def load_torch_models(build_dir: Path = BUILD_DIR, *, threads: int | None = None) -> TorchModels:
    """Load the built sentiment BERT (eager attention), its tokenizer and the digits CNN.

    Args:
        build_dir: where `fastpath build` left the checkpoints.
        threads: torch intra-op threads (None keeps torch's default, one per core).

    Raises:
        ConfigError: naming the missing file and the command that builds it.
    """
    import torch

    from triton_fastpath.models.train import load_digits_model
    from triton_fastpath.recipes.steps import load_hf_classifier

    needed = [build_dir / "sentiment" / "hf" / "model.safetensors", build_dir / "digits" / "model.pt"]
    for path in needed:
        if not path.exists():
            raise ConfigError(f"{path} is missing; run `fastpath build` first")
    if threads:
        torch.set_num_threads(threads)
    backends_importable()
    from fastpath_backends.text import TextEncoder

    model, _, labels = load_hf_classifier(build_dir / "sentiment" / "hf")
    encoder = TextEncoder(build_dir / "sentiment" / "onnx" / "tokenizer.json", MAX_LENGTH)
    return TorchModels(model.eval(), encoder, labels, load_digits_model(build_dir / "digits" / "model.pt"))
