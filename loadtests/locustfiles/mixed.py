"""Mixed traffic: three sentiment users for each digits user, each as in its own scenario.

locust -f loadtests/locustfiles/mixed.py --headless --host grpc://127.0.0.1:8001 -u 8 -r 8 -t 30s
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `locust -f`

from loadtests.grpc_user import TableShape  # noqa: F401
from loadtests.locustfiles import digits, sentiment


class MixedSentimentUser(sentiment.SentimentUser):
    scenario = "mixed"
    weight = 3


class MixedDigitsUser(digits.DigitsUser):
    scenario = "mixed"
    weight = 1
