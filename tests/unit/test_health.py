"""The health probe's requests, built from a model's config (no server: the live checks are in tests/reliability)."""

from __future__ import annotations

import pytest

from triton_fastpath.serve.health import PROBE_ID, main, probe_request


def test_a_text_model_gets_one_row_with_a_fresh_nonce_so_no_cache_answers() -> None:
    config = {"max_batch_size": 64, "input": [{"name": "text", "data_type": "TYPE_STRING", "dims": ["1"]}]}
    first, second = probe_request(config, 1), probe_request(config, 2)
    assert first["id"] == PROBE_ID
    assert first["inputs"] == [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [f"{PROBE_ID} 1"]}]
    assert first["inputs"][0]["data"] != second["inputs"][0]["data"]


def test_numeric_inputs_are_zeros_floats_with_a_tiny_nonce_variable_dims_become_one() -> None:
    config = {
        "max_batch_size": 8,
        "input": [
            {"name": "pixels", "data_type": "TYPE_FP32", "dims": [8, 8]},
            {"name": "ids", "data_type": "TYPE_INT64", "dims": [-1]},
            {"name": "flag", "data_type": "TYPE_BOOL", "dims": [1]},
            {"name": "extra", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
        ],
    }
    pixels, ids, flag = probe_request(config, 7)["inputs"]
    assert pixels["shape"] == [1, 8, 8] and len(pixels["data"]) == 64 and pixels["data"][0] == pytest.approx(7e-6)
    assert ids == {"name": "ids", "shape": [1, 1], "datatype": "INT64", "data": [0]}
    assert flag["data"] == [False]


def test_an_unbatched_model_gets_no_batch_dimension() -> None:
    config = {"max_batch_size": 0, "input": [{"name": "x", "data_type": "TYPE_INT32", "dims": [2, 3]}]}
    assert probe_request(config, 0)["inputs"][0]["shape"] == [2, 3]


def test_the_command_line_names_what_is_wrong() -> None:
    with pytest.raises(SystemExit):
        main(["--model", "m", "--attempts", "0"])
    with pytest.raises(SystemExit):
        main([])  # --model is required


def test_an_unreachable_server_fails_the_probe_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "http://127.0.0.1:9", "--model", "sentiment", "--timeout-s", "1"]) == 1
    assert capsys.readouterr().out.startswith("FAIL sentiment: URLError")
