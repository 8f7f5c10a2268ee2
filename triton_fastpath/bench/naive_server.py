"""The naive baseline: FastAPI + uvicorn (one worker) + PyTorch eager FP32 + JSON, one request at a time.

As such services are commonly written: a JSON body per text or image, the model called directly
in an `async def` endpoint, so the event loop serves exactly one inference at a time (no batching).

    python -m triton_fastpath.bench.naive_server --port 8080 --torch-threads 1

Endpoints: `POST /v1/sentiment {"text": "..."}`, `POST /v1/digits {"pixels": [[...8]...8]}`,
`GET /health`.
"""

import argparse
import sys

import numpy as np
from pydantic import BaseModel


class TextRequest(BaseModel):
    """`POST /v1/sentiment` body."""

    text: str


class PixelsRequest(BaseModel):
    """`POST /v1/digits` body: an 8x8 image, values 0..16."""

    pixels: list[list[float]]


def create_app(threads: int | None):
    """The FastAPI app serving both models."""
    from fastapi import FastAPI, HTTPException

    from triton_fastpath.bench.models import load_torch_models

    models = load_torch_models(threads=threads)
    app = FastAPI(title="naive baseline")

    @app.get("/health")
    async def health() -> dict:
        return {"ready": True}

    @app.post("/v1/sentiment")
    async def sentiment(request: TextRequest) -> dict:
        if not request.text.strip():
            raise HTTPException(status_code=400, detail="text is empty; send at least one word")
        probabilities = models.classify_texts([request.text])[0]
        best = int(np.argmax(probabilities))
        return {
            "label": models.labels[best],
            "probability": float(probabilities[best]),
            "probabilities": probabilities.tolist(),
        }

    @app.post("/v1/digits")
    async def digits(request: PixelsRequest) -> dict:
        pixels = np.asarray(request.pixels, dtype=np.float32)
        if pixels.shape != (8, 8):
            raise HTTPException(status_code=400, detail=f"pixels has shape {pixels.shape}; expected (8, 8)")
        probabilities = models.classify_digits(pixels[None])[0]
        return {"label": int(np.argmax(probabilities)), "probabilities": probabilities.tolist()}

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(
        create_app(args.torch_threads or None), host="127.0.0.1", port=args.port, workers=1, log_level="warning"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
