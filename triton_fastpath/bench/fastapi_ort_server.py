"""The baseline a team writes instead of Triton: FastAPI + uvicorn + `tokenizers` + onnxruntime INT8.

About forty lines of real logic, as such services are written: the plain `tokenizers` library
(truncation at 64 tokens; each text at its natural length, no padding for one text), one onnxruntime session per
model with a fixed thread count, an `async def` endpoint per model (one inference at a time per
worker, no batching), JSON in and out. Same HTTP protocol as `naive_server`, so the load
generator's `naive` protocol drives both:

    python -m triton_fastpath.bench.fastapi_ort_server --port 8080 --workers 2 --ort-threads 1

Endpoints: `POST /v1/sentiment {"text": "..."}`, `POST /v1/digits {"pixels": [[...8]...8]}`,
`GET /health`; with `--onnx NAME=FILE` (an imported model) only
`POST /v1/NAME {"inputs": {...}}` and `GET /health`. With `--workers N` uvicorn starts N
processes, each building its app with `app_factory` from the settings passed in environment variables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from triton_fastpath.paths import BUILD_DIR

MAX_LENGTH = 64
ENV_BUILD_DIR = "FASTAPI_ORT_BUILD_DIR"
ENV_ORT_THREADS = "FASTAPI_ORT_THREADS"
ENV_ONNX = "FASTAPI_ORT_ONNX"  # "name=path": serve that one ONNX model instead (imported models)
ENV_TEXT = "FASTAPI_ORT_TEXT"  # "name=onnx,tokenizer,max_length": one text model (imported sentence models)


class RowRequest(BaseModel):
    """`POST /v1/<name>` body of an imported model: one row, `{input name: value}`."""

    inputs: dict[str, Any]


class TextRequest(BaseModel):
    """`POST /v1/sentiment` body."""

    text: str


class PixelsRequest(BaseModel):
    """`POST /v1/digits` body: an 8x8 image, values 0..16."""

    pixels: list[list[float]]


def load_tokenizer(path: Path, max_length: int = MAX_LENGTH) -> Any:
    """A `tokenizers.Tokenizer` truncating at `max_length` tokens; a batch pads to its longest text.

    As a team writes it: one text is encoded at its natural length (padding it to 64 would make
    the encoder compute over padding, 1.8x the work for these texts).
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id)
    return tokenizer


def load_session(path: Path, threads: int = 1) -> Any:
    """An onnxruntime CPU session with `threads` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def classify(session: Any, tokenizer: Any, texts: list[str]) -> np.ndarray:
    """Probabilities [N, labels] from our export (softmax is part of the graph)."""
    encodings = tokenizer.encode_batch(texts)
    feeds = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
    }
    return session.run(["probabilities"], feeds)[0]


def new_app(title: str) -> Any:
    """A FastAPI app with `GET /health` (what the harness polls before it sends load)."""
    from fastapi import FastAPI

    app = FastAPI(title=title)

    @app.get("/health")
    async def health() -> dict:
        return {"ready": True}

    return app


def create_app(build_dir: Path = BUILD_DIR, ort_threads: int = 1) -> Any:
    """The FastAPI app serving the built sentiment (INT8) and digits ONNX models."""
    from fastapi import HTTPException

    tokenizer = load_tokenizer(build_dir / "sentiment" / "onnx" / "tokenizer.json")
    sentiment_session = load_session(build_dir / "sentiment" / "onnx" / "model.int8.onnx", ort_threads)
    digits_session = load_session(build_dir / "digits" / "onnx" / "model.onnx", ort_threads)
    id2label = json.loads((build_dir / "sentiment" / "hf" / "config.json").read_text())["id2label"]
    labels = [id2label[str(i)] for i in range(len(id2label))]
    app = new_app("FastAPI + onnxruntime baseline")

    @app.post("/v1/sentiment")
    async def sentiment(request: TextRequest) -> dict:
        if not request.text.strip():
            raise HTTPException(status_code=400, detail="text is empty; send at least one word")
        probabilities = classify(sentiment_session, tokenizer, [request.text])[0]
        best = int(np.argmax(probabilities))
        return {
            "label": labels[best],
            "probability": float(probabilities[best]),
            "probabilities": probabilities.tolist(),
        }

    @app.post("/v1/digits")
    async def digits(request: PixelsRequest) -> dict:
        pixels = np.asarray(request.pixels, dtype=np.float32)
        if pixels.shape != (8, 8):
            raise HTTPException(status_code=400, detail=f"pixels has shape {pixels.shape}; expected (8, 8)")
        probabilities = digits_session.run(["probabilities"], {"pixels": pixels[None]})[0][0]
        return {"label": int(np.argmax(probabilities)), "probabilities": probabilities.tolist()}

    return app


def create_text_app(name: str, onnx_file: Path, tokenizer_file: Path, max_length: int, ort_threads: int = 1) -> Any:
    """A text model (e.g. an imported sentence-transformers encoder, pooling in the graph):
    `POST /v1/<name> {"text": "..."}`, the text tokenized at its natural length (truncated at
    `max_length`), one Run a request; answers `{"probabilities": first output row}`."""
    from fastapi import HTTPException

    tokenizer = load_tokenizer(tokenizer_file, max_length)
    session = load_session(onnx_file, ort_threads)
    wanted = {i.name for i in session.get_inputs()}
    app = new_app(f"FastAPI + onnxruntime: {name}")

    @app.post(f"/v1/{name}")
    async def infer(request: TextRequest) -> dict:
        if not request.text.strip():
            raise HTTPException(status_code=400, detail="text is empty; send at least one word")
        encoding = tokenizer.encode(request.text)
        feeds = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([encoding.type_ids], dtype=np.int64),
        }
        row = session.run(None, {key: value for key, value in feeds.items() if key in wanted})[0][0]
        return {"probabilities": row.tolist()}

    return app


def create_onnx_app(name: str, onnx_file: Path, ort_threads: int = 1) -> Any:
    """The same service for any one ONNX model: `POST /v1/<name> {"inputs": {input: row}}`, one row a request.

    Answers `{"outputs": {output: row}}`, and `probabilities` too when the model has a class-scores
    output of that name or only one float output.
    """
    from fastapi import HTTPException

    session = load_session(onnx_file, ort_threads)
    dtypes = {i.name: _ORT_DTYPES.get(i.type, np.float32) for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    app = new_app(f"FastAPI + onnxruntime: {name}")

    @app.post(f"/v1/{name}")
    async def infer(request: RowRequest) -> dict:
        try:
            feeds = {key: np.asarray(request.inputs[key], dtype=dtype)[None] for key, dtype in dtypes.items()}
            rows = session.run(None, feeds)
        except (KeyError, TypeError, ValueError) as error:
            raise HTTPException(status_code=400, detail=f"bad inputs: {error}") from error
        outputs = {key: value[0].tolist() for key, value in zip(names, rows, strict=True)}
        return {"outputs": outputs, "probabilities": outputs.get("probabilities", outputs[names[0]])}

    return app


_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
    "tensor(float16)": np.float16,
}


def app_factory() -> Any:
    """The app of one uvicorn worker, from `FASTAPI_ORT_BUILD_DIR`, `FASTAPI_ORT_THREADS` (and `FASTAPI_ORT_ONNX`)."""
    threads = int(os.environ.get(ENV_ORT_THREADS, "1"))
    if os.environ.get(ENV_TEXT):
        name, spec = os.environ[ENV_TEXT].split("=", 1)
        onnx_file, tokenizer_file, max_length = spec.split(",")
        return create_text_app(name, Path(onnx_file), Path(tokenizer_file), int(max_length), threads)
    if os.environ.get(ENV_ONNX):
        name, path = os.environ[ENV_ONNX].split("=", 1)
        return create_onnx_app(name, Path(path), threads)
    return create_app(Path(os.environ.get(ENV_BUILD_DIR, str(BUILD_DIR))), threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default %(default)s)")
    parser.add_argument("--ort-threads", type=int, default=1, help="onnxruntime intra-op threads per worker")
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR, help="where the built models are")
    parser.add_argument("--onnx", metavar="NAME=FILE", help="serve this one ONNX model as /v1/NAME instead")
    parser.add_argument(
        "--text-onnx",
        metavar="NAME=FILE,TOKENIZER,MAX_LENGTH",
        help="serve this one text model (ids + mask in) as /v1/NAME {text} instead",
    )
    args = parser.parse_args(argv)
    import uvicorn

    if args.text_onnx:
        name, _, spec = args.text_onnx.partition("=")
        parts = spec.split(",")
        if not name or len(parts) != 3 or not all(Path(p).is_file() for p in parts[:2]) or not parts[2].isdigit():
            parser.error(f"--text-onnx {args.text_onnx!r}: expected NAME=FILE,TOKENIZER,MAX_LENGTH with existing files")
        os.environ[ENV_TEXT] = f"{name}={Path(parts[0]).resolve()},{Path(parts[1]).resolve()},{parts[2]}"
    if args.onnx:
        name, _, path = args.onnx.partition("=")
        if not name or not Path(path).is_file():
            parser.error(f"--onnx {args.onnx!r}: expected NAME=FILE with an existing file")
        os.environ[ENV_ONNX] = f"{name}={Path(path).resolve()}"
    os.environ[ENV_BUILD_DIR] = str(args.build_dir.resolve())
    os.environ[ENV_ORT_THREADS] = str(args.ort_threads)
    uvicorn.run(
        "triton_fastpath.bench.fastapi_ort_server:app_factory",
        factory=True,
        host="127.0.0.1",
        port=args.port,
        workers=args.workers,
        log_level="warning",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
