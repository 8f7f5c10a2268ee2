"""PyTriton serving the same eager torch models with Triton's dynamic batching.

PyTriton starts its own tritonserver (from the same nvidia-pytriton wheel) and runs the Python
callables below in this process; Triton batches requests (max 64, 1 ms queue delay, as ours).

    python -m triton_fastpath.bench.pytriton_server --http-port 8000 --grpc-port 8001 --metrics-port 8002

Models: `sentiment` (text BYTES [1] -> probabilities FP32 [2], label INT64 [1]) and `digits`
(pixels FP32 [8, 8] -> probabilities FP32 [10], label INT64 [1]); all on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

MAX_BATCH_SIZE = 64


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("http", "grpc", "metrics"):
        parser.add_argument(f"--{name}-port", type=int, required=True, help=f"{name} port on 127.0.0.1")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--max-queue-delay-us", type=int, default=1000, help="dynamic batcher delay (default 1000)")
    parser.add_argument("--log-file", default=None, help="tritonserver log file")
    args = parser.parse_args(argv)

    from pathlib import Path

    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    from triton_fastpath.bench.models import load_torch_models

    models = load_torch_models(threads=args.torch_threads or None)

    @batch
    def sentiment(text: np.ndarray) -> dict[str, np.ndarray]:
        texts = [bytes(t).decode("utf-8", errors="replace") for t in text.reshape(-1)]
        probabilities = models.classify_texts(texts).astype(np.float32)
        return {"probabilities": probabilities, "label": probabilities.argmax(axis=1)[:, None].astype(np.int64)}

    @batch
    def digits(pixels: np.ndarray) -> dict[str, np.ndarray]:
        probabilities = models.classify_digits(pixels).astype(np.float32)
        return {"probabilities": probabilities, "label": probabilities.argmax(axis=1)[:, None].astype(np.int64)}

    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=args.http_port,
        grpc_address="127.0.0.1",
        grpc_port=args.grpc_port,
        metrics_address="127.0.0.1",
        metrics_port=args.metrics_port,
        allow_gpu_metrics=False,
        metrics_config=["summary_latencies=true"],
        log_file=Path(args.log_file) if args.log_file else None,
    )
    batching = ModelConfig(
        max_batch_size=MAX_BATCH_SIZE, batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)
    )
    label = Tensor(name="label", dtype=np.int64, shape=(1,))
    with Triton(config=config) as triton:
        triton.bind(
            model_name="sentiment",
            infer_func=sentiment,
            inputs=[Tensor(name="text", dtype=bytes, shape=(1,))],
            outputs=[Tensor(name="probabilities", dtype=np.float32, shape=(2,)), label],
            config=batching,
        )
        triton.bind(
            model_name="digits",
            infer_func=digits,
            inputs=[Tensor(name="pixels", dtype=np.float32, shape=(8, 8))],
            outputs=[Tensor(name="probabilities", dtype=np.float32, shape=(10,)), label],
            config=batching,
        )
        triton.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
