"""triton-fastpath: a low-latency serving kit on NVIDIA Triton Inference Server.

Specs describe each model once; build steps export, verify and render them into a Triton model
repository; the embedded launcher serves it; clients call it over gRPC.
"""

__version__ = "0.1.0"
