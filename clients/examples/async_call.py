"""Call the served models from the generated SDK with asyncio: many calls in flight on one channel.

python clients/examples/async_call.py                 # a server on 127.0.0.1:8001 (`make serve`)
python clients/examples/async_call.py HOST:PORT
"""

from __future__ import annotations

import asyncio
import sys

from fastpath_models import AsyncSentimentClient

TEXTS = [
    "A gripping, beautifully shot thriller.",
    "Dull, lifeless and far too long.",
    "One of the best films of the year.",
    "A tedious mess with nothing to say.",
]


async def main(url: str) -> None:
    # Create the async client inside the event loop that uses it.
    async with AsyncSentimentClient(url, timeout_s=10) as client:
        # One call per text, all in flight at once; the server batches them.
        answers = await asyncio.gather(*(client.classify([text]) for text in TEXTS))
        for text, [result] in zip(TEXTS, answers):
            print(f"{result.label:<8} p={result.probability:.3f}  {text!r}")
        # Or one call with every text: split into requests of at most the model's max batch size.
        results = await client.classify(TEXTS)
        print("one call:", [r.label for r in results])
        print("stats:", client.stats)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8001"))
