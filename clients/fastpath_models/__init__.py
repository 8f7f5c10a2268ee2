"""Typed clients generated from `model_repository` by `fastpath clients generate`: do not edit.

Models:
    digits: `digits.py`, DigitsClient, AsyncDigitsClient
    embed: `embed.py`, EmbedClient, AsyncEmbedClient
    embed_encoder: `embed_encoder.py`, EmbedEncoderClient, AsyncEmbedEncoderClient
    sentiment: `sentiment.py`, SentimentClient, AsyncSentimentClient
    sentiment_encoder: `sentiment_encoder.py`, SentimentEncoderClient, AsyncSentimentEncoderClient

Not generated:
    embed_fused: a step of ensemble embed (use --all to include steps)
"""

from .digits import AsyncDigitsClient, DigitsClient, DigitsRequest, DigitsResponse
from .embed import AsyncEmbedClient, EmbedClient, EmbedRequest, EmbedResponse
from .embed_encoder import (
    AsyncEmbedEncoderClient,
    EmbedEncoderClient,
    EmbedEncoderRequest,
    EmbedEncoderResponse,
    EmbedIdsClient,
)
from .sentiment import AsyncSentimentClient, SentimentClient, SentimentRequest, SentimentResponse
from .sentiment_encoder import (
    AsyncSentimentEncoderClient,
    SentimentEncoderClient,
    SentimentEncoderRequest,
    SentimentEncoderResponse,
    SentimentIdsClient,
)

__all__ = [
    "AsyncDigitsClient",
    "AsyncEmbedClient",
    "AsyncEmbedEncoderClient",
    "AsyncSentimentClient",
    "AsyncSentimentEncoderClient",
    "DigitsClient",
    "DigitsRequest",
    "DigitsResponse",
    "EmbedClient",
    "EmbedEncoderClient",
    "EmbedEncoderRequest",
    "EmbedEncoderResponse",
    "EmbedIdsClient",
    "EmbedRequest",
    "EmbedResponse",
    "SentimentClient",
    "SentimentEncoderClient",
    "SentimentEncoderRequest",
    "SentimentEncoderResponse",
    "SentimentIdsClient",
    "SentimentRequest",
    "SentimentResponse",
]
