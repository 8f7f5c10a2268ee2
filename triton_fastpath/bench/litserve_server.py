"""A peer of the serving benchmark: LitServe serving the sentiment INT8 ONNX model, set up as its docs
recommend for throughput: `max_batch_size` 32 and `batch_timeout` 1 ms on the LitAPI,
`workers_per_device` inference workers on the CPU, one API server process per worker (its default),
ZeroMQ between them (`fast_queue`, "for >100 RPS"). Same tokenization and session as
`fastapi_ort_server` (its `load_tokenizer`, `load_session`, `classify`: `tokenizers` at natural
length, a batch padded to its longest text, one onnxruntime thread per worker), same JSON protocol
as the FastAPI baseline:

    build/peers/venv/bin/python -m triton_fastpath.bench.litserve_server --port 8080 --workers 2

Endpoints: `POST /v1/sentiment {"text": "..."}` (`{label, probability, probabilities}`), `GET /health`.
Runs in the peers' venv (`fastpath bench serving --install-peers`), not the kit's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import litserve as ls
from fastapi import HTTPException

from triton_fastpath.bench.fastapi_ort_server import classify, load_session, load_tokenizer
from triton_fastpath.paths import BUILD_DIR

MAX_BATCH, BATCH_TIMEOUT_S = 32, 0.001


class SentimentAPI(ls.LitAPI):
    """decode_request -> batch (a list of texts) -> predict -> unbatch -> encode_response."""

    def __init__(self, build_dir: Path) -> None:
        super().__init__(max_batch_size=MAX_BATCH, batch_timeout=BATCH_TIMEOUT_S, api_path="/v1/sentiment")
        self.build_dir = build_dir

    def setup(self, device: str) -> None:
        onnx = self.build_dir / "sentiment" / "onnx"
        self.tokenizer = load_tokenizer(onnx / "tokenizer.json")
        self.session = load_session(onnx / "model.int8.onnx", 1)
        id2label = json.loads((self.build_dir / "sentiment" / "hf" / "config.json").read_text())["id2label"]
        self.labels = [id2label[str(i)] for i in range(len(id2label))]

    def decode_request(self, request: dict) -> str:
        text = request.get("text")
        if not isinstance(text, str) or not text.strip():
            raise HTTPException(status_code=400, detail="text is empty or missing; send at least one word")
        return text

    def predict(self, texts: list[str]) -> list:
        return list(classify(self.session, self.tokenizer, texts))

    def encode_response(self, row: Any) -> dict:  # one row of probabilities (numpy)
        best = int(row.argmax())
        return {"label": self.labels[best], "probability": float(row[best]), "probabilities": row.tolist()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--workers", type=int, default=2, help="inference worker processes (default %(default)s)")
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR, help="where the built models are")
    args = parser.parse_args(argv)
    api = SentimentAPI(args.build_dir.resolve())
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=args.workers, fast_queue=True)
    server.run(host="127.0.0.1", port=args.port, log_level="warning", generate_client_file=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
