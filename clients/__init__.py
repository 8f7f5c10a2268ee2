"""Client libraries for triton-fastpath.

`clients.generated` holds the typed SDKs generated from the model repository (what applications
use; see clients/README.md); `runtime`, `tensors`, `retry` and `shm` are their shared runtime;
`errors` is the one error hierarchy; `grpc_client.FastpathClient` is the thin untyped client the
tests and tools use; `codegen` and `codegen_render` are the generator behind
`scripts/generate_clients.py`.
"""
