"""The default build under closed-loop load loses nothing: zero errors at concurrency 1 to 32.

The served batchers have no queue policy (in Triton 2.51 one exposes a 500 ms batcher stall that
then sheds requests, docs/known-issues.md); overload protection is the models' admission control,
which sheds nothing at normal load. Counts only, never a time: the benchmark prints each level's
max latency (`fastpath bench serving`), a shared 2-core machine makes timings no test's business.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.integration

LEVELS = (1, 4, 8, 16, 32)
SECONDS = 2.0


def closed_loop(url: str, model: str, concurrency: int, seconds: float) -> tuple[int, list[str]]:
    """`concurrency` clients each sending one unique text after the other; (answers, errors)."""
    import tritonclient.grpc as grpcclient

    answered, errors = [0] * concurrency, []
    stop = time.monotonic() + seconds

    def client(index: int) -> None:
        connection = grpcclient.InferenceServerClient(url)
        sent = 0
        while time.monotonic() < stop:
            text = grpcclient.InferInput("text", [1, 1], "BYTES")
            text.set_data_from_numpy(np.array([[f"a quiet film, client {index} #{sent}".encode()]], dtype=object))
            sent += 1
            try:
                connection.infer(model, [text], client_timeout=30)
                answered[index] += 1
            except Exception as error:  # every failure is counted, none is lost
                errors.append(f"{type(error).__name__}: {error}"[:200])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(answered), errors


@pytest.mark.parametrize("concurrency", LEVELS)
def test_the_default_build_answers_every_request_at_concurrency(triton, concurrency: int) -> None:
    answered, errors = closed_loop(triton.grpc_url, "sentiment", concurrency, SECONDS)
    assert answered > 0
    assert errors == [], f"{len(errors)} errors at concurrency {concurrency}, e.g. {errors[:3]}"
