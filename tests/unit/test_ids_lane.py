"""The ids lane without a server: which models are one, what the generator writes for them, and the
client's own checks, grouping and tokenizer handling (`fastpath_client.ids_lane`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastpath_client.errors import ClientError, InvalidInput
from fastpath_client.ids_lane import LocalTokenizer, check_texts, chunks_by_length
from triton_fastpath.config.render import parse_pbtxt
from triton_fastpath.config.settings import NativeBackend, RepoSettings
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.sdk.codegen import ids_lane_of, load_tokenizers, plan_models
from triton_fastpath.sdk.package import stale_files, write_files, write_tokenizers
from triton_fastpath.sdk.render import render_package

ROOT = Path(__file__).resolve().parents[2]
ENCODER = """
    name: "reviews_encoder" backend: "fastpath_ort" max_batch_size: 8
    input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true },
            { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true } ]
    output [ { name: "probabilities" data_type: TYPE_FP32 dims: [ 2 ] label_filename: "labels.txt" },
             { name: "label_index" data_type: TYPE_INT64 dims: [ 1 ] } ]
    parameters { key: "tokenizer_file" value: { string_value: "tokenizer.json" } }
    parameters { key: "max_length" value: { string_value: "32" } }
"""
TOKENIZER = '{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}'


def test_an_encoder_with_ids_inputs_and_a_tokenizer_parameter_is_an_ids_lane() -> None:
    config = parse_pbtxt(ENCODER)
    assert ids_lane_of(config) == ("tokenizer.json", 32)
    no_file = parse_pbtxt(ENCODER.replace('"tokenizer_file"', '"other"'))
    assert ids_lane_of(no_file) is None
    text_in = parse_pbtxt(ENCODER.replace('"input_ids"', '"text"'))
    assert ids_lane_of(text_in) is None


def test_the_generator_writes_an_ids_client_and_the_tokenizer_beside_it(tmp_path: Path) -> None:
    configs = {"reviews_encoder": parse_pbtxt(ENCODER)}
    (tmp_path / "repo" / "reviews_encoder" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "reviews_encoder" / "1" / "tokenizer.json").write_text(TOKENIZER)
    tokenizers = load_tokenizers(tmp_path / "repo", configs)
    assert tokenizers == {"reviews_encoder": TOKENIZER}
    labels = {"reviews_encoder": {"probabilities": ("bad", "good")}}
    files = render_package(plan_models(configs), configs, "repo", labels, tokenizers=tokenizers)
    assert files["reviews_encoder.tokenizer.json"] == TOKENIZER
    source = files["reviews_encoder.py"]
    assert "class ReviewsIdsClient(IdsLaneClient[LabelledText]):" in source
    assert "MAX_LENGTH = 32" in source and "def classify(" in source
    assert '"ReviewsIdsClient"' in files["__init__.py"]
    out = tmp_path / "sdk"
    write_files(out, files)
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout
    # a tokenizer file is a build output: --check compares the modules only
    (out / "reviews_encoder.tokenizer.json").write_text("{}")
    assert stale_files(out, files) == {}
    # a model that is gone takes its tokenizer file with it
    (out / "old_encoder.tokenizer.json").write_text(TOKENIZER)
    assert "old_encoder.tokenizer.json" in write_files(out, files)
    assert not (out / "old_encoder.tokenizer.json").exists()


def test_the_build_writes_the_tokenizers_of_the_sdk_in_place(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "reviews_encoder" / "1").mkdir(parents=True)
    (repo / "reviews_encoder" / "config.pbtxt").write_text(ENCODER)
    (repo / "reviews_encoder" / "1" / "tokenizer.json").write_text(TOKENIZER)
    sdk = tmp_path / "sdk"
    sdk.mkdir()
    assert write_tokenizers(repo, sdk) == ["reviews_encoder"]
    assert (sdk / "reviews_encoder.tokenizer.json").read_text() == TOKENIZER
    assert write_tokenizers(repo, sdk) == []  # unchanged: not written again


def test_texts_are_checked_as_the_server_checks_them() -> None:
    assert check_texts("m", ["  a film ", b"caf\xc3\xa9"]) == ["a film", "café"]
    for bad, problem in (("", "empty"), ("  ", "empty"), (b"\xff", "not valid UTF-8"), ("a\x00b", "NUL")):
        with pytest.raises(InvalidInput, match=rf"m: text\[1\] .*{problem}"):
            check_texts("m", ["fine", bad])
    with pytest.raises(InvalidInput, match="1,000,001 bytes"):
        check_texts("m", ["x" * 1_000_001])
    with pytest.raises(InvalidInput, match="list of str"):
        check_texts("m", "one text, not a list")
    with pytest.raises(InvalidInput, match="empty"):
        check_texts("m", [])


def test_rows_go_sorted_by_length_in_as_few_requests_as_the_max_batch_allows() -> None:
    assert chunks_by_length([5, 3, 9, 5, 3], 0) == [[1, 4, 0, 3, 2]]
    assert chunks_by_length([5, 3, 9, 5, 3], 2) == [[1, 4], [0, 3], [2]]
    assert chunks_by_length([7], 64) == [[0]]
    assert chunks_by_length([], 64) == []


def test_the_local_tokenizer_truncates_without_padding_and_flags_it(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.enable_padding(length=16)  # a file that asks for fixed padding: the lane ignores it
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    local = LocalTokenizer(path, max_length=8)
    ids, truncated = local.encode(["a b", "a " * 20, "b" * 5000])
    assert [row.tolist() for row in ids[:1]] == [[1, 2]]
    assert ids[0].dtype == np.int64
    assert len(ids[1]) == 8 and truncated == [False, True, True]  # cut at max_length; a huge text is cut too


def test_a_missing_tokenizer_file_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(ClientError, match=r"a build output, not part of the checkout.*run `make build`"):
        LocalTokenizer(tmp_path / "absent.json", 8)


def test_the_repository_serves_the_ids_lane_with_the_native_backend_unless_turned_off() -> None:
    names = {s.name for s in default_specs(RepoSettings())}
    assert {"sentiment_encoder", "embed_encoder"} <= names
    encoder = next(s for s in default_specs(RepoSettings()) if s.name == "sentiment_encoder")
    assert encoder.native and encoder.parameters["tokenizer_file"] == "tokenizer.json"
    assert encoder.labels == ("negative", "positive")  # a direct caller gets label names
    graph = {s.name for s in default_specs(RepoSettings(rendering="graph", cache=False))}
    assert "sentiment_encoder" in graph
    for off in (RepoSettings(native=NativeBackend(ids_lane=False)), RepoSettings(native=NativeBackend(enabled=False))):
        assert not {"sentiment_encoder", "embed_encoder"} & {s.name for s in default_specs(off)}


def test_the_clients_limits_are_the_servers(tmp_path: Path) -> None:
    from fastpath_client import ids_lane
    from triton_fastpath.paths import backends_importable

    backends_importable()
    from fastpath_backends.text import DEFAULT_MAX_TEXT_BYTES, TextEncoder

    assert ids_lane.MAX_TEXT_BYTES == DEFAULT_MAX_TEXT_BYTES
    path = tmp_path / "tokenizer.json"
    path.write_text(TOKENIZER)
    for max_length in (8, 64, 256):
        assert ids_lane.cut_chars(max_length) == TextEncoder(path, max_length).max_chars
