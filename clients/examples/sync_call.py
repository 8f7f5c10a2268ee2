"""Call the served models from the generated SDK, synchronously.

    python clients/examples/sync_call.py                  # a server on 127.0.0.1:8001 (`make serve`)
    python clients/examples/sync_call.py HOST:PORT

Needs only the `client` extra (`pip install '.[client]'`: tritonclient[grpc] and numpy).
"""

from __future__ import annotations

import sys

import numpy as np

from fastpath_models import DigitsClient, SentimentClient

TEXTS = ["A moving, beautifully acted film that stays with you.", "Tedious, predictable and far too long."]


def main(url: str) -> None:
    # One client holds one gRPC channel: create it once, share it between threads. Every call has a
    # deadline (timeout_s, retries included): the default is 10 s, and against Triton 2.51 never below
    # 5 s, where the SDK warns (docs/clients.md, "Deadlines").
    with SentimentClient(url) as sentiment:
        for text, result in zip(TEXTS, sentiment.classify(TEXTS)):
            print(f"sentiment: {result.label:<8} p={result.probability:.3f} truncated={result.truncated}  {text!r}")
        # A second model's client can share the channel.
        with DigitsClient(client=sentiment.transport) as digits:
            image = np.zeros((8, 8), dtype=np.float32)
            image[1:7, 3:5] = 16.0  # a vertical bar: most often read as a 1
            [answer] = digits.classify([image])
            print(f"digits: label={answer.label} p={float(answer.probabilities.max()):.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8001")
