"""triton-fastpath: a low-latency serving kit on NVIDIA Triton Inference Server.

Specs describe each model once; build steps export, verify and render them into a Triton model
repository; the embedded launcher serves it; clients call it over gRPC.

Layering: each package's docstring ends with the packages it may import ("May import: ...", named
one by one, the jobs at the top too); the top-level modules (`errors`, `paths`, `processes`) import
only each other, and every package may import them where its rule names them. The installable
libraries beside the kit (fastpath_backends, the Python backends' pure logic and parameter
contracts; fastpath_client; fastpath_models) are below every package here: any package may import
them, and they import nothing of triton_fastpath. tests/unit/test_layering.py checks every import
(those inside functions too) against these rules, that no two modules import each other, and that
no packages import each other round a circle.
"""

__version__ = "0.1.0"
