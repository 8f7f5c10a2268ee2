"""What the SDK raises, and what to do about each: one error hierarchy, `fastpath_client.errors`.

python clients/examples/handle_errors.py              # a server on 127.0.0.1:8001 (`make serve`)
python clients/examples/handle_errors.py HOST:PORT
"""

from __future__ import annotations

import socket
import sys

from fastpath_client.errors import ClientError, InvalidInput, ModelUnavailable, Overloaded, ServerError, Timeout
from fastpath_client.retry import RetryPolicy
from fastpath_models import DigitsClient, SentimentClient


def classify(client: SentimentClient, texts: list) -> None:
    """The pattern for application code: fix what is yours, degrade on what is the server's."""
    try:
        results = client.classify(texts)  # the default deadline, 10 s, retries included
        print("ok:", [r.label for r in results])
    except InvalidInput as error:  # the request is wrong: never retried; the message names the field
        print(f"InvalidInput: {error}")
    except Overloaded as error:  # shed by the server (or the client's throttle): retried within the deadline
        print(f"Overloaded: {error}")
    except (Timeout, ModelUnavailable) as error:  # retries already happened within the deadline
        print(f"{type(error).__name__}: {error}")
        for note in getattr(error, "__notes__", []):  # why the retries stopped
            print(f"  note: {note}")
    except ServerError as error:  # the model failed: report it
        print(f"ServerError: {error}")
    except ClientError as error:  # anything else the client raises (PermissionDenied)
        print(f"{type(error).__name__}: {error}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main(url: str) -> None:
    with SentimentClient(url) as client:
        classify(client, ["A gripping, beautifully shot thriller."])
        classify(client, [""])  # the server refuses an empty text, naming the row
        classify(client, [b"caf\xe9 \xff"])  # not UTF-8
        classify(client, [42])  # the client refuses the wrong type before sending
    with SentimentClient(url, model_name="no_such_model") as client:
        classify(client, ["hello"])  # not served: ModelUnavailable, not retried
    # Nothing listens here: UNAVAILABLE, retried with backoff until the deadline (5 s, the shortest the
    # SDK takes without a ShortDeadlineWarning against Triton 2.51; the default is 10 s).
    nowhere = f"127.0.0.1:{free_port()}"
    with SentimentClient(nowhere, timeout_s=5, retry_policy=RetryPolicy(max_backoff_s=0.5)) as client:
        classify(client, ["hello"])
    with DigitsClient(url) as digits:
        try:
            digits.classify([[[0.0] * 7] * 8])  # 8x7, not 8x8
        except InvalidInput as error:
            print(f"InvalidInput: {error}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8001")
