"""The load engine's payload streams (`triton_fastpath.load.streams`): fresh items that never repeat,
a share of duplicates, one stream per locust process. Pure: no server, no locust."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from triton_fastpath.load import (
    ProcessStream,
    duplicate_stream,
    fresh_items,
    payload_stream,
    vary_image,
    vary_item,
    vary_text,
)


@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.9])
def test_duplicate_stream_repeats_about_the_ratio_and_only_items_already_sent(ratio):
    stream = duplicate_stream(iter(range(100_000)), ratio, seed=7)
    items = list(itertools.islice(stream, 5000))
    seen: set[int] = set()
    repeats = 0
    for item in items:
        if item in seen:
            repeats += 1
        else:
            assert item == len(seen)  # new items arrive in order, none skipped
            seen.add(item)
    assert repeats / len(items) == pytest.approx(ratio, abs=0.03)


def test_duplicate_stream_is_reproducible_and_ends_with_its_source():
    first = list(itertools.islice(duplicate_stream(iter(range(1000)), 0.5, seed=3), 200))
    again = list(itertools.islice(duplicate_stream(iter(range(1000)), 0.5, seed=3), 200))
    assert first == again
    assert list(duplicate_stream(iter([1, 2]), 0.0)) == [1, 2]
    with pytest.raises(ValueError, match="ratio=1"):
        next(duplicate_stream(iter([1]), 1.0))


def test_fresh_items_never_repeat_and_vary_after_the_first_round() -> None:
    stream = fresh_items(["a", "b", "c"], vary_text, seed=1)
    items = [next(stream) for _ in range(9)]
    assert len(set(items)) == 9 and sorted(items[:3]) == ["a", "b", "c"] and items[3].startswith("1: ")
    with pytest.raises(ValueError, match="got none"):
        next(fresh_items([], vary_text))


def test_fresh_items_without_a_seed_keep_their_order() -> None:
    stream = fresh_items(["a", "b"])
    assert [next(stream) for _ in range(5)] == ["a", "b", "1: a", "1: b", "2: a"]


def test_a_tag_varies_every_round_so_streams_on_one_server_never_meet() -> None:
    """The tag goes first: it lies inside the model's token window, where a suffix could be cut off."""
    stream = fresh_items(["a", "b"], functools.partial(vary_text, tag="m"))
    assert [next(stream) for _ in range(3)] == ["m0: a", "m0: b", "m1: a"]


def test_vary_item_varies_texts_and_images_and_leaves_json_rows_alone() -> None:
    image = np.zeros((8, 8), dtype=np.float32)
    assert vary_item("t", 2) == vary_text("t", 2) == "2: t"
    assert np.array_equal(vary_item(image, 1), vary_image(image, 1)) and not np.array_equal(vary_item(image, 1), image)
    assert vary_item(image, 0) is image
    assert vary_item([[1.0]], 3) == [[1.0]] and vary_item({"x": 1}, 3) == {"x": 1}


def test_payload_stream_repeats_about_the_duplicate_ratio() -> None:
    stream = payload_stream([f"t{i}" for i in range(5000)], vary_text, duplicate_ratio=0.3, seed=7)
    sent = [next(stream) for _ in range(4000)]
    repeats = len(sent) - len(set(sent))
    assert 0.25 < repeats / len(sent) < 0.35


def test_payload_stream_in_order_repeats_the_requested_share() -> None:
    stream = payload_stream([f"t{i}" for i in range(10_000)], duplicate_ratio=0.9, seed=1, shuffle=False)
    items = [next(stream) for _ in range(2000)]
    assert 0.85 < 1 - len(set(items)) / len(items) < 0.95
    assert list(dict.fromkeys(items))[:3] == ["t0", "t1", "t2"]  # new items in their order
    with pytest.raises(ValueError, match="duplicate_ratio=1"):
        payload_stream(["a"], duplicate_ratio=1.0)


def test_default_seeds_differ_between_streams_and_a_given_seed_reproduces() -> None:
    """Not seeded by the process id (every containerised locust worker is PID 1): two streams differ."""
    texts = [f"t{i}" for i in range(1000)]
    first, second = (list(itertools.islice(payload_stream(texts, vary_text, duplicate_ratio=0.3), 50)) for _ in "ab")
    assert first != second
    again = [list(itertools.islice(payload_stream(texts, vary_text, duplicate_ratio=0.3, seed=3), 50)) for _ in "ab"]
    assert again[0] == again[1]


def test_process_stream_loads_items_on_first_use_and_keeps_one_stream() -> None:
    loads = []

    def items() -> list[str]:
        loads.append(1)
        return ["a", "b", "c"]

    stream = ProcessStream(items, vary_text, seed=1)
    assert not loads
    sent = [stream.next(0.0) for _ in range(6)]
    assert loads == [1] and len(set(sent)) == 6 and sorted(sent[:3]) == ["a", "b", "c"]
