"""Served heads folded into exported graphs, so no serving step has to compute them."""

from __future__ import annotations

import torch
from torch import nn


class ServedClassifier(nn.Module):
    """What a served classifier graph computes: probabilities [B, C] and the label index [B, 1].

    Softmax and argmax are folded into the exported graph, so no serving step has to compute
    them. Wraps a module returning scores, or a Hugging Face model returning `.logits`.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.model(*args, **kwargs)
        scores = getattr(scores, "logits", scores)
        probabilities = torch.softmax(scores, dim=-1)
        return probabilities, torch.argmax(probabilities, dim=-1, keepdim=True)
