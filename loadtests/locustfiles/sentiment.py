"""Sentiment scenario: one held-out review text per request to the `sentiment` ensemble.

    locust -f loadtests/locustfiles/sentiment.py --headless --host grpc://127.0.0.1:8001 \
        -u 8 -r 8 -t 30s --shape steady --duplicate-ratio 0.3
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `locust -f`

from locust import constant, task

from fastpath_models.sentiment import SentimentClient
from loadtests.grpc_user import GrpcUser, TableShape  # noqa: F401
from loadtests.payloads import held_out_texts
from triton_fastpath.load.streams import ProcessStream, vary_text

_texts = ProcessStream(held_out_texts, vary_text)  # one stream per process, shared by its users


def next_text(environment) -> str:
    """The next text of this process's stream."""
    return _texts.next(environment.parsed_options.duplicate_ratio)


class SentimentUser(GrpcUser):
    """Classifies one text per request, back to back (a closed loop)."""

    client_class = SentimentClient
    scenario = "sentiment"
    wait_time = constant(0)

    @task
    def classify(self) -> None:
        self.call("sentiment", self.client.classify, [next_text(self.environment)])
