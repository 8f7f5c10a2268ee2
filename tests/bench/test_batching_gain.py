"""The encoder's own gain from batching (`bench/batching_gain.py`), measured on the built sentiment
encoder: every plan runs every text once, and the gain is a ratio of measured times (no timing
asserted)."""

from __future__ import annotations

import pytest

from triton_fastpath.bench.batching_gain import batching_gain, describe, plans
from triton_fastpath.bench.imported import bucket_rows
from triton_fastpath.paths import BUILD_DIR

ENCODER = BUILD_DIR / "sentiment" / "onnx" / "model.int8.onnx"
TOKENIZER = BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json"


def test_every_plan_runs_every_text_once_and_buckets_hold_texts_of_near_lengths() -> None:
    lengths = [9, 3, 7, 1, 12, 5, 4, 8, 2, 6]
    found = plans(lengths, batch=4, bucket_rows=2)
    names = ["one text per Run", "batches of 4, padded to the longest", "batches of 4, Runs of 2 by length"]
    assert list(found) == names
    for runs in found.values():
        assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    assert found["batches of 4, padded to the longest"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert found["batches of 4, Runs of 2 by length"] == [[3, 1], [2, 0], [6, 5], [7, 4], [8, 9]]
    assert plans(lengths, batch=4, bucket_rows=0)["batches of 4, Runs of 0 by length"][0] == [3, 1, 2, 0]


def test_a_served_model_without_the_parameter_gets_the_kits_default_bucket(tmp_path) -> None:
    (tmp_path / "m").mkdir()
    parameter = 'parameters { key: "length_bucket_rows" value { string_value: "8" } }'
    (tmp_path / "m" / "config.pbtxt").write_text(f'name: "m"\n{parameter}\n')
    assert bucket_rows(tmp_path, "m") == 8
    assert bucket_rows(tmp_path, "absent") == 4


@pytest.mark.skipif(not ENCODER.is_file(), reason="build/ has no sentiment encoder; run `fastpath build`")
def test_the_gain_is_one_text_alone_over_the_best_batched_plan() -> None:
    texts = [f"a quiet film, number {n}, " + "with more words " * (n % 5) for n in range(12)]
    gain = batching_gain(ENCODER, TOKENIZER, 64, texts, bucket_rows=4, batch=8, repeats=1)
    times = gain["ms_per_text"]
    assert set(times) == set(plans([1] * 12, batch=8, bucket_rows=4)) and all(ms > 0 for ms in times.values())
    batched = min(ms for name, ms in times.items() if name != "one text per Run")
    assert gain["ratio"] == pytest.approx(times["one text per Run"] / batched)
    assert gain["texts"] == 12 and gain["mean_tokens"] > 5
    assert f"**{gain['ratio']:.2f}x**" in describe(gain)
