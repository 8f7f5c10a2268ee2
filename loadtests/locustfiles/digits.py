"""Digits scenario: one held-out 8x8 image per request to the `digits` model.

locust -f loadtests/locustfiles/digits.py --headless --host grpc://127.0.0.1:8001 -u 8 -r 8 -t 30s
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `locust -f`

from locust import constant, task

from fastpath_models.digits import DigitsClient
from loadtests.grpc_user import GrpcUser, TableShape  # noqa: F401
from loadtests.payloads import held_out_digits
from triton_fastpath.load.streams import ProcessStream, vary_image

_images = ProcessStream(held_out_digits, vary_image)  # one stream per process, shared by its users


def next_image(environment):
    """The next image of this process's stream."""
    return _images.next(environment.parsed_options.duplicate_ratio)


class DigitsUser(GrpcUser):
    """Classifies one image per request, back to back (a closed loop)."""

    client_class = DigitsClient
    scenario = "digits"
    wait_time = constant(0)

    @task
    def classify(self) -> None:
        self.call("digits", self.client.classify, [next_image(self.environment)])
