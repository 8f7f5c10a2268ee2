"""Typed clients generated from `model_repository` by `fastpath clients generate`: do not edit.

Models:
    digits: `digits.py`, DigitsClient, AsyncDigitsClient
    embed: `embed.py`, EmbedClient, AsyncEmbedClient
    sentiment: `sentiment.py`, SentimentClient, AsyncSentimentClient

Not generated:
    embed_fused: a step of ensemble embed (use --all to include steps)
    sentiment_fused: a step of ensemble sentiment (use --all to include steps)
"""

from .digits import AsyncDigitsClient, DigitsClient, DigitsRequest, DigitsResponse
from .embed import AsyncEmbedClient, EmbedClient, EmbedRequest, EmbedResponse
from .sentiment import AsyncSentimentClient, SentimentClient, SentimentRequest, SentimentResponse

__all__ = [
    "AsyncDigitsClient",
    "AsyncEmbedClient",
    "AsyncSentimentClient",
    "DigitsClient",
    "DigitsRequest",
    "DigitsResponse",
    "EmbedClient",
    "EmbedRequest",
    "EmbedResponse",
    "SentimentClient",
    "SentimentRequest",
    "SentimentResponse",
]
