"""Typed clients generated from `model_repository` by `scripts/generate_clients.py`: do not edit.

Models:
    digits: `digits.py`, DigitsClient, AsyncDigitsClient
    embed: `embed.py`, EmbedClient, AsyncEmbedClient
    sentiment: `sentiment.py`, SentimentClient, AsyncSentimentClient

Not generated:
    embed_encoder: a step of ensemble embed (use --all to include steps)
    embed_tokenizer: a step of ensemble embed (use --all to include steps)
    sentiment_cache: a step of ensemble sentiment (use --all to include steps)
    sentiment_encoder: a step of sentiment_cache (parameter encoder_model) (use --all to include steps)
    sentiment_postprocess: a step of ensemble sentiment (use --all to include steps)
    sentiment_tokenizer: a step of ensemble sentiment (use --all to include steps)
"""

from clients.generated.digits import AsyncDigitsClient, DigitsClient, DigitsRequest, DigitsResponse
from clients.generated.embed import AsyncEmbedClient, EmbedClient, EmbedRequest, EmbedResponse
from clients.generated.sentiment import AsyncSentimentClient, SentimentClient, SentimentRequest, SentimentResponse

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
