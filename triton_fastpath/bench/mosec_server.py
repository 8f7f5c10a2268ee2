"""A peer of the serving benchmark: mosec serving the sentiment INT8 ONNX model, set up as its docs
recommend for throughput: N worker processes behind mosec's Rust front end, dynamic batching (up to
32 texts, 1 ms wait). Same tokenization and session as `fastapi_ort_server` (its `load_tokenizer`,
`load_session`, `classify`: `tokenizers` at natural length, a batch padded to its longest text, one
onnxruntime thread per worker), same JSON protocol as the FastAPI baseline:

    build/peers/venv/bin/python -m triton_fastpath.bench.mosec_server --port 8080 --workers 2

Endpoints: `POST /v1/sentiment {"text": "..."}` (`{label, probability, probabilities}`), `GET /`.
Runs in the peers' venv (`fastpath bench serving --install-peers`), not the kit's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mosec import Server, ValidationError, Worker

from triton_fastpath.bench.fastapi_ort_server import classify, load_session, load_tokenizer
from triton_fastpath.paths import BUILD_DIR

ENV_BUILD_DIR = "MOSEC_PEER_BUILD_DIR"
MAX_BATCH, MAX_WAIT_MS = 32, 1


class Sentiment(Worker):
    """One worker process: the model loaded once, `forward` called with a dynamic batch of JSON bodies."""

    def __init__(self) -> None:
        super().__init__()
        build = Path(os.environ[ENV_BUILD_DIR])
        self.tokenizer = load_tokenizer(build / "sentiment" / "onnx" / "tokenizer.json")
        self.session = load_session(build / "sentiment" / "onnx" / "model.int8.onnx", 1)
        id2label = json.loads((build / "sentiment" / "hf" / "config.json").read_text())["id2label"]
        self.labels = [id2label[str(i)] for i in range(len(id2label))]

    def forward(self, data: list[dict]) -> list[dict]:
        texts = [item.get("text") if isinstance(item, dict) else None for item in data]
        if not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValidationError("text is empty or missing; send at least one word")
        answers = []
        for row in classify(self.session, self.tokenizer, texts):
            best = int(row.argmax())
            answers.append({"label": self.labels[best], "probability": float(row[best]), "probabilities": row.tolist()})
        return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default %(default)s)")
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR, help="where the built models are")
    args, _ = parser.parse_known_args(argv)

    os.environ[ENV_BUILD_DIR] = str(args.build_dir.resolve())  # the spawned workers inherit it
    # mosec parses sys.argv itself: only its own options, ours stay ours
    sys.argv = [sys.argv[0], "--address", "127.0.0.1", "--port", str(args.port), "--log-level", "warning"]
    server = Server()
    server.append_worker(
        Sentiment, num=args.workers, max_batch_size=MAX_BATCH, max_wait_time=MAX_WAIT_MS, route="/v1/sentiment"
    )
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
