"""Build build/container/: the model repository for the NGC Triton image, and the TensorRT engine plan.

The same specs as `fastpath build`, rendered for `nvcr.io/nvidia/tritonserver:24.10-py3` on a GPU:
the encoders as TensorRT plans (built on the GPU host by docker-compose's `trt-builder`, from the
FP32 ONNX and the trtexec commands written to build/container/trt/) or on Triton's onnxruntime
backend. Also fetches the held-out texts the locust services send (build/data/). Nothing here
needs Docker or a GPU; docs/deployment.md says what has been checked offline and what has never
run on a GPU host.

Examples:
    fastpath deploy build-container                          # TensorRT FP16 plans, one profile (opt batch 16)
    fastpath deploy build-container --trt-opt-batch 1 --trt-opt-batch 32
    fastpath deploy build-container --encoder-backend onnxruntime --ort-graph-level 1
"""

from __future__ import annotations

import sys

from triton_fastpath.cli import build
from triton_fastpath.config.render import Target


def main(argv: list[str] | None = None) -> int:
    """Run `fastpath deploy build-container`: `fastpath build` with the container target fixed."""
    return build.main(argv, target=Target.CONTAINER, description=__doc__)


if __name__ == "__main__":
    sys.exit(main())
