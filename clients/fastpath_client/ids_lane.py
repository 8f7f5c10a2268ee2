"""The ids lane: tokenize in the client, send token ids to a text pipeline's encoder.

A text request to a pipeline (`sentiment`) is tokenized on the server. A client that tokenizes
itself can skip that step: the repository also serves each pipeline's encoder on its own
(`sentiment_encoder`, ids in; on the embedded target by the kit's native backend), and the
generated SDK has a `<Name>IdsClient` for it that tokenizes here, with the model's own tokenizer
file, which the SDK carries beside the module (`sentiment_encoder.tokenizer.json`). The request
then crosses no Python process on the server. The text lane stays the default: it needs no
tokenizer in the client and it has the caches.

    from fastpath_models.sentiment_encoder import SentimentIdsClient

    with SentimentIdsClient("127.0.0.1:8001", timeout_s=5) as client:
        rows = client.classify(["a gripping, beautifully shot film"])   # [LabelledText(label=...)]

Texts are checked as the server checks them (empty, whitespace only, not UTF-8, NUL, too large:
`InvalidInput` naming the row, before anything is sent), cut to the same number of characters and
truncated at the model's `max_length` tokens, flagged `truncated` as the text lane flags them.
A call's texts go out sorted by length in as few requests as the max batch allows, each padded
only to its own longest text (the mask marks the padding). Before its first request the
client checks that its tokenizer file is the one the server's model was built with (the
`tokenizer_sha256` parameter of the encoder's config): a retrained model with a stale SDK is an
error, not silently wrong ids.

Needs `tokenizers` (`pip install tokenizers`), imported only when an ids client is made. Synchronous
only.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
from tritonclient.utils import InferenceServerException

from .errors import ClientError, InvalidInput, Timeout, map_exception
from .runtime import ModelClient

__all__ = ["EmbeddedText", "IdsLaneClient", "LabelledText", "LocalTokenizer", "check_texts", "chunks_by_length"]

# The server's limits (fastpath_backends.text): the most bytes a text may have, and the characters
# a text is cut to before tokenizing (a huge text costs no more than a long one; flagged truncated).
MAX_TEXT_BYTES = 1_000_000


def cut_chars(max_length: int) -> int:
    """Characters a text is cut to before tokenizing: the server's rule for `max_length` tokens."""
    return max(1024, 32 * max_length)


def check_texts(model: str, texts: Sequence[str | bytes]) -> list[str]:
    """`texts` decoded and stripped, or `InvalidInput` naming the first bad row (the server's checks)."""
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence | np.ndarray):
        raise InvalidInput(f"{model}: texts must be a list of str or bytes (got {type(texts).__name__})", model=model)
    if len(texts) == 0:
        raise InvalidInput(f"{model}: texts is empty; pass at least one text", model=model)
    found = []
    for row, value in enumerate(texts):
        where = f"{model}: text[{row}]"
        if not isinstance(value, str | bytes):
            raise InvalidInput(f"{where} is a {type(value).__name__}; expected str or bytes", model=model)
        data = value.encode("utf-8") if isinstance(value, str) else value
        if len(data) > MAX_TEXT_BYTES:
            raise InvalidInput(f"{where} is {len(data):,} bytes; the limit is {MAX_TEXT_BYTES:,} bytes", model=model)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidInput(
                f"{where} is not valid UTF-8: {error.reason} (byte 0x{data[error.start]:02x} at offset {error.start})",
                model=model,
            ) from None
        if "\x00" in text:
            raise InvalidInput(f"{where} contains a NUL character; send plain text", model=model)
        text = text.strip()
        if not text:
            raise InvalidInput(f"{where} is empty or whitespace only; send at least one word", model=model)
        found.append(text)
    return found


class LocalTokenizer:
    """The model's `tokenizers` tokenizer, truncating at `max_length` tokens, never padding.

    Raises:
        ClientError: `tokenizers` is not installed, or the file is missing (the message says what to do).
    """

    def __init__(self, path: Path, max_length: int) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ClientError(
                "the ids lane tokenizes in the client and needs `tokenizers`: pip install tokenizers "
                "(or call the text model, which tokenizes on the server)"
            ) from None
        path = Path(path)
        if not path.is_file():
            raise ClientError(
                f"no tokenizer file at {path}: it is a build output, not part of the checkout (the model's "
                "tokenizer is trained or copied by the build): run `make build` in the repository (it writes "
                "the file beside the generated module), or `fastpath clients generate` against a built "
                "repository, or pass tokenizer_file= (the model folder's tokenizer.json)"
            )
        self.path = path
        self.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        self.max_length = max_length
        self.max_chars = cut_chars(max_length)
        self._tokenizer = Tokenizer.from_file(str(path))
        self.pad_id = self._tokenizer.token_to_id("[PAD]") or 0  # as the server pads (masked anyway)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_length)

    def encode(self, texts: Sequence[str]) -> tuple[list[np.ndarray], list[bool]]:
        """Each text's ids at its natural length (int64), and whether it was truncated."""
        encodings = self._tokenizer.encode_batch([t[: self.max_chars] for t in texts])
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        truncated = [bool(e.overflowing) or len(t) > self.max_chars for e, t in zip(encodings, texts)]
        return ids, truncated


def chunks_by_length(lengths: Sequence[int], max_rows: int) -> list[list[int]]:
    """Row indices sorted by length, cut into requests of at most `max_rows` (0: one request).

    Each request is padded to its own longest row; sorting keeps the rows of a request close in
    length, as the text lane's length buckets do on the server.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    step = max_rows or len(order) or 1
    return [order[start : start + step] for start in range(0, len(order), step)]


@dataclass(frozen=True, eq=False)
class LabelledText:
    """One text's answer from a classifier's encoder (the fields of the text lane's response)."""

    label: str
    probability: float
    probabilities: np.ndarray
    truncated: bool


@dataclass(frozen=True, eq=False)
class EmbeddedText:
    """One text's answer from an embedding model's encoder."""

    embedding: np.ndarray
    truncated: bool


ResultT = TypeVar("ResultT", LabelledText, EmbeddedText)


class IdsLaneClient(Generic[ResultT]):
    """Tokenize here, call `ENCODER`'s model with ids (the generated `<Name>IdsClient` sets the class attributes).

    Args:
        url: the server's gRPC address, `host:port`.
        tokenizer_file: the model's tokenizer (default: `TOKENIZER_FILE`, beside the generated module).
        options: the `ModelClient` options (timeout_s, retries, ...), for the encoder's client.
    """

    ENCODER: ClassVar[type[ModelClient]]
    TOKENIZER_FILE: ClassVar[Path]
    MAX_LENGTH: ClassVar[int]

    def __init__(self, url: str, *, tokenizer_file: str | Path | None = None, **options: Any) -> None:
        self._tokenizer = LocalTokenizer(Path(tokenizer_file or self.TOKENIZER_FILE), self.MAX_LENGTH)
        self.encoder = self.ENCODER(url, **options)
        self.model_name = self.encoder.model_name
        self._checked = False
        outputs = {spec.name: spec for spec in self.ENCODER.SIGNATURE.outputs}
        self._labels = outputs["probabilities"].labels if "probabilities" in outputs else ()

    def __enter__(self) -> IdsLaneClient[ResultT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.encoder.close()

    def check_tokenizer(self) -> None:
        """Compare the tokenizer file with the server model's (`tokenizer_sha256`); once per client.

        Raises:
            InvalidInput: the files differ (the model was rebuilt: generate the SDK again).
        """
        if self._checked:
            return
        try:
            answer = self.encoder.transport.get_model_config(
                self.model_name, client_timeout=self.encoder.timeout_s, **self.encoder._header_kwargs()
            )
        except InferenceServerException as exc:
            raise map_exception(exc, self.model_name) from exc
        parameters = answer.config.parameters
        expected = parameters["tokenizer_sha256"].string_value if "tokenizer_sha256" in parameters else ""
        if expected and expected != self._tokenizer.sha256:
            raise InvalidInput(
                f"{self.model_name}: the tokenizer file {self._tokenizer.path} is not the one the server's model was "
                "built with (tokenizer_sha256 differs): generate the SDK again (make generate-clients)",
                model=self.model_name,
            )
        self._checked = True

    def _call(self, texts: Sequence[str | bytes], *, timeout_s: float | None, priority: int, request_id: str) -> list:
        """Check, tokenize, send (as few requests as the max batch allows; one deadline for all), join in order."""
        checked = check_texts(self.model_name, texts)
        ids, truncated = self._tokenizer.encode(checked)
        budget = self.encoder.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        self.check_tokenizer()
        results: list[Any] = [None] * len(checked)
        chunks = chunks_by_length([len(row) for row in ids], self.ENCODER.SIGNATURE.max_batch_size)
        for number, chunk in enumerate(chunks):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"{self.model_name}: the deadline of {budget:g} s passed", model=self.model_name)
            longest = max(len(ids[i]) for i in chunk)
            rows = []
            for i in chunk:
                row = np.full(longest, self._tokenizer.pad_id, dtype=np.int64)
                row[: len(ids[i])] = ids[i]
                mask = np.zeros(longest, dtype=np.int64)
                mask[: len(ids[i])] = 1
                rows.append(self.ENCODER.REQUEST(row, mask))
            rid = f"{request_id}/{number}" if request_id and len(chunks) > 1 else request_id
            answers = self.encoder._run(rows, timeout_s=remaining, priority=priority, request_id=rid)
            for i, answer in zip(chunk, answers):
                results[i] = self._result(answer, truncated[i])
        return results

    def _result(self, answer: Any, truncated: bool) -> LabelledText | EmbeddedText:
        if hasattr(answer, "embedding"):
            return EmbeddedText(np.asarray(answer.embedding), truncated)
        scores = np.asarray(answer.probabilities)
        index = int(np.asarray(answer.label_index).reshape(-1)[0])
        label = self._labels[index] if index < len(self._labels) else str(index)
        return LabelledText(label, float(scores[index]), scores, truncated)
